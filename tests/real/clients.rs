//! Who reaches the apiservers through skewgate, and what discovery shows them.

use std::path::Path;
use std::process::Command;

use crate::harness::{Pair, curl, gate, kubectl, resources, within};

/// A certificate user, a token user and an anonymous client each reach the apiservers through
/// skewgate as themselves (the front-proxy certificate with the user's headers; the token as it
/// came; no credentials at all), on both versions.
pub fn clients_reach_the_apiservers_as_themselves(pair: &Pair) {
    for reads in ["old", "new"] {
        let routes = format!("writes:\n  default: {reads}\nreads:\n  default: {reads}\n");
        let (gate, file) = gate(pair, &routes);
        let kc = file.with_file_name("kubeconfig");
        let (ok, who) = kubectl(
            &kc,
            &[
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
            ],
        );
        assert!(ok && who.trim() == "admin", "{reads}: {who}");
        let _ = kubectl(&kc, &["create", "serviceaccount", "default"]);
        let (ok, token) = kubectl(&kc, &["create", "token", "default"]);
        assert!(ok, "{token}");
        let review = format!(
            "https://{}/apis/authentication.k8s.io/v1/selfsubjectreviews",
            gate.addr
        );
        let bearer = format!("authorization: Bearer {}", token.trim());
        let body = r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#;
        let out = Command::new("curl")
            .args([
                "-sk",
                "-X",
                "POST",
                "-H",
                &bearer,
                "-H",
                "content-type: application/json",
            ])
            .args(["--data", body, &review])
            .output()
            .expect("curl");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("system:serviceaccount:default:default"),
            "{reads}: {text}"
        );
        // Anonymous: RBAC lets it read /version, not the namespaces.
        let anon = |path: &str| {
            let url = format!("https://{}{path}", gate.addr);
            let out = Command::new("curl")
                .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}", &url])
                .output()
                .expect("curl");
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        assert_eq!(anon("/version"), "200", "{reads}");
        assert_eq!(anon("/api/v1/namespaces"), "403", "{reads}");
    }
}

/// A real ServiceAccount token (`kubectl create token`) is routed as its account: a rollout of
/// `system:serviceaccount:*` at 100 % sends its reads to the new version and its user to the
/// apiserver as the token, which authenticates it (issue 44, 4).
pub fn token_clients_are_routed_as_their_service_account(pair: &Pair) {
    let routes = "writes:\n  default: old\nreads:\n  default: old\n  rollouts:\n    - {name: sa, match: {users: [\"system:serviceaccount:*\"]}, to: new, stickyBy: user, percent: 100}\n";
    let (gate, file) = gate(pair, routes);
    let kc = file.with_file_name("kubeconfig");
    let _ = kubectl(&kc, &["create", "serviceaccount", "default"]);
    let (ok, token) = kubectl(&kc, &["create", "token", "default"]);
    assert!(ok, "{token}");
    let version = |bearer: Option<&str>| {
        let mut curl = Command::new("curl");
        curl.arg("-sk");
        if let Some(b) = bearer {
            curl.args(["-H", &format!("authorization: Bearer {b}")]);
        }
        let out = curl
            .arg(format!("https://{}/version", gate.addr))
            .output()
            .expect("curl");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let v = v["gitVersion"].as_str().unwrap_or_default();
        v.trim_start_matches('v').to_owned()
    };
    let (new, old) = (
        pair.var("NEW_VERSION").trim_start_matches('v'),
        pair.var("OLD_VERSION").trim_start_matches('v'),
    );
    assert_eq!(
        version(Some(token.trim())),
        new,
        "the token's account reads from new"
    );
    assert_eq!(version(None), old, "anonymous reads from old");
    // A token the apiserver cannot authenticate is refused (401, no version), not served
    // anonymously: so a forged token's claims buy nothing.
    assert_eq!(version(Some("not-a-token")), "", "refused");
}

/// Reads default to the old version: a resource only the new one serves, in a group/version both
/// serve (v1.36's mutatingadmissionpolicies), is listed, readable and explained (issue 42, 3).
pub fn discovery_lists_what_only_the_new_version_adds_to_a_shared_group_version(pair: &Pair) {
    let (_gate, routes) = gate(pair, "writes:\n  default: new\nreads:\n  default: old\n");
    let kc = routes.with_file_name("kubeconfig");
    let own = Path::new(pair.var("KUBECONFIG"));
    let (ok_new, new) = kubectl(own, &["--context", "new", "api-resources"]);
    let (ok_old, old) = kubectl(own, &["--context", "old", "api-resources"]);
    assert!(ok_new && ok_old, "{new}\n{old}");
    let (new, old) = (resources(&new), resources(&old));
    let old_versions: Vec<&String> = old.iter().map(|(_, v)| v).collect();
    let added: Vec<&(String, String)> = new
        .iter()
        .filter(|r| !old.contains(r) && old_versions.contains(&&r.1))
        .collect();
    println!("resources the new version adds to group/versions both serve: {added:?}");
    let (ok, through) = kubectl(&kc, &["api-resources"]);
    assert!(ok, "{through}");
    let through = resources(&through);
    for r in &added {
        assert!(through.contains(r), "{r:?} not listed through skewgate");
        let (ok, text) = kubectl(&kc, &["get", &r.0]);
        assert!(ok, "kubectl get {}: {text}", r.0);
        // Its schema, in the old version's document of the group/version, merged in the
        // background once discovery has run.
        let mut said = String::new();
        let explained = within(20, || {
            let (ok, text) = kubectl(&kc, &["explain", &r.0]);
            said = text;
            ok && said.contains("KIND:")
        });
        assert!(explained, "kubectl explain {}: {said}", r.0);
    }
}

