//! A victim's latency through skewgate while other clients misbehave, against the same victim with
//! no attack, in one run, and the same through HAProxy when it is installed: clients that do not
//! read large LISTs, paced rapid reset, oversized headers, half-sent prefaces and slow headers
//! (slowloris), malformed bodies, and one greedy client.
//!
//! Each party is its own process, as it would be in a cluster: the simulator, the proxy, the victim
//! (this process: small GETs one after another on one h2c connection from its own address, so
//! per-client limits do not confuse it with the attackers) and the attackers (this program again,
//! run with `--attack`, at `nice 19`, so that on a small machine the load generator's own CPU does
//! not count as the proxy's failure to isolate). The attackers share the proxy's workers and
//! upstream connections with the victim.
//!
//! The victim also measures the apiserver straight, while the same attack runs through the proxy:
//! on a machine where the simulator and the proxy share the cores, that shows how much of the
//! victim's slowdown is the apiserver's (and the machine's) and how much the proxy's.
//!
//! Each row also says what the proxy cost meanwhile: its CPU (per cent of one core, over the
//! victim's run through it) and its peak resident memory, sampled every 100 ms. skewgate runs
//! with its response budget at 32 MiB (`--max-buffered-response-bytes 33554432`).
//!
//! Run: `cargo bench --bench attacks` (options after `--`: `--seconds N`, default 3).

#[path = "attack_frames.rs"]
mod attack_frames;
#[path = "targets.rs"]
mod targets;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use attack_frames::{settings_over_watches, unfinished_header_blocks, wide_open_non_readers};
use targets::{Target, arg, num_arg, rss_kib, start_sim, start_targets_with};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sequential small GETs for `seconds`: their latencies in microseconds, failures, and the first
/// failure's description.
async fn victim(base: String, seconds: u64) -> (Vec<u64>, u64, Option<String>) {
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .local_address("127.0.0.2".parse::<std::net::IpAddr>().ok())
        .build()
        .expect("client");
    let url = format!("{base}/api/v1/namespaces/default/configmaps/small");
    let (mut lat, mut failed, mut first) = (Vec::new(), 0, None);
    let end = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < end {
        let t = Instant::now();
        let outcome = tokio::time::timeout(Duration::from_secs(5), async {
            match client.get(&url).send().await {
                Ok(r) if r.status() == 200 => {
                    r.bytes().await.map(|_| ()).map_err(|e| e.to_string())
                }
                Ok(r) => Err(format!(
                    "{}: {}",
                    r.status(),
                    r.text().await.unwrap_or_default()
                )),
                Err(e) => Err(format!("{e:?}")),
            }
        })
        .await
        .unwrap_or_else(|_| Err("no answer within 5 s".to_owned()));
        match outcome {
            Ok(()) => lat.push(t.elapsed().as_micros() as u64),
            Err(e) => {
                failed += 1;
                first.get_or_insert(e);
            }
        }
    }
    lat.sort_unstable();
    (lat, failed, first)
}

fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// One attack: started before the victim, stopped after it.
type Attack = fn(SocketAddr, Arc<AtomicBool>, Arc<AtomicU64>) -> tokio::task::JoinHandle<()>;

fn non_readers(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    n: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut held = Vec::new();
        for _ in 0..4 {
            let Ok(tcp) = TcpStream::connect(addr).await else {
                return;
            };
            let Ok((send, conn)) = h2::client::Builder::new()
                .initial_window_size(0)
                .handshake::<_, bytes::Bytes>(tcp)
                .await
            else {
                return;
            };
            tokio::spawn(conn);
            for _ in 0..8 {
                let Ok(mut s) = send.clone().ready().await else {
                    break;
                };
                let req =
                    http::Request::get(format!("http://{addr}/api/v1/namespaces/big/configmaps"))
                        .body(())
                        .expect("request");
                if let Ok((resp, _)) = s.send_request(req, true) {
                    held.push(resp);
                    n.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        while !stop.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
}

fn rapid_reset(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    n: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            let Ok(tcp) = TcpStream::connect(addr).await else {
                return;
            };
            let Ok((mut send, conn)) = h2::client::handshake(tcp).await else {
                return;
            };
            tokio::spawn(conn);
            while !stop.load(Ordering::Relaxed) {
                send = match send.ready().await {
                    Ok(s) => s,
                    Err(_) => break,
                };
                let req =
                    http::Request::get(format!("http://{addr}/api/v1/namespaces/big/configmaps"))
                        .body(())
                        .expect("request");
                let Ok((resp, mut stream)) = send.send_request(req, true) else {
                    break;
                };
                tokio::time::sleep(Duration::from_millis(1)).await;
                stream.send_reset(h2::Reason::CANCEL);
                drop(resp);
                n.fetch_add(1, Ordering::Relaxed);
            }
        }
    })
}

