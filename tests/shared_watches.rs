//! Shared watches (`shareWatches`) on the simulators: clients of the same watch from different
//! resourceVersions get exactly the events after their own start from one upstream watch; a start
//! before what the shared watch keeps, and a watch list, go on their own; a client the
//! authorizer refuses gets the apiserver's 403 while the others go on; each client's
//! `timeoutSeconds` is its own.

mod common;
#[path = "common/pki.rs"]
mod pki;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use http_body_util::BodyExt;
use serde_json::{Value, json};

const NS: &str = "shared";

/// The routes: every configmap watch by name shared.
fn table(sims: &Sims) -> String {
    routes(
        sims,
        "writes:\n  default: old\nreads:\n  default: old\nshareWatches:\n  - name: mounts\n    match: {resources: [configmaps]}\n",
    )
}

/// Writes configmap `name` with `data` straight to the simulator: its resourceVersion.
async fn put(sims: &Sims, name: &str, data: &str) -> u64 {
    let client = reqwest::Client::new();
    let url = format!("{}/api/v1/namespaces/{NS}/configmaps", sims.old.url());
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS}, "data": {"v": data}});
    let resp = client.post(&url).json(&body).send().await.expect("post");
    let resp = if resp.status() == 409 {
        client
            .put(format!("{url}/{name}"))
            .json(&body)
            .send()
            .await
            .expect("put")
    } else {
        resp
    };
    assert!(resp.status().is_success(), "{}", resp.status());
    let v: Value = resp.json().await.expect("json");
    v["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("rv")
}

/// A client's watch: the events it read, as (type, data.v).
struct Client {
    body: hyper::body::Incoming,
    buf: Vec<u8>,
}

impl Client {
    async fn open(
        gate: &Gate,
        config: std::sync::Arc<rustls::ClientConfig>,
        query: &str,
    ) -> (u16, Client) {
        let path = format!(
            "/api/v1/namespaces/{NS}/configmaps?watch=true&fieldSelector=metadata.name%3Dmount&{query}"
        );
        let resp = pki::tls_open(gate.server.addr, config, &path, &[])
            .await
            .expect("watch");
        let status = resp.status().as_u16();
        (
            status,
            Client {
                body: resp.into_body(),
                buf: Vec::new(),
            },
        )
    }

