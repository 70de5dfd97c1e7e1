//! Small GETs against a simulated apiserver: directly, through skewgate, and through HAProxy and
//! nginx when they are installed, all in the same run, over HTTP/2 (h2c) and HTTP/1.1.
//!
//! Run: `cargo bench --bench load` (options after `--`: `--seconds N`, `--concurrency N`).
//! Every target is a separate process; the load generator runs on one thread. It prints requests/s,
//! latency percentiles, the proxy's CPU time per request (from /proc), the upstream connections the
//! proxy held open, and each figure as a ratio to going direct.

use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

const PATH: &str = "/api/v1/namespaces/default/configmaps/small";

struct Options {
    seconds: u64,
    concurrency: usize,
}

fn options() -> Options {
    let args: Vec<String> = std::env::args().collect();
    let get = |name: &str, default: u64| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    Options {
        seconds: get("--seconds", 5),
        concurrency: get("--concurrency", 64) as usize,
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

/// A process that is killed when dropped.
struct Proc {
    child: Child,
}

impl Proc {
    fn spawn(name: &'static str, cmd: &mut Command) -> Option<Proc> {
        match cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn() {
            Ok(child) => Some(Proc { child }),
            Err(e) => {
                eprintln!("{name}: cannot start: {e}");
                None
            }
        }
    }

    /// User + system CPU seconds of the process and its children processes (nginx workers).
    fn cpu_seconds(&self) -> f64 {
        let pid = self.child.id();
        let mut total = proc_cpu(pid);
        if let Ok(entries) = std::fs::read_dir("/proc") {
            for e in entries.flatten() {
                if let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok())
                    && parent_of(p) == Some(pid)
                {
                    total += proc_cpu(p);
                }
            }
        }
        total
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces; fields after the closing parenthesis are fixed.
    let after = stat.rsplit_once(')')?.1;
    Some(after.split_whitespace().map(str::to_owned).collect())
}

fn parent_of(pid: u32) -> Option<u32> {
    stat_fields(pid)?.get(1)?.parse().ok()
}

fn proc_cpu(pid: u32) -> f64 {
    let Some(f) = stat_fields(pid) else {
        return 0.0;
    };
    // utime and stime are fields 14 and 15 of stat; here indexed from field 3.
    let ticks: f64 = f.get(11).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    ticks / 100.0
}

/// Socket inodes held open by `pid` and its child processes.
fn socket_inodes(pid: u32) -> std::collections::HashSet<String> {
    let mut pids = vec![pid];
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.flatten() {
            if let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok())
                && parent_of(p) == Some(pid)
            {
                pids.push(p);
            }
        }
    }
    let mut inodes = std::collections::HashSet::new();
    for p in pids {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{p}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if let Ok(target) = std::fs::read_link(fd.path())
                && let Some(inode) = target
                    .to_str()
                    .and_then(|t| t.strip_prefix("socket:["))
                    .and_then(|t| t.strip_suffix(']'))
            {
                inodes.insert(inode.to_owned());
            }
        }
    }
    inodes
}

/// Established TCP connections of process `pid` (and its children) to port `port`: a proxy's
/// upstream connections.
fn connections_to(port: u16, pid: u32) -> usize {
    let inodes = socket_inodes(pid);
    let mut n = 0;
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let remote_port = cols
                .get(2)
                .and_then(|r| r.rsplit(':').next())
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if remote_port == Some(port)
                && cols.get(3) == Some(&"01")
                && cols.get(9).is_some_and(|i| inodes.contains(*i))
            {
                n += 1;
            }
        }
    }
    n
}

