//! The kubelet fleet: `--nodes` nodes (default 2,500), each from its own loopback address with four
//! client connections as a kubelet and its plugins hold them — one h2 connection carrying two
//! watches (its node's ConfigMap and its Lease, as a kubelet watches its Node and its Pods) and the
//! node's trickle of writes and reads, one more h2 connection and two HTTP/1.1 connections that
//! made one GET and went quiet. That is 10,000 connections and 5,000 watches by default.
//!
//! For skewgate and HAProxy in turn, it prints the proxy's resident memory per idle connection and
//! per watch, its upstream connections, its CPU at a steady trickle of status PATCHes and GETs
//! (`--trickle` requests/s for `--trickle-seconds`), how long a reconnect storm of every
//! connection and watch at once takes to settle, and the memory left 11 s after every client left.
//!
//! Run: `cargo bench --bench fleet` (options after `--`: `--nodes N`, `--trickle R`,
//! `--trickle-seconds S`, `--figures DIR`).

#[path = "targets.rs"]
mod targets;

#[path = "figures.rs"]
mod figures;

#[path = "fleet_nodes.rs"]
mod nodes;

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use tokio::task::JoinSet;

use nodes::{FAILED, Node, call, connect_node, each, get, h2_conn, node_ip, watch_node};

use targets::{Proc, Target, connections_to, rss_kib, start_sim, start_targets};

/// The steady trickle: node status PATCHes and GETs on the kubelets' connections, at `rate` a
/// second for `secs`; returns (sent, failed).
async fn trickle(nodes: &[Node], rate: u64, secs: u64) -> (u64, u64) {
    let total = rate * secs;
    let mut sent = JoinSet::new();
    let started = Instant::now();
    for k in 0..total {
        let due = started + Duration::from_secs_f64(k as f64 / rate as f64);
        tokio::time::sleep_until(due.into()).await;
        let i = (k as usize * 7919) % nodes.len().max(1);
        let Some(node) = nodes.get(i) else { break };
        let (i, mut send) = (node.i, node.kubelet.clone());
        sent.spawn(async move {
            let path = format!("/api/v1/namespaces/fleet/configmaps/node-{i}");
            let req = if k % 2 == 0 {
                http::Request::patch(&path)
                    .header("content-type", "application/merge-patch+json")
                    .header(
                        "user-agent",
                        "kubelet/v1.30.0 (linux/amd64) kubernetes/abcdef",
                    )
                    .body(Full::new(Bytes::from(format!(
                        r#"{{"data":{{"heartbeat":"{k}"}}}}"#
                    ))))
                    .expect("patch")
            } else {
                get(&path)
            };
            call(&mut send, req, 200).await
        });
    }
    let mut failed = 0;
    while let Some(r) = sent.join_next().await {
        if !matches!(r, Ok(true)) {
            failed += 1;
        }
    }
    (total, failed)
}

/// One proxy's figures.
struct Figures {
    name: &'static str,
    nodes: usize,
    conns: usize,
    watches: usize,
    conn_kib: f64,
    watch_kib: f64,
    upstream: usize,
    trickle_cpu_pct: f64,
    trickle_us: f64,
    trickle_failed: u64,
    events: u64,
    storm_s: f64,
    storm_nodes: usize,
    /// (connections held, RSS MiB), for the plot.
    rss: Vec<(f64, f64)>,
    left_kib: i64,
}

async fn measure(t: &Target, proc_: &Proc, sim_port: u16, o: &Opts) -> Figures {
    let pid = proc_.child.id();
    let to = (t.h2, t.h1);
    let rss_mib = || rss_kib(pid) as f64 / 1024.0;
    targets::settle().await;
    let before = rss_kib(pid);
    let events = Arc::new(AtomicU64::new(0));
    // Connections first, in four steps for the plot, then the watches on them.
    let mut rss = vec![(0.0, rss_mib())];
    let mut nodes = Vec::new();
    for s in 0..4 {
        let range: Vec<usize> = (o.nodes * s / 4..o.nodes * (s + 1) / 4).collect();
        nodes.extend(each(range, 256, |i| connect_node(i, to)).await);
        targets::settle().await;
        rss.push(((nodes.len() * 4) as f64, rss_mib()));
    }
    // Idle connections, not ones just served: after skewgate's memory trim (every 10 s) has given
    // back what their first requests used for a moment.
    tokio::time::sleep(Duration::from_secs(11)).await;
    let connected = rss_kib(pid);
    let conns = nodes.len() * 4;
    let nodes = each(nodes, 256, |n| watch_node(n, events.clone())).await;
    // Idle watches too: a kubelet's watch waits minutes between events.
    tokio::time::sleep(Duration::from_secs(11)).await;
    let watching = rss_kib(pid);
    let watches = nodes.len() * 2;
    let upstream = connections_to(sim_port, pid);
    let cpu0 = proc_.cpu_seconds();
    let (sent, failed) = trickle(&nodes, o.trickle, o.trickle_secs).await;
    let cpu = proc_.cpu_seconds() - cpu0;
    let events_seen = events.load(Ordering::Relaxed);
    // The storm: every client gone at once, and back at once.
    drop(nodes);
    let storm = Instant::now();
    let back = each((0..o.nodes).collect(), 1024, |i| {
        let events = events.clone();
        async move { watch_node(connect_node(i, to).await?, events).await }
    })
    .await;
    let storm_s = storm.elapsed().as_secs_f64();
    let storm_nodes = back.len();
    drop(back);
    tokio::time::sleep(Duration::from_secs(11)).await;
    let after = rss_kib(pid);
    Figures {
        name: t.name,
        nodes: o.nodes,
        conns,
        watches,
        conn_kib: connected.saturating_sub(before) as f64 / conns.max(1) as f64,
        watch_kib: watching.saturating_sub(connected) as f64 / watches.max(1) as f64,
        upstream,
        trickle_cpu_pct: cpu * 100.0 / o.trickle_secs as f64,
        trickle_us: cpu * 1e6 / sent.max(1) as f64,
        trickle_failed: failed,
        events: events_seen,
        storm_s,
        storm_nodes,
        rss,
        left_kib: after as i64 - before as i64,
    }
}

