//! Real control-plane components of the old version through skewgate: a kube-controller-manager
//! v1.35 whose updates (protobuf, as it sends them) a guard judges while it scales a Deployment.

use std::path::Path;

use serde_json::Value;

use crate::fields::schemas_known;
use crate::harness::{Pair, admin_get, gate, within};
use crate::protobuf::metric;

/// A real kube-controller-manager of the old version, through skewgate with a rejecting guard on
/// everything it updates (Deployments, ReplicaSets, Pods and their status), scales a Deployment
/// up and down: its protobuf updates are judged, and none is refused.
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
        "--replicas=1",
    ]);
    assert!(ok, "{out}");
    for replicas in [3, 2] {
        let (ok, out) = kubectl(&[
            "-n",
            "kcm",
            "scale",
            "deployment",
            "web",
            &format!("--replicas={replicas}"),
        ]);
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
    let (_, m) = admin_get(&gate, "/metrics");
    let checks = |encoding: &str, outcome: &str| {
        metric(
            &m,
            &format!(
                "skewgate_guard_checks_total{{encoding=\"{encoding}\",guard=\"kcm\",outcome=\"{outcome}\"}}"
            ),
        )
    };
    let judged = checks("protobuf", "nothing_lost");
    println!("controller-manager {old}: {judged} protobuf updates judged, none refused");
    assert!(judged >= 4.0, "its protobuf updates were judged: {m}");
    for encoding in ["protobuf", "json", "yaml"] {
        for outcome in ["lost", "cannot_check"] {
            assert_eq!(checks(encoding, outcome), 0.0, "{encoding} {outcome}: {m}");
        }
    }
    pair.stop(name);
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
