//! What a real kube-apiserver gains: `--nodes` simulated kubelets (default 1,000; a list such as
//! `1000,5000` runs each) against kube-apiserver from `$SKEWGATE_APISERVER_ASSETS` (the project's
//! `../shared/envtest`, started by tests/real/pair.sh; the bench says it skipped when that is
//! unset): straight to the apiserver, through skewgate, through HAProxy as kubeadm's HA guide runs
//! it (`mode tcp`) and through HAProxy as an L7 proxy sharing HTTP/2 connections (`--phases` picks),
//! each phase on a fresh apiserver and etcd.
//!
//! Each kubelet is a node's identity (a client certificate `system:node:NAME` in `system:nodes`,
//! issued by the cluster CA, so the apiserver's Node authorizer judges it as a kubelet's) on two
//! HTTP/2 connections over TLS (bench/kubelet_client.rs, bench/kubelet_fleet.rs): four informers
//! (its pods, its Node, the ConfigMap and Secret its pod mounts) in protobuf, and every 10 s a Lease
//! renewal and a Node status patch. For each phase: the apiserver's RSS, CPU seconds per minute,
//! goroutines and accepted connections over a steady window of `--seconds`, the proxy's RSS and
//! CPU, the p50/p99 of lease renewals and from a pod's creation to its kubelet's watch event
//! (`--deliveries N` pods, default one each 2 s of the window; each also parted at the create's
//! answer); then the proxy killed and started again, and the apiserver stopped and started again:
//! the time until every watch streams again and the most lists sent in one second (the herd).
//!
//! `skewgate-shared` is skewgate with the kubelets' watches of their mounts shared (`shareWatches`);
//! the apiserver's watches are counted at the end of the steady window. `--admin-straight` creates
//! the pods straight at the apiserver, so that a delivery through a proxy is its watch path alone.
//!
//! Run: `SKEWGATE_APISERVER_ASSETS=../shared/envtest cargo bench --bench kubelets [-- --nodes 1000
//! --seconds 60 --phases direct,skewgate,skewgate-shared,haproxy-tcp,haproxy-h2 --api-streams 0
//! --deliveries 1000 --admin-straight]`. Needs root
//! (pair.sh), etcd, openssl, xz and curl; haproxy for its phases. Writes target/kubelets.svg.

#[path = "targets.rs"]
mod targets;

#[path = "kubelet_client.rs"]
mod client;

#[path = "kubelet_fleet.rs"]
mod fleet;

#[path = "kubelet_procs.rs"]
mod procs;

#[path = "kubelet_plot.rs"]
mod plot;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use client::percentile;
use fleet::Fleet;
use plot::{DeliveryParts, Figures};
use procs::{Apiserver, PHASES, Proxy};
use targets::{arg, free_port, num_arg, proc_cpu, rss_kib};

/// How long every watch may take to stream again after a restart.
const REESTABLISH_LIMIT: Duration = Duration::from_secs(300);

/// The steady window: pods created one by one while the kubelets heartbeat.
async fn steady(
    f: &mut Figures,
    api: &Apiserver,
    proxy: Option<&Proxy>,
    fleet: &Fleet,
    admin: &client::Conn,
    seconds: u64,
) {
    let pid = api.pid();
    let proc_of = |p: &Proxy| p.process.as_ref().map(|p| p.cpu_seconds()).unwrap_or(0.0);
    let (cpu0, pcpu0, t0) = (proc_cpu(pid), proxy.map_or(0.0, proc_of), Instant::now());
    let reviews0 = fleet::apiserver_metrics(admin)
        .await
        .map_or(f64::NAN, |m| m.2);
    fleet.reset_latencies();
    let pods = num_arg("--deliveries", (seconds / 2).max(5)).max(1) as usize;
    let (mut delivery, mut created, mut after) = (Vec::new(), Vec::new(), Vec::new());
    for k in 0..pods {
        let node = (k * 7919) % fleet.n;
        if let Some(d) = fleet.deliver_pod(admin, node, &format!("p{k}")).await {
            delivery.push(d.total);
            created.push(d.created);
            after.push(d.total - d.created);
        }
        tokio::time::sleep(Duration::from_millis(seconds * 1000 / pods as u64)).await;
    }
    let elapsed = t0.elapsed().as_secs_f64();
    f.rss_mib = rss_kib(pid) as f64 / 1024.0;
    f.cpu_per_min = (proc_cpu(pid) - cpu0) / elapsed * 60.0;
    let (goroutines, watches, reviews) =
        fleet::apiserver_metrics(admin)
            .await
            .unwrap_or((f64::NAN, f64::NAN, f64::NAN));
    f.goroutines = goroutines;
    f.watches = watches;
    f.reviews_per_s = (reviews - reviews0) / elapsed;
    f.connections = api.accepted();
    if let Some(p) = proxy.and_then(|p| p.process.as_ref()) {
        f.proxy_rss_mib = rss_kib(p.child.id()) as f64 / 1024.0;
        f.proxy_cpu_per_min = (p.cpu_seconds() - pcpu0) / elapsed * 60.0;
    }
    f.lease = fleet.lease_percentiles();
    f.delivery = (percentile(&delivery, 0.5), percentile(&delivery, 0.99));
    f.delivery_parts = DeliveryParts {
        samples: delivery.len(),
        created: (percentile(&created, 0.5), percentile(&created, 0.99)),
        after: (percentile(&after, 0.5), percentile(&after, 0.99)),
    };
    f.failed = fleet.stats.failed.load(Ordering::Relaxed);
}

