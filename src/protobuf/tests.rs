use std::collections::BTreeMap;

use serde_json::{Value as Json, json};

use prost_reflect::ReflectMessage as _;

use super::*;
use crate::skew::{KindFields, losses};

fn pod(message: Option<&str>) -> Json {
    let mut resource = json!({"resourceID": "r1", "health": "Healthy"});
    if let Some(m) = message {
        resource["message"] = json!(m);
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "resourceVersion": "7",
                     "labels": {"tier": "web"}, "creationTimestamp": "2026-11-28T09:00:00Z"},
        "spec": {"containers": [{"name": "c", "image": "busybox",
                 "resources": {"limits": {"example.com/dev": "1"}},
                 "ports": [{"containerPort": 80}],
                 "readinessProbe": {"httpGet": {"port": "http", "path": "/"}}}]},
        "status": {"phase": "Pending", "containerStatuses": [{
            "name": "c", "image": "busybox", "ready": false, "restartCount": 0,
            "allocatedResourcesStatus": [{"name": "example.com/dev", "resources": [resource]}]}]}
    })
}

fn kind(paths: &[&str]) -> KindFields {
    KindFields {
        resource: "pods".into(),
        fields: paths
            .iter()
            .map(|p| ((*p).to_owned(), None))
            .collect::<BTreeMap<_, _>>(),
    }
}

#[test]
fn a_body_reads_as_its_json_with_kubernetes_own_forms_and_zeros_left_out() {
    let bytes = encode_json(&pod(Some("ok"))).expect("encodes");
    assert!(bytes.starts_with(MAGIC));
    let body = Body::decode(&bytes).expect("decodes");
    assert_eq!(
        (body.api_version.as_str(), body.kind.as_str()),
        ("v1", "Pod")
    );
    let view = body.view();
    let meta = &view["metadata"];
    assert_eq!(meta["creationTimestamp"], "2026-11-28T09:00:00Z");
    assert_eq!(meta["labels"]["tier"], "web");
    let container = &view["spec"]["containers"][0];
    assert_eq!(container["resources"]["limits"]["example.com/dev"], "1");
    assert_eq!(container["readinessProbe"]["httpGet"]["port"], "http");
    assert_eq!(container["ports"][0]["containerPort"], 80);
    let status = &view["status"]["containerStatuses"][0];
    // Zero values are left out, as omitempty leaves them out.
    assert!(status.get("ready").is_none() && status.get("restartCount").is_none());
    assert_eq!(
        status["allocatedResourcesStatus"][0]["resources"][0]["message"],
        "ok"
    );
    assert_eq!(body.view_checked(), (view.clone(), None));
    // Encoded again unchanged, the bytes are the same.
    assert_eq!(&body.encode()[..], &bytes[..]);
}

#[test]
fn a_lost_field_is_put_back_in_protobuf_from_the_stored_object() {
    let stored = Body::decode(&encode_json(&pod(Some("ok"))).expect("stored")).expect("stored");
    let mut sent = pod(None);
    sent["metadata"]["labels"]["tier"] = json!("db");
    let mut body = Body::decode(&encode_json(&sent).expect("sent")).expect("sent");
    let message = "status.containerStatuses[].allocatedResourcesStatus[].resources[].message";
    let all = [
        "status",
        "status.containerStatuses",
        "status.containerStatuses[].name",
        "status.containerStatuses[].allocatedResourcesStatus",
        "status.containerStatuses[].allocatedResourcesStatus[].name",
        "status.containerStatuses[].allocatedResourcesStatus[].resources",
        "status.containerStatuses[].allocatedResourcesStatus[].resources[].resourceID",
    ];
    let old = kind(&all);
    let new = kind(&[&all[..], &[message]].concat());
    let lost = losses(&new, &old, &stored.view(), &body.view());
    let paths: Vec<&str> = lost.iter().map(|l| l.path.as_str()).collect();
    assert_eq!(
        paths,
        ["status.containerStatuses[0].allocatedResourcesStatus[0].resources[0].message"]
    );
    body.restore(&stored, &lost);
    let again = Body::decode(&body.encode()).expect("restored body decodes");
    let view = again.view();
    assert_eq!(
        view["status"]["containerStatuses"][0]["allocatedResourcesStatus"][0]["resources"][0]["message"],
        "ok"
    );
    // Everything else is the client's.
    assert_eq!(view["metadata"]["labels"]["tier"], "db");
    assert!(losses(&new, &old, &stored.view(), &view).is_empty());
}

