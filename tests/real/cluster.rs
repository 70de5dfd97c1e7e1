//! skewgate as part of the cluster: the `kubernetes` Service's endpoints it keeps under the RBAC
//! deploy/ ships, its readiness while an apiserver it uses stops and comes back, and its own name
//! in the apiservers' audit logs.

use std::path::Path;
use std::process::Command;

use crate::harness::{Pair, admin_get, curl_code, direct, gate, gate_with, logged, within};

/// With `--advertise-address`, skewgate (as user `skewgate`, with only deploy/kubeadm/rbac.yaml's
/// rights) renews its Lease and makes the Endpoints and EndpointSlice `default/kubernetes` name
/// it; shut down, it takes itself out. No write is forbidden.
pub fn the_endpoints_reconciler_writes_under_the_shipped_rbac(pair: &Pair) {
    let rbac = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubeadm/rbac.yaml");
    let (ok, text) = direct(pair, "new", &["apply", "-f", &rbac.to_string_lossy()]);
    assert!(ok, "{text}");
    let routes = "writes:\n  default: new\nreads:\n  default: old\n";
    let more = [
        "--advertise-address",
        "192.0.2.10",
        "--shutdown-delay",
        "1s",
    ];
    let (mut gate, _) = gate_with(pair, routes, &more);
    let port = gate.addr.rsplit(':').next().unwrap_or_default().to_owned();
    let get = |args: &[&str]| direct(pair, "old", args).1;
    let named = || {
        let endpoints = get(&[
            "get",
            "endpoints",
            "kubernetes",
            "-o",
            "jsonpath={.subsets}",
        ]);
        let slice = get(&[
            "get",
            "endpointslices.discovery.k8s.io",
            "kubernetes",
            "-o",
            "json",
        ]);
        endpoints.contains("192.0.2.10")
            && endpoints.contains(&port)
            && slice.contains("192.0.2.10")
            && slice.contains(&port)
    };
    let named = within(30, named);
    assert!(
        named,
        "the kubernetes Service names skewgate: {:?}",
        logged(&gate)
    );
    let leases = get(&["-n", "kube-system", "get", "leases", "-o", "name"]);
    assert!(leases.contains("skewgate-"), "{leases}");

    // SIGTERM: out of the endpoints before the listener closes. The last replica leaves the
    // endpoints as they are, so a second one, that stays, is the one left named.
    let more = ["--advertise-address", "192.0.2.11"];
    let (stays, _) = gate_with(pair, routes, &more);
    let both = || {
        get(&[
            "get",
            "endpoints",
            "kubernetes",
            "-o",
            "jsonpath={.subsets}",
        ])
        .contains("192.0.2.11")
    };
    assert!(within(30, both), "the second replica is named");
    let pid = gate.child.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let _ = gate.child.wait();
    let left = get(&[
        "get",
        "endpoints",
        "kubernetes",
        "-o",
        "jsonpath={.subsets}",
    ]);
    assert!(
        !left.contains("192.0.2.10") && left.contains("192.0.2.11"),
        "{left}"
    );
    drop(stays);
    let refused: Vec<(String, String, i64)> = pair
        .audit("new")
        .into_iter()
        .chain(pair.audit("old"))
        .filter(|e| e["user"]["username"] == "skewgate")
        .map(|e| {
            let what = |f: &str| e["objectRef"][f].as_str().unwrap_or_default().to_owned();
            let code = e["responseStatus"]["code"].as_i64().unwrap_or(0);
            (
                e["verb"].as_str().unwrap_or_default().to_owned(),
                what("resource"),
                code,
            )
        })
        .filter(|(_, _, code)| *code == 401 || *code == 403)
        .collect();
    assert!(
        refused.is_empty(),
        "skewgate's own requests refused: {refused:?}"
    );
}

