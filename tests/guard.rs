//! The update guard end to end: a full-object update from a client older than the apiserver that
//! serves it, which would drop a field the stored object has and the client's version does not
//! know (the simulator's `policy` of configmaps, known from 1.30), is rejected, warned about or
//! repaired, as the guard says; a current client passes untouched.

mod common;

use std::sync::atomic::Ordering;

use common::*;
use serde_json::{Value, json};

const OLD_KUBECTL: &str = "kubectl/v1.29.4 (linux/amd64) kubernetes/abc1234";
const NEW_KUBECTL: &str = "kubectl/v1.30.1 (linux/amd64) kubernetes/abc1234";

fn table(sims: &Sims, action: &str, unknown: &str) -> String {
    routes(
        sims,
        &format!(
            "writes:\n  default: new\nreads:\n  default: new\nguards:\n  - name: old-clients\n    match: {{resources: [configmaps]}}\n    action: {action}\n    unknownVersion: {unknown}\n"
        ),
    )
}

/// A gate serving `text`, once it knows both versions' schemas.
async fn gate_knowing_schemas(text: &str) -> Gate {
    let gate = gate(text).await;
    gate.knows_schemas().await;
    gate
}

/// A gate whose guard acts by `action`, once it knows both versions' schemas, and a configmap
/// stored with the 1.30 field `policy`.
async fn guarded(sims: &Sims, action: &str, unknown: &str) -> Gate {
    configmap_guard(sims, ("new", "new"), "old-clients", action, unknown).await
}

async fn put(gate: &Gate, name: &str, user_agent: &str, body: &Value) -> reqwest::Response {
    h1().put(format!(
        "{}/api/v1/namespaces/default/configmaps/{name}",
        gate.url()
    ))
    .header("user-agent", user_agent)
    .json(body)
    .send()
    .await
    .expect("put")
}

fn updates(sims: &Sims) -> usize {
    sims.store
        .writes()
        .iter()
        .filter(|w| w.verb == "update")
        .count()
}

async fn stored(sims: &Sims) -> Value {
    reqwest::get(format!(
        "{}/api/v1/namespaces/default/configmaps/cm",
        sims.new.url()
    ))
    .await
    .expect("get")
    .json()
    .await
    .expect("json")
}

