//! deploy/monitoring/ against a running skewgate: every metric the dashboard and the alerts use is
//! in its /metrics, the rules pass `promtool check rules` (where promtool is installed), and the
//! ServiceMonitor selects the Service that exposes the admin port.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

fn monitoring() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/monitoring")
}

fn yaml_documents(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(monitoring().join(file)).expect("read");
    serde_saphyr::from_multiple(&text).expect("YAML")
}

/// Every PromQL expression of the dashboard (panels and variables).
fn dashboard_exprs() -> Vec<String> {
    let text = std::fs::read_to_string(monitoring().join("dashboard.json")).expect("dashboard");
    let d: Value = serde_json::from_str(&text).expect("dashboard JSON");
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push(t["expr"].as_str().expect("expr").to_owned());
        }
    }
    for v in d["templating"]["list"].as_array().expect("variables") {
        if let Some(q) = v["query"].as_str().filter(|q| q.contains('(')) {
            out.push(q.to_owned());
        }
    }
    out
}

/// The rule groups of the PrometheusRule.
fn rule_groups() -> Value {
    let docs = yaml_documents("prometheus-rules.yaml");
    assert_eq!(docs[0]["kind"], "PrometheusRule");
    docs[0]["spec"].clone()
}

/// The metric names an expression reads (skewgate's and the process metrics), recorded rules left out.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut word = String::new();
    for c in expr.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
            continue;
        }
        if (word.starts_with("skewgate_") || word.starts_with("process_")) && !word.contains(':') {
            names.insert(std::mem::take(&mut word));
        }
        word.clear();
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_and_the_alerts_use_is_exported() {
    let sims = sims().await;
    let gate = gate(&routes(
        &sims,
        "writes:
  default: old
  pins: [{name: team-a, namespaces: [team-a], backend: new}]
reads:
  default: old
  rollouts:
    - name: canary
      match: {namespaces: [canary]}
      to: new
      percent: 50
      abort: {errorRatio: 0.5, window: 1m, minRequests: 100}
guards:
  - name: old-kubectl
    match: {resources: [configmaps], clients: [\"kubectl<1.30\"]}
    action: reject
shareWatches:
  - name: kubelet-mounts
    match: {resources: [configmaps, secrets], groups: [\"system:nodes\"]}
",
    ))
    .await;
    let c = h1();
    for ns in ["team-a", "canary", "default"] {
        let r = c
            .get(format!("{}/api/v1/namespaces/{ns}/configmaps", gate.url()))
            .send()
            .await
            .expect("get");
        assert_eq!(r.status(), 200);
    }
    // A write through v1.30 (team-a's pin) of a configmap holding its field `policy`: what a
    // rollback to v1.29 would strand, counted once the schemas are known.
    gate.knows_schemas().await;
    let cm = serde_json::json!({"metadata": {"name": "kept"}, "policy": "keep"});
    let url = format!("{}/api/v1/namespaces/team-a/configmaps", sims.new.url());
    assert_eq!(
        c.post(url).json(&cm).send().await.expect("create").status(),
        201
    );
    let patched = c
        .patch(format!(
            "{}/api/v1/namespaces/team-a/configmaps/kept",
            gate.url()
        ))
        .header("content-type", "application/merge-patch+json")
        .body(r#"{"data":{"a":"1"}}"#)
        .send()
        .await
        .expect("patch");
    assert_eq!(patched.status(), 200);
    let m = gate.metrics().await;
    let mut exprs = dashboard_exprs();
    let groups = rule_groups();
    for g in groups["groups"].as_array().expect("groups") {
        for r in g["rules"].as_array().expect("rules") {
            exprs.push(r["expr"].as_str().expect("expr").to_owned());
        }
    }
    let used: BTreeSet<String> = exprs.iter().flat_map(|e| metric_names(e)).collect();
    assert!(used.len() >= 15, "{used:?}");
    let missing: Vec<&String> = used
        .iter()
        .filter(|name| {
            !m.lines().any(|l| {
                l.strip_prefix(name.as_str())
                    .is_some_and(|rest| rest.starts_with(['{', ' ']))
            })
        })
        .collect();
    assert!(missing.is_empty(), "not in /metrics: {missing:?}\n{m}");
}

#[test]
fn the_alerts_pass_promtool() {
    let groups = rule_groups();
    let alerts: Vec<&str> = groups["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .filter_map(|r| r["alert"].as_str())
        .collect();
    for wanted in [
        "SkewgateBackendWithoutEndpoints",
        "SkewgateRolloutAborted",
        "SkewgateReloadFailing",
        "SkewgateBackendErrorRatioAboveOthers",
        "SkewgateWritesHeldTooLong",
    ] {
        assert!(alerts.contains(&wanted), "{wanted}: {alerts:?}");
    }
    let dir = temp_dir("rules");
    std::fs::write(
        dir.join("rules.yaml"),
        serde_saphyr::to_string(&groups).expect("YAML"),
    )
    .expect("write");
    promtool(&dir, &["check", "rules", "rules.yaml"]);
}

#[test]
fn the_service_monitor_selects_the_metrics_service_and_its_port() {
    let docs = yaml_documents("servicemonitor.yaml");
    let service = docs
        .iter()
        .find(|d| d["kind"] == "Service")
        .expect("Service");
    let monitor = docs
        .iter()
        .find(|d| d["kind"] == "ServiceMonitor")
        .expect("ServiceMonitor");
    let selector = monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels");
    for (k, v) in selector {
        assert_eq!(&service["metadata"]["labels"][k], v, "label {k}");
    }
    let port = monitor["spec"]["endpoints"][0]["port"]
        .as_str()
        .expect("port");
    assert!(
        service["spec"]["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .any(|p| p["name"] == port),
        "{port}"
    );
    // The Service selects the Deployment's pods.
    let deployment =
        std::fs::read_to_string(monitoring().join("../skewgate.yaml")).expect("deployment");
    for (k, v) in service["spec"]["selector"].as_object().expect("selector") {
        let v = v.as_str().expect("value");
        assert!(deployment.contains(&format!("{k}: {v}")), "{k}: {v}");
    }
}

/// A backend added ahead of its apiservers (step 1 of deploy/UPGRADE.md: no endpoint up, no rule
/// sends to it) raises no alert; the same backend once a rule uses it does (promtool's own rule
/// tests, where promtool is installed).
#[test]
fn no_alert_fires_for_a_backend_that_no_rule_uses_yet() {
    let dir = temp_dir("alert-test");
    let rules = dir.join("rules.yaml");
    std::fs::write(
        &rules,
        serde_saphyr::to_string(&rule_groups()).expect("YAML"),
    )
    .expect("write");
    let test = "rule_files: [rules.yaml]
evaluation_interval: 30s
tests:
  - interval: 30s
    input_series:
      - series: 'skewgate_endpoint_ready{backend=\"v1-30\",endpoint=\"https://10.0.0.11:6444\"}'
        values: '0x20'
      - series: 'skewgate_backend_in_use{backend=\"v1-30\"}'
        values: '0x9 1x10'
    alert_rule_test:
      - eval_time: 4m
        alertname: SkewgateBackendWithoutEndpoints
        exp_alerts: []
      - eval_time: 9m
        alertname: SkewgateBackendWithoutEndpoints
        exp_alerts:
          - exp_labels: {severity: critical, backend: v1-30}
            exp_annotations:
              summary: Backend v1-30 has no ready endpoint
              description: No endpoint of backend v1-30 answers its health check. Requests that the route table sends there get 503. Check the apiservers of that version, or move its pins and rollouts away (see deploy/UPGRADE.md).
";
    std::fs::write(dir.join("test.yaml"), test).expect("write");
    promtool(&dir, &["test", "rules", "test.yaml"]);
}

/// Runs promtool with `args` in `dir` and asserts it succeeded; `false` (and a SKIPPED line) when
/// promtool is not installed.
fn promtool(dir: &std::path::Path, args: &[&str]) -> bool {
    if std::process::Command::new("promtool")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("SKIPPED: promtool is not installed; the rules were not tried");
        return false;
    }
    let out = std::process::Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("promtool runs");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    true
}
