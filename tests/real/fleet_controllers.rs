//! The control plane's own components through a fleet whose pin moves are superseded (issue 57):
//! a real kube-controller-manager v1.35 through one replica and a real kube-scheduler v1.35
//! through the other, writing as a cluster does (protobuf updates of Deployments, ReplicaSets and
//! their status, bindings), while the pin of their namespace moves four times, each table reaching
//! the second replica 3 s late and superseded before the fleet could make it.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::harness::{Pair, admin_get, direct, gate_with, table, within};
use crate::protobuf::metric;

const NS: &str = "ctrl";

fn routes(pin: &str) -> String {
    format!(
        "writes:\n  default: old\n  fence: 3s\n  pins:\n    - name: {NS}\n      namespaces: [{NS}]\n{pin}reads:\n  default: old\nguards:\n  - name: seen\n    match: {{namespaces: [{NS}], resources: [deployments.apps, replicasets.apps]}}\n    action: warn\n"
    )
}

/// The controller-manager scales a Deployment through replica A (its status, its ReplicaSets),
/// kubectl scales it through replica B, the scheduler binds its pods through replica B, while the pin of their namespace moves there and back twice, tables 4 s
/// apart with `flipAt` 3 s ahead and B 3 s late. Both settle (every write of theirs answered, in
/// the end), the controller-manager's protobuf updates pass the pin's moves, and the audit logs
/// show no object of the namespace written by both versions at once.
pub fn real_components_write_through_superseded_moves(pair: &Pair) {
    let old = pair.var("OLD_VERSION").to_owned();
    if !pair.has("kube-controller-manager", &old) || !pair.has("kube-scheduler", &old) {
        println!("SKIPPED (components in a fleet): no controller-manager or scheduler {old}");
        return;
    }
    let rbac = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubeadm/rbac.yaml");
    let (ok, text) = direct(pair, "new", &["apply", "-f", &rbac.to_string_lossy()]);
    assert!(ok, "{text}");
    let replica = |ip: &str| {
        let more = [
            "--advertise-address",
            ip,
            "--lease-renew-interval",
            "2s",
            "--lease-duration",
            "3s",
        ];
        gate_with(pair, &routes("      backend: old\n"), &more)
    };
    let (a, a_file) = replica("192.0.2.51");
    let (b, b_file) = replica("192.0.2.52");
    crate::fields::schemas_known(&a);
    crate::fields::schemas_known(&b);
    let kc = a_file.with_file_name("kubeconfig");
    let kubectl = |args: &[&str]| crate::harness::kubectl(Path::new(&kc), args);
    let (ok, out) = kubectl(&["create", "namespace", NS]);
    assert!(ok, "{out}");
    let (ok, out) = kubectl(&["-n", NS, "create", "deployment", "web", "--image=busybox"]);
    assert!(ok, "{out}");
    crate::controllers::a_node_to_bind_to(pair);
    let (kcm, scheduler) = ("kcm-fleet", "scheduler-fleet");
    pair.run(
        "kube-controller-manager",
        &old,
        &format!("https://{}", a.addr),
        kcm,
    )
    .unwrap_or_else(|e| panic!("the controller-manager did not start: {e}"));
    pair.run(
        "kube-scheduler",
        &old,
        &format!("https://{}", b.addr),
        scheduler,
    )
    .unwrap_or_else(|e| panic!("the scheduler did not start: {e}"));
    // The Deployment is scaled through B while the controller-manager writes its status through
    // A: one object written through both replicas.
    let kc_b = b_file.with_file_name("kubeconfig");
    let through_b = |args: &[&str]| crate::harness::kubectl(Path::new(&kc_b), args);
    let replicas = move_while_scaling(pair, (&a_file, &b_file), &through_b);
    settled(&kubectl, replicas, pair, kcm);
    let (_, m) = admin_get(&a, "/metrics");
    let protobuf: f64 = ["nothing_lost", "lost", "cannot_check", "malformed"]
        .iter()
        .map(|o| {
            metric(
                &m,
                &format!("skewgate_guard_checks_total{{encoding=\"protobuf\",guard=\"seen\",outcome=\"{o}\"}}"),
            )
        })
        .sum();
    println!("components in a fleet: {protobuf} protobuf updates of the controller-manager judged");
    assert!(protobuf >= 4.0, "its protobuf updates passed through: {m}");
    let judged = crate::supersede::judge_writes(pair, NS);
    println!("components in a fleet: audit {judged:?}");
    let overlaps: usize = judged.values().map(|o| o.overlaps).sum();
    assert_eq!(overlaps, 0, "cross-version overlaps: {judged:?}");
    // How many writes the components make depends on how busy the machine is (9 in a CI run
    // after the other checks, 32 alone): enough to cross the moves, and some object written by
    // each version in turn.
    assert!(
        judged.values().map(|o| o.writes).sum::<usize>() >= 5
            && judged.values().any(|o| o.switches >= 1),
        "the components wrote across the moves: {judged:?}"
    );
    pair.stop(scheduler);
    pair.stop(kcm);
}