/// skewgate reads from the old version and writes to the new: while the old apiserver is down it
/// is not ready and says which backend, writes still reach the new one, and it is ready again
/// once the old one is back. A replica that uses only the new version stays ready throughout.
pub fn readiness_follows_an_apiserver_that_stops_and_returns(pair: &Pair) {
    let (both, _) = gate(pair, "writes:\n  default: new\nreads:\n  default: old\n");
    let (only_new, _) = gate(pair, "writes:\n  default: new\nreads:\n  default: new\n");
    let ready = |g| admin_get(g, "/readyz").0 == 200;
    assert!(
        within(20, || ready(&both) && ready(&only_new)),
        "ready at first"
    );
    let (ok, text) = direct(pair, "new", &["create", "configmap", "while-old-is-down"]);
    assert!(ok, "{text}");
    pair.stop("old");
    assert!(
        within(30, || !ready(&both)),
        "not ready without the old version"
    );
    let (_, why) = admin_get(&both, "/readyz");
    assert!(why.contains("old"), "/readyz names the backend: {why}");
    assert!(
        ready(&only_new),
        "a replica that does not use the old version stays ready"
    );
    // Patches (writes) go to the new version, reads to the old one.
    let one = format!(
        "https://{}/api/v1/namespaces/default/configmaps/while-old-is-down",
        both.addr
    );
    let kind = "content-type: application/merge-patch+json";
    let body = r#"{"data":{"written":"while the old version was down"}}"#;
    let code = curl_code(pair, &["-X", "PATCH", "-H", kind, "--data", body, &one]);
    assert_eq!(code, 200, "a write goes to the new version meanwhile");
    let code = curl_code(pair, &[&one]);
    assert_eq!(code, 503, "a read cannot reach the old version");
    // What the status page shows: the old endpoint down since when, and why; the 503 with its
    // reason, request and client.
    let json = |path| serde_json::from_str::<serde_json::Value>(&admin_get(&both, path).1);
    let endpoint = |routes: &serde_json::Value| routes["backends"][0]["endpoints"][0].clone();
    let down = endpoint(&json("/debug/routes").expect("routes JSON"));
    assert_eq!(down["state"], "down", "{down}");
    assert!(
        down["since"].is_string() && down["failureSince"].is_string(),
        "{down}"
    );
    let recent = json("/debug/recent").expect("recent JSON");
    let answered = &recent["errors"][0];
    assert_eq!(
        (&answered["code"], &answered["backend"], &answered["verb"]),
        (&503.into(), &"old".into(), &"get".into()),
        "{recent}"
    );
    assert_eq!(answered["resource"], "configmaps", "{recent}");
    assert!(
        answered["client"]
            .as_str()
            .is_some_and(|c| c.starts_with("user ")),
        "the client by its certificate's user: {recent}"
    );
    pair.up().expect("the old apiserver starts again");
    assert!(
        within(60, || ready(&both)),
        "ready again with the old version back"
    );
    let back = endpoint(&json("/debug/routes").expect("routes JSON"));
    assert_eq!(back["state"], "ready", "{back}");
    assert!(
        back["since"].as_str() >= down["since"].as_str(),
        "ready since it came back: {back}, down {down}"
    );
    assert_eq!(
        curl_code(pair, &[&one]),
        200,
        "reads reach the old version again"
    );
    assert!(ready(&only_new));
}

/// Every request skewgate made as itself (health checks, discovery, OpenAPI, the endpoints) names
/// it: `User-Agent: skewgate/<version>`, as kube-apiserver's own clients name themselves.
pub fn skewgate_names_itself_in_the_audit_logs(pair: &Pair) {
    let own: Vec<String> = pair
        .audit("new")
        .into_iter()
        .chain(pair.audit("old"))
        .filter(|e| e["user"]["username"] == "skewgate")
        .map(|e| e["userAgent"].as_str().unwrap_or_default().to_owned())
        .collect();
    let expected = format!("skewgate/{}", env!("CARGO_PKG_VERSION"));
    let unnamed: Vec<&String> = own.iter().filter(|ua| **ua != expected).collect();
    println!("audit: {} requests by skewgate itself", own.len());
    assert!(!own.is_empty(), "skewgate's own requests are audited");
    assert!(unnamed.is_empty(), "not {expected}: {unnamed:?}");
}
