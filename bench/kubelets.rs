//! What a real kube-apiserver gains: `--nodes` simulated kubelets (default 1,000) against kube-apiserver
//! from `$SKEWGATE_APISERVER_ASSETS` (the project's `../shared/envtest`, started by
//! tests/real/pair.sh; the bench says it skipped when that is unset), first straight to the
//! apiserver, then through skewgate, the apiserver restarted before each.
//!
//! Each kubelet is a node's identity (a client certificate `system:node:NAME` in `system:nodes`,
//! issued by the cluster CA, so the apiserver's Node authorizer judges it as a kubelet's) on one
//! HTTP/2 connection over TLS, as client-go holds it: it registers its Node and Lease, watches the
//! pods bound to it and its Node, and every 10 s renews its Lease and patches its Node's status
//! (JSON; a kubelet sends protobuf for some of these). For each phase it prints the apiserver's
//! RSS, CPU seconds per minute, goroutines and open client connections over a steady window of
//! `--seconds`, the proxy's RSS and CPU, the p50/p99 of lease renewals, and the p50/p99 from a
//! pod's creation (bound to a node) to its kubelet's watch seeing it.
//!
//! Run: `SKEWGATE_APISERVER_ASSETS=../shared/envtest cargo bench --bench kubelets [-- --nodes 1000
//! --seconds 60]`. Needs root (pair.sh), etcd, openssl, xz and curl.

#[path = "targets.rs"]
mod targets;

#[path = "kubelet_client.rs"]
mod client;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use client::{Fleet, Kubelet, percentile};
use targets::{Proc, free_port, num_arg, proc_cpu, rss_kib};

/// The real apiserver ("new" of pair.sh's two), and how to restart it.
struct Apiserver {
    dir: PathBuf,
    script: PathBuf,
    assets: String,
    port: u16,
    /// pair.sh's other apiserver, idle here.
    old_port: u16,
    /// etcd's client and peer ports.
    etcd: (u16, u16),
}

impl Apiserver {
    fn up(&self) -> bool {
        let ports = [
            ("NEW_PORT", self.port.to_string()),
            ("OLD_PORT", self.old_port.to_string()),
            ("ETCD_PORT", self.etcd.0.to_string()),
            ("ETCD_PEER_PORT", self.etcd.1.to_string()),
        ];
        let out = Command::new("bash")
            .arg(&self.script)
            .arg("up")
            .arg(&self.dir)
            .env("ASSETS", &self.assets)
            .envs(ports)
            .output();
        match out {
            Ok(o) if o.status.success() => true,
            Ok(o) => {
                eprintln!("pair.sh up: {}", String::from_utf8_lossy(&o.stderr));
                false
            }
            Err(e) => {
                eprintln!("pair.sh: {e}");
                false
            }
        }
    }

    fn pid(&self, role: &str) -> u32 {
        std::fs::read_to_string(self.dir.join(format!("run/{role}.pid")))
            .ok()
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or(0)
    }

    fn pki(&self, file: &str) -> PathBuf {
        self.dir.join("pki").join(file)
    }
}

impl Drop for Apiserver {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(&self.script)
            .arg("down")
            .arg(&self.dir)
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The apiserver's accepted connections: its sockets whose local port is its own.
fn accepted(pid: u32, port: u16) -> usize {
    let inodes = targets::socket_inodes(pid);
    let text = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    text.lines()
        .skip(1)
        .filter(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let local = cols
                .get(1)
                .and_then(|l| l.rsplit(':').next())
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            local == Some(port)
                && cols.get(3) == Some(&"01")
                && cols.get(9).is_some_and(|i| inodes.contains(*i))
        })
        .count()
}

/// One phase's figures.
struct Figures {
    name: &'static str,
    kubelets: usize,
    rss_mib: f64,
    cpu_per_min: f64,
    goroutines: f64,
    connections: usize,
    proxy_rss_mib: f64,
    proxy_cpu_per_min: f64,
    lease: (f64, f64),
    delivery: (f64, f64),
    failed: u64,
}

