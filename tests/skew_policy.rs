//! The version-skew policy through the proxy, against the simulators (v1.29 "old", v1.30 "new"):
//! a component is never served by an older apiserver; its pinned writes there are refused with a
//! `Status` saying why, and sent nowhere; a newer controller-manager's leader-election Lease
//! writes are refused while writes go to the older version; a component newer than every backend
//! is refused; and a table may allow it in so many words. The real components are in
//! tests/real/rehearsal.rs.

mod common;

use common::*;
use serde_json::{Value, json};

const TABLE: &str = "writes:
  default: old
  pins:
    - {name: team-a, namespaces: [team-a], backend: new}
reads:
  default: old
";

const KCM_NEW: &str = "kube-controller-manager/v1.30.0 (linux/amd64) kubernetes/abc";
const KCM_OLD: &str = "kube-controller-manager/v1.29.0 (linux/amd64) kubernetes/abc";
const LEASE: &str =
    "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-controller-manager";

async fn send(
    c: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    ua: &str,
    body: Option<Value>,
) -> reqwest::Response {
    let mut req = c.request(method, url).header("user-agent", ua);
    if let Some(body) = body {
        req = req.json(&body);
    }
    req.send().await.expect("send")
}

fn version(r: &reqwest::Response) -> String {
    let v = r.headers().get(skewgate_sim::VERSION_HEADER);
    v.and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

async fn setup(c: &reqwest::Client, base: &str) {
    for ns in ["team-b", "kube-system"] {
        let body = json!({"metadata": {"name": ns}});
        let r = send(
            c,
            reqwest::Method::POST,
            format!("{base}/api/v1/namespaces"),
            KCM_OLD,
            Some(body),
        )
        .await;
        assert!(
            r.status().is_success() || r.status() == 409,
            "{}",
            r.status()
        );
    }
    let cm = json!({"metadata": {"name": "cm"}, "data": {"v": "0"}});
    let url = format!("{base}/api/v1/namespaces/team-b/configmaps");
    let r = send(c, reqwest::Method::POST, url, KCM_OLD, Some(cm)).await;
    assert_eq!(r.status(), 201);
    let lease =
        json!({"metadata": {"name": "kube-controller-manager"}, "spec": {"holderIdentity": "old"}});
    let url = format!("{base}/apis/coordination.k8s.io/v1/namespaces/kube-system/leases");
    let r = send(c, reqwest::Method::POST, url, KCM_OLD, Some(lease)).await;
    assert_eq!(r.status(), 201);
}

#[tokio::test]
async fn a_component_is_never_served_by_an_older_apiserver() {
    let sims = sims().await;
    let gate = gate(&routes(&sims, TABLE)).await;
    let (c, base) = (h1(), gate.url());
    setup(&c, &base).await;
    let list = format!("{base}/api/v1/namespaces/team-b/configmaps");
    // Its reads go to v1.30, the old one's to v1.29 as the table says.
    let r = send(&c, reqwest::Method::GET, list.clone(), KCM_NEW, None).await;
    assert_eq!(
        (r.status().as_u16(), version(&r)),
        (200, "v1.30.1".to_owned())
    );
    let r = send(&c, reqwest::Method::GET, list, KCM_OLD, None).await;
    assert_eq!(
        (r.status().as_u16(), version(&r)),
        (200, "v1.29.4".to_owned())
    );
    // Its update through v1.29 (writes.default) is refused, and nothing is written.
    let cm = format!("{base}/api/v1/namespaces/team-b/configmaps/cm");
    let mut obj: Value = send(&c, reqwest::Method::GET, cm.clone(), KCM_OLD, None)
        .await
        .json()
        .await
        .expect("json");
    obj["data"]["v"] = json!("1");
    let r = send(
        &c,
        reqwest::Method::PUT,
        cm.clone(),
        KCM_NEW,
        Some(obj.clone()),
    )
    .await;
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
    let status: Value = r.json().await.expect("a Status");
    assert_eq!(status["reason"], "TooManyRequests");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("may not write through backend \"old\" (v1.29)"),
        "{message}"
    );
    let stored: Value = send(&c, reqwest::Method::GET, cm.clone(), KCM_OLD, None)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(stored["data"]["v"], "0", "nothing was sent");
    // The old one writes.
    let r = send(&c, reqwest::Method::PUT, cm, KCM_OLD, Some(obj)).await;
    assert_eq!(r.status(), 200);
    // Its Lease write: it may not lead while writes go to v1.29.
    let lease = format!("{base}{LEASE}");
    let held: Value = send(&c, reqwest::Method::GET, lease.clone(), KCM_NEW, None)
        .await
        .json()
        .await
        .expect("json");
    let r = send(&c, reqwest::Method::PUT, lease, KCM_NEW, Some(held)).await;
    assert_eq!(r.status(), 429);
    let status: Value = r.json().await.expect("a Status");
    assert!(
        status["message"]
            .as_str()
            .unwrap_or_default()
            .contains("elects a leader"),
        "{status}"
    );
    // Newer than every backend: refused.
    let r = send(
        &c,
        reqwest::Method::GET,
        format!("{base}/api/v1/pods"),
        "kube-scheduler/v1.31.0",
        None,
    )
    .await;
    assert_eq!(r.status(), 503);
    let m = gate.metrics().await;
    for (component, outcome, at_least) in [
        ("kube-controller-manager", "raised", 2.0),
        ("kube-controller-manager", "write_refused", 1.0),
        ("kube-controller-manager", "leadership_held", 1.0),
        ("kube-scheduler", "no_backend", 1.0),
    ] {
        let name = format!(
            "skewgate_skew_policy_total{{component=\"{component}\",outcome=\"{outcome}\"}}"
        );
        assert!(metric(&m, &name) >= at_least, "{name}: {m}");
    }
}

#[tokio::test]
async fn a_table_may_allow_an_older_apiserver_in_so_many_words() {
    let sims = sims().await;
    let table = format!("{TABLE}skewPolicy:\n  allowOlderApiserver: [kube-controller-manager]\n");
    let gate = gate(&routes(&sims, &table)).await;
    let (c, base) = (h1(), gate.url());
    setup(&c, &base).await;
    let cm = format!("{base}/api/v1/namespaces/team-b/configmaps/cm");
    let r = send(&c, reqwest::Method::GET, cm.clone(), KCM_NEW, None).await;
    assert_eq!(version(&r), "v1.29.4", "as the table says");
    let obj: Value = r.json().await.expect("json");
    let r = send(&c, reqwest::Method::PUT, cm, KCM_NEW, Some(obj)).await;
    assert_eq!(r.status(), 200);
}