#[test]
fn a_field_the_schema_does_not_know_is_found_and_kept() {
    let bytes = encode_json(&pod(None)).expect("encodes");
    let body = Body::decode(&bytes).expect("decodes");
    // Field 999 of the Pod, a string a newer release might add.
    let mut raw = body.object().encode_to_vec();
    raw.extend([0xba, 0x3e, 3, b'n', b'e', b'w']);
    let mut envelope = body.envelope.clone();
    envelope.set_field_by_name("raw", Value::Bytes(raw.into()));
    let mut newer = MAGIC.to_vec();
    newer.extend(envelope.encode_to_vec());
    let body = Body::decode(&newer).expect("decodes with the field unknown");
    let (_, found) = body.view_checked();
    assert_eq!(
        found.as_deref(),
        Some("field 999 of a k8s.io.api.core.v1.Pod")
    );
    assert_eq!(&body.encode()[..], &newer[..], "kept as it came");
    // Deeper: field 999 of a container of the pod's spec.
    let mut pod = Body::decode(&encode_json(&pod(None)).expect("encodes")).expect("decodes");
    let spec = pod.object.get_field_by_name_mut("spec").expect("spec");
    let containers = spec
        .as_message_mut()
        .and_then(|s| s.get_field_by_name_mut("containers"))
        .and_then(Value::as_list_mut)
        .expect("containers");
    let container = containers[0].as_message_mut().expect("a container");
    let mut raw = container.encode_to_vec();
    raw.extend([0xba, 0x3e, 1, b'x']);
    *container = DynamicMessage::decode(container.descriptor(), &raw[..]).expect("decodes");
    let (view, found) = pod.view_checked();
    assert_eq!(view, pod.view());
    assert_eq!(
        found.as_deref(),
        Some("field 999 of a k8s.io.api.core.v1.Container")
    );
}

#[test]
fn what_is_not_a_readable_body_says_why() {
    assert_eq!(
        Body::decode(b"{\"kind\":\"Pod\"}").err(),
        Some(Unreadable::NoMagic)
    );
    let mut crd = json!({"apiVersion": "v1", "kind": "Pod"});
    let bytes = encode_json(&crd).expect("encodes");
    let body = Body::decode(&bytes).expect("decodes");
    let mut envelope = body.envelope.clone();
    let mut meta = envelope
        .get_field_by_name("typeMeta")
        .and_then(|v| v.as_message().cloned())
        .expect("typeMeta");
    meta.set_field_by_name("apiVersion", Value::String("example.com/v1".into()));
    meta.set_field_by_name("kind", Value::String("Widget".into()));
    envelope.set_field_by_name("typeMeta", Value::Message(meta));
    let mut widget = MAGIC.to_vec();
    widget.extend(envelope.encode_to_vec());
    let err = Body::decode(&widget).expect_err("no such kind");
    assert!(err.to_string().contains("Widget"), "{err}");
    crd["kind"] = json!("Deployment");
    assert!(encode_json(&crd).is_err(), "no Deployment in v1");
    let mut torn = bytes.clone();
    torn.truncate(bytes.len() / 2);
    assert!(Body::decode(&torn).is_err());
    assert!(Body::decode(b"k8s\0\xff").is_err());
}

#[test]
fn kinds_are_found_by_group_and_version() {
    let s = schema();
    for (api_version, kind) in [
        ("v1", "Pod"),
        ("apps/v1", "Deployment"),
        ("rbac.authorization.k8s.io/v1", "ClusterRole"),
        ("internal.apiserver.k8s.io/v1alpha1", "StorageVersion"),
        ("coordination.k8s.io/v1", "Lease"),
        ("resource.k8s.io/v1", "ResourceClaim"),
    ] {
        assert!(s.kind(api_version, kind).is_some(), "{api_version} {kind}");
    }
    assert!(s.kind("apps/v1", "Pod").is_none());
}

#[test]
fn fields_named_after_their_go_field_read_as_json_names_them() {
    let webhooks = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "w"},
        "webhooks": [{"name": "a.example.com", "sideEffects": "None"}]});
    let policy = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy", "metadata": {"name": "p"},
        "spec": {"validations": [{"expression": "true"}], "variables": [{"name": "x", "expression": "1"}]}});
    // DaemonEndpoint's Port is Port in JSON too.
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"},
        "status": {"daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}});
    for object in [webhooks, policy, node] {
        let body = Body::decode(&encode_json(&object).expect("encodes")).expect("decodes");
        let mut expected = object.clone();
        let map = expected.as_object_mut().expect("an object");
        map.remove("apiVersion");
        map.remove("kind");
        assert_eq!(body.view(), expected);
    }
}
