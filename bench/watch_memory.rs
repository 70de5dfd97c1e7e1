//! Memory per open watch: skewgate and the peers (HAProxy, nginx, when installed) each hold the same
//! number of idle watches from h2c clients to the simulator; the growth of each proxy's resident
//! memory is divided by the number of watches. Also prints the upstream connections they hold.
//!
//! Run: `cargo bench --bench watch_memory` (options after `--`: `--watches N`, default 2,000).

#[path = "targets.rs"]
mod targets;

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

use targets::{Target, connections_to, rss_kib, settle, start_sim, start_targets};

/// Streams per client connection: under HAProxy's and nginx's default limits (100, 128).
const PER_CONNECTION: usize = 100;

/// How long after the last watch opened the memory is read.
const IDLE: Duration = Duration::from_secs(22);

async fn open_watches(target: &Target, n: usize) -> Vec<hyper::Response<hyper::body::Incoming>> {
    let mut held = Vec::with_capacity(n);
    let mut conns = Vec::new();
    for _ in 0..n.div_ceil(PER_CONNECTION) {
        let tcp = TcpStream::connect(target.h2).await.expect("connect");
        let (send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                .await
                .expect("handshake");
        tokio::spawn(conn);
        conns.push(send);
    }
    let mut pending = Vec::with_capacity(n);
    for i in 0..n {
        let mut send = conns[i / PER_CONNECTION].clone();
        let addr = target.h2;
        pending.push(tokio::spawn(async move {
            let req = http::Request::get(format!(
                "http://{addr}/api/v1/namespaces/watched/configmaps?watch=1"
            ))
            .body(Empty::<Bytes>::new())
            .expect("request");
            send.send_request(req).await
        }));
    }
    for p in pending {
        match p.await {
            Ok(Ok(resp)) if resp.status() == 200 => held.push(resp),
            Ok(Ok(resp)) => eprintln!("{}: watch answered {}", target.name, resp.status()),
            other => eprintln!("{}: watch failed: {:?}", target.name, other.err()),
        }
    }
    held
}

#[tokio::main(flavor = "multi_thread", worker_threads = 1)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n = targets::num_arg("--watches", 2000) as usize;
    let exe = env!("CARGO_BIN_EXE_skewgate");
    let dir = std::env::temp_dir().join(format!("skewgate-bench-watch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (_sim, sim) = start_sim(exe).await;
    let targets = start_targets(exe, &dir, sim).await;
    println!(
        "\n{n} idle watches per proxy, h2c clients with {PER_CONNECTION} streams a connection\n"
    );
    println!(
        "  {:<10} {:>8} {:>11} {:>11} {:>12} {:>10}",
        "proxy", "watches", "RSS before", "RSS after", "per watch", "upstream"
    );
    for t in targets.iter().filter(|t| t.process.is_some()) {
        let pid = t.process.as_ref().map(|p| p.child.id()).unwrap_or(0);
        settle().await;
        let before = rss_kib(pid);
        let held = open_watches(t, n).await;
        // Idle watches, not a burst just served: what the burst allocated for a moment (request
        // futures, headers, buffers) skewgate gives back at its memory trim's next look. Read
        // sooner, the figure depends on what the allocator happened to have purged (the same
        // binary read 5–8 KiB per watch measured first, 14–17 measured second).
        tokio::time::sleep(IDLE).await;
        let after = rss_kib(pid);
        let upstream = connections_to(sim.port(), pid);
        let per = (after.saturating_sub(before)) as f64 * 1024.0 / held.len().max(1) as f64;
        println!(
            "  {:<10} {:>8} {:>8} KiB {:>8} KiB {:>8.1} KiB {:>10}",
            t.name,
            held.len(),
            before,
            after,
            per / 1024.0,
            upstream
        );
        drop(held);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}
