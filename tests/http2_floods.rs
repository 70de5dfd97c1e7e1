//! HTTP/2 floods that the post-2019 servers end, each ended the same way by skewgate and seen on
//! the wire: HEADERS on a lower or reused stream id (GOAWAY), frames on closed streams (a stream
//! error each, counted, then GOAWAY ENHANCE_YOUR_CALM), empty DATA frames (h2's bound), and
//! malformed requests and connection errors counted against the client, which is held back as an
//! HTTP/1.1 client sending malformed heads is ("MadeYouReset", CVE-2025-8671, among them).

mod common;
#[path = "common/frames.rs"]
mod frames;

use std::time::Duration;

use common::*;
use frames::*;
use skewgate::edge::EdgeSettings;
use skewgate::proxy::ProxySettings;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const DEFAULTS: &str = "writes:\n  default: old\nreads:\n  default: old\n";
const PROTOCOL_ERROR: u32 = 0x1;
const STREAM_CLOSED: u32 = 0x5;
const ENHANCE_YOUR_CALM: u32 = 0xb;

/// What the client saw.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// RST_STREAM on the stream looked for, with its code.
    Reset(u32),
    /// The response on it ended (END_STREAM).
    Ended,
    GoAway(u32),
    /// The connection closed without a GOAWAY.
    Closed,
}

/// Reads frames (acknowledging SETTINGS) until something happens on stream `id` or to the
/// connection; resets of other streams are counted in `others`. `None` when nothing came in 10 s.
async fn next_on(conn: &mut TcpStream, id: u32, others: &mut usize) -> Option<Seen> {
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let Some(f) = next_frame(conn, until).await? else {
            return Some(Seen::Closed);
        };
        match f.kind {
            GOAWAY => return Some(Seen::GoAway(code(&f.payload, 4))),
            RST_STREAM if f.stream == id => return Some(Seen::Reset(code(&f.payload, 0))),
            RST_STREAM => *others += 1,
            DATA | HEADERS if f.stream == id && f.flags & END_STREAM != 0 => {
                return Some(Seen::Ended);
            }
            _ => {}
        }
    }
}

async fn gate_without_hold_back(sims: &Sims) -> Gate {
    let settings = (
        ProxySettings::default(),
        EdgeSettings {
            hold_back_offenders: false,
            ..EdgeSettings::default()
        },
    );
    gate_with(&routes(sims, DEFAULTS), settings).await
}

