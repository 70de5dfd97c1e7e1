//! Fields one version knows and the other does not: what `skew` reports, what the guard judges,
//! and what a pin keeps.

use std::path::Path;
use std::process::Command;

use crate::harness::{Pair, admin_get, curl, curl_code, direct, gate, kubectl};

/// `skewgate skew` against both: no element defaults or wrapper depths taken for fields (issue 42,
/// 4); the pod status field only the new version knows, if these versions have it.
pub fn skew_reports_only_real_differences(pair: &Pair) -> Option<String> {
    let (_gate, routes) = gate(pair, "writes:\n  default: new\nreads:\n  default: old\n");
    let (ca, fp, fpk) = (
        pair.pki("ca.crt"),
        pair.pki("front-proxy-client.crt"),
        pair.pki("front-proxy-client.key"),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_skewgate"))
        .arg("skew")
        .arg("--routes")
        .arg(&routes)
        .args(["--upstream-ca-file", &ca, "--proxy-client-cert-file", &fp])
        .args(["--proxy-client-key-file", &fpk])
        .output()
        .expect("skew runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let fields: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("field "))
        .collect();
    let defaults = text
        .lines()
        .filter(|l| l.trim().starts_with("default "))
        .count();
    println!("skew: {} fields, {defaults} defaults", fields.len());
    let false_ones: Vec<&&str> = fields
        .iter()
        .filter(|f| {
            let path = f.split_whitespace().next().unwrap_or("");
            path.ends_with("{}") || path.ends_with("[]")
        })
        .collect();
    assert!(
        false_ones.is_empty(),
        "element defaults taken for fields: {false_ones:?}"
    );
    let real = "status.containerStatuses[].allocatedResourcesStatus[].resources[].message";
    let found = fields
        .iter()
        .any(|f| f.trim_start().starts_with(real) && f.contains("known by new"));
    let known_pair = pair.minor("new") == "v1.36" && pair.minor("old") == "v1.35";
    if known_pair {
        assert!(found, "the real difference is not found:\n{text}");
    }
    found.then(|| real.to_owned())
}

/// A pod whose status carries a field only the new version knows: a main-object PUT by an old
/// client passes and the apiserver keeps the status; a `/status` PUT without it is rejected
/// (issue 42, 5).
pub fn the_guard_judges_a_pod_as_the_apiserver_takes_it(pair: &Pair, field: &str) {
    let (gate, routes) = gate(
        pair,
        "writes:\n  default: new\nreads:\n  default: old\nguards:\n  - name: old-clients\n    match: {resources: [pods, pods/status]}\n",
    );
    let kc = routes.with_file_name("kubeconfig");
    // The guard judges once it has read both versions' OpenAPI (with discovery).
    schemas_known(&gate);
    let _ = kubectl(&kc, &["create", "serviceaccount", "default"]);
    let pod = routes.with_file_name("pod.yaml");
    std::fs::write(
        &pod,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: guarded}\nspec:\n  schedulingGates: [{name: example.com/hold}]\n  containers:\n  - name: c\n    image: busybox\n    resources: {limits: {example.com/dev: \"1\"}, requests: {example.com/dev: \"1\"}}\n",
    )
    .expect("pod");
    let (ok, text) = kubectl(&kc, &["apply", "-f", &pod.to_string_lossy()]);
    assert!(ok, "{text}");
    let url = format!(
        "https://{}/api/v1/namespaces/default/pods/guarded",
        gate.addr
    );
    let (code, body) = curl(pair, &[url.as_str()]);
    assert_eq!(code, 200, "{body}");
    let mut obj: serde_json::Value = serde_json::from_str(&body).expect("pod JSON");
    obj["status"]["containerStatuses"] = serde_json::json!([{
        "name": "c", "image": "busybox", "imageID": "", "ready": false, "restartCount": 0,
        "state": {"waiting": {"reason": "ContainerCreating"}},
        "allocatedResourcesStatus": [{"name": "example.com/dev", "resources": [{"resourceID": "r1", "health": "Healthy", "message": "ok"}]}],
    }]);
    let json = routes.with_file_name("pod.json");
    let put = |obj: &serde_json::Value, path: &str, agent: &str| {
        std::fs::write(&json, obj.to_string()).expect("json");
        let data = format!("@{}", json.display());
        let url = format!("{url}{path}");
        let ua = format!("user-agent: {agent}");
        curl(
            pair,
            &[
                "-X",
                "PUT",
                "-H",
                "content-type: application/json",
                "-H",
                &ua,
                "--data",
                &data,
                &url,
            ],
        )
    };
    let new_kubectl = format!(
        "kubectl/{}.0 (linux/amd64) kubernetes/abc",
        pair.minor("new")
    );
    let old_kubectl = format!(
        "kubectl/{}.0 (linux/amd64) kubernetes/abc",
        pair.minor("old")
    );
    let (code, body) = put(&obj, "/status", &new_kubectl);
    assert_eq!(code, 200, "{body}");
    // What an old client reads (through the old version, which drops the field) and sends back.
    let (_, body) = curl(pair, &[url.as_str()]);
    let mut read: serde_json::Value = serde_json::from_str(&body).expect("pod JSON");
    read["metadata"]["labels"] = serde_json::json!({"tier": "web"});
    let (code, body) = put(&read, "", &old_kubectl);
    assert_eq!(
        code, 200,
        "a main-object PUT is judged without the status it cannot change: {body}"
    );
    let direct = format!(
        "{}/api/v1/namespaces/default/pods/guarded",
        pair.var("NEW_URL")
    );
    let (_, stored) = curl(pair, &[direct.as_str()]);
    let stored: serde_json::Value = serde_json::from_str(&stored).expect("pod JSON");
    let message = &stored["status"]["containerStatuses"][0]["allocatedResourcesStatus"][0]["resources"]
        [0]["message"];
    assert_eq!(message, "ok", "the apiserver kept {field}");
    assert_eq!(stored["metadata"]["labels"]["tier"], "web");
    let (code, body) = put(&read, "/status", &old_kubectl);
    assert_eq!(code, 422, "a /status PUT without {field}: {body}");
    assert!(body.contains("allocatedResourcesStatus"), "{body}");
}

/// A status write through the old version wipes what only the new one stores (v1.35's disabled
/// `ResourceHealthStatus` drops `allocatedResourcesStatus` whole); with the pods pinned to the new
/// version, the same write through skewgate keeps it. The damage pins exist to prevent, seen and
/// prevented on real apiservers.
pub fn a_pin_keeps_what_the_old_version_would_wipe(pair: &Pair) {
    let unpinned = "writes:\n  default: old\nreads:\n  default: old\n";
    let pinned = "writes:\n  default: old\n  pins:\n    - {name: pods, resources: [pods], backend: new}\nreads:\n  default: old\n";
    for (name, routes, kept) in [("unpinned", unpinned, false), ("pinned", pinned, true)] {
        let (gate, file) = gate(pair, routes);
        // A pod whose status a new kubelet wrote, straight to the new version.
        healthy_pod_on_new(pair, &file, name);
        // Another writer adds a condition through skewgate.
        let through = format!(
            "https://{}/api/v1/namespaces/default/pods/{name}/status",
            gate.addr
        );
        let condition =
            r#"{"status":{"conditions":[{"type":"example.com/Checked","status":"True"}]}}"#;
        assert_eq!(merge_patch(pair, &through, condition), 200, "{name}");
        let (ok, stored) = direct(pair, "new", &["get", "pod", name, "-o", "json"]);
        assert!(ok, "{stored}");
        let stored: serde_json::Value = serde_json::from_str(&stored).expect("pod JSON");
        let status = &stored["status"];
        assert!(
            status["conditions"]
                .to_string()
                .contains("example.com/Checked")
        );
        let health = &status["containerStatuses"][0]["allocatedResourcesStatus"];
        assert_eq!(
            !health.is_null(),
            kept,
            "{name}: allocatedResourcesStatus after a status write through skewgate: {health}"
        );
    }
}

/// Through 1.35 (older than 1.36), every write of a pod drops what only 1.36 stores, whatever the
/// client sends: the guard's down direction refuses a status update of a pod read from 1.36
/// (reject), or sends it and says so (warn), when the real 1.35 then drops the field.
pub fn the_guard_refuses_an_update_through_the_older_version_that_drops_a_field(pair: &Pair) {
    for (action, code) in [("reject", 422), ("warn", 200)] {
        let routes = format!(
            "writes:\n  default: old\nreads:\n  default: new\nguards:\n  - name: down\n    match: {{resources: [pods, pods/status]}}\n    action: {action}\n"
        );
        let (gate, file) = gate(pair, &routes);
        schemas_known(&gate);
        let name = format!("down-{action}");
        healthy_pod_on_new(pair, &file, &name);
        // The pod as read through skewgate (from 1.36), with a condition added, PUT back.
        let url = format!(
            "https://{}/api/v1/namespaces/default/pods/{name}/status",
            gate.addr
        );
        let (_, body) = curl(pair, &[url.as_str()]);
        let mut read: serde_json::Value = serde_json::from_str(&body).expect("pod JSON");
        read["status"]["conditions"] =
            serde_json::json!([{"type": "example.com/Checked", "status": "True"}]);
        let json = file.with_file_name("pod.json");
        std::fs::write(&json, read.to_string()).expect("json");
        let data = format!("@{}", json.display());
        let (got, answer) = curl(
            pair,
            &[
                "-X",
                "PUT",
                "-H",
                "content-type: application/json",
                "--data",
                &data,
                &url,
            ],
        );
        assert_eq!(got, code, "{action}: {answer}");
        // The status page lists the decision with the object and the field the real 1.35 drops.
        let (_, recent) = admin_get(&gate, "/debug/recent");
        let recent: serde_json::Value = serde_json::from_str(&recent).expect("recent JSON");
        let decision = &recent["guards"]["recent"][0];
        assert_eq!(
            (
                &decision["action"],
                &decision["resource"],
                &decision["name"]
            ),
            (&action.into(), &"pods".into(), &name.as_str().into()),
            "{recent}"
        );
        assert!(
            decision["fields"]
                .as_array()
                .is_some_and(|f| f.iter().any(|p| p
                    .as_str()
                    .is_some_and(|p| p.contains("allocatedResourcesStatus")))),
            "{recent}"
        );
        assert_eq!(recent["guards"]["lastHour"][action], 1, "{recent}");
        let (ok, stored) = direct(pair, "new", &["get", "pod", &name, "-o", "json"]);
        assert!(ok, "{stored}");
        let stored: serde_json::Value = serde_json::from_str(&stored).expect("pod JSON");
        let kept = !stored["status"]["containerStatuses"][0]["allocatedResourcesStatus"].is_null();
        if action == "reject" {
            assert!(answer.contains("allocatedResourcesStatus"), "{answer}");
            assert!(kept, "nothing was sent");
        } else {
            assert!(!kept, "1.35 dropped it, as the warning said: {stored}");
        }
    }
}

/// Waits until the gate has read both versions' OpenAPI (with discovery).
pub fn schemas_known(gate: &crate::process::Serving) {
    let skew = format!("http://{}/debug/skew", gate.admin);
    let known = (0..300).any(|_| {
        let read = Command::new("curl").args(["-s", &skew]).output();
        let text = read.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
        let ready = text.is_ok_and(|t| {
            let v: serde_json::Value = serde_json::from_str(&t).unwrap_or_default();
            v["report"]["kinds"]
                .as_array()
                .is_some_and(|k| !k.is_empty())
        });
        if !ready {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        ready
    });
    assert!(known, "the schemas were not read");
}

/// Pod `name`, created straight on the new version, with the status a new kubelet writes: its
/// container's `allocatedResourcesStatus` (only 1.36 stores its `message`; 1.35 drops it whole).
pub fn healthy_pod_on_new(pair: &Pair, beside: &Path, name: &str) {
    let pod = beside.with_file_name("pod.yaml");
    std::fs::write(&pod, pod_yaml(name)).expect("pod");
    let (ok, text) = direct(pair, "new", &["apply", "-f", &pod.to_string_lossy()]);
    assert!(ok, "{text}");
    let status = format!(
        "{}/api/v1/namespaces/default/pods/{name}/status",
        pair.var("NEW_URL")
    );
    let health = r#"{"status":{"containerStatuses":[{"name":"c","image":"busybox","imageID":"","ready":false,"restartCount":0,"state":{"waiting":{"reason":"ContainerCreating"}},"allocatedResourcesStatus":[{"name":"example.com/dev","resources":[{"resourceID":"r1","health":"Healthy","message":"ok"}]}]}]}}"#;
    assert_eq!(merge_patch(pair, &status, health), 200);
}

fn pod_yaml(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  schedulingGates: [{{name: example.com/hold}}]\n  containers:\n  - name: c\n    image: busybox\n    resources: {{limits: {{example.com/dev: \"1\"}}, requests: {{example.com/dev: \"1\"}}}}\n"
    )
}

/// A JSON merge patch with the admin certificate: the status code.
pub fn merge_patch(pair: &Pair, url: &str, body: &str) -> u16 {
    let kind = "content-type: application/merge-patch+json";
    curl_code(pair, &["-X", "PATCH", "-H", kind, "--data", body, url])
}
