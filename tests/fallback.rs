//! Version-aware fallback: a request for a group/version/resource that the chosen backend does not
//! serve goes to the backend that does (known from discovery), and is counted.

mod common;

use common::*;
use serde_json::json;

#[tokio::test]
async fn requests_fall_back_to_the_version_that_serves_them() {
    let sims = sims().await;
    // Everything goes to the old version, except reads of team-b, which go to the new one.
    let gate = gate(&routes(
        &sims,
        "writes:\n  default: old\n  pins:\n    - {name: team-b, namespaces: [team-b], backend: new}\nreads:\n  default: old\n",
    ))
    .await;
    assert!(
        eventually(10, || async {
            let d = gate.debug_routes().await;
            d["backends"]
                .as_array()
                .is_some_and(|b| b.iter().all(|b| b["served"].as_u64().unwrap_or(0) > 0))
        })
        .await,
        "discovery ran for both backends: {}",
        gate.debug_routes().await
    );
    let c = h1();
    let base = gate.url();
    // widgets.sim.skewgate.io/v1 exists only in 1.30; the rules send these requests to 1.29.
    let widget =
        json!({"apiVersion": "sim.skewgate.io/v1", "kind": "Widget", "metadata": {"name": "w1"}});
    let r = c
        .post(format!(
            "{base}/apis/sim.skewgate.io/v1/namespaces/default/widgets"
        ))
        .json(&widget)
        .send()
        .await
        .expect("create");
    assert_eq!((r.status().as_u16(), served_by(&r)), (201, NEW.to_owned()));
    let r = c
        .get(format!(
            "{base}/apis/sim.skewgate.io/v1/namespaces/default/widgets/w1"
        ))
        .send()
        .await
        .expect("get");
    assert_eq!((r.status().as_u16(), served_by(&r)), (200, NEW.to_owned()));
    // apps/v1beta2 is gone from 1.30; a team-b write pinned to 1.30 falls back to 1.29, which serves it.
    c.post(format!("{base}/api/v1/namespaces"))
        .json(&json!({"metadata": {"name": "team-b"}}))
        .send()
        .await
        .expect("ns");
    let deploy = json!({"apiVersion": "apps/v1beta2", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": 1}});
    let r = c
        .post(format!(
            "{base}/apis/apps/v1beta2/namespaces/team-b/deployments"
        ))
        .json(&deploy)
        .send()
        .await
        .expect("create");
    assert_eq!((r.status().as_u16(), served_by(&r)), (201, OLD.to_owned()));
    // What both serve stays where the rules send it.
    let r = c
        .get(format!(
            "{base}/apis/apps/v1/namespaces/team-b/deployments/d"
        ))
        .send()
        .await
        .expect("get");
    assert_eq!((r.status().as_u16(), served_by(&r)), (200, NEW.to_owned()));
    // What nobody serves is not rerouted: the chosen backend answers 404.
    let r = c
        .get(format!("{base}/apis/nothing.example.com/v1/things"))
        .send()
        .await
        .expect("get");
    assert_eq!((r.status().as_u16(), served_by(&r)), (404, OLD.to_owned()));

    let m = gate.metrics().await;
    assert_eq!(
        metric(&m, "skewgate_fallbacks_total{from=\"old\",to=\"new\"}"),
        2.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "skewgate_fallbacks_total{from=\"new\",to=\"old\"}"),
        1.0,
        "{m}"
    );
}
