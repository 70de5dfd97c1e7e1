//! Large responses: a LIST of about 10 MB relayed directly, through skewgate, and through HAProxy
//! and nginx when they are installed, over h2c and HTTP/1.1, in the same run.
//!
//! Two measurements:
//! - throughput: the LIST fetched back to back on one connection, in MB/s and as a ratio to going
//!   direct, with the proxy's CPU time per LIST;
//! - memory against slow clients: 16 clients ask for the LIST at once, each on its own connection,
//!   read nothing for 2 s, then read at 1 MB/s for 2 s, then read the rest; the proxy's resident
//!   memory is taken in each phase, as growth per stream. Every client must get the LIST whole.
//!
//! Run: `cargo bench --bench large` (options after `--`: `--lists N` back-to-back LISTs per
//! target and protocol, default 10; `--readers N`, default 16; `--items N` ConfigMaps of 100 KB,
//! default 100).

#[path = "targets.rs"]
mod targets;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

use targets::{Target, rss_kib, settle, start_sim, start_targets};

const LIST: &str = "/api/v1/namespaces/default/configmaps";
const ITEM: usize = 100_000;

#[derive(Clone, Copy)]
enum Proto {
    H2,
    H1,
}

impl Proto {
    fn name(self) -> &'static str {
        match self {
            Proto::H2 => "h2c",
            Proto::H1 => "http/1.1",
        }
    }
}

/// One client connection, either protocol, that sends GETs.
enum Client {
    H2(hyper::client::conn::http2::SendRequest<Empty<Bytes>>),
    H1(hyper::client::conn::http1::SendRequest<Empty<Bytes>>),
}

impl Client {
    /// Connects; h2c with a stream window of `window` bytes (hyper's default, 2 MiB, when None).
    async fn connect(addr: SocketAddr, proto: Proto, window: Option<u32>) -> Option<Client> {
        let io = TokioIo::new(TcpStream::connect(addr).await.ok()?);
        Some(match proto {
            Proto::H2 => {
                let mut builder = hyper::client::conn::http2::Builder::new(TokioExecutor::new());
                if let Some(w) = window {
                    builder.initial_stream_window_size(w);
                }
                let (send, conn) = builder.handshake(io).await.ok()?;
                tokio::spawn(conn);
                Client::H2(send)
            }
            Proto::H1 => {
                let (send, conn) = hyper::client::conn::http1::handshake(io).await.ok()?;
                tokio::spawn(conn);
                Client::H1(send)
            }
        })
    }

    async fn get(&mut self, addr: SocketAddr) -> Option<http::Response<Incoming>> {
        // h2 takes the authority from the URI; HTTP/1.1 sends the path and a Host header.
        let uri = match self {
            Client::H2(_) => format!("http://{addr}{LIST}"),
            Client::H1(_) => LIST.to_string(),
        };
        let mut req = http::Request::get(uri).body(Empty::new()).ok()?;
        if let Client::H1(_) = self {
            let host = http::HeaderValue::from_str(&addr.to_string()).ok()?;
            req.headers_mut().insert(http::header::HOST, host);
        }
        match self {
            Client::H2(s) => s.send_request(req).await.ok(),
            Client::H1(s) => {
                s.ready().await.ok()?;
                s.send_request(req).await.ok()
            }
        }
    }
}

/// Fills the simulator with `items` ConfigMaps of 100 KB; returns the LIST's size in bytes.
async fn fill(sim: SocketAddr, items: usize) -> usize {
    let io = TokioIo::new(TcpStream::connect(sim).await.expect("connect"));
    let (mut send, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let blob = "x".repeat(ITEM);
    for i in 0..items {
        let body =
            serde_json::json!({"metadata": {"name": format!("big-{i}")}, "data": {"blob": blob}});
        let req = http::Request::post(LIST)
            .header("host", "sim")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .expect("request");
        send.ready().await.expect("ready");
        let resp = send.send_request(req).await.expect("create");
        assert_eq!(resp.status(), 201, "create big-{i}");
        resp.into_body().collect().await.expect("body");
    }
    let mut c = Client::connect(sim, Proto::H1, None)
        .await
        .expect("connect");
    let resp = c.get(sim).await.expect("list");
    resp.into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes()
        .len()
}

/// Reads a body whole, at most `rate` bytes a second after `hold` of reading nothing, for
/// `slow_for`; then as fast as it comes. Returns the bytes read.
async fn read_paced(
    resp: http::Response<Incoming>,
    hold: Duration,
    rate: f64,
    slow_for: Duration,
) -> usize {
    tokio::time::sleep(hold).await;
    let mut body = resp.into_body();
    let start = Instant::now();
    let mut read = 0usize;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { return read };
        if let Some(d) = frame.data_ref() {
            read += d.len();
        }
        let elapsed = start.elapsed();
        if elapsed < slow_for {
            let due = Duration::from_secs_f64(read as f64 / rate);
            if due > elapsed {
                tokio::time::sleep((due - elapsed).min(slow_for - elapsed)).await;
            }
        }
    }
    read
}

