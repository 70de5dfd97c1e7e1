//! A victim's latency through skewgate while other clients misbehave, against the same victim with
//! no attack, in one run: clients that do not read large LISTs, paced rapid reset, oversized
//! headers, half-sent prefaces and slow headers (slowloris), malformed bodies, and one greedy
//! client. The victim (its own address, so per-client limits do not confuse it with the attackers)
//! sends small GETs one after another on one h2c connection, sharing skewgate's workers and
//! upstream connections with the attackers.
//!
//! Run: `cargo bench --bench attacks` (options after `--`: `--seconds N`, default 3).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use skewgate::proxy::{ProxySettings, ServeOptions, Server};
use skewgate::sim::{self, SimConfig, Store};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

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

async fn fill_store(sim: &str) {
    let client = reqwest::Client::new();
    let data = "x".repeat(100_000);
    for i in 0..40 {
        let body = serde_json::json!({"metadata": {"name": format!("big-{i}"), "namespace": "big"}, "data": {"blob": data}});
        let _ = client
            .post(format!("{sim}/api/v1/namespaces/big/configmaps"))
            .json(&body)
            .send()
            .await;
    }
    let small = serde_json::json!({"metadata": {"name": "small", "namespace": "default"}, "data": {"k": "v"}});
    let _ = client
        .post(format!("{sim}/api/v1/namespaces/default/configmaps"))
        .json(&small)
        .send()
        .await;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let seconds = arg("--seconds", 3);
    let any: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let store = Store::new();
    let sim = sim::start(SimConfig::new("v1.30.0"), store, any)
        .await
        .expect("sim");
    fill_store(&sim.url()).await;
    let dir = std::env::temp_dir().join(format!("skewgate-attacks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let routes = dir.join("routes.yaml");
    std::fs::write(
        &routes,
        format!(
            "apiVersion: skewgate.io/v1alpha1\nkind: RouteTable\nbackends:\n  - {{name: b, endpoints: [\"{}\"]}}\nwrites:\n  default: b\nreads:\n  default: b\n",
            sim.url()
        ),
    )
    .expect("routes");
    let server = Server::start(ServeOptions {
        routes,
        listen: any,
        admin_listen: any,
        reload_poll: Duration::from_secs(60),
        settings: ProxySettings {
            first_request_timeout: Duration::from_secs(5),
            ..ProxySettings::default()
        },
    })
    .await
    .expect("skewgate");
    let base = format!("http://{}", server.addr);
    let _ = victim(base.clone(), 1).await;
    let mut failures = Vec::new();

    let attacks: [(&str, Option<Attack>); 8] = [
        ("quiet", None),
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
    println!("victim: sequential small GETs on one h2c connection, {seconds} s per phase\n");
    println!(
        "| phase | victim p50 µs | p99 µs | p99 × quiet | victim failures | attack requests |"
    );
    println!("|---|---|---|---|---|---|");
    let mut quiet_p99 = 0;
    for (name, attack) in attacks {
        let stop = Arc::new(AtomicBool::new(false));
        let count = Arc::new(AtomicU64::new(0));
        let task = attack.map(|a| a(server.addr, stop.clone(), count.clone()));
        if task.is_some() {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let (lat, failed, first) = victim(base.clone(), seconds).await;
        if let Some(f) = first {
            failures.push(format!("{name}: {f}"));
        }
        stop.store(true, Ordering::Relaxed);
        if let Some(t) = task {
            t.abort();
        }
        let (p50, p99) = (pct(&lat, 0.5), pct(&lat, 0.99));
        if quiet_p99 == 0 {
            quiet_p99 = p99.max(1);
        }
        println!(
            "| {name} | {p50} | {p99} | {:.2} | {failed} | {} |",
            p99 as f64 / quiet_p99 as f64,
            count.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for f in failures {
        println!("first victim failure under {f}");
    }
    server.shutdown().await;
}
