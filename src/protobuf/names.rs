//! How the proto fields of k8s.io/api are named in JSON. go-to-protobuf names a field by its JSON
//! tag, but for two kinds of exception the `.proto` files do not mark: Go's embedded structs
//! (`json:",inline"`), whose fields JSON writes as the parent's own; and a few fields whose Go
//! protobuf tag names the Go field (`Webhooks`), which JSON writes in lower camel case. Both are
//! every such field of the compiled-in release; a new release's are found by the real-pair test
//! that reads objects both ways (`skewgate_reads_protobuf_as_the_apiserver_writes_json`).

use std::borrow::Cow;

use prost_reflect::{FieldDescriptor, MessageDescriptor};

/// Whether field `name` of `parent` is a Go embedded struct (`json:",inline"`), whose fields
/// JSON writes as the parent's own.
pub(super) fn inline(parent: &MessageDescriptor, name: &str) -> bool {
    const ANY_PARENT: [&str; 8] = [
        "volumeSource",
        "persistentVolumeSource",
        "ephemeralContainerCommon",
        "localObjectReference",
        "ingressRuleValue",
        "ruleWithOperations",
        "deviceConfiguration",
        "volumeStatus",
    ];
    if ANY_PARENT.contains(&name) {
        return true;
    }
    matches!(
        (parent.name(), name),
        ("Probe", "handler") | ("RuleWithOperations", "rule")
    )
}

/// The proto fields whose JSON name is theirs in lower camel case: `(message, field)`.
const RENAMED: [(&str, &str); 5] = [
    ("MutatingWebhookConfiguration", "Webhooks"),
    ("ValidatingWebhookConfiguration", "Webhooks"),
    ("Validation", "Expression"),
    ("Variable", "Name"),
    ("Variable", "Expression"),
];

/// The JSON name of `field` of `parent` (`DaemonEndpoint`'s `Port` is `Port` in JSON too).
pub(super) fn json_name<'f>(
    parent: &MessageDescriptor,
    field: &'f FieldDescriptor,
) -> Cow<'f, str> {
    let name = field.name();
    if RENAMED.contains(&(parent.name(), name)) {
        let mut lower = name.to_owned();
        lower[..1].make_ascii_lowercase();
        return Cow::Owned(lower);
    }
    Cow::Borrowed(name)
}

/// The field of `parent` that JSON names `key`, if it is one of its own (not an embedded struct's).
fn field_named(parent: &MessageDescriptor, key: &str) -> Option<FieldDescriptor> {
    if let Some(field) = parent.get_field_by_name(key)
        && json_name(parent, &field) == key
    {
        return Some(field);
    }
    let (first, rest) = (key.get(..1)?, key.get(1..)?);
    let upper = format!("{}{rest}", first.to_ascii_uppercase());
    parent
        .get_field_by_name(&upper)
        .filter(|f| json_name(parent, f) == key)
}

/// The fields from a message of `descriptor` to its JSON key `key`: the field itself, or the
/// embedded structs on the way to it.
pub(super) fn route(descriptor: &MessageDescriptor, key: &str) -> Option<Vec<FieldDescriptor>> {
    if let Some(field) = field_named(descriptor, key)
        && !inline(descriptor, field.name())
    {
        return Some(vec![field]);
    }
    descriptor.fields().find_map(|f| {
        let kind = f.kind();
        let inner = kind.as_message().filter(|_| inline(descriptor, f.name()))?;
        let mut rest = route(inner, key)?;
        rest.insert(0, f.clone());
        Some(rest)
    })
}