/// A GET of `/version` on stream `id`, answered whole.
async fn answered(conn: &mut TcpStream, id: u32) {
    let block = get("/version");
    conn.write_all(&frame(HEADERS, END_STREAM | END_HEADERS, id, &block))
        .await
        .expect("write");
    assert_eq!(next_on(conn, id, &mut 0).await, Some(Seen::Ended));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_on_a_lower_or_a_finished_stream_id_end_the_connection() {
    let sims = sims().await;
    let gate = gate_without_hold_back(&sims).await;
    let block = get("/version");
    // Stream 5 opened and answered; then stream 3, lower than 5 and never opened (RFC 9113,
    // 5.1.1).
    let mut conn = connect(gate.server.addr).await;
    answered(&mut conn, 5).await;
    let lower = frame(HEADERS, END_STREAM | END_HEADERS, 3, &block);
    conn.write_all(&lower).await.expect("write");
    assert_eq!(
        next_on(&mut conn, 3, &mut 0).await,
        Some(Seen::GoAway(PROTOCOL_ERROR))
    );
    // Stream 1 answered, then opened again: closed both ways (5.1).
    let mut conn = connect(gate.server.addr).await;
    answered(&mut conn, 1).await;
    let again = frame(HEADERS, END_STREAM | END_HEADERS, 1, &block);
    conn.write_all(&again).await.expect("write");
    assert_eq!(
        next_on(&mut conn, 1, &mut 0).await,
        Some(Seen::GoAway(STREAM_CLOSED))
    );
    assert_eq!(next_on(&mut conn, 1, &mut 0).await, Some(Seen::Closed));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_on_a_stream_the_client_reset_is_a_stream_error_each_time_until_goaway() {
    let sims = sims().await;
    let gate = gate_without_hold_back(&sims).await;
    let mut conn = connect(gate.server.addr).await;
    // A request with a body to come, reset by the client, then DATA on it.
    let block = get("/api/v1/namespaces/default/configmaps");
    let mut out = frame(HEADERS, END_HEADERS, 1, &block);
    out.extend(frame(RST_STREAM, 0, 1, &8u32.to_be_bytes()));
    out.extend(frame(DATA, 0, 1, b"late"));
    conn.write_all(&out).await.expect("write");
    assert_eq!(
        next_on(&mut conn, 1, &mut 0).await,
        Some(Seen::Reset(STREAM_CLOSED))
    );
    // The same, 1,100 times: each is answered and counted, and the 1,025th ends the connection
    // (the bound on streams a client makes skewgate reset, h2's).
    let flood: Vec<u8> = (0..1100)
        .flat_map(|_| frame(DATA, END_STREAM, 1, &[]))
        .collect();
    let writer = tokio::spawn(async move {
        let _ = conn.write_all(&flood).await;
        conn
    });
    let mut conn = writer.await.expect("writer");
    let mut resets = 0;
    assert_eq!(
        next_on(&mut conn, u32::MAX, &mut resets).await,
        Some(Seen::GoAway(ENHANCE_YOUR_CALM))
    );
    assert_eq!(resets, 1024, "each frame on the closed stream was answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_on_a_finished_stream_and_a_flood_of_empty_data_end_the_connection() {
    let sims = sims().await;
    let gate = gate_without_hold_back(&sims).await;
    // An empty DATA frame on a stream answered whole: closed both ways, a connection error.
    let mut conn = connect(gate.server.addr).await;
    answered(&mut conn, 1).await;
    conn.write_all(&frame(DATA, 0, 1, &[]))
        .await
        .expect("write");
    assert_eq!(
        next_on(&mut conn, 1, &mut 0).await,
        Some(Seen::GoAway(STREAM_CLOSED))
    );
    // Empty DATA frames without END_STREAM on an open stream: a hundred are taken, the next ends
    // the connection (h2's bound); the request is not answered before.
    let mut conn = connect(gate.server.addr).await;
    let block = get("/api/v1/namespaces/default/configmaps");
    let mut out = frame(HEADERS, END_HEADERS, 1, &block);
    for _ in 0..101 {
        out.extend(frame(DATA, 0, 1, &[]));
    }
    conn.write_all(&out).await.expect("write");
    assert_eq!(
        next_on(&mut conn, 1, &mut 0).await,
        Some(Seen::GoAway(ENHANCE_YOUR_CALM))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_body_in_one_byte_frames_arrives_whole() {
    let sims = sims().await;
    let gate = gate_without_hold_back(&sims).await;
    let mut conn = connect(gate.server.addr).await;
    // A ConfigMap created with its body sent a byte a frame, beside a 300-byte frame (held as it
    // came) in the middle: the apiserver gets it whole and in order.
    let body = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"bytewise"},"data":{"k":"PAD"}}"#;
    let body = String::from_utf8_lossy(body).replace("PAD", &"v".repeat(300));
    let mut block = vec![0x83, 0x86]; // :method POST, :scheme http
    for (name_index, value) in [
        (4u8, "/api/v1/namespaces/default/configmaps"),
        (1, "skewgate.test"),
    ] {
        block.push(name_index);
        block.push(u8::try_from(value.len()).expect("short"));
        block.extend_from_slice(value.as_bytes());
    }
    let mut out = frame(HEADERS, END_HEADERS, 1, &block);
    let bytes = body.as_bytes();
    let (head, rest) = bytes.split_at(60);
    let (middle, tail) = rest.split_at(300);
    for b in head {
        out.extend(frame(DATA, 0, 1, &[*b]));
    }
    out.extend(frame(DATA, 0, 1, middle));
    for b in tail {
        out.extend(frame(DATA, 0, 1, &[*b]));
    }
    out.extend(frame(DATA, END_STREAM, 1, &[]));
    conn.write_all(&out).await.expect("write");
    assert_eq!(next_on(&mut conn, 1, &mut 0).await, Some(Seen::Ended));
    let got = h1()
        .get(format!(
            "{}/api/v1/namespaces/default/configmaps/bytewise",
            gate.url()
        ))
        .send()
        .await
        .expect("get");
    assert_eq!(got.status(), 200);
    let got: serde_json::Value = got.json().await.expect("json");
    assert_eq!(got["data"]["k"], "v".repeat(300));
}

/// `n` connections from this address, each sending what `send` makes and reading until it closes.
async fn offend(addr: std::net::SocketAddr, n: usize, send: &[u8]) {
    for _ in 0..n {
        let mut conn = connect(addr).await;
        conn.write_all(send).await.expect("write");
        while tokio::time::timeout(Duration::from_secs(5), read_frame(&mut conn))
            .await
            .ok()
            .flatten()
            .is_some_and(|f| f.kind != GOAWAY && f.kind != RST_STREAM)
        {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_http2_requests_and_connection_errors_hold_the_client_back() {
    let held_back = |text: &str| {
        text.lines()
            .find(|l| {
                l.starts_with("skewgate_clients_held_back_total")
                    && l.contains("malformed_requests")
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // Requests without `:path`, one a connection (each a stream reset PROTOCOL_ERROR).
    let sims = sims().await;
    let first = gate(&routes(&sims, DEFAULTS)).await;
    let no_path = frame(HEADERS, END_STREAM | END_HEADERS, 1, &[0x82, 0x86]);
    offend(first.server.addr, 20, &no_path).await;
    assert!(
        eventually(5, || async { held_back(&first.metrics().await) >= 1.0 }).await,
        "20 malformed HTTP/2 requests within a second held nobody back"
    );
    // WINDOW_UPDATE(0) after a request's HEADERS, "MadeYouReset": each a connection error.
    let second = gate(&routes(&sims, DEFAULTS)).await;
    let mut made_you_reset = frame(HEADERS, END_STREAM | END_HEADERS, 1, &get("/version"));
    made_you_reset.extend(frame(WINDOW_UPDATE, 0, 0, &0u32.to_be_bytes()));
    offend(second.server.addr, 20, &made_you_reset).await;
    assert!(
        eventually(5, || async { held_back(&second.metrics().await) >= 1.0 }).await,
        "20 HTTP/2 connection errors within a second held nobody back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_of_requests_each_reset_at_once_is_cut_off_and_reaches_the_apiserver_not_at_all()
{
    let sims = sims().await;
    let gate = gate_without_hold_back(&sims).await;
    let requests = || {
        sims.old
            .controls
            .requests
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let before = requests();
    // What a rapid-reset client left in its socket while it was held back: 1,000 requests, each
    // reset right after its HEADERS, read by skewgate in one go.
    let block = get("/api/v1/namespaces/default/configmaps");
    let mut backlog = Vec::new();
    for i in 0..1000u32 {
        backlog.extend(frame(HEADERS, END_STREAM | END_HEADERS, 2 * i + 1, &block));
        backlog.extend(frame(RST_STREAM, 0, 2 * i + 1, &8u32.to_be_bytes()));
    }
    let mut conn = connect(gate.server.addr).await;
    conn.write_all(&backlog).await.expect("write");
    // The connection is cut off for its resets once its backlog is read, or as it is.
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        while read_frame(&mut conn).await.is_some() {}
    })
    .await;
    assert!(
        closed.is_ok(),
        "the connection was not cut off for its resets"
    );
    let reached = requests() - before;
    // (The simulator also counts skewgate's health checks and discovery meanwhile.)
    assert!(
        reached < 50,
        "{reached} of 1,000 requests reset in the same read reached the apiserver"
    );
}

/// A connection from `from` that begins a header block of ~100 KB (one header's value of 112 KB
/// begun: HEADERS and six CONTINUATION frames, none with END_HEADERS) and waits.
async fn unfinished_block(to: std::net::SocketAddr, from: std::net::Ipv4Addr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind(std::net::SocketAddr::from((from, 0)))
        .expect("bind a loopback source address");
    let mut conn = socket.connect(to).await.expect("connect");
    let mut bytes = PREFACE.to_vec();
    bytes.extend(frame(SETTINGS, 0, 0, &[]));
    // :method GET, :scheme http, then a literal `x-big` whose value (114,688 bytes) is to come.
    let mut block = vec![0x82, 0x86, 0x00, 5];
    block.extend_from_slice(b"x-big");
    let len = 7 * 16_384u32;
    block.push(0x7f);
    let mut rest = len - 127;
    while rest >= 128 {
        block.push(u8::try_from(rest % 128).expect("7 bits") | 0x80);
        rest /= 128;
    }
    block.push(u8::try_from(rest).expect("7 bits"));
    bytes.extend(frame(HEADERS, 0, 1, &block));
    for _ in 0..6 {
        bytes.extend(frame(CONTINUATION, 0, 1, &vec![b'a'; 16_384]));
    }
    conn.write_all(&bytes).await.expect("write");
    conn
}

/// How a connection that waits ended within `secs`: its GOAWAY's code, if any. Nothing is sent
/// (not even a SETTINGS acknowledgement: within a header block any other frame is an error).
async fn goaway_within(conn: &mut TcpStream, secs: u64) -> Option<u32> {
    let until = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        match tokio::time::timeout_at(until, read_frame(conn))
            .await
            .ok()?
        {
            Some(f) if f.kind == GOAWAY => return Some(code(&f.payload, 4)),
            Some(_) => {}
            None => return None,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_blocks_never_ended_are_held_within_one_bound_for_the_process() {
    let sims = sims().await;
    let gate = gate_without_hold_back(&sims).await;
    let addr = gate.server.addr;
    // 200 connections, each from its own address, each with ~112 KB of a header block begun: at
    // the default bound (16 MiB of 128 KiB blocks) 128 are held, the rest ended at once.
    let mut conns = Vec::new();
    for n in 0..200u8 {
        conns.push(unfinished_block(addr, std::net::Ipv4Addr::new(127, 0, 3, 1 + n)).await);
    }
    let waits = conns.into_iter().map(|mut conn| {
        tokio::spawn(async move {
            let seen = goaway_within(&mut conn, 2).await;
            (conn, seen)
        })
    });
    let (mut conns, mut calmed) = (Vec::new(), 0);
    for wait in waits.collect::<Vec<_>>() {
        let (conn, seen) = wait.await.expect("task");
        calmed += usize::from(seen == Some(ENHANCE_YOUR_CALM));
        conns.push(conn);
    }
    assert!(
        (72..=80).contains(&calmed),
        "{calmed} of 200 ended: the bound holds 128 blocks"
    );
    // A client with a head sent whole is served meanwhile.
    let mut ok = connect(addr).await;
    answered(&mut ok, 1).await;
    // The blocks held are given back with their connections: one more is held again.
    drop(conns);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut again = unfinished_block(addr, std::net::Ipv4Addr::new(127, 0, 5, 1)).await;
    assert_eq!(goaway_within(&mut again, 1).await, None);
    drop(again);
}
