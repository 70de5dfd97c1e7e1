//! Write latency of 8 writers through skewgate while a pin moves back and forth, against the same
//! writers with no move, in the same run.
//!
//! Run: `cargo bench --bench pin_move` (options after `--`: `--seconds N`, `--move-every-ms N`,
//! `--write-ms N`). Two simulated apiservers (v1.29, v1.30) share a store and take `--write-ms` per
//! write; skewgate runs in-process with a route file that pins namespace `team-a`; the file is
//! rewritten every `--move-every-ms` during the second phase.

#[path = "targets.rs"]
mod targets;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use skewgate::app::{ServeOptions, Server};
use skewgate::proxy::ProxySettings;
use skewgate_sim::{self as sim, SimConfig, Store};

fn table(old: &str, new: &str, to: &str) -> String {
    format!(
        "apiVersion: skewgate.io/v1alpha1\nkind: RouteTable\nbackends:\n  - {{name: old, endpoints: [\"{old}\"]}}\n  - {{name: new, endpoints: [\"{new}\"]}}\nwrites:\n  default: old\n  pins:\n    - {{name: team-a, namespaces: [team-a], backend: {to}}}\nreads:\n  default: old\n"
    )
}

struct Phase {
    latencies: Vec<u32>,
    refused: u64,
    failed: u64,
}

async fn writers(base: &str, seconds: u64) -> Phase {
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for w in 0..8usize {
        let (stop, base) = (stop.clone(), base.to_owned());
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .http2_prior_knowledge()
                .build()
                .expect("client");
            let (mut lat, mut refused, mut failed) = (Vec::new(), 0, 0);
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let url = format!(
                    "{base}/api/v1/namespaces/team-a/configmaps/cm-{}",
                    (n + w) % 16
                );
                let t = Instant::now();
                let r = client
                    .patch(&url)
                    .header("content-type", "application/merge-patch+json")
                    .body(format!(r#"{{"data":{{"w{w}":"{n}"}}}}"#))
                    .send()
                    .await;
                match r.map(|r| r.status().as_u16()) {
                    Ok(200) => lat.push(t.elapsed().as_micros() as u32),
                    Ok(429) => refused += 1,
                    _ => failed += 1,
                }
            }
            (lat, refused, failed)
        }));
    }
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut phase = Phase {
        latencies: Vec::new(),
        refused: 0,
        failed: 0,
    };
    for t in tasks {
        if let Ok((l, r, f)) = t.await {
            phase.latencies.extend(l);
            phase.refused += r;
            phase.failed += f;
        }
    }
    phase.latencies.sort_unstable();
    phase
}

fn pct(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    f64::from(sorted[((sorted.len() - 1) as f64 * p).round() as usize]) / 1000.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let seconds = targets::num_arg("--seconds", 5);
    let every = targets::num_arg("--move-every-ms", 400);
    let write_ms = targets::num_arg("--write-ms", 5);
    let loopback: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let store = Store::new();
    let old = sim::start(SimConfig::new("v1.29.0"), store.clone(), loopback)
        .await
        .expect("sim");
    let new = sim::start(SimConfig::new("v1.30.0"), store.clone(), loopback)
        .await
        .expect("sim");
    for s in [&old, &new] {
        s.controls.write_delay.store(write_ms, Ordering::Relaxed);
    }
    let dir = std::env::temp_dir().join(format!("skewgate-bench-move-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let routes = dir.join("routes.yaml");
    std::fs::write(&routes, table(&old.url(), &new.url(), "old")).expect("routes");
    let server = Server::start(ServeOptions {
        routes: routes.clone(),
        listen: loopback,
        admin_listen: loopback,
        reload_poll: Duration::from_millis(100),
        settings: ProxySettings::default(),
        edge: Default::default(),
    })
    .await
    .expect("skewgate");
    let base = format!("http://{}", server.addr);
    let client = reqwest::Client::new();
    client
        .post(format!("{base}/api/v1/namespaces"))
        .json(&serde_json::json!({"metadata": {"name": "team-a"}}))
        .send()
        .await
        .expect("ns");
    for i in 0..16 {
        client
            .post(format!("{base}/api/v1/namespaces/team-a/configmaps"))
            .json(&serde_json::json!({"metadata": {"name": format!("cm-{i}")}}))
            .send()
            .await
            .expect("cm");
    }

    let steady = writers(&base, seconds).await;
    let moving = {
        let mover = {
            let (routes, old, new) = (routes.clone(), old.url(), new.url());
            tokio::spawn(async move {
                let mut moves = 0u64;
                let deadline = Instant::now() + Duration::from_secs(seconds);
                while Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(every)).await;
                    moves += 1;
                    let to = if moves % 2 == 1 { "new" } else { "old" };
                    let tmp = routes.with_extension("tmp");
                    let _ = std::fs::write(&tmp, table(&old, &new, to));
                    let _ = std::fs::rename(&tmp, &routes);
                }
                moves
            })
        };
        let phase = writers(&base, seconds).await;
        let moves = mover.await.unwrap_or(0);
        (phase, moves)
    };
    let metrics = client
        .get(format!("http://{}/metrics", server.admin_addr))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .unwrap_or_default();
    let applied: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("skewgate_pin_moves_total{pin=\"team-a\"}"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    let (moving, rewrites) = moving;
    println!(
        "\n8 writers, PATCH of 16 objects in team-a, {write_ms} ms per write at the simulators, {seconds} s per phase\n"
    );
    println!(
        "  {:<24} {:>8} {:>9} {:>9} {:>9} {:>8} {:>7}",
        "phase", "writes", "p50 ms", "p99 ms", "max ms", "429s", "errors"
    );
    for (name, p) in [("no move", &steady), ("pin moving", &moving)] {
        println!(
            "  {:<24} {:>8} {:>9.2} {:>9.2} {:>9.2} {:>8} {:>7}",
            name,
            p.latencies.len(),
            pct(&p.latencies, 0.5),
            pct(&p.latencies, 0.99),
            pct(&p.latencies, 1.0),
            p.refused,
            p.failed
        );
    }
    println!(
        "\n  moving / no move: p50 ×{:.2}, p99 ×{:.2}; {rewrites} rewrites of the route file, {applied} moves applied",
        pct(&moving.latencies, 0.5) / pct(&steady.latencies, 0.5).max(1e-9),
        pct(&moving.latencies, 0.99) / pct(&steady.latencies, 0.99).max(1e-9),
    );
    let _ = std::fs::remove_dir_all(&dir);
    server.shutdown().await;
}
