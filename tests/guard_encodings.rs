//! The update guard judges a body whatever its encoding, with the simulator behind it: YAML as the
//! JSON it stands for (and, preserved, sent as that JSON); a body it cannot read (CBOR, a protobuf
//! kind its schema lacks, a stored object the apiserver will not give as protobuf) follows the
//! guard's failure rule and never passes silently; a body the apiserver cannot read either is
//! left to the apiserver. The simulator speaks JSON only: protobuf updates are judged against the
//! real kube-apiservers (tests/real/protobuf.rs).

mod common;

use common::*;
use serde_json::{Value, json};

const OLD_KUBECTL: &str = "kubectl/v1.29.4 (linux/amd64) kubernetes/abc1234";

/// A gate whose guard on configmaps acts by `action`, once it knows both versions' schemas, and
/// a configmap stored with the 1.30 field `policy`.
async fn guarded(sims: &Sims, action: &str) -> Gate {
    configmap_guard(sims, ("new", "new"), "old-clients", action, "guard").await
}

/// A PUT of the configmap by an old client, with `body` as `content_type`.
async fn put(gate: &Gate, content_type: &str, body: Vec<u8>) -> reqwest::Response {
    h1().put(format!(
        "{}/api/v1/namespaces/default/configmaps/cm",
        gate.url()
    ))
    .header("user-agent", OLD_KUBECTL)
    .header("content-type", content_type)
    .body(body)
    .send()
    .await
    .expect("put")
}

async fn stored(sims: &Sims) -> Value {
    let url = format!("{}/api/v1/namespaces/default/configmaps/cm", sims.new.url());
    let r = reqwest::get(url).await.expect("get");
    r.json().await.expect("json")
}

fn checks(m: &str, encoding: &str, outcome: &str) -> f64 {
    metric(
        m,
        &format!(
            "skewgate_guard_checks_total{{encoding=\"{encoding}\",guard=\"old-clients\",outcome=\"{outcome}\"}}"
        ),
    )
}

const OLD_YAML: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  a: \"2\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_yaml_update_is_judged_as_its_json_and_preserved_as_json() {
    let sims = sims().await;
    let gate = guarded(&sims, "reject").await;
    let r = put(&gate, "application/yaml", OLD_YAML.into()).await;
    assert_eq!(r.status(), 422);
    let status: Value = r.json().await.expect("Status");
    assert_eq!(status["details"]["causes"][0]["field"], "policy");
    let recent = gate.debug_recent().await;
    assert_eq!(
        recent["guards"]["recent"][0]["encoding"], "yaml",
        "{recent}"
    );
    assert_eq!(checks(&gate.metrics().await, "yaml", "lost"), 1.0);

    let sims = common::sims().await;
    let gate = guarded(&sims, "preserve").await;
    let r = put(&gate, "application/yaml", OLD_YAML.into()).await;
    assert_eq!(r.status(), 200, "sent as the JSON it stands for");
    let cm = stored(&sims).await;
    assert_eq!(
        (&cm["policy"], &cm["data"]["a"]),
        (&json!("keep"), &json!("2"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_the_guard_cannot_read_follows_its_failure_rule() {
    let sims = sims().await;
    let gate = guarded(&sims, "reject").await;
    // CBOR (application/cbor, which newer apiservers may read): not read, so not judged.
    let r = put(&gate, "application/cbor", b"\xd9\xd9\xf7\xa0".to_vec()).await;
    assert_eq!(r.status(), 503);
    let status: Value = r.json().await.expect("Status");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(message.contains("application/cbor"), "{status}");
    // A protobuf object of a kind skewgate's schema lacks.
    let widget = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}});
    let mut bytes = skewgate::protobuf::encode_json(&widget).expect("encodes");
    let at = bytes
        .windows(9)
        .position(|w| w == b"ConfigMap")
        .expect("kind in the envelope");
    bytes[at..at + 9].copy_from_slice(b"ConfigMoo");
    let r = put(&gate, "application/vnd.kubernetes.protobuf", bytes).await;
    assert_eq!(r.status(), 503);
    let status: Value = r.json().await.expect("Status");
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains("ConfigMoo")),
        "{status}"
    );
    // A ConfigMap in protobuf whose stored object the apiserver (the simulator) gives only as
    // JSON: nothing to put fields back from, so not judged.
    let configmap = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"a": "2"}});
    let bytes = skewgate::protobuf::encode_json(&configmap).expect("encodes");
    let r = put(&gate, "application/vnd.kubernetes.protobuf", bytes).await;
    assert_eq!(r.status(), 503);
    assert_eq!(stored(&sims).await["data"]["a"], "1", "nothing was sent");
    let m = gate.metrics().await;
    assert_eq!(checks(&m, "unknown", "cannot_check"), 1.0, "{m}");
    assert_eq!(checks(&m, "protobuf", "cannot_check"), 2.0, "{m}");

    // warn fails open: sent, for the apiserver to decide.
    let sims = common::sims().await;
    let gate = guarded(&sims, "warn").await;
    let r = put(&gate, "application/cbor", b"\xd9\xd9\xf7\xa0".to_vec()).await;
    assert_ne!(r.status(), 503, "sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_no_apiserver_can_read_is_left_to_the_apiserver() {
    let sims = sims().await;
    let gate = guarded(&sims, "reject").await;
    let r = put(&gate, "application/json", b"{\"metadata\": ".to_vec()).await;
    assert_eq!(r.status(), 400, "the apiserver's own answer");
    let r = put(&gate, "application/vnd.kubernetes.protobuf", b"{}".to_vec()).await;
    assert_ne!(r.status(), 503, "not skewgate's: the apiserver refuses it");
    let m = gate.metrics().await;
    assert_eq!(checks(&m, "json", "malformed"), 1.0, "{m}");
    assert_eq!(checks(&m, "protobuf", "malformed"), 1.0, "{m}");
    assert_eq!(stored(&sims).await["policy"], "keep");
}
