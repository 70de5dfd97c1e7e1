//! Kubernetes protobuf bodies, read with the schema of the newest supported release compiled in
//! (proto/, compiled by build.rs): the envelope (`k8s\0` and a `runtime.Unknown`), the object's
//! message found by its kind, a JSON view of it (`view.rs`), and lost fields put back from the
//! stored object (`restore.rs`).
//!
//! Field numbers are never reused between Kubernetes releases, so the newest schema reads every
//! older client's bytes; a field it does not know (a client or apiserver newer than it) is kept as
//! an unknown field and re-encoded as it came, and [`Body::view_checked`] says where one is.

mod from_json;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod fuzzing;
mod names;
mod restore;
mod view;

use std::collections::HashMap;
use std::sync::LazyLock;

use bytes::Bytes;
use prost::Message as _;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, Value};

pub use from_json::{decode_to_json, encode_json};
pub use view::view;

/// The Kubernetes release whose `.proto` files are compiled in (`v1.36.3`).
pub const KUBERNETES: &str = env!("SKEWGATE_PROTO_KUBERNETES");

/// What starts every Kubernetes protobuf body.
pub const MAGIC: &[u8] = b"k8s\0";

/// The media type of Kubernetes protobuf bodies.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

const UNKNOWN: &str = "k8s.io.apimachinery.pkg.runtime.Unknown";

/// The compiled-in schema: every message, and the kinds by group, version and kind.
pub struct Schema {
    unknown: MessageDescriptor,
    /// `(package segment, version, kind)` (`("apps", "v1", "Deployment")`) to its message.
    kinds: HashMap<(String, String, String), MessageDescriptor>,
}

static SCHEMA: LazyLock<Schema> = LazyLock::new(|| {
    let bytes: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/kubernetes.bin"));
    // Built by build.rs from proto/: a failure here is a broken build, not input.
    let pool = DescriptorPool::decode(bytes).expect("the compiled-in descriptor set decodes");
    let unknown = pool
        .get_message_by_name(UNKNOWN)
        .expect("the compiled-in schema has runtime.Unknown");
    let mut kinds = HashMap::new();
    for message in pool.all_messages() {
        let Some(rest) = message.package_name().strip_prefix("k8s.io.api.") else {
            continue;
        };
        if let Some((segment, version)) = rest.split_once('.') {
            let key = (
                segment.to_owned(),
                version.to_owned(),
                message.name().to_owned(),
            );
            kinds.insert(key, message);
        }
    }
    Schema { unknown, kinds }
});

/// The compiled-in schema.
pub fn schema() -> &'static Schema {
    &SCHEMA
}

impl Schema {
    /// The message of kind `kind` in `apiVersion` `api_version` (`apps/v1`, `v1`), if the schema
    /// has it: the built-in kinds of `k8s.io/api` (not CustomResourceDefinitions, APIServices or
    /// custom resources, which have no `.proto` in k8s.io/api).
    pub fn kind(&self, api_version: &str, kind: &str) -> Option<&MessageDescriptor> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let key = (
            segment(group).to_owned(),
            version.to_owned(),
            kind.to_owned(),
        );
        self.kinds.get(&key)
    }
}

/// The package segment of an API group: `core` for the core group, `apiserverinternal` for
/// `internal.apiserver.k8s.io`, else the group's first label (`rbac.authorization.k8s.io`: `rbac`).
fn segment(group: &str) -> &str {
    match group {
        "" => "core",
        "internal.apiserver.k8s.io" => "apiserverinternal",
        g => g.split('.').next().unwrap_or(g),
    }
}

/// Why a protobuf body cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Unreadable {
    #[error("the body does not start with Kubernetes' protobuf magic k8s\\0")]
    NoMagic,
    #[error("its runtime.Unknown envelope does not decode: {0}")]
    Envelope(String),
    #[error("its object is content-encoded ({0:?})")]
    ContentEncoded(String),
    #[error(
        "skewgate's protobuf schema (Kubernetes {KUBERNETES}) has no kind {kind:?} in {api_version:?}"
    )]
    NoSuchKind { api_version: String, kind: String },
    #[error(
        "its {kind} does not decode with skewgate's protobuf schema (Kubernetes {KUBERNETES}): {why}"
    )]
    Object { kind: String, why: String },
}

