//! The update guard in both directions of skew, whatever the client's own version:
//!
//! - down: an update served by the older backend (1.29) of an object whose stored form has a field
//!   only 1.30 knows (`policy`) would drop it, so the guard rejects it, warns, or (preserve, which
//!   cannot put back what 1.29 does not store) rejects it too;
//! - up: a current client whose reads of the object go to 1.29 (a rollout) and whose update goes to
//!   1.30 (the pin) sends back an object without the field it never saw.

mod common;

use common::*;
use serde_json::{Value, json};

const NEW_KUBECTL: &str = "kubectl/v1.30.1 (linux/amd64) kubernetes/abc1234";

/// A gate with writes through `writes` and reads through `reads`, a guard over configmaps acting
/// by `action`, once it knows both versions' schemas; and a configmap stored (through 1.30) with
/// the 1.30 field `policy`.
async fn split(sims: &Sims, writes: &str, reads: &str, action: &str) -> Gate {
    configmap_guard(sims, (writes, reads), "skew", action, "guard").await
}

/// A PUT of configmap `cm` through the gate by a 1.30 kubectl.
async fn put(gate: &Gate, body: &Value) -> reqwest::Response {
    h1().put(format!(
        "{}/api/v1/namespaces/default/configmaps/cm",
        gate.url()
    ))
    .header("user-agent", NEW_KUBECTL)
    .json(body)
    .send()
    .await
    .expect("put")
}

/// The configmap as 1.30 reads it.
async fn stored(sims: &Sims) -> Value {
    let url = format!("{}/api/v1/namespaces/default/configmaps/cm", sims.new.url());
    reqwest::get(url)
        .await
        .expect("get")
        .json()
        .await
        .expect("json")
}

fn updates(sims: &Sims) -> usize {
    let writes = sims.store.writes();
    writes.iter().filter(|w| w.verb == "update").count()
}

/// What a client that read the object from 1.30 sends back: with the field.
fn read_from_new() -> Value {
    json!({"metadata": {"name": "cm"}, "data": {"a": "2"}, "policy": "keep"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn down_an_update_through_the_older_version_that_would_drop_a_stored_field_is_refused() {
    let sims = sims().await;
    // Reads from 1.30, writes through 1.29: the table's split that check warns of.
    let gate = split(&sims, "old", "new", "reject").await;
    let before = updates(&sims);
    let r = put(&gate, &read_from_new()).await;
    assert_eq!(r.status(), 422);
    let status: Value = r.json().await.expect("Status");
    assert_eq!(status["reason"], "Invalid");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("backend \"old\" (v1.29)") && message.contains("cannot store policy"),
        "{status}"
    );
    assert_eq!(status["details"]["causes"][0]["field"], "policy");
    assert_eq!(updates(&sims), before, "nothing reached the apiserver");
    assert_eq!(stored(&sims).await["policy"], "keep");
    // Also when the body leaves the field out: 1.29 drops the stored one all the same.
    let r = put(
        &gate,
        &json!({"metadata": {"name": "cm"}, "data": {"a": "3"}}),
    )
    .await;
    assert_eq!(r.status(), 422);
    let m = gate.metrics().await;
    let key = "skewgate_guarded_updates_total{action=\"reject\",encoding=\"json\",guard=\"skew\",resource=\"configmaps\"}";
    assert_eq!(metric(&m, key), 2.0, "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn down_warn_sends_it_and_says_what_is_dropped_and_preserve_refuses() {
    let sims = sims().await;
    let gate = split(&sims, "old", "new", "preserve").await;
    let r = put(&gate, &read_from_new()).await;
    assert_eq!(r.status(), 422, "preserve cannot make 1.29 store it");
    let status: Value = r.json().await.expect("Status");
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains("preserve cannot put back")),
        "{status}"
    );
    let sims = common::sims().await;
    let gate = split(&sims, "old", "new", "warn").await;
    let r = put(&gate, &read_from_new()).await;
    assert_eq!(r.status(), 200);
    let warning = r.headers().get("warning").and_then(|w| w.to_str().ok());
    assert!(
        warning.is_some_and(|w| w.contains("cannot store policy")),
        "{warning:?}"
    );
    assert!(
        stored(&sims).await.get("policy").is_none(),
        "1.29 dropped it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn down_an_object_without_newer_fields_passes_untouched() {
    let sims = sims().await;
    let gate = split(&sims, "old", "new", "reject").await;
    // Stored without `policy` (1.29 drops it from the request).
    let plain = json!({"metadata": {"name": "cm"}, "data": {"a": "2"}});
    let url = format!("{}/api/v1/namespaces/default/configmaps/cm", sims.old.url());
    let r = h1().put(url).json(&plain).send().await.expect("put");
    assert_eq!(r.status(), 200);
    let r = put(&gate, &plain).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("warning").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_a_current_client_that_reads_through_the_older_version_is_judged_by_it() {
    let sims = sims().await;
    // Reads from 1.29, writes through 1.30: the client never saw `policy`.
    let gate = split(&sims, "new", "old", "reject").await;
    let read_from_old = json!({"metadata": {"name": "cm"}, "data": {"a": "2"}});
    let before = updates(&sims);
    let r = put(&gate, &read_from_old).await;
    assert_eq!(r.status(), 422);
    let status: Value = r.json().await.expect("Status");
    assert!(
        status["message"].as_str().is_some_and(|m| m.contains(
            "a v1.30 client that reads this object through backend \"old\" (v1.29) would drop policy"
        )),
        "{status}"
    );
    assert_eq!(updates(&sims), before, "nothing reached the apiserver");
    assert_eq!(stored(&sims).await["policy"], "keep");
    // Where it reads what it writes, a current client means to drop the field.
    let sims = common::sims().await;
    let gate = split(&sims, "new", "new", "reject").await;
    let r = put(&gate, &read_from_old).await;
    assert_eq!(r.status(), 200);
    assert!(stored(&sims).await.get("policy").is_none());
}