/// The four moves, A's table at each step and B's 3 s later, the Deployment scaled at each:
/// returns the replicas it was last scaled to.
fn move_while_scaling(
    pair: &Pair,
    (a_file, b_file): (&Path, &Path),
    kubectl: &dyn Fn(&[&str]) -> (bool, String),
) -> u32 {
    let steps = [
        ("old", "new", 3),
        ("new", "old", 1),
        ("old", "new", 4),
        ("new", "old", 2),
    ];
    for (from, to, replicas) in steps {
        let flip_at = std::time::SystemTime::now() + Duration::from_secs(3);
        let pin = format!(
            "      backend: {to}\n      from: {from}\n      flipAt: {}\n",
            humantime::format_rfc3339_seconds(flip_at)
        );
        let text = table(pair, &routes(&pin));
        std::fs::write(a_file, &text).expect("routes");
        let to = format!("--replicas={replicas}");
        let (ok, out) = kubectl(&["-n", NS, "scale", "deployment", "web", &to]);
        assert!(ok, "{out}");
        std::thread::sleep(Duration::from_secs(3));
        std::fs::write(b_file, &text).expect("routes");
        std::thread::sleep(Duration::from_secs(1));
    }
    steps.last().map_or(0, |s| s.2)
}

/// The Deployment at `replicas`, and every one of its pods bound to node-0.
fn settled(kubectl: &dyn Fn(&[&str]) -> (bool, String), replicas: u32, pair: &Pair, kcm: &str) {
    let done = within(180, || deployment_settled(kubectl, NS, replicas));
    let (_, pods) = kubectl(&["-n", NS, "get", "pods", "-o", "wide"]);
    let log = pair.log(kcm);
    let tail: Vec<&str> = log.lines().rev().take(20).collect();
    assert!(done, "{pods}\n{tail:?}");
}

/// Whether Deployment `web` of `ns` is at `replicas` and every live pod of it bound to node-0
/// (without a kubelet, a bound pod deleted stays terminating: the live ones count).
pub fn deployment_settled(
    kubectl: &dyn Fn(&[&str]) -> (bool, String),
    ns: &str,
    replicas: u32,
) -> bool {
    let (_, text) = kubectl(&["-n", ns, "get", "deployment", "web", "-o", "json"]);
    let d: Value = serde_json::from_str(&text).unwrap_or_default();
    let (_, text) = kubectl(&["-n", ns, "get", "pods", "-o", "json"]);
    let pods: Value = serde_json::from_str(&text).unwrap_or_default();
    let items: Vec<Value> = pods["items"].as_array().cloned().unwrap_or_default();
    let live: Vec<&Value> = (items.iter())
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .collect();
    d["status"]["observedGeneration"] == d["metadata"]["generation"]
        && d["status"]["updatedReplicas"] == replicas
        && live.len() == replicas as usize
        && live.iter().all(|p| p["spec"]["nodeName"] == "node-0")
}
