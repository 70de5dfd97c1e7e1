//! A rollout aborts by itself when its new version fails: reads go back to the default version, and
//! the abort shows in /debug/routes and /metrics.

mod common;

use std::sync::atomic::Ordering;

use common::*;
use serde_json::Value;

#[tokio::test]
async fn a_failing_new_version_trips_the_abort_and_reads_go_back() {
    let sims = sims().await;
    let gate = gate(&routes(
        &sims,
        "writes:
  default: old
reads:
  default: old
  rollouts:
    - name: to-new
      to: new
      stickyBy: namespace
      percent: 100
      abort: {errorRatio: 0.1, window: 1m, minRequests: 50}
",
    ))
    .await;
    let c = h2();
    let url = |i: usize| format!("{}/api/v1/namespaces/ns-{i}/configmaps", gate.url());
    // Healthy: every read goes to the new version.
    for i in 0..20 {
        let r = c.get(url(i)).send().await.expect("read");
        assert_eq!((r.status().as_u16(), served_by(&r)), (200, NEW.to_owned()));
    }
    // The new version starts failing one read in five.
    sims.new
        .controls
        .fail_reads_per_mille
        .store(200, Ordering::Relaxed);
    let mut failures = 0;
    let mut sent = 0;
    while sent < 500 {
        let r = c.get(url(sent)).send().await.expect("read");
        sent += 1;
        if r.status() == 500 {
            failures += 1;
        }
        if served_by(&r) == OLD {
            break;
        }
    }
    assert!(
        sent < 500,
        "the abort tripped ({failures} failures in {sent} reads)"
    );
    // From now on every read goes to the default version and succeeds.
    for i in 0..50 {
        let r = c.get(url(i)).send().await.expect("read");
        assert_eq!((r.status().as_u16(), served_by(&r)), (200, OLD.to_owned()));
    }
    let debug: Value = gate.debug_routes().await;
    let rollout = &debug["reads"]["rollouts"][0];
    assert_eq!(rollout["aborted"], true, "{rollout}");
    assert_eq!(rollout["percentInForce"], 0.0);
    let ratio = rollout["abortWindow"]["errorRatio"].as_f64().unwrap_or(0.0);
    assert!(ratio > 0.1, "{rollout}");
    let m = gate.metrics().await;
    assert_eq!(
        metric(&m, "skewgate_rollout_aborted{rollout=\"to-new\"}"),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "skewgate_rollout_percent{rollout=\"to-new\"}"),
        0.0,
        "{m}"
    );

    // The abort holds until the file changes; a changed file starts afresh.
    sims.new
        .controls
        .fail_reads_per_mille
        .store(0, Ordering::Relaxed);
    let fixed = routes(
        &sims,
        "writes:\n  default: old\nreads:\n  default: old\n  rollouts:\n    - {name: to-new, to: new, percent: 100, abort: {errorRatio: 0.2, window: 1m, minRequests: 50}}\n",
    );
    gate.rewrite(&fixed);
    assert!(
        eventually(10, || async {
            let r = c.get(url(1)).send().await.expect("read");
            served_by(&r) == NEW
        })
        .await
    );
}

/// A rollout to a backend with no endpoint ready (its apiservers down, or not up yet) aborts too:
/// skewgate's own 503s count as failures of the rollout that chose the backend. Before, they were
/// never recorded, and such a rollout kept sending its share to a backend that answered nothing.
#[tokio::test]
async fn a_rollout_to_a_backend_with_no_endpoint_aborts() {
    let sims = sims().await;
    let gate = gate(&routes(
        &sims,
        "  - name: gone
    endpoints: [http://127.0.0.1:1]
writes:
  default: old
reads:
  default: old
  rollouts:
    - name: to-gone
      to: gone
      percent: 100
      abort: {errorRatio: 0.5, window: 1m, minRequests: 10}
",
    ))
    .await;
    let c = h1();
    let url = format!("{}/api/v1/namespaces/a/configmaps", gate.url());
    let mut unavailable = 0;
    for _ in 0..30 {
        let r = c.get(&url).send().await.expect("read");
        if r.status() == 503 {
            unavailable += 1;
        } else {
            assert_eq!((r.status().as_u16(), served_by(&r)), (200, OLD.to_owned()));
        }
    }
    assert!(
        (10..=11).contains(&unavailable),
        "{unavailable} answered 503 before the abort"
    );
    let m = gate.metrics().await;
    assert_eq!(
        metric(&m, "skewgate_rollout_aborted{rollout=\"to-gone\"}"),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "skewgate_rollout_percent{rollout=\"to-gone\"}"),
        0.0
    );
}