/// What an old client sends: the object as it read it, without the field it does not know.
fn old_body() -> Value {
    json!({"metadata": {"name": "cm"}, "data": {"a": "2"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_answers_422_naming_the_field_and_sends_nothing() {
    let sims = sims().await;
    let gate = guarded(&sims, "reject", "guard").await;
    let before = updates(&sims);
    let r = put(&gate, "cm", OLD_KUBECTL, &old_body()).await;
    assert_eq!(r.status(), 422);
    let status: Value = r.json().await.expect("Status");
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(status["details"]["causes"][0]["field"], "policy");
    assert!(
        status["details"]["causes"][0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("v1.29")),
        "{status}"
    );
    assert_eq!(updates(&sims), before, "nothing reached the apiserver");
    assert_eq!(stored(&sims).await["policy"], "keep");
    // A client as new as the apiserver is not guarded: it means to drop the field.
    let r = put(&gate, "cm", NEW_KUBECTL, &old_body()).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("warning").is_none());
    assert!(stored(&sims).await.get("policy").is_none());
    let m = gate.metrics().await;
    assert_eq!(
        metric(
            &m,
            "skewgate_guarded_updates_total{action=\"reject\",encoding=\"json\",guard=\"old-clients\",resource=\"configmaps\"}"
        ),
        1.0,
        "{m}"
    );
    // Both updates were read and judged as JSON: one would lose a field, one had nothing to lose.
    for (outcome, n) in [("lost", 1.0), ("nothing_lost", 0.0), ("cannot_check", 0.0)] {
        let name = format!(
            "skewgate_guard_checks_total{{encoding=\"json\",guard=\"old-clients\",outcome=\"{outcome}\"}}"
        );
        assert_eq!(metric(&m, &name), n, "{outcome}: {m}");
    }
    // The status page names the object, the client and the field; a 422 is the guard's answer,
    // not an error of skewgate's.
    let recent = gate.debug_recent().await;
    assert_eq!(
        recent["guards"]["lastHour"],
        json!({"reject": 1, "warn": 0, "preserve": 0})
    );
    let decision = &recent["guards"]["recent"][0];
    assert_eq!(
        (
            &decision["namespace"],
            &decision["name"],
            &decision["fields"]
        ),
        (&json!("default"), &json!("cm"), &json!(["policy"])),
        "{decision}"
    );
    assert_eq!(decision["encoding"], "json", "{decision}");
    assert!(
        decision["against"]
            .as_str()
            .is_some_and(|c| c.contains("v1.29")),
        "{decision}"
    );
    assert_eq!(recent["errors"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warn_forwards_and_says_which_fields_were_dropped() {
    let sims = sims().await;
    let gate = guarded(&sims, "warn", "guard").await;
    let r = put(&gate, "cm", OLD_KUBECTL, &old_body()).await;
    assert_eq!(r.status(), 200);
    let warning = r
        .headers()
        .get("warning")
        .and_then(|w| w.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(
        warning.starts_with("299 - \"") && warning.contains("policy"),
        "{warning}"
    );
    assert!(
        stored(&sims).await.get("policy").is_none(),
        "sent unchanged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preserve_keeps_the_stored_value_of_the_field() {
    let sims = sims().await;
    let gate = guarded(&sims, "preserve", "guard").await;
    let r = put(&gate, "cm", OLD_KUBECTL, &old_body()).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("warning").is_some());
    let cm = stored(&sims).await;
    assert_eq!(cm["policy"], "keep", "the field survives");
    assert_eq!(cm["data"]["a"], "2", "the client's change is applied");
    let recent = gate.debug_recent().await;
    assert_eq!(recent["guards"]["lastHour"]["preserve"], 1, "{recent}");
    assert_eq!(recent["guards"]["recent"][0]["action"], "preserve");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_of_unknown_version_are_guarded_unless_the_guard_lets_them_pass() {
    let sims = sims().await;
    let gate = guarded(&sims, "reject", "guard").await;
    assert_eq!(
        put(&gate, "cm", "my-operator", &old_body()).await.status(),
        422
    );
    let sims = common::sims().await;
    let gate = guarded(&sims, "reject", "pass").await;
    assert_eq!(
        put(&gate, "cm", "my-operator", &old_body()).await.status(),
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_missing_and_unreadable_objects() {
    let sims = sims().await;
    let gate = guarded(&sims, "reject", "guard").await;
    // Over the apiserver's 3 MiB: 413, nothing sent.
    let big = json!({"metadata": {"name": "cm"}, "data": {"a": "x".repeat(3 << 20)}});
    let r = put(&gate, "cm", OLD_KUBECTL, &big).await;
    assert_eq!(r.status(), 413);
    // No stored object: nothing to lose; the apiserver answers for itself.
    let r = put(
        &gate,
        "missing",
        OLD_KUBECTL,
        &json!({"metadata": {"name": "missing"}}),
    )
    .await;
    assert_eq!(r.status(), 404);
    assert_eq!(
        r.json::<Value>().await.expect("Status")["reason"],
        "NotFound"
    );
    // The stored object cannot be read: reject fails closed.
    sims.new
        .controls
        .fail_reads_per_mille
        .store(1000, Ordering::Relaxed);
    let before = updates(&sims);
    let r = put(&gate, "cm", OLD_KUBECTL, &old_body()).await;
    assert_eq!(r.status(), 503);
    assert_eq!(updates(&sims), before);
    // warn fails open.
    sims.new
        .controls
        .fail_reads_per_mille
        .store(0, Ordering::Relaxed);
    let sims2 = common::sims().await;
    let warn = guarded(&sims2, "warn", "guard").await;
    sims2
        .new
        .controls
        .fail_reads_per_mille
        .store(1000, Ordering::Relaxed);
    let r = put(&warn, "cm", OLD_KUBECTL, &old_body()).await;
    assert_eq!(r.status(), 200);
}

/// A PUT through the gate of `path` (under `/api/v1/namespaces/default/`) by `user_agent`.
async fn put_at(gate: &Gate, path: &str, user_agent: &str, body: &Value) -> reqwest::Response {
    let url = format!("{}/api/v1/namespaces/default/{path}", gate.url());
    let put = h1().put(url).header("user-agent", user_agent).json(body);
    put.send().await.expect("put")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_main_object_put_is_not_judged_by_the_status_the_apiserver_keeps() {
    let sims = sims().await;
    let text = table(&sims, "reject", "guard")
        .replace("resources: [configmaps]", "resources: [pods, pods/status]");
    let gate = gate_knowing_schemas(&text).await;
    // A pod, and its status set by a 1.30 client with the 1.30 status field.
    let pod =
        // With the grace period as stored (its default changed in 1.30: left out, it is a loss).
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}], "terminationGracePeriodSeconds": 45}});
    let url = format!("{}/api/v1/namespaces/default/pods", gate.url());
    let created = h1()
        .post(url)
        .header("user-agent", NEW_KUBECTL)
        .json(&pod)
        .send()
        .await;
    assert_eq!(created.expect("create").status(), 201);
    let mut with_status = pod.clone();
    with_status["status"] = json!({"phase": "Running", "resizeStatus": "InProgress"});
    let r = put_at(&gate, "pods/p/status", NEW_KUBECTL, &with_status).await;
    assert_eq!(r.status(), 200);
    // A 1.29 client's PUT of the pod without the status field: the apiserver keeps the stored
    // status there, so nothing is lost, and the guard lets it through (before: 422 over
    // status.resizeStatus).
    let mut relabelled = pod.clone();
    relabelled["metadata"]["labels"] = json!({"tier": "web"});
    relabelled["status"] = json!({"phase": "Running"});
    let r = put_at(&gate, "pods/p", OLD_KUBECTL, &relabelled).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
    let stored: Value = reqwest::get(format!(
        "{}/api/v1/namespaces/default/pods/p",
        sims.new.url()
    ))
    .await
    .expect("get")
    .json()
    .await
    .expect("json");
    assert_eq!(stored["status"]["resizeStatus"], "InProgress", "{stored}");
    assert_eq!(stored["metadata"]["labels"]["tier"], "web");
    // Its PUT of the status itself without the field would lose it: rejected.
    let r = put_at(&gate, "pods/p/status", OLD_KUBECTL, &relabelled).await;
    assert_eq!(r.status(), 422);
}
