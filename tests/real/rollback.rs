//! Rolling back from v1.36 to v1.35 as a first-class move: what only v1.36 keeps is written through
//! skewgate (a pod's `allocatedResourcesStatus`, a MutatingAdmissionPolicy, a kind v1.35 does not
//! serve); skewgate counts it as it passes; `rollback-check --to` the v1.35 backend names both
//! objects and their namespace and fails; with the pins it suggests in the rollback table it
//! passes, `check` finds nothing in its record to warn of, and once the table is loaded and its move
//! made, every other write goes to v1.35 while the pinned objects keep what v1.35 would drop.

use std::process::Command;
use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::fields::merge_patch;
use crate::harness::{Pair, admin_get, direct, gate, kubectl, table, within};

const NS: &str = "rb-gpu";
const PLAIN: &str = "rb-plain";
const POLICY: &str = "rb-add-label";

/// `skewgate rollback-check` against the pair as the pair's admin: its exit code, its JSON (with
/// `-o json`) or text.
fn rollback_check(pair: &Pair, routes: &std::path::Path, more: &[&str]) -> (Option<i32>, String) {
    let admin = ["--proxy-user", "admin", "--as-group", "system:masters"];
    rollback_check_as(pair, routes, &[&admin[..], more].concat())
}

/// `skewgate rollback-check` against the pair, its user named in `more`.
fn rollback_check_as(
    pair: &Pair,
    routes: &std::path::Path,
    more: &[&str],
) -> (Option<i32>, String) {
    let (ca, fp, fpk) = (
        pair.pki("ca.crt"),
        pair.pki("front-proxy-client.crt"),
        pair.pki("front-proxy-client.key"),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_skewgate"))
        .arg("rollback-check")
        .arg("--routes")
        .arg(routes)
        .args(["--to", "old", "--upstream-ca-file", &ca])
        .args([
            "--proxy-client-cert-file",
            &fp,
            "--proxy-client-key-file",
            &fpk,
        ])
        .args(more)
        .output()
        .expect("rollback-check runs");
    println!(
        "rollback-check: {}",
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .last()
            .unwrap_or("")
    );
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Through skewgate, writes on v1.36: a namespace with a pod whose status holds v1.36's
/// `allocatedResourcesStatus`, a namespace with a plain configmap, and a MutatingAdmissionPolicy.
fn write_what_only_v1_36_keeps(pair: &Pair, kubeconfig: &std::path::Path, gate_addr: &str) {
    for ns in [NS, PLAIN] {
        let (ok, text) = kubectl(kubeconfig, &["create", "namespace", ns]);
        assert!(ok || text.contains("AlreadyExists"), "{text}");
        let (ok, text) = kubectl(
            kubeconfig,
            &["-n", ns, "create", "serviceaccount", "default"],
        );
        assert!(ok || text.contains("AlreadyExists"), "{text}");
    }
    let dir = kubeconfig.with_file_name("objects.yaml");
    let objects = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: gpu, namespace: {NS}}}\nspec:\n  schedulingGates: [{{name: example.com/hold}}]\n  containers:\n  - name: c\n    image: busybox\n    resources: {{limits: {{example.com/dev: \"1\"}}, requests: {{example.com/dev: \"1\"}}}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: plain, namespace: {PLAIN}}}\ndata: {{k: v}}\n---\napiVersion: admissionregistration.k8s.io/v1\nkind: MutatingAdmissionPolicy\nmetadata: {{name: {POLICY}}}\nspec:\n  matchConstraints:\n    resourceRules: [{{apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}}]\n  failurePolicy: Ignore\n  reinvocationPolicy: Never\n  mutations:\n  - patchType: ApplyConfiguration\n    applyConfiguration: {{expression: 'Object{{metadata: Object.metadata{{labels: {{\"rb\": \"y\"}}}}}}'}}\n"
    );
    std::fs::write(&dir, objects).expect("objects");
    let (ok, text) = kubectl(kubeconfig, &["apply", "-f", &dir.to_string_lossy()]);
    assert!(ok, "{text}");
    let status = format!("https://{gate_addr}/api/v1/namespaces/{NS}/pods/gpu/status");
    let health = r#"{"status":{"containerStatuses":[{"name":"c","image":"busybox","imageID":"","ready":false,"restartCount":0,"state":{"waiting":{"reason":"ContainerCreating"}},"allocatedResourcesStatus":[{"name":"example.com/dev","resources":[{"resourceID":"r1","health":"Healthy","message":"ok"}]}]}]}}"#;
    assert_eq!(merge_patch(pair, &status, health), 200);
}

/// The sample `series` in skewgate's /metrics, 0 when absent.
fn sample(gate: &crate::process::Serving, series: &str) -> f64 {
    let (_, text) = admin_get(gate, "/metrics");
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The finding of `resource` (its selector) and `stake` (a field, or `kindNotServed`).
fn finding<'c>(check: &'c Value, resource: &str, stake: &str) -> Option<&'c Value> {
    check["findings"].as_array()?.iter().find(|f| {
        let r = &f["resource"];
        let selector = match r["group"].as_str() {
            Some("") | None => r["resource"].as_str().unwrap_or("").to_owned(),
            Some(g) => format!("{}.{g}", r["resource"].as_str().unwrap_or("")),
        };
        let kind = f["stake"]["field"].as_str().or(f["stake"]["type"].as_str());
        selector == resource && kind == Some(stake)
    })
}

/// Whether `finding` names `name` in `namespace`.
fn names(finding: Option<&Value>, namespace: &str, name: &str) -> bool {
    (finding
        .and_then(|f| f["namespaces"].as_array())
        .into_iter()
        .flatten())
    .any(|n| {
        n["namespace"] == namespace
            && (n["names"].as_array()).is_some_and(|a| a.iter().any(|x| x == name))
    })
}

const FIELD: &str = "status.containerStatuses[].allocatedResourcesStatus[].resources[].message";

pub fn rollback_check_names_what_only_v1_36_keeps_and_the_pins_keep_it(pair: &Pair) {
    let (gate, routes) = gate(pair, "writes:\n  default: new\nreads:\n  default: new\n");
    crate::fields::schemas_known(&gate);
    let kubeconfig = routes.with_file_name("kubeconfig");
    write_what_only_v1_36_keeps(pair, &kubeconfig, &gate.addr);
    counted_as_they_passed(&gate);
    a_protobuf_answer_is_judged_as_its_json(pair, &gate);
    let record = routes.with_file_name("rollback-check.json");
    let check = names_both_and_fails(pair, &routes, &record);
    the_older_drops_the_whole_field(pair, &routes);

    // The rollback table: the suggested pins first, then every other write back to v1.35.
    let pins = check["suggestedPins"].as_str().unwrap_or_default();
    let flip = SystemTime::now() + Duration::from_secs(8);
    let at = humantime::format_rfc3339_seconds(flip).to_string();
    let plan_text = table(pair, &crate::common::rollback_plan(pins, &at, "3s"));
    let plan = routes.with_file_name("plan.yaml");
    std::fs::write(&plan, &plan_text).expect("plan");
    let plan_arg = plan.display().to_string();
    let (code, out) = rollback_check(pair, &routes, &["--plan", &plan_arg]);
    assert_eq!(code, Some(0), "{out}\n{plan_text}");
    let out = Command::new(env!("CARGO_BIN_EXE_skewgate"))
        .arg("check")
        .arg("--rollback-record")
        .arg(&record)
        .arg("--running")
        .arg(&routes)
        .arg(&plan)
        .output()
        .expect("check");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !said.contains("rollback"), "{said}");

    rolled_back_keeps_what_is_pinned(pair, (&gate, &routes), &plan_text, flip);
}

/// As the writes passed, skewgate counted what a rollback to v1.35 would strand.
fn counted_as_they_passed(gate: &crate::process::Serving) {
    let exposure = |resource: &str, stake: &str| {
        sample(
            gate,
            &format!(
                "skewgate_rollback_exposure_total{{older=\"old\",resource=\"{resource}\",stake=\"{stake}\"}}"
            ),
        )
    };
    assert!(
        exposure("pods", "field") >= 1.0,
        "the status write that stored the field"
    );
    assert_eq!(
        exposure(
            "mutatingadmissionpolicies.admissionregistration.k8s.io",
            "kind"
        ),
        1.0
    );
}

/// A kubelet's status patch through skewgate, answered in protobuf as kubelets ask: the stored pod
/// it answers with holds v1.36's field, and counts once, as the JSON answer did.
fn a_protobuf_answer_is_judged_as_its_json(pair: &Pair, gate: &crate::process::Serving) {
    let series =
        "skewgate_rollback_exposure_total{older=\"old\",resource=\"pods\",stake=\"field\"}";
    let before = sample(gate, series);
    let status = format!(
        "https://{}/api/v1/namespaces/{NS}/pods/gpu/status",
        gate.addr
    );
    let condition = r#"{"status":{"conditions":[{"type":"example.com/Proto","status":"True"}]}}"#;
    let (code, headers, body) = crate::harness::curl_bytes(
        pair,
        &[
            "-X",
            "PATCH",
            "-H",
            "content-type: application/merge-patch+json",
            "-H",
            "accept: application/vnd.kubernetes.protobuf",
            "-H",
            "user-agent: kubelet/v1.36.3 (linux/amd64) kubernetes/abc1234",
            "--data",
            condition,
            &status,
        ],
    );
    assert_eq!(code, 200, "{headers}");
    assert!(body.starts_with(b"k8s\0"), "a protobuf answer: {headers}");
    assert_eq!(sample(gate, series), before + 1.0, "judged in protobuf");
}

/// Before the rollback, as its own user under the read-only role deploy/ ships: both objects
/// named, with the namespace, a failing exit, and the record written. The check's JSON.
fn names_both_and_fails(pair: &Pair, routes: &std::path::Path, record: &std::path::Path) -> Value {
    let rbac = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/kubeadm/rollback-check-rbac.yaml"
    );
    let (ok, text) = direct(pair, "new", &["apply", "-f", rbac]);
    assert!(ok, "{text}");
    let record_arg = record.display().to_string();
    let args = [
        "--proxy-user",
        "skewgate-rollback-check",
        "-o",
        "json",
        "--record",
        &record_arg,
    ];
    let (code, out) = rollback_check_as(pair, routes, &args);
    assert_eq!(code, Some(1), "{out}");
    let check: Value = serde_json::from_str(&out).expect("JSON");
    assert!(
        names(finding(&check, "pods", FIELD), NS, "gpu"),
        "{check:#}"
    );
    let policies = "mutatingadmissionpolicies.admissionregistration.k8s.io";
    assert!(
        names(finding(&check, policies, "kindNotServed"), "", POLICY),
        "{check:#}"
    );
    let (_, text) = rollback_check(pair, routes, &[]);
    assert!(
        text.contains("LOSES DATA") && text.contains(&format!("namespace {NS}: 1 (gpu)  LOST")),
        "{text}"
    );
    check
}

