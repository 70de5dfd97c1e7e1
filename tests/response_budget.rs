//! The bound on response data held for clients that do not read (`--max-buffered-response-bytes`,
//! `upstream/budget.rs`): 16 addresses, each with 100 large LISTs it never reads, against
//! skewgate as a process; what it holds stays within the bound, and a client that reads still gets
//! its whole LIST meanwhile. `BUDGET=0 cargo test --test response_budget -- --nocapture` runs the
//! same without a bound and prints what it held (and fails).

mod common;
#[path = "common/frames.rs"]
mod frames;
#[path = "common/process.rs"]
mod process;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use common::*;
use frames::{END_HEADERS, END_STREAM, HEADERS, PREFACE, SETTINGS, WINDOW_UPDATE, frame, get};
use tokio::io::AsyncWriteExt;

const DEFAULTS: &str = "writes:\n  default: old\nreads:\n  default: old\n";

/// The bound the test sets: 32 MiB.
const LIMIT: usize = 32 << 20;

/// A client on source address `from` that opens one HTTP/2 connection and asks for `lists` LISTs
/// on it, reading nothing: with its windows shut (`open` false: SETTINGS_INITIAL_WINDOW_SIZE 0),
/// or opened to 2^31-1 (the stream windows by SETTINGS, the connection's by WINDOW_UPDATE), so
/// that only its socket, never read, holds skewgate back.
async fn non_reader(
    to: SocketAddr,
    from: Ipv4Addr,
    lists: u32,
    open: bool,
) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("receive buffer");
    socket
        .bind(SocketAddr::from((from, 0)))
        .expect("bind a loopback source address");
    let mut conn = socket.connect(to).await.expect("connect");
    let mut hello = PREFACE.to_vec();
    if open {
        hello.extend(frame(SETTINGS, 0, 0, &[0, 4, 0x7f, 0xff, 0xff, 0xff]));
        let more = (i32::MAX as u32 - 65_535).to_be_bytes();
        hello.extend(frame(WINDOW_UPDATE, 0, 0, &more));
    } else {
        hello.extend(frame(SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 0]));
    }
    for n in 0..lists {
        let path = "/api/v1/namespaces/default/configmaps";
        hello.extend(frame(
            HEADERS,
            END_STREAM | END_HEADERS,
            2 * n + 1,
            &get(path),
        ));
    }
    conn.write_all(&hello).await.expect("requests");
    conn
}

/// The resident memory of process `pid`, in bytes.
fn rss(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| {
            v.trim()
                .trim_end_matches(" kB")
                .trim()
                .parse::<usize>()
                .ok()
        })
        .map_or(0, |kb| kb << 10)
}

async fn scrape(admin: &str) -> String {
    reqwest::get(format!("http://{admin}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_addresses_with_a_hundred_unread_lists_each_stay_within_the_bound() {
    unread_lists_stay_within_the_bound(16, false).await;
}

/// The same with the clients' windows opened wide: skewgate may send all it has, and only the
/// sockets, never read, hold it. Each stream once held about 51 KiB whatever the bound (6.2 times
/// it with 4,000 streams): a stream whose client took all it held was given a small window
/// whether or not the budget had room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_with_windows_opened_wide_that_never_read_stay_within_the_bound() {
    unread_lists_stay_within_the_bound(24, true).await;
}

async fn unread_lists_stay_within_the_bound(addresses: u8, open: bool) {
    let sims = sims().await;
    // 20 x 20 KB: each LIST is 400 KB, more than an upstream stream's window of 256 KiB.
    big_configmaps(&sims, 20, 20_000).await;
    let routes_file = temp_dir("budget").join("routes.yaml");
    std::fs::write(&routes_file, routes(&sims, DEFAULTS)).expect("routes");
    let limit = std::env::var("BUDGET").unwrap_or(LIMIT.to_string());
    let gate = process::serve(
        &routes_file,
        &["--max-buffered-response-bytes", &limit],
        None,
    );
    let addr: SocketAddr = gate.addr.parse().expect("address");
    let pid = gate.child.id();
    // One LIST first, so that the upstream connections and the read buffers are there.
    let url = format!("http://{addr}/api/v1/namespaces/default/configmaps");
    let whole = h2().get(&url).send().await.expect("list").bytes().await;
    let whole = whole.expect("body").len();
    assert!(whole > 400_000, "{whole}");
    let before = rss(pid);

    let mut clients = Vec::new();
    for n in 0..addresses {
        clients.push(non_reader(addr, Ipv4Addr::new(127, 0, 1, n + 1), 100, open).await);
    }
    // Every LIST is on its way upstream, then what skewgate holds is sampled for a while.
    let admin = gate.admin.clone();
    let sent = eventually(30, || {
        let admin = admin.clone();
        let all = f64::from(addresses) * 100.0;
        async move {
            let text = scrape(&admin).await;
            metric(&text, "skewgate_upstream_streams{") >= all
                || metric(&text, "skewgate_response_buffer_cut_connections_total") >= 1.0
        }
    })
    .await;
    let (mut most, mut most_open) = (0.0f64, 0.0f64);
    let mut peak_rss = 0;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let text = scrape(&gate.admin).await;
        most = most.max(metric(&text, "skewgate_response_buffered_bytes"));
        most_open = most_open.max(metric(&text, "skewgate_response_windows_open_bytes"));
        peak_rss = peak_rss.max(rss(pid));
    }
    let text = scrape(&gate.admin).await;
    let shrinks = metric(&text, "skewgate_response_window_shrinks_total");
    let cut = metric(&text, "skewgate_response_buffer_resets_total");
    let evicted = metric(&text, "skewgate_response_buffer_cut_connections_total");
    eprintln!(
        "sent: {sent}; buffered at most {most} of {LIMIT} (windows open {most_open}); RSS {before} -> {peak_rss} (+{} MiB); shrinks {shrinks}; cut {cut}; connections cut {evicted}",
        (peak_rss.saturating_sub(before)) >> 20
    );

    // A client that reads gets its whole LIST meanwhile.
    let read = tokio::time::timeout(Duration::from_secs(20), async {
        h2().get(&url).send().await.expect("list").bytes().await
    })
    .await
    .expect("a reader's LIST stalled behind the non-readers")
    .expect("body");
    assert_eq!(read.len(), whole);

    // Every LIST went upstream, or the budget, spent, cut the connections that took nothing.
    assert!(sent, "not every LIST was sent upstream");
    // Within a frame of the bound: the apiserver's DATA in flight when its window closed.
    assert!(
        most <= (LIMIT + (16 << 10)) as f64,
        "buffered {most} > {LIMIT}"
    );
    // The process as a whole: without the bound it grew by 696 MiB here, with it by 55.
    let grew = peak_rss.saturating_sub(before);
    assert!(grew < 4 * LIMIT, "RSS grew by {} MiB", grew >> 20);
    assert!(shrinks >= 1.0, "no small window announced");
    drop(clients);
}