/// Sends `bytes` on fresh connections, four at a time, until stopped.
fn raw_flood(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    n: Arc<AtomicU64>,
    bytes: Vec<u8>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let bytes = Arc::new(bytes);
        let mut tasks = Vec::new();
        for _ in 0..4 {
            let (stop, n, bytes) = (stop.clone(), n.clone(), bytes.clone());
            tasks.push(tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut s) = TcpStream::connect(addr).await else {
                        return;
                    };
                    let _ = s.write_all(&bytes).await;
                    let _ = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await;
                    n.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    })
}

fn big_headers(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    n: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    let mut req = b"GET /api/v1/namespaces HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
    req.extend(std::iter::repeat_n(b'a', 300_000));
    req.extend_from_slice(b"\r\n\r\n");
    raw_flood(addr, stop, n, req)
}

fn malformed_bodies(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    n: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    let req = b"GET /api/v1/namespaces HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n".to_vec();
    raw_flood(addr, stop, n, req)
}

/// Connections that send part of a request (`PRI`, or a header a byte at a time) and hold on.
fn slow_starts(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    n: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut held = Vec::new();
        for i in 0..1000 {
            let Ok(mut s) = TcpStream::connect(addr).await else {
                break;
            };
            let first: &[u8] = if i % 2 == 0 {
                b"PRI"
            } else {
                b"GET / HTTP/1.1\r\nX-Slow: "
            };
            let _ = s.write_all(first).await;
            held.push(s);
            n.fetch_add(1, Ordering::Relaxed);
        }
        while !stop.load(Ordering::Relaxed) {
            for s in held.iter_mut() {
                let _ = s.write_all(b"a").await;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

fn greedy(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    n: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let client = reqwest::Client::builder()
            .http2_prior_knowledge()
            .build()
            .expect("client");
        let mut tasks = Vec::new();
        for _ in 0..300 {
            let (client, stop, n) = (client.clone(), stop.clone(), n.clone());
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(r) = client
                        .get(format!("http://{addr}/api/v1/namespaces/big/configmaps"))
                        .send()
                        .await
                    {
                        let _ = r.bytes().await;
                    }
                    n.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    })
}

/// Forty ConfigMaps of 100 KB in namespace `big` (a 4 MB LIST); `default/small` is already there.
async fn fill_store(sim: SocketAddr) {
    let client = reqwest::Client::new();
    let data = "x".repeat(100_000);
    for i in 0..40 {
        let body = serde_json::json!({"metadata": {"name": format!("big-{i}"), "namespace": "big"}, "data": {"blob": data}});
        let _ = client
            .post(format!("http://{sim}/api/v1/namespaces/big/configmaps"))
            .json(&body)
            .send()
            .await;
    }
}

/// The phases: a name and the attack run beside the victim.
const PHASES: [(&str, Option<Attack>); 11] = [
    ("quiet", None),
    (
        "40 addresses x 100 unread 4 MB LISTs, windows wide open",
        Some(wide_open_non_readers),
    ),
    (
        "SETTINGS_INITIAL_WINDOW_SIZE alternating over 1,000 watches",
        Some(settings_over_watches),
    ),
    (
        "2,000 header blocks of 100 KB never ended",
        Some(unfinished_header_blocks),
    ),
    (
        "clients not reading 4 MB LISTs (32 streams)",
        Some(non_readers),
    ),
    (
        "paced rapid reset (HEADERS, 1 ms, RST_STREAM)",
        Some(rapid_reset),
    ),
    ("300 KB header blocks", Some(big_headers)),
    ("malformed chunked bodies", Some(malformed_bodies)),
    (
        "1,000 half-sent prefaces and slow headers",
        Some(slow_starts),
    ),
    ("one client, 300 LISTs of 4 MB in flight", Some(greedy)),
    ("quiet again", None),
];

/// `--attack N --target ADDR --ms T`: runs phase N's attack for T ms, then prints how many attack
/// requests it made.
fn run_attacker(phase: usize, target: SocketAddr, ms: u64) {
    let Some((_, Some(attack))) = PHASES.get(phase) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let count = rt.block_on(async move {
        let stop = Arc::new(AtomicBool::new(false));
        let count = Arc::new(AtomicU64::new(0));
        let task = attack(target, stop.clone(), count.clone());
        tokio::time::sleep(Duration::from_millis(ms)).await;
        stop.store(true, Ordering::Relaxed);
        task.abort();
        count.load(Ordering::Relaxed)
    });
    println!("{count}");
    rt.shutdown_background();
}

/// Starts phase `phase`'s attacker against `target` at the lowest CPU priority, for `ms`.
fn spawn_attacker(phase: usize, target: SocketAddr, ms: u64) -> Option<std::process::Child> {
    let exe = std::env::current_exe().ok()?;
    Command::new("nice")
        .args(["-n", "19"])
        .arg(exe)
        .args(["--attack", &phase.to_string(), "--target"])
        .arg(target.to_string())
        .args(["--ms", &ms.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()
}

/// The phases against one proxy: a table row each, and each phase's first victim failure.
async fn phases(target: &Target, sim: SocketAddr, seconds: u64, failures: &mut Vec<String>) {
    let base = format!("http://{}", target.h2);
    let direct = format!("http://{sim}");
    let _ = victim(base.clone(), 1).await;
    println!(
        "\n{}: victim sends sequential small GETs on one h2c connection, {seconds} s per phase \
         through the proxy, then {seconds} s straight to the apiserver while the same attack goes on\n",
        target.name
    );
    println!(
        "| phase | victim p50 µs | p99 µs | p99 × quiet | direct p99 µs | p99 × direct | victim failures | attack requests | proxy CPU % | proxy RSS peak MiB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut quiet_p99 = 0;
    let pid = target.process.as_ref().map(|p| p.child.id());
    for (i, (name, attack)) in PHASES.iter().enumerate() {
        let attacker = attack.and_then(|_| spawn_attacker(i, target.h2, 2 * seconds * 1000 + 500));
        if attacker.is_some() {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let cpu_before = target.process.as_ref().map_or(0.0, |p| p.cpu_seconds());
        let began = Instant::now();
        let peak = Arc::new(AtomicU64::new(0));
        let sampling = Arc::new(AtomicBool::new(true));
        let sampler = pid.map(|pid| {
            let (peak, sampling) = (peak.clone(), sampling.clone());
            tokio::spawn(async move {
                while sampling.load(Ordering::Relaxed) {
                    peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        });
        let (lat, failed, first) = victim(base.clone(), seconds).await;
        let cpu = target.process.as_ref().map_or(0.0, |p| p.cpu_seconds()) - cpu_before;
        let cpu_pct = 100.0 * cpu / began.elapsed().as_secs_f64();
        sampling.store(false, Ordering::Relaxed);
        if let Some(s) = sampler {
            let _ = s.await;
        }
        let rss_mib = peak.load(Ordering::Relaxed) >> 10;
        if let Some(f) = first {
            failures.push(format!("{} under {name}: {f}", target.name));
        }
        let (direct_lat, _, _) = victim(direct.clone(), seconds).await;
        let count = attacker
            .and_then(|c| c.wait_with_output().ok())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_else(|| "0".to_owned());
        let (p50, p99) = (pct(&lat, 0.5), pct(&lat, 0.99));
        let direct_p99 = pct(&direct_lat, 0.99).max(1);
        if quiet_p99 == 0 {
            quiet_p99 = p99.max(1);
        }
        println!(
            "| {name} | {p50} | {p99} | {:.2} | {direct_p99} | {:.2} | {failed} | {count} | {cpu_pct:.0} | {rss_mib} |",
            p99 as f64 / quiet_p99 as f64,
            p99 as f64 / direct_p99 as f64,
        );
        // Let the proxy and the simulator finish what the attack left behind.
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if let (Some(phase), Some(target)) = (arg("--attack"), arg("--target")) {
        if let (Ok(phase), Ok(target)) = (phase.parse(), target.parse()) {
            run_attacker(phase, target, num_arg("--ms", 3000));
        }
        return;
    }
    let seconds = num_arg("--seconds", 3);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let exe = env!("CARGO_BIN_EXE_skewgate");
        let dir = std::env::temp_dir().join(format!("skewgate-attacks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let (_sim, sim_addr) = start_sim(exe).await;
        fill_store(sim_addr).await;
        // The response budget at 32 MiB, as the attacks on it were first run.
        let budget = ["--max-buffered-response-bytes", "33554432"];
        let targets = start_targets_with(exe, &dir, sim_addr, &budget).await;
        let mut failures = Vec::new();
        for target in targets
            .iter()
            .filter(|t| matches!(t.name, "skewgate" | "haproxy"))
        {
            phases(target, sim_addr, seconds, &mut failures).await;
        }
        println!();
        for f in failures {
            println!("first victim failure: {f}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    });
}
