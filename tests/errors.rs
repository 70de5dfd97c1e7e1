//! What a client sees when the proxy cannot complete a request, and what /metrics and /readyz say.

mod common;

use common::*;
use serde_json::Value;

#[tokio::test]
async fn an_unreachable_backend_gets_a_503_status_with_retry_after() {
    let sims = sims().await;
    // A port nothing listens on: bind one, then let it go.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead_url = format!("http://{}", dead.local_addr().expect("addr"));
    drop(dead);
    let text = routes(&sims, "writes:\n  default: old\nreads:\n  default: old\n")
        .replace(&sims.old.url(), &dead_url);
    let gate = gate(&text).await;
    for client in [h1(), h2()] {
        let r = client
            .get(format!("{}/api/v1/namespaces", gate.url()))
            .send()
            .await
            .expect("response");
        assert_eq!(r.status(), 503);
        assert_eq!(
            r.headers().get("retry-after").and_then(|v| v.to_str().ok()),
            Some("1")
        );
        assert_eq!(
            r.headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok()),
            Some("application/json")
        );
        // A response of skewgate's own carries its date and length over either protocol.
        assert!(r.headers().contains_key("date"), "{:?}", r.headers());
        let length = r.content_length();
        let body = r.bytes().await.expect("body");
        assert_eq!(length, Some(body.len() as u64));
        let status: Value = serde_json::from_slice(&body).expect("Status JSON");
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["reason"], "ServiceUnavailable");
        assert_eq!(status["code"], 503);
        assert!(
            status["message"]
                .as_str()
                .is_some_and(|m| m.contains("\"old\"")),
            "{status}"
        );
    }
    // Readiness says which backend has no endpoint; the other backend still serves.
    let ready = reqwest::get(format!("{}/readyz", gate.admin()))
        .await
        .expect("readyz");
    assert_eq!(ready.status(), 503);
    assert!(ready.text().await.expect("text").contains("old"));
    let m = gate.metrics().await;
    assert!(
        metric(
            &m,
            "skewgate_requests_total{backend=\"old\",class=\"read\",code=\"503\",group=\"\",resource=\"namespaces\",verb=\"list\"}"
        ) >= 2.0,
        "{m}"
    );
    // The status page lists the error once, with how often, what and whose, and why.
    let recent = gate.debug_recent().await;
    let errors = recent["errors"].as_array().expect("errors");
    assert_eq!(errors.len(), 1, "{recent}");
    let e = &errors[0];
    assert_eq!(
        (&e["code"], &e["reason"], &e["times"]),
        (
            &Value::from(503),
            &Value::from("ServiceUnavailable"),
            &Value::from(2)
        ),
        "{e}"
    );
    assert_eq!(
        (&e["verb"], &e["resource"], &e["backend"], &e["client"]),
        (
            &Value::from("list"),
            &Value::from("namespaces"),
            &Value::from("old"),
            &Value::from("address 127.0.0.1")
        ),
        "{e}"
    );
    assert!(
        e["message"]
            .as_str()
            .is_some_and(|m| m.contains("has no endpoint ready")),
        "{e}"
    );
}

#[tokio::test]
async fn metrics_move_with_the_requests_made() {
    let sims = sims().await;
    let gate = gate(&routes(
        &sims,
        "writes:\n  default: new\n  pins:\n    - {name: team-a, namespaces: [team-a], backend: new}\nreads:\n  default: old\n",
    ))
    .await;
    let c = h1();
    for _ in 0..3 {
        let r = c
            .get(format!(
                "{}/api/v1/namespaces/team-b/configmaps",
                gate.url()
            ))
            .send()
            .await
            .expect("get");
        assert_eq!(r.status(), 200);
    }
    let r = c
        .get(format!(
            "{}/api/v1/namespaces/team-a/configmaps/missing",
            gate.url()
        ))
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 404);
    let m = gate.metrics().await;
    for (line, want) in [
        (
            "skewgate_requests_total{backend=\"old\",class=\"read\",code=\"200\",group=\"\",resource=\"configmaps\",verb=\"list\"}",
            3.0,
        ),
        (
            "skewgate_requests_total{backend=\"new\",class=\"read\",code=\"404\",group=\"\",resource=\"configmaps\",verb=\"get\"}",
            1.0,
        ),
        (
            "skewgate_decisions_total{class=\"read\",rule=\"reads.default\"}",
            3.0,
        ),
        (
            "skewgate_decisions_total{class=\"read\",rule=\"team-a\"}",
            1.0,
        ),
        (
            "skewgate_request_duration_seconds_count{backend=\"old\",class=\"read\",verb=\"list\"}",
            3.0,
        ),
        (
            "skewgate_inflight_requests{backend=\"old\",class=\"read\"}",
            0.0,
        ),
        ("skewgate_client_connections{protocol=\"http1\"}", 1.0),
    ] {
        assert_eq!(metric(&m, line), want, "{line}\n{m}");
    }
    assert!(m.contains("skewgate_upstream_connections{backend=\"old\""));
    let ready = reqwest::get(format!("{}/readyz", gate.admin()))
        .await
        .expect("readyz");
    assert!(
        eventually(10, || async {
            reqwest::get(format!("{}/readyz", gate.admin()))
                .await
                .is_ok_and(|r| r.status() == 200)
        })
        .await,
        "{ready:?}"
    );
    let debug: Value = gate.debug_routes().await;
    assert_eq!(debug["writes"]["pins"][0]["name"], "team-a");
    assert_eq!(debug["backends"][0]["endpoints"][0]["state"], "ready");
    // Its keys are camelCase, as Kubernetes' own JSON is (`discovery_error` was the one apart).
    assert!(
        debug["backends"][0].get("discoveryError").is_some(),
        "{debug}"
    );
    let mut keys = Vec::new();
    snake_keys(&debug, &mut keys);
    assert!(keys.is_empty(), "{keys:?}");
}

/// The keys of `v`, at any depth, with an underscore in them.
fn snake_keys(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                if k.contains('_') {
                    out.push(k.clone());
                }
                snake_keys(v, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| snake_keys(v, out)),
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_may_have_been_applied_is_not_invited_to_retry() {
    let sims = sims().await;
    // A pinned write gets fence - 2s = 1s upstream; the apiserver takes 2s to apply it.
    let gate = gate(&routes(
        &sims,
        "writes:\n  default: old\n  fence: 3s\n  pins:\n    - {name: team-a, namespaces: [team-a], backend: old}\nreads:\n  default: old\n",
    ))
    .await;
    let client = h2();
    let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "team-a"}, "data": {"a": "1"}});
    let created = client
        .post(format!(
            "{}/api/v1/namespaces/team-a/configmaps",
            gate.url()
        ))
        .json(&cm)
        .send()
        .await
        .expect("create");
    assert_eq!(created.status(), 201);
    sims.old
        .controls
        .write_delay
        .store(2000, std::sync::atomic::Ordering::Relaxed);
    let r = client
        .put(format!(
            "{}/api/v1/namespaces/team-a/configmaps/c",
            gate.url()
        ))
        .json(&cm)
        .send()
        .await
        .expect("update");
    assert_eq!(r.status(), 504);
    assert!(
        r.headers().get("retry-after").is_none(),
        "{:?}",
        r.headers()
    );
    let status: Value = r.json().await.expect("Status");
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains("may have been applied")),
        "{status}"
    );
}
