//! What an update guard adds to a full-object update (PUT) it checks, against the same update that
//! no guard matches, in the same run.
//!
//! Run: `cargo bench --bench guard` (options after `--`: `--requests N`). Two simulated apiservers
//! (v1.29, v1.30) share a store; skewgate runs in-process, writes go to v1.30, and a guard with
//! `action: warn` matches configmaps in namespace `guarded`. A kubectl/v1.29 client PUTs a configmap
//! that carries the 1.30 field `policy` without it, one request at a time: in `guarded` the guard
//! reads the body whole, reads the stored object and finds the field; in `plain` nothing is checked.
//! Then the guard's own work on a pod's body, JSON beside protobuf (`guard_bodies.rs`, `--bodies N`
//! updates each, default 20,000): the simulator speaks JSON only, and the GET of the stored object
//! costs the same in either encoding.

#[path = "guard_bodies.rs"]
mod guard_bodies;
#[path = "targets.rs"]
mod targets;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use skewgate::app::{ServeOptions, Server};
use skewgate::proxy::ProxySettings;
use skewgate_sim::{self as sim, SimConfig, Store};

const OLD_KUBECTL: &str = "kubectl/v1.29.4 (linux/amd64) kubernetes/abc1234";

fn table(old: &str, new: &str) -> String {
    format!(
        "apiVersion: skewgate.io/v1alpha1\nkind: RouteTable\nbackends:\n  - {{name: old, version: v1.29, endpoints: [\"{old}\"]}}\n  - {{name: new, version: v1.30, endpoints: [\"{new}\"]}}\nwrites:\n  default: new\nreads:\n  default: new\nguards:\n  - name: old-clients\n    match: {{namespaces: [guarded], resources: [configmaps]}}\n    action: warn\n"
    )
}

async fn put_loop(client: &reqwest::Client, base: &str, namespace: &str, n: usize) -> Vec<u32> {
    let url = format!("{base}/api/v1/namespaces/{namespace}/configmaps/cm");
    let mut lat = Vec::with_capacity(n);
    for i in 0..n {
        let body = format!(r#"{{"metadata":{{"name":"cm"}},"data":{{"i":"{i}"}}}}"#);
        let t = Instant::now();
        let r = client
            .put(&url)
            .header("user-agent", OLD_KUBECTL)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("an answer");
        assert!(r.status().is_success(), "{}", r.status());
        let _ = r.bytes().await;
        lat.push(t.elapsed().as_micros() as u32);
        // Put the 1.30 field back, so that every guarded update finds it again.
        let _ = client
            .patch(&url)
            .header("user-agent", OLD_KUBECTL)
            .header("content-type", "application/merge-patch+json")
            .body(r#"{"policy":"keep"}"#)
            .send()
            .await;
    }
    lat
}

fn percentile(sorted: &[u32], p: f64) -> u32 {
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n = targets::num_arg("--requests", 2000) as usize;
    let store = Store::new();
    let loopback: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let old = sim::start(SimConfig::new("v1.29.4"), store.clone(), loopback)
        .await
        .expect("sim");
    let new = sim::start(SimConfig::new("v1.30.1"), store.clone(), loopback)
        .await
        .expect("sim");
    let dir = std::env::temp_dir().join(format!("skewgate-bench-guard-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let routes = dir.join("routes.yaml");
    std::fs::write(&routes, table(&old.url(), &new.url())).expect("routes");
    let server = Server::start(ServeOptions {
        routes,
        listen: loopback,
        admin_listen: loopback,
        reload_poll: Duration::from_secs(5),
        settings: ProxySettings::default(),
        edge: Default::default(),
    })
    .await
    .expect("skewgate");
    let base = format!("http://{}", server.addr);
    let admin = format!("http://{}", server.admin_addr);
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .expect("client");
    // The schemas are read with discovery, within a few seconds of the start.
    for _ in 0..100 {
        let v: serde_json::Value = match client.get(format!("{admin}/debug/skew")).send().await {
            Ok(r) => r.json().await.unwrap_or_default(),
            Err(_) => serde_json::Value::Null,
        };
        if v["report"]["kinds"]
            .as_array()
            .is_some_and(|k| !k.is_empty())
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for ns in ["plain", "guarded"] {
        let _ = client
            .post(format!("{base}/api/v1/namespaces"))
            .json(&serde_json::json!({"metadata": {"name": ns}}))
            .send()
            .await;
        let _ = client
            .post(format!("{base}/api/v1/namespaces/{ns}/configmaps"))
            .header("user-agent", "kubectl/v1.30.1")
            .json(&serde_json::json!({"metadata": {"name": "cm"}, "policy": "keep"}))
            .send()
            .await;
    }
    // Warm-up, then the two in turn.
    put_loop(&client, &base, "plain", 200).await;
    put_loop(&client, &base, "guarded", 200).await;
    let mut plain = put_loop(&client, &base, "plain", n).await;
    let mut guarded = put_loop(&client, &base, "guarded", n).await;
    plain.sort_unstable();
    guarded.sort_unstable();
    println!("\nfull-object updates (PUT) from a kubectl/v1.29 client, {n} each, one at a time\n");
    println!(
        "  {:<10} {:>8} {:>8} {:>8}",
        "", "p50 µs", "p99 µs", "× plain"
    );
    for (name, lat) in [("plain", &plain), ("guarded", &guarded)] {
        println!(
            "  {:<10} {:>8} {:>8} {:>8.2}",
            name,
            percentile(lat, 0.5),
            percentile(lat, 0.99),
            f64::from(percentile(lat, 0.5)) / f64::from(percentile(&plain, 0.5)),
        );
    }
    println!(
        "\n  the guard adds {} µs at p50 (reading the body whole, the stored object, comparing)\n",
        i64::from(percentile(&guarded, 0.5)) - i64::from(percentile(&plain, 0.5))
    );
    server.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    guard_bodies::run(targets::num_arg("--bodies", 20_000) as usize);
}