/// The first event of a watch of ConfigMaps without a resourceVersion (its type, and the kind,
/// code and reason of its object: the message names resource versions, which move between two
/// requests), and whether the stream ended within 10 s, through `base`.
fn first_watch_event(pair: &Pair, base: &str) -> (u16, String, bool) {
    let url = format!("{base}/api/v1/namespaces/default/configmaps?watch=true");
    let started = std::time::Instant::now();
    let (code, body) = curl(pair, &["--max-time", "10", &url]);
    let ended = started.elapsed() < std::time::Duration::from_secs(9);
    let first = body.lines().next().unwrap_or_default();
    let event: serde_json::Value = serde_json::from_str(first).unwrap_or_default();
    println!("{base}: {first}");
    let o = &event["object"];
    let said = format!(
        "{} {} {} {}",
        event["type"], o["kind"], o["code"], o["reason"]
    );
    (code, said, ended)
}

/// A watch without a resourceVersion is a watch list to kube-apiserver 1.36: on an etcd without
/// progress notifications (the 3.4 here) it ends at once in an ERROR event ("RequestWatchProgress
/// is disabled" under the bench's kubelets; "Timeout: Too large resource version" on a fresh pair). Through skewgate it ends the same way, the
/// apiserver's event and its end passed on as they came (and on an etcd that has them, it streams
/// through both alike).
pub fn a_watch_without_a_version_ends_through_skewgate_as_it_ends_straight(pair: &Pair) {
    let (gate, _) = gate(pair, "writes:\n  default: new\nreads:\n  default: new\n");
    let straight = first_watch_event(pair, pair.var("NEW_URL"));
    let through = first_watch_event(pair, &format!("https://{}", gate.addr));
    println!("a watch without resourceVersion, straight: {straight:?}");
    assert_eq!(straight.0, 200, "{straight:?}");
    assert_eq!(through, straight);
}

/// kube-apiserver's own `RequestInfoFactory` names a collection GET as skewgate's classifier does,
/// judged by the apiserver's audit log (its `objectRef` is the RequestInfo): a label selector that
/// `labels.Parse` refuses fails the list options' decoding, and the name a `metadata.name` field
/// selector required is dropped (skewgate kept it: issue 58). Each case in a namespace of its own.
pub fn the_apiserver_names_collection_requests_as_skewgate_does(pair: &Pair) {
    let cases = [
        "fieldSelector=metadata.name%3Dc1&labelSelector=!!",
        "fieldSelector=metadata.name%3Dc1&labelSelector=app%20in%20(a)",
        "fieldSelector=metadata.name%3Dc1&labelSelector=a%3E-1",
        "fieldSelector=metadata.name%3Dc1&labelSelector=a%3D%00!!",
        "fieldSelector=metadata.name%3Dc1&labelSelector=a%2Cb%3Dx%20y",
        "fieldSelector=metadata.name%3Dc1&labelSelector=x%20notin%20()",
        "fieldSelector=metadata.name%3Dc1&limit=x",
        "watch=1&fieldSelector=metadata.name%3Dc1&labelSelector=!!",
        "watch=1&timeoutSeconds=1&fieldSelector=metadata.name%3Dc1&labelSelector=a",
    ];
    let url = pair.var("NEW_URL");
    for (n, query) in cases.iter().enumerate() {
        let path = format!("/api/v1/namespaces/rq-{n}/configmaps");
        let _ = curl(pair, &["--max-time", "5", &format!("{url}{path}?{query}")]);
    }
    let seen = |n: usize| {
        pair.audit("new").into_iter().find(|e| {
            e["objectRef"]["namespace"] == format!("rq-{n}")
                && e["objectRef"]["resource"] == "configmaps"
        })
    };
    assert!(
        within(10, || seen(cases.len() - 1).is_some()),
        "the audit log has the requests"
    );
    for (n, query) in cases.iter().enumerate() {
        let event = seen(n).unwrap_or_else(|| panic!("{query}: not in the audit log"));
        let path = format!("/api/v1/namespaces/rq-{n}/configmaps");
        let ours = skewgate::classify::classify("GET", &path, Some(query));
        let name = event["objectRef"]["name"].as_str().unwrap_or_default();
        assert_eq!(
            (ours.verb.as_str(), &*ours.name),
            (event["verb"].as_str().unwrap_or_default(), name),
            "{query}: skewgate against the apiserver"
        );
    }
}
