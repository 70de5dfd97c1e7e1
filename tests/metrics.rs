//! Metrics that follow the route table: series of what a reload removed go away, counters of what
//! the table has start at 0, the pin gauge says where each pin points, reload success is a gauge,
//! creates count as writes, requests carry bounded group/resource labels, and the build and
//! process metrics are there.

mod common;

use common::*;

/// Backends old and new (the simulators) and `spare` (nothing listens), a pin, a rollout with
/// abort to `spare`.
fn table(sims: &Sims, pin_to: &str, rollout: &str, spare: bool) -> String {
    let spare_backend = if spare {
        "  - name: spare\n    endpoints: [http://127.0.0.1:1]\n"
    } else {
        ""
    };
    let to = if spare { "spare" } else { "new" };
    routes(
        sims,
        &format!(
            "{spare_backend}writes:
  default: old
  pins:
    - {{name: team-a, namespaces: [team-a], backend: {pin_to}}}
reads:
  default: old
  rollouts:
    - name: {rollout}
      match: {{namespaces: [canary]}}
      to: {to}
      percent: 100
      abort: {{errorRatio: 0.5, window: 1m, minRequests: 1000}}
"
        ),
    )
}

fn has(m: &str, line: &str) -> bool {
    m.lines().any(|l| l == line)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn series_follow_the_route_table_across_a_reload() {
    let sims = sims().await;
    let gate = gate(&table(&sims, "new", "canary", true)).await;
    let c = h1();
    for _ in 0..4 {
        let r = c
            .get(format!("{}/api/v1/namespaces/canary/pods", gate.url()))
            .send()
            .await
            .expect("get");
        assert_eq!(r.status(), 503);
    }
    let m = gate.metrics().await;
    for line in [
        r#"skewgate_pin_backend{backend="new",pin="team-a"} 1"#,
        r#"skewgate_pin_backend{backend="old",pin="writes.default"} 1"#,
        r#"skewgate_rollout_percent{rollout="canary"} 100"#,
        r#"skewgate_rollout_error_ratio{rollout="canary"} 1"#,
        r#"skewgate_endpoint_ready{backend="spare",endpoint="http://127.0.0.1:1"} 0"#,
        // The rollout sends to spare: the alert on a backend without endpoints takes it.
        r#"skewgate_backend_in_use{backend="spare"} 1"#,
        r#"skewgate_backend_in_use{backend="old"} 1"#,
        // Started at 0, before any event.
        r#"skewgate_upstream_errors_total{backend="new",reason="connect"} 0"#,
        r#"skewgate_pin_moves_total{pin="team-a"} 0"#,
        r#"skewgate_decisions_total{class="write",rule="team-a"} 0"#,
        r#"skewgate_config_reloads_total{result="failure"} 0"#,
        r#"skewgate_tls_handshake_errors_total{reason="bad_certificate"} 0"#,
    ] {
        assert!(has(&m, line), "{line}\n{m}");
    }
    assert!(!m.contains(r#"skewgate_pin_backend{backend="old",pin="team-a"}"#));

    gate.rewrite(&table(&sims, "old", "canary-2", false));
    let moved = eventually(10, || async {
        has(
            &gate.metrics().await,
            r#"skewgate_pin_backend{backend="old",pin="team-a"} 1"#,
        )
    })
    .await;
    let m = gate.metrics().await;
    assert!(moved, "{m}");
    assert!(!m.contains("spare"), "the removed backend's series: {m}");
    assert!(!m.contains(r#"rollout="canary""#), "{m}");
    assert!(!m.contains(r#"rule="canary""#), "{m}");
    assert!(!m.contains(r#"skewgate_pin_backend{backend="new",pin="team-a"}"#));
    assert!(has(
        &m,
        r#"skewgate_rollout_percent{rollout="canary-2"} 100"#
    ));
    assert!(
        has(&m, r#"skewgate_pin_moves_total{pin="team-a"} 1"#),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_reload_shows_in_the_reload_gauge_until_a_good_one() {
    let sims = sims().await;
    let good = table(&sims, "new", "canary", false);
    let gate = gate(&good).await;
    let m = gate.metrics().await;
    assert!(has(&m, "skewgate_config_last_reload_successful 1"), "{m}");
    assert!(
        m.lines()
            .any(|l| l.starts_with("skewgate_build_info{commit=")
                && l.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION")))
                && l.ends_with(" 1")),
        "{m}"
    );
    for name in [
        "process_cpu_seconds_total ",
        "process_resident_memory_bytes ",
        "process_open_fds ",
    ] {
        assert!(m.lines().any(|l| l.starts_with(name)), "{name}: {m}");
    }

    gate.rewrite("backends: [oops");
    assert!(
        eventually(10, || async {
            has(
                &gate.metrics().await,
                "skewgate_config_last_reload_successful 0",
            )
        })
        .await
    );
    gate.rewrite(&good.replace("percent: 100", "percent: 50"));
    assert!(
        eventually(10, || async {
            has(
                &gate.metrics().await,
                "skewgate_config_last_reload_successful 1",
            )
        })
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_count_as_writes_and_resources_are_labelled_within_bounds() {
    let sims = sims().await;
    let gate = gate(&table(&sims, "new", "canary", false)).await;
    let c = h1();
    let created = c
        .post(format!(
            "{}/api/v1/namespaces/team-b/configmaps",
            gate.url()
        ))
        .header("content-type", "application/json")
        .body(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c1"},"data":{"a":"b"}}"#)
        .send()
        .await
        .expect("create");
    assert_eq!(created.status(), 201);
    for path in [
        "/apis/apps/v1/namespaces/team-b/deployments",
        "/apis/made-up-123.example/v1/namespaces/team-b/things",
        "/version",
    ] {
        c.get(format!("{}{path}", gate.url()))
            .send()
            .await
            .expect("get");
    }
    let m = gate.metrics().await;
    let requests = |labels: &str| {
        m.lines()
            .any(|l| l.starts_with(&format!("skewgate_requests_total{{{labels}}}")))
    };
    assert!(
        requests(
            r#"backend="old",class="write",code="201",group="",resource="configmaps",verb="create""#
        ),
        "{m}"
    );
    assert!(
        requests(
            r#"backend="old",class="read",code="200",group="apps",resource="deployments",verb="list""#
        ),
        "{m}"
    );
    assert!(
        m.lines().any(|l| l.starts_with("skewgate_requests_total{")
            && l.contains(r#"group="other",resource="other""#)),
        "{m}"
    );
    assert!(!m.contains("made-up-123"), "{m}");
    assert!(
        m.lines().any(|l| l.starts_with("skewgate_requests_total{")
            && l.contains(r#"group="",resource="",verb="get""#)),
        "{m}"
    );
    assert!(has(
        &m,
        r#"skewgate_inflight_requests{backend="old",class="write"} 0"#
    ));
}
