//! Small GETs against a simulated apiserver: directly, through skewgate, and through HAProxy and
//! nginx when they are installed, all in the same run, over HTTP/2 (h2c) and HTTP/1.1.
//!
//! Run: `cargo bench --bench load` (options after `--`: `--seconds N`, `--concurrency N`,
//! `--rounds N`: every target measured N times, the targets taking turns (each round beginning one
//! target further on), and each figure the median of its rounds).
//! Every target is a separate process; the load generator runs on one thread. It prints requests/s,
//! latency percentiles, the proxy's CPU time per request (from /proc), the upstream connections the
//! proxy held open, and each figure as a ratio to going direct.
//!
//! Beside them in the h2c table, `floor`: a frame-level relay that does only what every HTTP/2
//! proxy must (bench/relay_floor.rs), run as this bench's own binary with `--relay-floor ADDR
//! --relay-upstream ADDR`. It is the cost skewgate's data path could come down to.
//!
//! Between them, in both tables, `bare` and `bare+frames` (bench/bare_path.rs): hyper's servers
//! with nothing of skewgate's own, sending upstream through h2's client or as frames. They measure
//! what skewgate's own work costs, and what a frame-level upstream would save with hyper kept on
//! the client side.

#[path = "targets.rs"]
mod targets;

#[path = "load_tls.rs"]
mod tls;

#[path = "figures.rs"]
mod figures;

#[path = "relay_floor.rs"]
mod relay_floor;

#[path = "bare_path.rs"]
mod bare_path;

use figures::Row;

/// skewgate's allocator, for the yardsticks this binary runs (`floor`, `bare`, `bare+frames`), so
/// that they differ from skewgate in nothing but their data path.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use targets::{Proc, Target, connections_to, start_sim, start_targets};

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};

const PATH: &str = "/api/v1/namespaces/default/configmaps/small";

struct Options {
    seconds: u64,
    concurrency: usize,
    /// Times each target is measured, in turns: the machine's noise then falls on every target
    /// alike, and the median leaves out a round a neighbour's load spoilt.
    rounds: usize,
}

fn options() -> Options {
    Options {
        seconds: targets::num_arg("--seconds", 5),
        concurrency: targets::num_arg("--concurrency", 64) as usize,
        rounds: targets::num_arg("--rounds", 1).max(1) as usize,
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Proto {
    H1,
    H2,
}

struct Result1 {
    errors: u64,
    rps: f64,
    p50: f64,
    p99: f64,
    cpu_us: Option<f64>,
    upstream: Option<usize>,
}

/// Runs load for `secs` seconds (after a 1 s warm-up) with `concurrency` requests in flight.
/// Whether a request got a 200 and its whole body; failures are reported once each.
async fn succeeded(response: hyper::Result<http::Response<hyper::body::Incoming>>) -> bool {
    match response {
        Ok(r) if r.status() == 200 => r.into_body().collect().await.is_ok(),
        Ok(r) => {
            eprintln!("request answered {}", r.status());
            false
        }
        Err(e) => {
            eprintln!("request failed: {e}");
            false
        }
    }
}

/// Sends requests one after another until `stop`, timing those sent while `measuring`. A failure
/// ends the loop, so a failing target never spins.
async fn request_loop<F, Fut>(
    mut one: F,
    stop: Arc<AtomicBool>,
    measuring: Arc<AtomicBool>,
) -> (u64, u64, Vec<u32>)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut lat = Vec::new();
    let (mut ok, mut err) = (0u64, 0u64);
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        let good = one().await;
        if measuring.load(Ordering::Relaxed) {
            lat.push(t.elapsed().as_micros() as u32);
            if good { ok += 1 } else { err += 1 }
        }
        if !good {
            break;
        }
    }
    (ok, err, lat)
}