    /// The next `n` events, or fewer if the stream ends or 5 s pass.
    async fn events(&mut self, n: usize) -> Vec<(String, String)> {
        let mut out = Vec::new();
        while out.len() < n {
            while let Some(nl) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=nl).collect();
                let e: Value = serde_json::from_slice(&line).expect("event");
                let v = e["object"]["data"]["v"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                out.push((e["type"].as_str().unwrap_or_default().to_owned(), v));
            }
            if out.len() >= n {
                break;
            }
            match tokio::time::timeout(Duration::from_secs(5), self.body.frame()).await {
                Ok(Some(Ok(f))) => {
                    if let Ok(d) = f.into_data() {
                        self.buf.extend_from_slice(&d);
                    }
                }
                _ => break,
            }
        }
        out
    }

    /// Whether the stream ends within `secs`.
    async fn ends_within(&mut self, secs: u64) -> bool {
        let end = async {
            loop {
                match self.body.frame().await {
                    Some(Ok(_)) => {}
                    _ => return,
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(secs), end)
            .await
            .is_ok()
    }
}

fn modified(vs: &[&str]) -> Vec<(String, String)> {
    vs.iter()
        .map(|v| ("MODIFIED".to_owned(), (*v).to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_of_one_watch_share_one_upstream_watch_each_from_its_own_start() {
    let p = pki::pki();
    let sims = sims().await;
    let (proxy, edge) = pki::settings(&p, false);
    let gate = gate_with(&table(&sims), (proxy, edge)).await;
    let node = |n: &str| {
        let leaf = p.ca.issue(
            &p.dir,
            n,
            &format!("system:node:{n}"),
            &["system:nodes"],
            &[],
        );
        pki::client_config(&p.ca, Some(&leaf), &[b"h2"])
    };
    let rv0 = put(&sims, "other", "0").await;
    let rv1 = put(&sims, "mount", "1").await;
    let controls = sims.old.controls.clone();
    let watches_before = controls.watches.load(Ordering::Relaxed);

    let (code, mut a) = Client::open(&gate, node("n1"), &format!("resourceVersion={rv1}")).await;
    assert_eq!(code, 200);
    let rv2 = put(&sims, "mount", "2").await;
    let _rv3 = put(&sims, "mount", "3").await;
    assert_eq!(a.events(2).await, modified(&["2", "3"]));
    // Behind the shared watch, within its buffer: replayed from its own start.
    let (_, mut b) = Client::open(&gate, node("n2"), &format!("resourceVersion={rv2}")).await;
    assert_eq!(b.events(1).await, modified(&["3"]));
    // With a timeout of its own.
    let (_, mut c) = Client::open(
        &gate,
        node("n3"),
        &format!("resourceVersion={rv2}&timeoutSeconds=3"),
    )
    .await;
    assert_eq!(c.events(1).await, modified(&["3"]));
    put(&sims, "mount", "4").await;
    for w in [&mut a, &mut b, &mut c] {
        assert_eq!(w.events(1).await, modified(&["4"]));
    }
    assert!(
        c.ends_within(6).await,
        "timeoutSeconds=3 ends its own watch"
    );
    put(&sims, "mount", "5").await;
    assert_eq!(a.events(1).await, modified(&["5"]), "the others go on");
    assert_eq!(b.events(1).await, modified(&["5"]));
    assert_eq!(
        controls.watches.load(Ordering::Relaxed) - watches_before,
        1,
        "three clients, one upstream watch"
    );
    let text = gate.metrics().await;
    assert_eq!(metric(&text, "skewgate_shared_watches "), 1.0);
    assert_eq!(metric(&text, "skewgate_shared_watch_clients "), 2.0);
    assert_eq!(
        metric(
            &text,
            "skewgate_shared_watch_joins_total{from=\"live\",rule=\"mounts\"}"
        ),
        2.0
    );
    assert!(metric(&text, "skewgate_shared_watch_replayed_events_total") >= 2.0);
    let open = gate.admin_json("/debug/shares").await;
    assert_eq!(open["watches"][0]["clients"], 2, "{open}");
    assert_eq!(
        open["watches"][0]["watch"],
        format!("old /api/v1/namespaces/{NS}/configmaps?fieldSelector=metadata.name%3Dmount (*/*)"),
        "{open}"
    );

    // From before the shared watch began: its own upstream watch, which has what it missed.
    let (code, mut d) = Client::open(&gate, node("n4"), &format!("resourceVersion={rv0}")).await;
    assert_eq!(code, 200);
    let mut missed = vec![("ADDED".to_owned(), "1".to_owned())];
    missed.extend(modified(&["2", "3", "4", "5"]));
    assert_eq!(d.events(5).await, missed);
    assert_eq!(controls.watches.load(Ordering::Relaxed) - watches_before, 2);
    // A watch with no resourceVersion begins with the state, which only the apiserver has.
    let (_, mut e) = Client::open(&gate, node("n5"), "").await;
    assert_eq!(e.events(1).await, [("ADDED".to_owned(), "5".to_owned())]);
    let text = gate.metrics().await;
    assert_eq!(
        metric(
            &text,
            "skewgate_shared_watch_own_total{reason=\"behind\",rule=\"mounts\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(
            &text,
            "skewgate_shared_watch_own_total{reason=\"initial_state\",rule=\"mounts\"}"
        ),
        1.0
    );

    // The authorizer refuses n6: the apiserver's 403, and the others go on.
    controls
        .watch_denied
        .lock()
        .unwrap()
        .push("system:node:n6".to_owned());
    let (code, mut refused) =
        Client::open(&gate, node("n6"), &format!("resourceVersion={rv2}")).await;
    assert_eq!(code, 403);
    let mut body = Vec::new();
    while let Some(Ok(f)) = refused.body.frame().await {
        body.extend_from_slice(&f.into_data().unwrap_or_default());
    }
    let status: Value = serde_json::from_slice(&body).expect("Status");
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(status["details"]["name"], "mount");
    assert_eq!(
        status["message"],
        "configmaps \"mount\" is forbidden: User \"system:node:n6\" cannot watch resource \"configmaps\" in API group \"\" in the namespace \"shared\": the simulator denies this user"
    );
    put(&sims, "mount", "6").await;
    assert_eq!(a.events(1).await, modified(&["6"]));
    assert_eq!(b.events(1).await, modified(&["6"]));

    // When the last client leaves, the shared watch ends (after its linger).
    drop((a, b, d, e));
    assert!(
        eventually(20, || async {
            controls.watches_open.load(Ordering::Relaxed) == 0
        })
        .await,
        "the upstream watches end with their clients"
    );
}
