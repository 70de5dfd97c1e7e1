//! Real control-plane components of the old version through skewgate: a kube-controller-manager
//! v1.35 whose updates (protobuf, as it sends them) a guard judges while it scales a Deployment,
//! and a kube-scheduler v1.35 that binds the Deployment's pods.

use std::path::Path;

use serde_json::Value;

use crate::fields::schemas_known;
use crate::harness::{Pair, admin_get, curl_code, direct, gate, within};
use crate::protobuf::metric;

/// A real kube-controller-manager of the old version, through skewgate with a rejecting guard on
/// everything it updates (Deployments, ReplicaSets, Pods and their status), scales a Deployment
/// up and down: its protobuf updates are judged, and none is refused. Then a real kube-scheduler
/// of the old version, through the same skewgate, binds the Deployment's pods to a Node.
pub fn a_real_old_controller_manager_scales_a_deployment_through_the_guard(pair: &Pair) {
    let old = pair.var("OLD_VERSION").to_owned();
    if !pair.has("kube-controller-manager", &old) {
        println!("SKIPPED (controller-manager): no kube-controller-manager-{old}.xz in the assets");
        return;
    }
    let routes = "writes:\n  default: new\nreads:\n  default: new\nguards:\n  - name: kcm\n    match: {resources: [deployments.apps, replicasets.apps, pods]}\n    action: reject\n";
    let (gate, file) = gate(pair, routes);
    schemas_known(&gate);
    let name = "kcm-through-skewgate";
    let server = format!("https://{}", gate.addr);
    pair.run("kube-controller-manager", &old, &server, name)
        .unwrap_or_else(|e| panic!("the controller-manager did not start: {e}"));
    let kc = file.with_file_name("kubeconfig");
    let kubectl = |args: &[&str]| crate::harness::kubectl(Path::new(&kc), args);
    let (ok, out) = kubectl(&["create", "namespace", "kcm"]);
    assert!(ok, "{out}");
    let (ok, out) = kubectl(&[
        "-n",
        "kcm",
        "create",
        "deployment",
        "web",
        "--image=busybox",
    ]);
    assert!(ok, "{out}");
    for replicas in [3, 2] {
        scaled(pair, &kubectl, replicas, name);
    }
    if pair.has("kube-scheduler", &old) {
        a_node_to_bind_to(pair);
        let scheduler = "scheduler-through-skewgate";
        pair.run("kube-scheduler", &old, &server, scheduler)
            .unwrap_or_else(|e| panic!("the scheduler did not start: {e}"));
        let bound = within(120, || {
            let (_, text) = kubectl(&["-n", "kcm", "get", "pods", "-o", "json"]);
            let pods: Value = serde_json::from_str(&text).unwrap_or_default();
            let items = pods["items"].as_array().cloned().unwrap_or_default();
            !items.is_empty() && items.iter().all(|p| p["spec"]["nodeName"] == "node-0")
        });
        let (_, pods) = kubectl(&["-n", "kcm", "get", "pods", "-o", "wide"]);
        assert!(bound, "{pods}\n{}", tail(&pair.log(scheduler)));
        println!("scheduler {old}: the Deployment's pods bound through skewgate");
        pair.stop(scheduler);
    } else {
        println!("SKIPPED (scheduler): no kube-scheduler-{old}.xz in the assets");
    }
    nothing_refused(&gate, &old);
    pair.stop(name);
}

/// Scales the Deployment to `replicas` and waits until the controller-manager (`name`) has made
/// it so.
fn scaled(pair: &Pair, kubectl: &dyn Fn(&[&str]) -> (bool, String), replicas: u32, name: &str) {
    let to = format!("--replicas={replicas}");
    let (ok, out) = kubectl(&["-n", "kcm", "scale", "deployment", "web", &to]);
    assert!(ok, "{out}");
    let settled = within(120, || {
        let (_, text) = kubectl(&["-n", "kcm", "get", "deployment", "web", "-o", "json"]);
        let d: Value = serde_json::from_str(&text).unwrap_or_default();
        let status = &d["status"];
        status["observedGeneration"] == d["metadata"]["generation"]
            && status["replicas"] == replicas
            && status["updatedReplicas"] == replicas
    });
    let (_, pods) = kubectl(&["-n", "kcm", "get", "pods", "--no-headers"]);
    assert!(
        settled,
        "the Deployment did not settle at {replicas}:\n{pods}\n{}",
        tail(&pair.log(name))
    );
}

/// Node `node-0`, Ready with room for pods, without the not-ready taint admission gives a new
/// Node (no kubelet and no node lifecycle controller run here); made once for the pair.
pub fn a_node_to_bind_to(pair: &Pair) {
    let node = r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"node-0"}}"#;
    let file = crate::common::temp_dir("node").join("node.json");
    std::fs::write(&file, node).expect("node");
    let (ok, out) = direct(pair, "new", &["create", "-f", &file.to_string_lossy()]);
    assert!(ok || out.contains("AlreadyExists"), "{out}");
    let status = r#"{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","lastHeartbeatTime":null}],"capacity":{"cpu":"8","memory":"16Gi","pods":"110"},"allocatable":{"cpu":"8","memory":"16Gi","pods":"110"}}}"#;
    let url = format!("{}/api/v1/nodes/node-0/status", pair.var("NEW_URL"));
    let kind = "content-type: application/merge-patch+json";
    let code = curl_code(pair, &["-X", "PATCH", "-H", kind, "--data", status, &url]);
    assert_eq!(code, 200, "the Node's status");
    let untaint = [
        "taint",
        "node",
        "node-0",
        "node.kubernetes.io/not-ready:NoSchedule-",
    ];
    let _ = direct(pair, "new", &untaint);
}

/// The controller-manager's protobuf updates were judged, and no update was refused or left
/// unchecked, in any encoding.
fn nothing_refused(gate: &crate::process::Serving, old: &str) {
    let (_, m) = admin_get(gate, "/metrics");
    let checks = |encoding: &str, outcome: &str| {
        let name = format!(
            "skewgate_guard_checks_total{{encoding=\"{encoding}\",guard=\"kcm\",outcome=\"{outcome}\"}}"
        );
        metric(&m, &name)
    };
    let judged = checks("protobuf", "nothing_lost");
    println!("controller-manager {old}: {judged} protobuf updates judged, none refused");
    assert!(judged >= 4.0, "its protobuf updates were judged: {m}");
    for encoding in ["protobuf", "json", "yaml"] {
        for outcome in ["lost", "cannot_check"] {
            assert_eq!(checks(encoding, outcome), 0.0, "{encoding} {outcome}: {m}");
        }
    }
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