async fn phase(
    name: &'static str,
    api: &Apiserver,
    target: std::net::SocketAddr,
    proxy: Option<&Proc>,
    nodes: usize,
    seconds: u64,
) -> Option<Figures> {
    let fleet = Fleet::start(api.dir.join("pki").as_path(), target, nodes).await?;
    println!("{name}: {} kubelets up", fleet.kubelets.len());
    tokio::time::sleep(Duration::from_secs(10)).await;
    let pid = api.pid("new");
    let (cpu0, pcpu0, t0) = (
        proc_cpu(pid),
        proxy.map_or(0.0, Proc::cpu_seconds),
        Instant::now(),
    );
    fleet.reset_latencies();
    let admin = Kubelet::admin(&api.dir.join("pki"), target).await?;
    let pods = (seconds / 2).max(5) as usize;
    let mut delivery = Vec::new();
    for k in 0..pods {
        let node = (k * 7919) % fleet.kubelets.len();
        if let Some(d) = fleet
            .deliver_pod(&admin, node, &format!("{name}-{k}"))
            .await
        {
            delivery.push(d);
        }
        tokio::time::sleep(Duration::from_millis(seconds * 1000 / pods as u64)).await;
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let figures = Figures {
        name,
        kubelets: fleet.kubelets.len(),
        rss_mib: rss_kib(pid) as f64 / 1024.0,
        cpu_per_min: (proc_cpu(pid) - cpu0) / elapsed * 60.0,
        goroutines: admin.goroutines().await.unwrap_or(f64::NAN),
        connections: accepted(pid, api.port),
        proxy_rss_mib: proxy.map_or(0.0, |p| rss_kib(p.child.id()) as f64 / 1024.0),
        proxy_cpu_per_min: proxy.map_or(0.0, |p| (p.cpu_seconds() - pcpu0) / elapsed * 60.0),
        lease: fleet.lease_percentiles(),
        delivery: (percentile(&delivery, 0.5), percentile(&delivery, 0.99)),
        failed: fleet.failed(),
    };
    drop(fleet);
    Some(figures)
}

fn skewgate(api: &Apiserver, listen: std::net::SocketAddr) -> Option<Proc> {
    let dir = api.dir.join("skewgate");
    std::fs::create_dir_all(&dir).ok()?;
    let routes = dir.join("routes.yaml");
    let table = format!(
        "apiVersion: skewgate.io/v1alpha1\nkind: RouteTable\nbackends:\n  - {{name: new, endpoints: [\"https://127.0.0.1:{}\"]}}\nwrites:\n  default: new\nreads:\n  default: new\n",
        api.port
    );
    std::fs::write(&routes, table).ok()?;
    let pki = |f: &str| api.pki(f);
    let exe = std::env::var("SKEWGATE_BIN").unwrap_or_else(|_| "target/release/skewgate".into());
    let mut cmd = Command::new(exe);
    cmd.arg("serve")
        .arg("--routes")
        .arg(&routes)
        .arg(format!("--listen={listen}"))
        .arg(format!("--admin-listen=127.0.0.1:{}", free_port()))
        .arg("--tls-cert-file")
        .arg(pki("apiserver.crt"))
        .arg("--tls-private-key-file")
        .arg(pki("apiserver.key"))
        .arg("--client-ca-file")
        .arg(pki("ca.crt"))
        .arg("--upstream-ca-file")
        .arg(pki("ca.crt"))
        .arg("--proxy-client-cert-file")
        .arg(pki("front-proxy-client.crt"))
        .arg("--proxy-client-key-file")
        .arg(pki("front-proxy-client.key"))
        .args(["--hold-back-offenders", "false", "--no-access-log"])
        // The bench's kubelets do not dial again after a GOAWAY, as client-go does: skewgate's
        // default 0.001 would end some 20 of their connections in a run, and count their
        // requests failed.
        .args(["--goaway-chance", "0"]);
    Proc::spawn("skewgate", &mut cmd)
}

fn print(all: &[Figures]) {
    println!(
        "\n  {:<9} {:>8} {:>10} {:>10} {:>10} {:>6} {:>10} {:>10} {:>15} {:>15} {:>6}",
        "path",
        "kubelets",
        "api MiB",
        "api cpu/m",
        "goroutines",
        "conns",
        "proxy MiB",
        "proxy cpu/m",
        "lease p50/p99",
        "watch p50/p99",
        "failed"
    );
    for f in all {
        println!(
            "  {:<9} {:>8} {:>10.0} {:>9.1}s {:>10.0} {:>6} {:>10.0} {:>9.1}s {:>7.1}/{:<7.1} {:>7.1}/{:<7.1} {:>6}",
            f.name,
            f.kubelets,
            f.rss_mib,
            f.cpu_per_min,
            f.goroutines,
            f.connections,
            f.proxy_rss_mib,
            f.proxy_cpu_per_min,
            f.lease.0,
            f.lease.1,
            f.delivery.0,
            f.delivery.1,
            f.failed
        );
    }
    println!(
        "\n  api: the real kube-apiserver (RSS at the end of the steady window, CPU over it, go_goroutines, accepted connections); lease: renewal latency in ms; watch: ms from a pod's creation to its kubelet's watch event"
    );
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
    let nodes = num_arg("--nodes", 1000) as usize;
    let seconds = num_arg("--seconds", 60);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // Each phase on an apiserver (and etcd) of its own, started afresh: a Go process keeps the
    // memory it grew, so the second phase would start where the first left it.
    let fresh = |phase: &str| Apiserver {
        dir: std::env::temp_dir().join(format!("skewgate-kubelets-{}-{phase}", std::process::id())),
        script: root.join("tests/real/pair.sh"),
        assets: assets.clone(),
        port: free_port(),
        old_port: free_port(),
        etcd: (free_port(), free_port()),
    };
    let api = fresh("direct");
    if !api.up() {
        println!("SKIPPED: the real apiserver did not start");
        return;
    }
    let direct: std::net::SocketAddr = ([127, 0, 0, 1], api.port).into();
    let mut all = Vec::new();
    all.extend(phase("direct", &api, direct, None, nodes, seconds).await);
    print(&all);
    drop(api);
    let api = fresh("skewgate");
    if !api.up() {
        return;
    }
    let listen: std::net::SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let proxy = skewgate(&api, listen).map(Arc::new);
    if let Some(p) = &proxy {
        if !targets::wait_ready(listen).await {
            eprintln!("skewgate did not start");
            return;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        all.extend(phase("skewgate", &api, listen, Some(p), nodes, seconds).await);
    }
    print(&all);
}