async fn load(
    addr: SocketAddr,
    proto: Proto,
    tls: Option<Arc<rustls::ClientConfig>>,
    concurrency: usize,
    secs: u64,
    proc_: Option<&Proc>,
) -> (u64, u64, Vec<u32>, Duration, Option<f64>) {
    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    let mut connections = tokio::task::JoinSet::new();
    // h2: a few connections, many streams each; h1: one connection per request in flight.
    let conns = if proto == Proto::H2 {
        4.min(concurrency)
    } else {
        concurrency
    };
    let per_conn = concurrency.div_ceil(conns);
    for _ in 0..conns {
        let Some(tcp) = tls::dial(addr, tls.as_ref()).await else {
            continue;
        };
        match proto {
            Proto::H2 => {
                let (send, conn) =
                    match hyper::client::conn::http2::handshake::<_, _, Empty<Bytes>>(
                        TokioExecutor::new(),
                        TokioIo::new(tcp),
                    )
                    .await
                    {
                        Ok(pair) => pair,
                        Err(e) => {
                            eprintln!("h2 handshake with {addr} failed: {e}");
                            continue;
                        }
                    };
                connections.spawn(async move {
                    let _ = conn.await;
                });
                for _ in 0..per_conn {
                    let mut send = send.clone();
                    let one = move || {
                        let req = http::Request::get(format!("http://{addr}{PATH}"))
                            .body(Empty::<Bytes>::new())
                            .expect("request");
                        let response = send.send_request(req);
                        async move { succeeded(response.await).await }
                    };
                    tasks.push(tokio::spawn(request_loop(
                        one,
                        stop.clone(),
                        measuring.clone(),
                    )));
                }
            }
            Proto::H1 => {
                let Ok((mut send, conn)) =
                    hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await
                else {
                    continue;
                };
                connections.spawn(async move {
                    let _ = conn.await;
                });
                let one = move || {
                    let req = http::Request::get(PATH)
                        .header("host", "bench")
                        .body(Empty::<Bytes>::new())
                        .expect("request");
                    let response = send.send_request(req);
                    async move { succeeded(response.await).await }
                };
                tasks.push(tokio::spawn(request_loop(
                    one,
                    stop.clone(),
                    measuring.clone(),
                )));
            }
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The proxy's CPU over the same window as the requests counted: not the warm-up's, nor the
    // connections' set-up (which made 2 s runs cost 1.5 times what 5 s runs did per request).
    let cpu0 = proc_.map(Proc::cpu_seconds);
    measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed();
    let cpu = proc_.map(Proc::cpu_seconds).zip(cpu0).map(|(a, b)| a - b);
    stop.store(true, Ordering::Relaxed);
    let (mut ok, mut err, mut lat) = (0, 0, Vec::new());
    for t in tasks {
        if let Ok((o, e, l)) = t.await {
            ok += o;
            err += e;
            lat.extend(l);
        }
    }
    // Close the load's connections so they are not counted as a proxy's upstream ones later.
    connections.abort_all();
    while connections.join_next().await.is_some() {}
    lat.sort_unstable();
    (ok, err, lat, elapsed, cpu)
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    f64::from(sorted[i.min(sorted.len() - 1)])
}

async fn measure(
    addr: SocketAddr,
    proto: Proto,
    tls: Option<Arc<rustls::ClientConfig>>,
    o: &Options,
    proc_: Option<&Proc>,
    sim_port: u16,
) -> Result1 {
    let mut upstream = None;
    let pid = proc_.map(|p| p.child.id());
    let probe = async {
        // Sample the proxy's upstream connections in the middle of the run.
        tokio::time::sleep(Duration::from_millis(1000 + o.seconds * 500)).await;
        pid.map_or(0, |pid| connections_to(sim_port, pid))
    };
    let load = load(addr, proto, tls, o.concurrency, o.seconds, proc_);
    let ((ok, err, lat, elapsed, cpu), conns) = tokio::join!(load, probe);
    if proc_.is_some() {
        upstream = Some(conns);
    }
    Result1 {
        errors: err,
        rps: ok as f64 / elapsed.as_secs_f64(),
        p50: percentile(&lat, 0.50),
        p99: percentile(&lat, 0.99),
        cpu_us: cpu.map(|c| c * 1e6 / ok.max(1) as f64),
        upstream,
    }
}

/// Every target measured `o.rounds` times, the targets taking turns: each target's rounds. Each
/// round begins one target further on, so that no target always follows the same one (the one
/// before leaves the simulator, the caches and the scheduler in its own state).
async fn measure_in_turns(
    targets: &[Target],
    label: &str,
    (proto, tls): (Proto, Option<Arc<rustls::ClientConfig>>),
    o: &Options,
    sim_port: u16,
) -> Vec<Vec<Result1>> {
    let mut runs: Vec<Vec<Result1>> = targets.iter().map(|_| Vec::new()).collect();
    for round in 1..=o.rounds {
        for k in 0..targets.len() {
            let i = (round - 1 + k) % targets.len();
            let (Some(t), Some(runs)) = (targets.get(i), runs.get_mut(i)) else {
                continue;
            };
            if o.rounds > 1 {
                eprintln!(
                    "measuring {} ({label}), round {round} of {}",
                    t.name, o.rounds
                );
            } else {
                eprintln!("measuring {} ({label})", t.name);
            }
            let addr = if proto == Proto::H2 { t.h2 } else { t.h1 };
            runs.push(measure(addr, proto, tls.clone(), o, t.process.as_ref(), sim_port).await);
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    runs
}

/// A target's rounds as one: each figure the median of its rounds (errors added up).
fn median_of(runs: &[Result1]) -> Result1 {
    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(f64::total_cmp);
        match v.len() {
            0 => 0.0,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        }
    }
    let of = |f: fn(&Result1) -> f64| median(runs.iter().map(f).collect());
    let cpu: Vec<f64> = runs.iter().filter_map(|r| r.cpu_us).collect();
    let mut upstream: Vec<usize> = runs.iter().filter_map(|r| r.upstream).collect();
    upstream.sort_unstable();
    Result1 {
        errors: runs.iter().map(|r| r.errors).sum(),
        rps: of(|r| r.rps),
        p50: of(|r| r.p50),
        p99: of(|r| r.p99),
        cpu_us: (!cpu.is_empty()).then(|| median(cpu)),
        upstream: upstream.get(upstream.len() / 2).copied(),
    }
}

/// One table: every target under load from `proto` clients (over TLS with `tls`).
async fn table(
    out: &mut String,
    (label, key): (&str, &'static str),
    targets: &[Target],
    (proto, tls): (Proto, Option<Arc<rustls::ClientConfig>>),
    o: &Options,
    sim_port: u16,
) -> Vec<Row> {
    let _ = writeln!(out, "{label}:");
    let _ = writeln!(
        out,
        "  {:<10} {:>10} {:>8} {:>9} {:>9} {:>10} {:>10} {:>10} {:>9}",
        "target",
        "req/s",
        "×direct",
        "p50 µs",
        "p99 µs",
        "+p50 µs",
        "CPU µs/req",
        "upstream",
        "errors"
    );
    let runs = measure_in_turns(targets, label, (proto, tls), o, sim_port).await;
    let mut rows: Vec<Row> = Vec::new();
    let mut direct: Option<Result1> = None;
    for (t, runs) in targets.iter().zip(&runs) {
        let r = median_of(runs);
        let base = direct.as_ref();
        let _ = writeln!(
            out,
            "  {:<10} {:>10.0} {:>8.2} {:>9.0} {:>9.0} {:>10} {:>10} {:>10} {:>9}",
            t.name,
            r.rps,
            base.map_or(1.0, |d| r.rps / d.rps),
            r.p50,
            r.p99,
            base.map_or("-".to_owned(), |d| format!("{:.0}", r.p50 - d.p50)),
            r.cpu_us.map_or("-".to_owned(), |c| format!("{c:.1}")),
            r.upstream.map_or("-".to_owned(), |u| u.to_string()),
            r.errors,
        );
        rows.push(Row {
            scenario: key,
            target: t.name,
            rps: r.rps,
            ratio: base.map_or(1.0, |d| r.rps / d.rps),
            cpu_us: r.cpu_us,
        });
        direct.get_or_insert(r);
    }
    if o.rounds > 1 {
        let _ = writeln!(out, "  CPU µs/req by round (the medians above):");
        for (t, runs) in targets.iter().zip(&runs) {
            let cpu: Vec<String> = runs
                .iter()
                .filter_map(|r| r.cpu_us.map(|c| format!("{c:.1}")))
                .collect();
            if !cpu.is_empty() {
                let _ = writeln!(out, "    {:<10} {}", t.name, cpu.join(" "));
            }
        }
    }
    let _ = writeln!(out);
    rows
}

/// The TLS scenario: requests over TLS both sides, then the cost of a new connection.
async fn tls_scenario(out: &mut String, exe: &str, dir: &std::path::Path, o: &Options) -> Vec<Row> {
    let Some(setup) = tls::start(exe, dir).await else {
        let _ = writeln!(out, "TLS: left out (the TLS simulator did not start)\n");
        return Vec::new();
    };
    let port = setup.sim_addr.port();
    let mut rows = Vec::new();
    for (proto, alpn, label, key) in [
        (
            Proto::H2,
            &b"h2"[..],
            "TLS both sides, h2 client (4 connections)",
            "tls h2",
        ),
        (
            Proto::H1,
            &b"http/1.1"[..],
            "TLS both sides, HTTP/1.1 client (one connection per request in flight)",
            "tls http/1.1",
        ),
    ] {
        let client = setup.client(alpn);
        rows.extend(
            table(
                out,
                (label, key),
                &setup.targets,
                (proto, Some(client)),
                o,
                port,
            )
            .await,
        );
    }
    let n = targets::num_arg("--handshakes", 2000) as usize;
    let _ = writeln!(
        out,
        "new TLS connections ({n}, 8 at a time; each a full handshake with a client certificate, one GET over h2, close):"
    );
    let _ = writeln!(
        out,
        "  {:<10} {:>12} {:>16} {:>9}",
        "target", "conns/s", "CPU µs/conn", "failed"
    );
    let client = setup.client(b"h2");
    for t in &setup.targets {
        eprintln!("measuring {} (handshakes)", t.name);
        let (rate, cpu, failed) = tls::handshakes(t, &client, PATH, n, 8).await;
        let _ = writeln!(
            out,
            "  {:<10} {:>12.0} {:>16} {:>9}",
            t.name,
            rate,
            cpu.map_or("-".to_owned(), |c| format!("{c:.0}")),
            failed
        );
        rows.push(Row {
            scenario: "tls handshake",
            target: t.name,
            rps: rate,
            ratio: 0.0,
            cpu_us: cpu,
        });
    }
    let _ = writeln!(out);
    rows
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let floor = targets::arg("--relay-floor").zip(targets::arg("--relay-upstream"));
    if let Some((listen, upstream)) = floor {
        let addr = |a: String| {
            a.parse()
                .expect("--relay-floor and --relay-upstream: ip:port")
        };
        relay_floor::run(addr(listen), addr(upstream));
        return;
    }
    let bare = targets::arg("--bare").zip(targets::arg("--relay-upstream"));
    if let Some((listen, upstream)) = bare {
        let how = match targets::arg("--bare-upstream").as_deref() {
            Some("frames") => bare_path::Upstream::Frames,
            _ => bare_path::Upstream::H2,
        };
        let addr = |a: String| a.parse().expect("--bare and --relay-upstream: ip:port");
        let direct = targets::arg("--bare-server").as_deref() == Some("h2");
        bare_path::run(addr(listen), addr(upstream), how, direct);
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    if let Some(addr) = targets::arg("--client") {
        // The bench's own client alone, against any address: for perf or strace on one target.
        let addr: SocketAddr = addr.parse().expect("--client: ip:port");
        let proto = if std::env::args().any(|a| a == "--h1") {
            Proto::H1
        } else {
            Proto::H2
        };
        let o = options();
        let (ok, err, lat, elapsed, _) =
            runtime.block_on(load(addr, proto, None, o.concurrency, o.seconds, None));
        let rps = ok as f64 / elapsed.as_secs_f64();
        println!(
            "{ok} ok, {err} errors, {rps:.0} req/s, p50 {} µs",
            percentile(&lat, 0.5)
        );
        return;
    }
    runtime.block_on(bench());
}

/// Starts one of this bench's own yardsticks in front of the simulator: this binary, run again
/// with `args` (and `--relay-upstream`).
async fn start_own(name: &'static str, args: &[&str], sim: SocketAddr) -> Option<Target> {
    let exe = std::env::current_exe().ok()?;
    let addr: SocketAddr = format!("127.0.0.1:{}", targets::free_port()).parse().ok()?;
    let process = Proc::spawn(
        name,
        std::process::Command::new(exe)
            .args(args)
            .arg(addr.to_string())
            .args(["--relay-upstream", &sim.to_string()]),
    )?;
    targets::wait_ready(addr).await.then_some(Target {
        name,
        h2: addr,
        h1: addr,
        process: Some(process),
    })
}

async fn bench() {
    let o = options();
    let exe = env!("CARGO_BIN_EXE_skewgate");
    let dir = std::env::temp_dir().join(format!("skewgate-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");

    let (sim, sim_addr) = start_sim(exe).await;
    let sim_port = sim_addr.port();
    let mut targets = start_targets(exe, &dir, sim_addr).await;
    targets.extend(start_own("bare", &["--bare-upstream", "h2", "--bare"], sim_addr).await);
    let frames = ["--bare-upstream", "frames", "--bare"];
    targets.extend(start_own("bare+frames", &frames, sim_addr).await);
    // h2c only: the floor speaks nothing else.
    let h1_targets = targets.len();
    targets.extend(start_own("floor", &["--relay-floor"], sim_addr).await);

    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nsmall GET ({PATH}), {} s per run, {} requests in flight, load generator on one thread{}\n",
        o.seconds,
        o.concurrency,
        if o.rounds > 1 {
            format!(
                ", median of {} rounds (the targets in turns, each round beginning one further on)",
                o.rounds
            )
        } else {
            String::new()
        }
    );
    let mut rows = Vec::new();
    for (proto, label, key) in [
        (Proto::H2, "h2c client (4 connections)", "h2c"),
        (
            Proto::H1,
            "HTTP/1.1 client (one connection per request in flight)",
            "http/1.1",
        ),
    ] {
        let targets = match proto {
            Proto::H2 => &targets[..],
            Proto::H1 => &targets[..h1_targets],
        };
        rows.extend(table(&mut out, (label, key), targets, (proto, None), &o, sim_port).await);
    }
    drop(targets);
    drop(sim);
    if std::env::args().any(|a| a == "--no-tls") {
        let _ = writeln!(out, "TLS: left out (--no-tls)\n");
    } else {
        rows.extend(tls_scenario(&mut out, exe, &dir, &o).await);
    }
    println!("{out}");
    figures::write_load(&out, &rows);
    let _ = std::fs::remove_dir_all(&dir);
}