async fn wait_ready(addr: SocketAddr) -> bool {
    for _ in 0..200 {
        if TcpStream::connect(addr).await.is_ok() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    false
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
    concurrency: usize,
    secs: u64,
) -> (u64, u64, Vec<u32>, Duration) {
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
        let tcp = match TcpStream::connect(addr).await {
            Ok(t) => t,
            Err(e) => {
                eprintln!("connect to {addr} failed: {e}");
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        match proto {
            Proto::H2 => {
                let (send, conn) = match hyper::client::conn::http2::handshake(
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
    measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed();
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
    (ok, err, lat, elapsed)
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
    o: &Options,
    proc_: Option<&Proc>,
    sim_port: u16,
) -> Result1 {
    let cpu0 = proc_.map(Proc::cpu_seconds);
    let mut upstream = None;
    let pid = proc_.map(|p| p.child.id());
    let probe = async {
        // Sample the proxy's upstream connections in the middle of the run.
        tokio::time::sleep(Duration::from_millis(1000 + o.seconds * 500)).await;
        pid.map_or(0, |pid| connections_to(sim_port, pid))
    };
    let ((ok, err, lat, elapsed), conns) =
        tokio::join!(load(addr, proto, o.concurrency, o.seconds), probe);
    if proc_.is_some() {
        upstream = Some(conns);
    }
    let cpu = proc_.map(Proc::cpu_seconds).zip(cpu0).map(|(a, b)| a - b);
    Result1 {
        errors: err,
        rps: ok as f64 / elapsed.as_secs_f64(),
        p50: percentile(&lat, 0.50),
        p99: percentile(&lat, 0.99),
        cpu_us: cpu.map(|c| c * 1e6 / ok.max(1) as f64),
        upstream,
    }
}

fn write_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write");
    p
}

fn which(bin: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
            .map(|d| d.join(bin))
            .find(|p| p.is_file())
    })
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let o = options();
    let exe = env!("CARGO_BIN_EXE_skewgate");
    let dir = std::env::temp_dir().join(format!("skewgate-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");

    let sim_port = free_port();
    let sim_addr: SocketAddr = format!("127.0.0.1:{sim_port}").parse().expect("addr");
    let _sim = Proc::spawn(
        "sim",
        Command::new(exe).args(["sim", "--listen", &sim_addr.to_string()]),
    )
    .expect("sim");
    assert!(wait_ready(sim_addr).await, "the simulator listens");
    // The small object every GET reads.
    let tcp = TcpStream::connect(sim_addr).await.expect("connect");
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let create = http::Request::post("/api/v1/namespaces/default/configmaps")
        .header("host", "sim")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(
            br#"{"metadata":{"name":"small"},"data":{"k":"v"}}"#,
        )))
        .expect("request");
    let created = send.send_request(create).await.expect("create");
    assert_eq!(created.status(), 201);

    // (name, h2c address, HTTP/1.1 address, process)
    let mut targets: Vec<(&'static str, SocketAddr, SocketAddr, Option<Proc>)> =
        vec![("direct", sim_addr, sim_addr, None)];

    let sg_port = free_port();
    let routes = write_file(
        &dir,
        "routes.yaml",
        &format!(
            "apiVersion: skewgate.io/v1alpha1\nkind: RouteTable\nbackends:\n  - name: sim\n    endpoints: [http://{sim_addr}]\nwrites:\n  default: sim\nreads:\n  default: sim\n"
        ),
    );
    let sg = Proc::spawn(
        "skewgate",
        Command::new(exe)
            .args(["serve", "--routes"])
            .arg(&routes)
            .args([
                "--listen",
                &format!("127.0.0.1:{sg_port}"),
                "--admin-listen",
                &format!("127.0.0.1:{}", free_port()),
            ]),
    );
    let sg_addr: SocketAddr = format!("127.0.0.1:{sg_port}").parse().expect("addr");
    if sg.is_some() && wait_ready(sg_addr).await {
        targets.push(("skewgate", sg_addr, sg_addr, sg));
    }

    if let Some(haproxy) = which("haproxy") {
        let (port, port1) = (free_port(), free_port());
        let cfg = write_file(
            &dir,
            "haproxy.cfg",
            &format!(
                "global\n  nbthread 2\ndefaults\n  mode http\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n  http-reuse always\nfrontend fe\n  bind 127.0.0.1:{port} proto h2\n  bind 127.0.0.1:{port1}\n  default_backend be\nbackend be\n  server sim {sim_addr} proto h2\n"
            ),
        );
        let p = Proc::spawn(
            "haproxy",
            Command::new(haproxy).arg("-db").arg("-f").arg(&cfg),
        );
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
        let addr1: SocketAddr = format!("127.0.0.1:{port1}").parse().expect("addr");
        if p.is_some() && wait_ready(addr).await {
            targets.push(("haproxy", addr, addr1, p));
        }
    } else {
        println!("haproxy: not installed (apt-get install haproxy), left out");
    }
    if let Some(nginx) = which("nginx") {
        let (port, port1) = (free_port(), free_port());
        let cfg = write_file(
            &dir,
            "nginx.conf",
            &format!(
                "worker_processes 2;\nerror_log /dev/null crit;\npid {}/nginx.pid;\ndaemon off;\nevents {{ worker_connections 4096; }}\nhttp {{\n  access_log off;\n  keepalive_requests 10000000;\n  client_body_temp_path {d};\n  proxy_temp_path {d};\n  fastcgi_temp_path {d};\n  uwsgi_temp_path {d};\n  scgi_temp_path {d};\n  upstream sim {{ server {sim_addr}; keepalive 64; }}\n  server {{\n    listen 127.0.0.1:{port} http2;\n    listen 127.0.0.1:{port1};\n    location / {{ proxy_pass http://sim; proxy_http_version 1.1; proxy_set_header Connection \"\"; }}\n  }}\n}}\n",
                dir.display(),
                d = dir.display()
            ),
        );
        let p = Proc::spawn(
            "nginx",
            Command::new(nginx)
                .arg("-c")
                .arg(&cfg)
                .arg("-e")
                .arg("/dev/null"),
        );
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
        let addr1: SocketAddr = format!("127.0.0.1:{port1}").parse().expect("addr");
        if p.is_some() && wait_ready(addr).await {
            targets.push(("nginx", addr, addr1, p));
        }
    } else {
        println!("nginx: not installed (apt-get install nginx-light), left out");
    }

    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nsmall GET ({PATH}), {} s per run, {} requests in flight, load generator on one thread\n",
        o.seconds, o.concurrency
    );
    for proto in [Proto::H2, Proto::H1] {
        let label = if proto == Proto::H2 {
            "h2c client (4 connections)"
        } else {
            "HTTP/1.1 client (one connection per request in flight)"
        };
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
        let mut direct: Option<Result1> = None;
        for (name, h2_addr, h1_addr, p) in &targets {
            eprintln!("measuring {name}");
            let addr = if proto == Proto::H2 {
                *h2_addr
            } else {
                *h1_addr
            };
            let r = measure(addr, proto, &o, p.as_ref(), sim_port).await;
            let base = direct.as_ref();
            let _ = writeln!(
                out,
                "  {:<10} {:>10.0} {:>8.2} {:>9.0} {:>9.0} {:>10} {:>10} {:>10} {:>9}",
                name,
                r.rps,
                base.map_or(1.0, |d| r.rps / d.rps),
                r.p50,
                r.p99,
                base.map_or("-".to_owned(), |d| format!("{:.0}", r.p50 - d.p50)),
                r.cpu_us.map_or("-".to_owned(), |c| format!("{c:.1}")),
                r.upstream.map_or("-".to_owned(), |u| u.to_string()),
                r.errors,
            );
            if direct.is_none() {
                direct = Some(r);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let _ = writeln!(out);
    }
    println!("{out}");
    let _ = std::fs::remove_dir_all(&dir);
    drop(targets);
}