/// Back-to-back LISTs on one connection: MB/s and the proxy's CPU milliseconds per LIST.
async fn throughput(
    t: &Target,
    proto: Proto,
    lists: usize,
    size: usize,
) -> Option<(f64, Option<f64>)> {
    let addr = match proto {
        Proto::H2 => t.h2,
        Proto::H1 => t.h1,
    };
    let mut c = Client::connect(addr, proto, None).await?;
    // One to warm the connections up.
    let warm = c.get(addr).await?;
    warm.into_body().collect().await.ok()?;
    let cpu = t.process.as_ref().map(|p| p.cpu_seconds());
    let start = Instant::now();
    for _ in 0..lists {
        let resp = c.get(addr).await?;
        let got = resp.into_body().collect().await.ok()?.to_bytes().len();
        if got != size {
            eprintln!("{}: a LIST of {got} bytes, not {size}", t.name);
            return None;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu_ms = cpu
        .zip(t.process.as_ref())
        .map(|(before, p)| (p.cpu_seconds() - before) * 1000.0 / lists as f64);
    Some(((size * lists) as f64 / secs / 1e6, cpu_ms))
}

/// What the proxy's memory did while `readers` slow clients fetched the LIST: growth per stream
/// while they read nothing, while they read at 1 MB/s, and after; and how many got it whole.
async fn slow_readers(t: &Target, proto: Proto, readers: usize, size: usize) -> String {
    let addr = match proto {
        Proto::H2 => t.h2,
        Proto::H1 => t.h1,
    };
    let pid = t.process.as_ref().map_or(0, |p| p.child.id());
    settle().await;
    let before = rss_kib(pid);
    let mut tasks = Vec::new();
    for _ in 0..readers {
        tasks.push(tokio::spawn(async move {
            // The 64 KiB stream window of a client that reads slowly.
            let mut c = Client::connect(addr, proto, Some(65_535)).await?;
            let resp = c.get(addr).await?;
            let hold = Duration::from_secs(2);
            Some(read_paced(resp, hold, 1e6, Duration::from_secs(2)).await)
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let holding = rss_kib(pid);
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let slow = rss_kib(pid);
    let mut whole = 0;
    for task in tasks {
        if let Ok(Some(n)) = task.await
            && n == size
        {
            whole += 1;
        }
    }
    settle().await;
    let after = rss_kib(pid);
    let per = |kib: u64| kib.saturating_sub(before) as f64 / readers as f64;
    format!(
        "  {:<10} {:<9} {:>9.0} KiB {:>9.0} KiB {:>+9} KiB {:>6}/{readers}",
        t.name,
        proto.name(),
        per(holding),
        per(slow),
        after as i64 - before as i64,
        whole
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 1)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let lists = targets::num_arg("--lists", 10) as usize;
    let readers = targets::num_arg("--readers", 16) as usize;
    let items = targets::num_arg("--items", 100) as usize;
    let exe = env!("CARGO_BIN_EXE_skewgate");
    let dir = std::env::temp_dir().join(format!("skewgate-bench-large-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (sim, sim_addr) = start_sim(exe).await;
    let size = fill(sim_addr, items).await;
    let targets = start_targets(exe, &dir, sim_addr).await;

    println!(
        "\nLIST of {items} ConfigMaps ({:.1} MB), {lists} back to back on one connection\n",
        size as f64 / 1e6
    );
    // The proxies speak h2 to the apiserver whatever the client speaks, so direct h2c is the
    // baseline of both protocols' rows; direct HTTP/1.1 is shown too.
    println!("  target     protocol       MB/s   ×direct h2c   proxy CPU ms/LIST");
    let mut direct = None;
    for proto in [Proto::H2, Proto::H1] {
        for t in &targets {
            match throughput(t, proto, lists, size).await {
                Some((mbps, cpu)) => {
                    let base = *direct.get_or_insert(mbps);
                    let cpu = cpu.map_or("-".to_string(), |c| format!("{c:.1}"));
                    println!(
                        "  {:<10} {:<9} {mbps:>9.0} {:>13.2} {cpu:>19}",
                        t.name,
                        proto.name(),
                        mbps / base
                    );
                }
                None => println!("  {:<10} {:<9} failed", t.name, proto.name()),
            }
        }
    }

    println!(
        "\n{readers} clients at once, each on its own connection: the LIST unread for 2 s, read at 1 MB/s for 2 s, then whole"
    );
    println!("  proxy RSS growth per stream (after: all of it, once they are done)\n");
    println!("  target     protocol   not reading   reading slowly       after  whole");
    for proto in [Proto::H2, Proto::H1] {
        for t in targets.iter().filter(|t| t.process.is_some()) {
            println!("{}", slow_readers(t, proto, readers, size).await);
        }
    }
    drop(targets);
    drop(sim);
    let _ = std::fs::remove_dir_all(&dir);
}