/// A protobuf body: its envelope and its object, decoded.
#[derive(Clone, Debug)]
pub struct Body {
    envelope: DynamicMessage,
    /// The object's `apiVersion` and `kind`, from the envelope.
    pub api_version: String,
    pub kind: String,
    object: DynamicMessage,
}

impl Body {
    /// Decodes a body: `k8s\0`, then a `runtime.Unknown` whose `raw` is the object of the kind its
    /// `typeMeta` names.
    pub fn decode(bytes: &[u8]) -> Result<Body, Unreadable> {
        let schema = schema();
        let rest = bytes.strip_prefix(MAGIC).ok_or(Unreadable::NoMagic)?;
        let envelope = DynamicMessage::decode(schema.unknown.clone(), rest)
            .map_err(|e| Unreadable::Envelope(e.to_string()))?;
        let text = |m: &DynamicMessage, name: &str| {
            m.get_field_by_name(name)
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        };
        let type_meta = envelope
            .get_field_by_name("typeMeta")
            .and_then(|v| v.as_message().cloned());
        let meta = |name: &str| {
            type_meta
                .as_ref()
                .map(|t| text(t, name))
                .unwrap_or_default()
        };
        let (api_version, kind) = (meta("apiVersion"), meta("kind"));
        let encoding = text(&envelope, "contentEncoding");
        if !encoding.is_empty() {
            return Err(Unreadable::ContentEncoded(encoding));
        }
        let descriptor =
            schema
                .kind(&api_version, &kind)
                .ok_or_else(|| Unreadable::NoSuchKind {
                    api_version: api_version.clone(),
                    kind: kind.clone(),
                })?;
        let raw = envelope
            .get_field_by_name("raw")
            .and_then(|v| v.as_bytes().cloned())
            .unwrap_or_default();
        let object =
            DynamicMessage::decode(descriptor.clone(), raw).map_err(|e| Unreadable::Object {
                kind: kind.clone(),
                why: e.to_string(),
            })?;
        Ok(Body {
            envelope,
            api_version,
            kind,
            object,
        })
    }

    /// The object.
    pub fn object(&self) -> &DynamicMessage {
        &self.object
    }

    /// The object as JSON, as Go's encoding writes the same object (see `view.rs`).
    pub fn view(&self) -> serde_json::Value {
        view(&self.object)
    }

    /// [`Body::view`], and the first field the schema does not know, if any (`field 999 of
    /// k8s.io.api.core.v1.Container`): its sender or the apiserver that encoded it is newer than
    /// the schema. One walk for both.
    pub fn view_checked(&self) -> (serde_json::Value, Option<String>) {
        let mut unknown = None;
        let json = view::view_noting(&self.object, &mut unknown);
        let at = unknown.map(|(number, message)| format!("field {number} of a {message}"));
        (json, at)
    }

    /// Puts back the stored values of `losses` (paths of the JSON view) into the object.
    pub fn restore(&mut self, stored: &Body, losses: &[crate::skew::Loss]) {
        restore::restore(&mut self.object, &stored.object, losses);
    }

    /// The body's bytes: the envelope as it came, with the object encoded again.
    pub fn encode(&self) -> Bytes {
        let mut envelope = self.envelope.clone();
        envelope.set_field_by_name("raw", Value::Bytes(self.object.encode_to_vec().into()));
        let mut out = Vec::with_capacity(MAGIC.len() + envelope.encoded_len());
        out.extend_from_slice(MAGIC);
        envelope.encode(&mut out).unwrap_or_else(|_| {
            unreachable!("a Vec grows to take any message");
        });
        Bytes::from(out)
    }
}

#[cfg(test)]
mod tests;