struct Opts {
    nodes: usize,
    trickle: u64,
    trickle_secs: u64,
}

/// One ConfigMap per node in namespace `fleet`, straight to the simulator.
async fn create_objects(sim: SocketAddr, n: usize) {
    let mut tasks = JoinSet::new();
    let Some(send) = h2_conn(node_ip(0), sim, &mut tasks).await else {
        panic!("cannot reach the simulator");
    };
    let created = each((0..n).collect(), 64, |i| {
        let mut send = send.clone();
        async move {
            let req = http::Request::post("/api/v1/namespaces/fleet/configmaps")
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(format!(
                    r#"{{"metadata":{{"name":"node-{i}"}},"data":{{"heartbeat":"0"}}}}"#
                ))))
                .expect("create");
            call(&mut send, req, 201).await.then_some(())
        }
    })
    .await;
    assert_eq!(created.len(), n, "creating the nodes' objects failed");
}

fn report(out: &mut String, f: &Figures) {
    let _ = writeln!(
        out,
        "  {:<9} {:>6} {:>8} {:>9.1} {:>8} {:>9.1} {:>9} {:>8.1}% {:>9.1} {:>7} {:>8} {:>8.1} s {:>6} {:>+9} KiB",
        f.name,
        f.nodes,
        f.conns,
        f.conn_kib,
        f.watches,
        f.watch_kib,
        f.upstream,
        f.trickle_cpu_pct,
        f.trickle_us,
        f.trickle_failed,
        f.events,
        f.storm_s,
        f.storm_nodes,
        f.left_kib
    );
}

fn plot(text: &str, figures: &[Figures]) {
    let series: Vec<(&str, Vec<(f64, f64)>)> =
        figures.iter().map(|f| (f.name, f.rss.clone())).collect();
    let chart = figures::lines(
        "resident memory against idle client connections (each after one GET)",
        ("client connections", "RSS, MiB"),
        &series,
        (10.0, 10.0, 720.0, 360.0),
    );
    let bars: Vec<(&str, Vec<(&str, f64)>)> = vec![
        (
            "per idle connection",
            figures.iter().map(|f| (f.name, f.conn_kib)).collect(),
        ),
        (
            "per watch",
            figures.iter().map(|f| (f.name, f.watch_kib)).collect(),
        ),
    ];
    let (kib, h) = figures::bars(
        "memory per connection and per watch (lower is better)",
        "KiB",
        &bars,
        (740.0, 10.0, 480.0),
    );
    let body = format!("{chart}{kib}");
    figures::write(
        "fleet",
        text,
        &figures::document(1230.0, 380.0_f64.max(h + 20.0), &body),
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let o = Opts {
        nodes: targets::num_arg("--nodes", 2500) as usize,
        trickle: targets::num_arg("--trickle", 250),
        trickle_secs: targets::num_arg("--trickle-seconds", 10),
    };
    let exe = env!("CARGO_BIN_EXE_skewgate");
    let dir = std::env::temp_dir().join(format!("skewgate-bench-fleet-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (_sim, sim) = start_sim(exe).await;
    create_objects(sim, o.nodes).await;
    let targets = start_targets(exe, &dir, sim).await;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n{} nodes: {} client connections (per node 2 h2 + 2 HTTP/1.1, each after one GET), {} watches, then a trickle of {}/s PATCH+GET for {} s, then a reconnect storm of all\n",
        o.nodes,
        o.nodes * 4,
        o.nodes * 2,
        o.trickle,
        o.trickle_secs
    );
    let _ = writeln!(
        out,
        "  {:<9} {:>6} {:>8} {:>9} {:>8} {:>9} {:>9} {:>9} {:>9} {:>7} {:>8} {:>10} {:>6} {:>13}",
        "proxy",
        "nodes",
        "conns",
        "KiB/conn",
        "watches",
        "KiB/watch",
        "upstream",
        "CPU",
        "µs/req",
        "failed",
        "events",
        "storm",
        "back",
        "RSS left"
    );
    let mut all = Vec::new();
    let mut failures = Vec::new();
    for t in targets
        .iter()
        .filter(|t| matches!(t.name, "skewgate" | "haproxy"))
    {
        let Some(p) = t.process.as_ref() else {
            continue;
        };
        eprintln!("measuring {}", t.name);
        FAILED.take();
        let f = measure(t, p, sim.port(), &o).await;
        failures.push(format!("  {:<10} {}", t.name, FAILED.take()));
        report(&mut out, &f);
        all.push(f);
    }
    let _ = writeln!(
        out,
        "\n  conns, watches: opened; KiB/conn, KiB/watch: the proxy's RSS growth divided by them (11 s after the last connected, and after the last watch began); upstream: its connections to the apiserver (stream limit 100) while the watches are open; CPU, µs/req: at the trickle; events: watch events the nodes got; storm: until every node had its connections, GETs and watches back; back: nodes back; RSS left: 11 s after the last client left, against before."
    );
    let _ = writeln!(
        out,
        "\n  connections and requests that failed, all phases, by reason:\n{}",
        failures.join("\n")
    );
    println!("{out}");
    plot(&out, &all);
    let _ = std::fs::remove_dir_all(&dir);
}
