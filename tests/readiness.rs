//! Readiness means "can serve the traffic it will get": a backend that no rule sends traffic to
//! now (docs/operating.md's upgrade step 1: the new version's backend added before its apiservers exist) does
//! not make a replica unready; one that a rule uses does, and `/readyz` names it and the rules.

mod common;

use common::*;
use skewgate::proxy::ProxySettings;

/// Nothing listens there.
const NOWHERE: &str = "http://127.0.0.1:1";

async fn readyz(gate: &Gate) -> (u16, String) {
    let r = reqwest::get(format!("{}/readyz", gate.admin()))
        .await
        .expect("readyz");
    (r.status().as_u16(), r.text().await.unwrap_or_default())
}

fn table(sims: &Sims, rollout_percent: u32) -> String {
    routes(
        sims,
        &format!(
            "writes:\n  default: old\n  pins:\n    - {{name: team-a, namespaces: [team-a], backend: old}}\nreads:\n  default: old\n  rollouts:\n    - {{name: canary, match: {{namespaces: [canary]}}, to: new, percent: {rollout_percent}}}\n"
        ),
    )
    .replace(&sims.new.url(), NOWHERE)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_no_rule_uses_does_not_make_a_replica_unready() {
    let sims = sims().await;
    // Step 1 of an upgrade: the new backend is in the file, its apiservers do not exist yet.
    let gate = gate(&table(&sims, 0)).await;
    assert!(
        eventually(10, || async { readyz(&gate).await.0 == 200 }).await,
        "ready while only the unused backend is unreachable: {:?}",
        readyz(&gate).await
    );
    let debug = gate.debug_routes().await;
    assert_eq!(debug["backends"][1]["usedBy"], serde_json::json!([]));
    // A rollout above 0 % sends traffic there: not ready, and the body says why.
    gate.rewrite(&table(&sims, 10));
    assert!(
        eventually(10, || async { readyz(&gate).await.0 == 503 }).await,
        "a backend a live rollout uses counts"
    );
    let (_, body) = readyz(&gate).await;
    assert!(body.contains("backend new (used by canary)"), "{body}");
    assert!(!body.contains("backend old"), "{body}");
    // Back to 0 %: ready again.
    gate.rewrite(&table(&sims, 0));
    assert!(eventually(10, || async { readyz(&gate).await.0 == 200 }).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_default_or_pin_on_an_unreachable_backend_makes_it_unready() {
    let sims = sims().await;
    let text = table(&sims, 0).replace(
        "    - {name: team-a, namespaces: [team-a], backend: old}",
        "    - {name: team-a, namespaces: [team-a], backend: new}",
    );
    let gate = gate(&text).await;
    assert!(
        eventually(10, || async {
            readyz(&gate)
                .await
                .1
                .contains("backend new (used by team-a)")
        })
        .await,
        "{:?}",
        readyz(&gate).await
    );
    assert_eq!(readyz(&gate).await.0, 503);
    // Liveness is not readiness: the process answers.
    let live = reqwest::get(format!("{}/livez", gate.admin()))
        .await
        .expect("livez");
    assert_eq!(live.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skewgate_names_itself_in_its_own_requests_and_forwards_a_clients_name_as_it_came() {
    let sims = sims().await;
    let gate = gate(&table(&sims, 0)).await;
    let own = format!("skewgate/{}", skewgate::VERSION);
    // Its health checks and discovery, as an apiserver's audit log would show them.
    for path in ["/readyz", "/version", "/apis"] {
        let named = eventually(10, || async {
            sims.old.controls.user_agent_of(path).as_deref() == Some(own.as_str())
        })
        .await;
        assert!(named, "{path}: {:?}", sims.old.controls.user_agent_of(path));
    }
    // A client's request keeps the client's own name.
    let list = "/api/v1/namespaces/default/configmaps";
    let kubectl = "kubectl/v1.36.3 (linux/amd64)";
    let client = reqwest::Client::builder().user_agent(kubectl).build();
    let resp = client.expect("client").get(gate.url() + list).send().await;
    assert_eq!(resp.expect("list").status(), 200);
    assert_eq!(
        sims.old.controls.user_agent_of(list).as_deref(),
        Some(kubectl)
    );
}

/// An apiserver that was down (restarting) is used again about a second after it answers, not a
/// whole health interval later: until a check finds it ready every request to its backend gets
/// 503, and every client behind skewgate waits with it (bench/kubelets.rs measured the kubelets'
/// watches back 12.5 s after a restart through skewgate and 8.7 s going straight, with checks
/// every 5 s). Here the interval is an hour, so only the quick re-check of a down endpoint passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apiserver_back_from_a_restart_is_used_again_without_waiting_a_health_interval() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let sims = sims().await;
    let up = Arc::new(AtomicBool::new(false));
    let (sim, switch) = (sims.old.addr, up.clone());
    // The apiserver's port as a restart leaves it: nothing listens, then the apiserver does.
    let (relay, _) = tcp_relay(move || {
        if switch.load(Ordering::SeqCst) {
            sim
        } else {
            "127.0.0.1:1".parse().expect("addr")
        }
    })
    .await;
    let text = routes(&sims, "writes:\n  default: old\nreads:\n  default: old\n")
        .replace(&sims.old.url(), &format!("http://{relay}"));
    let settings = ProxySettings {
        health_interval: std::time::Duration::from_secs(3600),
        ..ProxySettings::default()
    };
    let gate = gate_with(&text, settings).await;
    let get = || async {
        h1().get(format!(
            "{}/api/v1/namespaces/default/configmaps",
            gate.url()
        ))
        .send()
        .await
        .expect("answer")
    };
    let down = get().await;
    assert_eq!(down.status(), 503, "the apiserver is down");
    assert_eq!(down.headers()["retry-after"], "1");
    up.store(true, Ordering::SeqCst);
    assert!(
        eventually(10, || async { get().await.status() == 200 }).await,
        "the apiserver is back, and skewgate sends to it again within the hour's interval"
    );
}
