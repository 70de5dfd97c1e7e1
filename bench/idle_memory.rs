//! Memory per idle client connection: skewgate and the peers (HAProxy, nginx, when installed) each
//! hold the same number of client connections that made one small GET and then went quiet, first
//! HTTP/1.1 (keep-alive), then h2c. Prints the growth of each proxy's resident memory per
//! connection while they are held, and what stays 11 s after they close.
//!
//! Run: `cargo bench --bench idle_memory` (options after `--`: `--connections N`, default 5,000;
//! `--protocol http1` or `--protocol h2c` for one protocol only, as when profiling one).

#[path = "targets.rs"]
mod targets;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use targets::{Target, rss_kib, settle, start_sim, start_targets};

const PATH: &str = "/api/v1/namespaces/default/configmaps/small";

/// One HTTP/1.1 keep-alive connection after one GET, its answer read whole.
async fn h1_idle(addr: SocketAddr) -> Option<TcpStream> {
    let mut s = TcpStream::connect(addr).await.ok()?;
    s.write_all(format!("GET {PATH} HTTP/1.1\r\nHost: bench\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        got.extend_from_slice(&buf[..n]);
        if complete(&got) {
            return Some(s);
        }
    }
}

/// Whether `got` holds a whole response with a Content-Length (or chunked, ended) body.
fn complete(got: &[u8]) -> bool {
    let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
    let body = got.len() - end - 4;
    match head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        Some(len) => body >= len,
        None => got.ends_with(b"0\r\n\r\n"),
    }
}

/// One h2c connection after one GET, its answer read whole; the connection's task keeps it open.
async fn h2_idle(addr: SocketAddr) -> Option<h2::client::SendRequest<Bytes>> {
    let tcp = TcpStream::connect(addr).await.ok()?;
    let (send, conn) = h2::client::handshake(tcp).await.ok()?;
    tokio::spawn(conn);
    let mut send = send.ready().await.ok()?;
    let req = http::Request::get(format!("http://{addr}{PATH}"))
        .body(())
        .ok()?;
    let (resp, _) = send.send_request(req, true).ok()?;
    let mut body = resp.await.ok()?.into_body();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.ok()?;
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    Some(send)
}

/// Opens `n` connections with `open`, 64 at a time; returns those that made their GET.
async fn open_all<T, F, Fut>(n: usize, addr: SocketAddr, open: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(SocketAddr) -> Fut,
    Fut: std::future::Future<Output = Option<T>> + Send + 'static,
{
    let mut held = Vec::with_capacity(n);
    let mut batch = Vec::new();
    for i in 0..n {
        batch.push(tokio::spawn(open(addr)));
        if batch.len() == 64 || i + 1 == n {
            for t in batch.drain(..) {
                if let Ok(Some(c)) = t.await {
                    held.push(c);
                }
            }
        }
    }
    held
}

/// Waits after the connections closed: skewgate gives freed memory back every 10 s.
async fn closed() {
    tokio::time::sleep(Duration::from_secs(11)).await;
}

/// One row: the proxy's memory before, while holding, and after closing the connections.
fn row(name: &str, proto: &str, held: usize, before: u64, during: u64, after: u64) {
    let per = during.saturating_sub(before) as f64 / held.max(1) as f64;
    println!(
        "  {name:<10} {proto:<9} {held:>11} {before:>8} KiB {during:>8} KiB {per:>9.1} KiB {after:>8} KiB {:>+8} KiB",
        after as i64 - before as i64
    );
}

/// One protocol's row for proxy `t`: `n` connections opened with `open`, held, then closed.
async fn measure<T, F, Fut>(t: &Target, proto: &str, addr: SocketAddr, n: usize, open: F)
where
    T: Send + 'static,
    F: Fn(SocketAddr) -> Fut,
    Fut: std::future::Future<Output = Option<T>> + Send + 'static,
{
    let pid = t.process.as_ref().map_or(0, |p| p.child.id());
    settle().await;
    let before = rss_kib(pid);
    let held = open_all(n, addr, open).await;
    // skewgate lets an idle HTTP/1.1 connection's buffers go within a second of its last response,
    // and returns the memory to the system a second later.
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let during = rss_kib(pid);
    let count = held.len();
    drop(held);
    closed().await;
    let after = rss_kib(pid);
    row(t.name, proto, count, before, during, after);
}

#[tokio::main(flavor = "multi_thread", worker_threads = 1)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n = targets::num_arg("--connections", 5000) as usize;
    let exe = env!("CARGO_BIN_EXE_skewgate");
    let dir = std::env::temp_dir().join(format!("skewgate-bench-idle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (_sim, sim) = start_sim(exe).await;
    let targets = start_targets(exe, &dir, sim).await;
    println!("\n{n} idle client connections per proxy, each after one small GET\n");
    println!(
        "  {:<10} {:<9} {:>11} {:>12} {:>12} {:>13} {:>12} {:>12}",
        "proxy",
        "protocol",
        "connections",
        "RSS before",
        "RSS held",
        "per conn",
        "RSS closed",
        "closed-before"
    );
    let protocol = targets::arg("--protocol");
    let runs = |p: &str| protocol.as_deref().is_none_or(|only| only == p);
    for t in targets.iter().filter(|t| t.process.is_some()) {
        if runs("http1") {
            measure(t, "HTTP/1.1", t.h1, n, h1_idle).await;
        }
        if runs("h2c") {
            measure(t, "h2c", t.h2, n, h2_idle).await;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