/// Kills the proxy and starts it again: seconds until every watch streams, the herd's peak.
async fn restart_proxy(proxy: &mut Proxy, fleet: &Fleet) -> Option<(f64, usize)> {
    let t = Instant::now();
    if !proxy.restart().await {
        eprintln!("{}: did not start again", proxy.name);
        return None;
    }
    let all = fleet.all_watching(t, REESTABLISH_LIMIT).await;
    Some((
        all.map_or(f64::NAN, |d| d.as_secs_f64()),
        fleet.peak_lists(t),
    ))
}

/// Stops the apiserver and starts it again: seconds until it is ready, until every watch streams,
/// the herd's peak, and the apiserver's connections once they do.
async fn restart_apiserver(api: &Apiserver, fleet: &Fleet) -> Option<(f64, f64, usize, usize)> {
    let t = Instant::now();
    api.stop().await;
    if !tokio::task::block_in_place(|| api.up()) {
        return None;
    }
    let ready = t.elapsed().as_secs_f64();
    let all = fleet.all_watching(t, REESTABLISH_LIMIT).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let all = all.map_or(f64::NAN, |d| d.as_secs_f64());
    Some((ready, all, fleet.peak_lists(t), api.accepted()))
}

async fn phase(name: &'static str, api: &Apiserver, nodes: usize, seconds: u64) -> Option<Figures> {
    if name.starts_with("haproxy") && nodes * 2 > procs::HAPROXY_MAXCONN {
        println!(
            "{name}: left out at {nodes} kubelets: HAProxy holds {} connections under this machine's descriptor limit",
            procs::HAPROXY_MAXCONN
        );
        return None;
    }
    let mut proxy = procs::proxy(name, api);
    if name != "direct" {
        let p = proxy.as_mut()?;
        if !p.start().await {
            eprintln!("{name}: did not start");
            return None;
        }
    }
    let target = proxy.as_ref().map_or(api.addr(), |p| p.listen);
    // With --admin-straight the pods are created straight at the apiserver, so a delivery through
    // a proxy is the watch's path alone.
    let admin_target = if std::env::args().any(|a| a == "--admin-straight") {
        api.addr()
    } else {
        target
    };
    let admin = Arc::new(fleet::admin(&api.pki(), admin_target).await?);
    if !fleet::prepare(&admin, nodes).await {
        return None;
    }
    // The proxy before any kubelet: what it holds for the kubelets is the rest.
    let idle = proxy
        .as_ref()
        .and_then(|p| p.process.as_ref())
        .map_or(0.0, |p| rss_kib(p.child.id()) as f64 / 1024.0);
    let t = Instant::now();
    let fleet = Fleet::start(&api.pki(), target, nodes).await?;
    match fleet.all_watching(t, REESTABLISH_LIMIT).await {
        Some(up) => println!("{name}: {nodes} kubelets watching after {up:.1?}"),
        // Measured all the same: a machine the fleet overloads is a finding too.
        None => println!(
            "{name}: only {} of {} watches after {REESTABLISH_LIMIT:?}",
            fleet.stats.up.load(Ordering::Relaxed),
            nodes * fleet::WATCHES
        ),
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    let mut f = Figures::new(name, nodes);
    f.proxy_idle_mib = idle;
    steady(&mut f, api, proxy.as_ref(), &fleet, &admin, seconds).await;
    println!("{name}: steady window done");
    if let Some(p) = proxy.as_mut() {
        f.proxy_restart = restart_proxy(p, &fleet).await;
        println!("{name}: {} restarted: {:?}", p.name, f.proxy_restart);
    }
    f.api_restart = restart_apiserver(api, &fleet).await;
    println!("{name}: apiserver restarted: {:?}", f.api_restart);
    f.dials = fleet.stats.dials.load(Ordering::Relaxed);
    f.refused = fleet.stats.refused.load(Ordering::Relaxed);
    Some(f)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let Ok(assets) = std::env::var("SKEWGATE_APISERVER_ASSETS") else {
        println!(
            "SKIPPED: SKEWGATE_APISERVER_ASSETS is not set (the real kube-apiserver binaries)"
        );
        return;
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let counts: Vec<usize> = arg("--nodes")
        .unwrap_or_else(|| "1000".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    let seconds = num_arg("--seconds", 60);
    let phases = arg("--phases").unwrap_or_else(|| PHASES.join(","));
    let streams = num_arg("--api-streams", 0);
    let flags = if streams > 0 {
        format!("--http2-max-streams-per-connection={streams}")
    } else {
        String::new()
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut all = Vec::new();
    for &nodes in &counts {
        for name in PHASES
            .into_iter()
            .filter(|p| phases.split(',').any(|q| q == *p))
        {
            // Each phase on an apiserver (and etcd) of its own, started afresh: a Go process keeps
            // the memory it grew, so the second phase would start where the first left it.
            let api = Apiserver {
                dir: std::env::temp_dir().join(format!(
                    "skewgate-kubelets-{}-{name}-{nodes}",
                    std::process::id()
                )),
                script: root.join("tests/real/pair.sh"),
                assets: assets.clone(),
                port: free_port(),
                old_port: free_port(),
                etcd: (free_port(), free_port()),
                flags: flags.clone(),
            };
            if !api.up() {
                println!("SKIPPED: the real apiserver did not start");
                return;
            }
            all.extend(phase(name, &api, nodes, seconds).await);
            plot::print(&all);
        }
    }
    let svg = root.join("target/kubelets.svg");
    if std::fs::write(&svg, plot::svg(&all)).is_ok() {
        println!("\n  plot: {}", svg.display());
    }
}
