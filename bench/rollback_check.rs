//! What `skewgate rollback-check` costs on a big cluster: the simulators (v1.29 and v1.30 over one
//! store) hold N pods (default 100,000) over 100 namespaces, one in ten with a field only v1.30
//! knows; rollback-check reads them all in pages of 500 through v1.30 and judges each. Its wall
//! time and peak memory (GNU time's maximum RSS) are printed beside the same run's baseline:
//! `kubectl get pods -A --chunk-size=500 -o name` reading the same pods from the same simulator.
//!
//! Run: `cargo bench --bench rollback_check` (`-- --objects N`).

#[path = "targets.rs"]
mod targets;

use std::net::SocketAddr;
use std::process::Command;

use serde_json::json;
use skewgate_sim::{self as sim, SimConfig, Store};

use targets::num_arg;

/// Fills the store with `n` pods, every tenth with v1.30's `spec.sidecarPolicy`.
fn populate(store: &Store, n: u64) {
    let pods = sim::api::find((1, 30), "", "v1", "pods").expect("pods");
    for i in 0..n {
        let ns = format!("ns-{:03}", i % 100);
        let mut spec = json!({"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}], "nodeName": format!("node-{}", i % 1000)});
        if i % 10 == 0 {
            spec["sidecarPolicy"] = json!("Always");
        }
        let pod = json!({"metadata": {"name": format!("pod-{i:06}"), "namespace": ns,
            "labels": {"app": format!("app-{}", i % 50)}}, "spec": spec});
        store.create(pods, &ns, pod).expect("create");
    }
}

/// What a reader cost: wall and CPU seconds, peak RSS in KiB.
type Cost = (f64, f64, u64);

/// `cmd` run under GNU time, or why not.
fn timed(cmd: &mut Command) -> Result<Cost, String> {
    let out = cmd.output().map_err(|e| e.to_string())?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    let figures: Vec<f64> = last
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    match figures[..] {
        [wall, user, sys, kib] => Ok((wall, user + sys, kib as u64)),
        _ => Err(format!("no figures from GNU time: {stderr}")),
    }
}

fn gnu_time() -> Command {
    let mut c = Command::new("/usr/bin/time");
    c.args(["-f", "%e %U %S %M"]);
    c
}

fn main() {
    let n = num_arg("--objects", 100_000);
    if !std::path::Path::new("/usr/bin/time").exists() {
        println!("SKIPPED: no /usr/bin/time (GNU time: apt-get install time)");
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let store = Store::new();
    let loopback: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let (old, new) = rt.block_on(async {
        let old = sim::start(SimConfig::new("v1.29.4"), store.clone(), loopback)
            .await
            .expect("old");
        let new = sim::start(SimConfig::new("v1.30.1"), store.clone(), loopback)
            .await
            .expect("new");
        (old, new)
    });
    let began = std::time::Instant::now();
    populate(&store, n);
    println!("{n} pods stored in {:.1} s", began.elapsed().as_secs_f64());
    let dir = std::env::temp_dir().join(format!("skewgate-bench-rollback-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let routes = dir.join("routes.yaml");
    std::fs::write(
        &routes,
        format!(
            "apiVersion: skewgate.io/v1alpha1\nkind: RouteTable\nbackends:\n  - {{name: old, version: v1.29, endpoints: [\"{}\"]}}\n  - {{name: new, version: v1.30, endpoints: [\"{}\"]}}\nwrites:\n  default: new\nreads:\n  default: new\n",
            old.url(),
            new.url()
        ),
    )
    .expect("routes");
    let check = timed(
        gnu_time()
            .arg(env!("CARGO_BIN_EXE_skewgate"))
            .args(["rollback-check", "--to", "old", "-o", "json", "--routes"])
            .arg(&routes),
    );
    let kubectl = timed(gnu_time().args([
        "kubectl",
        "--server",
        &new.url(),
        "get",
        "pods",
        "-A",
        "--chunk-size=500",
        "-o",
        "name",
    ]));
    println!("| reader of {n} pods | wall | CPU | peak RSS |\n|---|---|---|---|");
    for (name, figures) in [
        ("skewgate rollback-check", &check),
        ("kubectl get -o name", &kubectl),
    ] {
        match figures {
            Ok((wall, cpu, kib)) => println!(
                "| {name} | {wall:.2} s | {cpu:.2} s | {:.1} MiB |",
                *kib as f64 / 1024.0
            ),
            Err(why) => println!("| {name} | failed: {why} | | |"),
        }
    }
    if let (Ok((a, ca, ka)), Ok((b, cb, kb))) = (&check, &kubectl) {
        println!(
            "rollback-check / kubectl: wall {:.2}×, CPU {:.2}×, memory {:.2}×",
            a / b,
            ca / cb,
            *ka as f64 / *kb as f64
        );
    }
}