/// v1.35.6's own word, by a dry-run update: it drops the whole allocatedResourcesStatus (its
/// feature gate is off), not only the `message` its OpenAPI lacks.
fn the_older_drops_the_whole_field(pair: &Pair, routes: &std::path::Path) {
    let (_, told) = rollback_check(pair, routes, &["-o", "json", "--dry-run"]);
    let told: Value = serde_json::from_str(&told).expect("JSON");
    let dry = &finding(&told, "pods", FIELD).expect("the pods finding")["dryRun"];
    println!("rollback-check --dry-run of the pod through v1.35: {dry}");
    assert!(
        (dry["dropped"].as_array().into_iter().flatten())
            .any(|d| d == "status.containerStatuses[].allocatedResourcesStatus"),
        "{dry}"
    );
}

/// The plan loaded and its move made: a status write of the pinned pod and a patch of the policy
/// go to v1.36 and keep what they hold; a write of anything else goes to v1.35.
fn rolled_back_keeps_what_is_pinned(
    pair: &Pair,
    (gate, routes): (&crate::process::Serving, &std::path::Path),
    plan_text: &str,
    flip: SystemTime,
) {
    std::fs::write(routes, plan_text).expect("load the plan");
    let loaded = within(20, || {
        admin_get(gate, "/debug/routes")
            .1
            .contains("\"everything\"")
    });
    assert!(loaded, "the plan was loaded");
    while SystemTime::now() < flip + Duration::from_secs(4) {
        std::thread::sleep(Duration::from_millis(200));
    }
    let through = |path: &str| format!("https://{}{path}", gate.addr);
    let condition =
        r#"{"status":{"conditions":[{"type":"example.com/RolledBack","status":"True"}]}}"#;
    let status = through(&format!("/api/v1/namespaces/{NS}/pods/gpu/status"));
    assert_eq!(merge_patch(pair, &status, condition), 200);
    let label = r#"{"metadata":{"labels":{"rolled-back":"yes"}}}"#;
    let policy = through(&format!(
        "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies/{POLICY}"
    ));
    assert_eq!(
        merge_patch(pair, &policy, label),
        200,
        "kept on v1.36, served"
    );
    let plain = through(&format!("/api/v1/namespaces/{PLAIN}/configmaps/plain"));
    assert_eq!(merge_patch(pair, &plain, r#"{"data":{"k":"w"}}"#), 200);

    let (ok, stored) = direct(pair, "new", &["-n", NS, "get", "pod", "gpu", "-o", "json"]);
    assert!(ok, "{stored}");
    let stored: Value = serde_json::from_str(&stored).expect("pod");
    let status = &stored["status"];
    assert!(
        status["conditions"].to_string().contains("RolledBack"),
        "{status}"
    );
    assert!(
        !status["containerStatuses"][0]["allocatedResourcesStatus"].is_null(),
        "the pinned pod kept its field: {status}"
    );
    // Which version took each write, by the apiservers' own audit logs.
    let patched_on = |role: &str, (namespace, resource, name): (&str, &str, &str)| {
        pair.audit(role).iter().any(|e| {
            let at = &e["objectRef"];
            e["verb"] == "patch"
                && at["namespace"].as_str().unwrap_or("") == namespace
                && at["resource"] == resource
                && at["name"] == name
                && e["responseStatus"]["code"] == 200
        })
    };
    let plain = (PLAIN, "configmaps", "plain");
    assert!(patched_on("old", plain), "everything else went back");
    assert!(!patched_on("new", plain));
    assert!(patched_on("new", ("", "mutatingadmissionpolicies", POLICY)));
    assert!(!patched_on("old", (NS, "pods", "gpu")));
    assert!(patched_on("new", (NS, "pods", "gpu")));
}
