//! The limits skewgate's HTTP/2 server (src/edge/http2, at the frame level) holds a client to,
//! each seen on the wire by a client that speaks frame by frame: the stream limit, the windows
//! skewgate grants, a request's `content-length`, the bound on streams reset for the client's
//! fault, the connection's window, answers (PONGs) a client must read before it is read again, and
//! the header-list bound (431). Each time, the connection's other streams, or other clients, are
//! served on.

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

/// A gate whose namespace `frozen` is served by an endpoint that never answers: requests to it stay
/// open, and their bodies unread. The simulators are returned to be held as long as the gate.
async fn gate_with_frozen_namespace() -> (Sims, Gate) {
    let sims = sims().await;
    let (frozen, _hole) = black_hole().await;
    let text = routes_with_frozen_namespace(&sims, &frozen);
    let settings = ProxySettings {
        max_requests_per_client: 5000,
        ..ProxySettings::default()
    };
    let gate = gate_with(&text, settings).await;
    (sims, gate)
}

/// A GET's header block with a `content-length`, for a request that sends a body.
fn get_with_length(path: &str, len: usize) -> Vec<u8> {
    let mut block = get(path);
    let len = len.to_string();
    // Literal without indexing, name `content-length` (static index 28).
    block.extend([0x0f, 28 - 15, u8::try_from(len.len()).expect("short")]);
    block.extend(len.as_bytes());
    block
}

/// What the client saw on a stream or the connection.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// RST_STREAM on the stream, with its code.
    Reset(u32),
    /// A response head on the stream: whether it says 200.
    Head(bool),
    /// GOAWAY, with its code.
    GoAway(u32),
}

/// Reads frames (acknowledging SETTINGS) until a reset or a head on `id`, or a GOAWAY; counts the
/// resets of other streams seen before it in `others`. `None` when nothing came within 10 s.
async fn next_on(conn: &mut TcpStream, id: u32, others: &mut usize) -> Option<Seen> {
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let f = next_frame(conn, until).await??;
        match f.kind {
            GOAWAY => return Some(Seen::GoAway(code(&f.payload, 4))),
            RST_STREAM if f.stream == id => return Some(Seen::Reset(code(&f.payload, 0))),
            RST_STREAM => *others += 1,
            // `:status` 200, indexed (static index 8).
            HEADERS if f.stream == id => return Some(Seen::Head(f.payload.first() == Some(&0x88))),
            _ => {}
        }
    }
}

const REFUSED_STREAM: u32 = 0x7;
const PROTOCOL_ERROR: u32 = 0x1;
const FLOW_CONTROL_ERROR: u32 = 0x3;
const ENHANCE_YOUR_CALM: u32 = 0xb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_over_the_limit_are_refused_and_the_connection_serves_on() {
    let (_sims, gate) = gate_with_frozen_namespace().await;
    let mut conn = connect(gate.server.addr).await;
    // 1,000 requests that stay open (SETTINGS_MAX_CONCURRENT_STREAMS), and one more.
    let mut burst = Vec::new();
    for i in 0..1001u32 {
        let block = get("/api/v1/namespaces/frozen/configmaps/x");
        burst.extend(frame(HEADERS, END_STREAM | END_HEADERS, 2 * i + 1, &block));
    }
    conn.write_all(&burst).await.expect("burst");
    let mut others = 0;
    assert_eq!(
        next_on(&mut conn, 2001, &mut others).await,
        Some(Seen::Reset(REFUSED_STREAM))
    );
    assert_eq!(others, 0, "no other stream was refused");
    // One of them given up, and the connection takes a new request, and answers it.
    let mut more = frame(RST_STREAM, 0, 1, &8u32.to_be_bytes());
    let block = get("/api/v1/namespaces/default/configmaps");
    more.extend(frame(HEADERS, END_STREAM | END_HEADERS, 2003, &block));
    conn.write_all(&more).await.expect("more");
    assert_eq!(
        next_on(&mut conn, 2003, &mut others).await,
        Some(Seen::Head(true))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_body_past_its_window_or_its_length_is_reset_and_the_connection_serves_on() {
    let (_sims, gate) = gate_with_frozen_namespace().await;
    let mut conn = connect(gate.server.addr).await;
    let path = "/api/v1/namespaces/frozen/configmaps/x";
    // Stream 1: more than the stream's window of 1 MiB, unread by the frozen apiserver.
    let mut out = frame(HEADERS, END_HEADERS, 1, &get(path));
    let chunk = vec![b'x'; 16 << 10];
    for _ in 0..65 {
        out.extend(frame(DATA, 0, 1, &chunk));
    }
    // Stream 3: six bytes where its `content-length` says five.
    out.extend(frame(HEADERS, END_HEADERS, 3, &get_with_length(path, 5)));
    out.extend(frame(DATA, END_STREAM, 3, b"sixsix"));
    // Stream 5: a request served as usual after them.
    let block = get("/api/v1/namespaces/default/configmaps");
    out.extend(frame(HEADERS, END_STREAM | END_HEADERS, 5, &block));
    conn.write_all(&out).await.expect("write");
    let mut others = 0;
    let mut seen = Vec::new();
    for id in [1, 3, 5] {
        seen.push(next_on(&mut conn, id, &mut others).await);
    }
    assert_eq!(
        seen,
        [
            Some(Seen::Reset(FLOW_CONTROL_ERROR)),
            Some(Seen::Reset(PROTOCOL_ERROR)),
            Some(Seen::Head(true))
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_makes_skewgate_reset_too_many_streams_is_sent_goaway() {
    let sims = sims().await;
    let text = routes(&sims, "writes:\n  default: old\nreads:\n  default: old\n");
    let settings = (
        ProxySettings::default(),
        EdgeSettings {
            hold_back_offenders: false,
            ..EdgeSettings::default()
        },
    );
    let gate = gate_with(&text, settings).await;
    let mut conn = connect(gate.server.addr).await;
    // Requests without `:path`, each malformed (RFC 9113, 8.3.1): 1,024 are reset, the next one
    // ends the connection.
    let mut out = Vec::new();
    for i in 0..1100u32 {
        out.extend(frame(
            HEADERS,
            END_STREAM | END_HEADERS,
            2 * i + 1,
            &[0x82, 0x86],
        ));
    }
    let writer = tokio::spawn(async move {
        let _ = conn.write_all(&out).await;
        conn
    });
    let mut conn = writer.await.expect("writer");
    let mut resets = 0;
    let seen = next_on(&mut conn, u32::MAX, &mut resets).await;
    assert_eq!(seen, Some(Seen::GoAway(ENHANCE_YOUR_CALM)));
    assert_eq!(
        resets, 1025,
        "every malformed request was reset up to the bound"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_window_past_its_largest_is_a_connection_error() {
    let sims = sims().await;
    let text = routes(&sims, "writes:\n  default: old\nreads:\n  default: old\n");
    let gate = gate(&text).await;
    let mut conn = connect(gate.server.addr).await;
    let increment = 0x7fff_ffffu32.to_be_bytes();
    conn.write_all(&frame(WINDOW_UPDATE, 0, 0, &increment))
        .await
        .expect("write");
    let mut others = 0;
    assert_eq!(
        next_on(&mut conn, u32::MAX, &mut others).await,
        Some(Seen::GoAway(FLOW_CONTROL_ERROR))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_floods_pings_and_reads_nothing_is_not_read_either_and_others_are_served() {
    let sims = sims().await;
    let text = routes(&sims, "writes:\n  default: old\nreads:\n  default: old\n");
    let settings = (
        ProxySettings::default(),
        EdgeSettings {
            workers: 1,
            ..EdgeSettings::default()
        },
    );
    let gate = gate_with(&text, settings).await;
    let mut flood = connect(gate.server.addr).await;
    // PINGs, written until skewgate stops reading them: it must, as their PONGs go unread. 64 MiB
    // is many times what the sockets' buffers hold.
    let pings: Vec<u8> = (0..4096u64)
        .flat_map(|i| frame(PING, 0, 0, &i.to_be_bytes()))
        .collect();
    let mut sent = 0usize;
    let stopped = loop {
        if sent > 64 << 20 {
            break false;
        }
        match tokio::time::timeout(Duration::from_secs(2), flood.write_all(&pings)).await {
            Ok(Ok(())) => sent += pings.len(),
            Ok(Err(e)) => panic!("the flooding connection failed: {e}"),
            Err(_) => break true,
        }
    };
    assert!(
        stopped,
        "skewgate read {sent} bytes of PINGs whose PONGs were not read"
    );
    // Another client on the same worker is served meanwhile.
    let url = format!(
        "http://{}/api/v1/namespaces/default/configmaps",
        gate.server.addr
    );
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .expect("client");
    let answer = client.get(&url).send().await.expect("answer");
    assert_eq!(answer.status(), 200);
    drop(flood);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_pings_longer_than_the_answer_queue_is_answered_whole() {
    let sims = sims().await;
    let text = routes(&sims, "writes:\n  default: old\nreads:\n  default: old\n");
    let gate = gate(&text).await;
    let mut conn = connect(gate.server.addr).await;
    // More PINGs at once than skewgate queues answers for before it stops reading (256): it
    // reads on once they are written, and answers every one.
    let pings: Vec<u8> = (0..600u64)
        .flat_map(|i| frame(PING, 0, 0, &i.to_be_bytes()))
        .collect();
    conn.write_all(&pings).await.expect("pings");
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut pongs = 0;
    while pongs < 600 {
        let Ok(Some(f)) = tokio::time::timeout_at(until, read_frame(&mut conn)).await else {
            break;
        };
        if f.kind == PING && f.flags & ACK != 0 {
            pongs += 1;
        }
    }
    assert_eq!(pongs, 600, "every PING answered");
}

/// An HPACK integer with an `n`-bit prefix, its first byte or-ed with `flags` (RFC 7541, 5.1).
fn hpack_int(flags: u8, n: u32, mut value: usize, out: &mut Vec<u8>) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

/// A head over the header-list bound skewgate announces (twice its 64 KiB header bound) is
/// answered 431 and its stream reset before it is read whole; the connection serves on, and the
/// status page lists the 431 among the errors skewgate answered itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_over_the_header_list_bound_is_431_and_listed() {
    let sims = sims().await;
    let defaults = "writes:\n  default: old\nreads:\n  default: old\n";
    let gate = gate(&routes(&sims, defaults)).await;
    let mut conn = connect(gate.server.addr).await;
    let mut block = get("/api/v1/namespaces/default/configmaps");
    // x-big: 130 KiB, a literal without indexing with a new name.
    let value = vec![b'a'; 130 * 1024];
    block.push(0x00);
    hpack_int(0, 7, 5, &mut block);
    block.extend(b"x-big");
    hpack_int(0, 7, value.len(), &mut block);
    block.extend(&value);
    // In frames of 16 KiB (SETTINGS_MAX_FRAME_SIZE's default): HEADERS, then CONTINUATION.
    let mut chunks = block.chunks(16 * 1024).peekable();
    let mut wire = Vec::new();
    let mut kind = HEADERS;
    while let Some(chunk) = chunks.next() {
        let mut flags = if kind == HEADERS { END_STREAM } else { 0 };
        if chunks.peek().is_none() {
            flags |= END_HEADERS;
        }
        wire.extend(frame(kind, flags, 1, chunk));
        kind = CONTINUATION;
    }
    let block = get("/api/v1/namespaces/default/configmaps");
    wire.extend(frame(HEADERS, END_STREAM | END_HEADERS, 3, &block));
    conn.write_all(&wire).await.expect("heads");
    // Stream 1: a head that is not 200 (431, a literal), then its reset; stream 3: served.
    let mut others = 0;
    assert_eq!(
        next_on(&mut conn, 1, &mut others).await,
        Some(Seen::Head(false))
    );
    assert_eq!(
        next_on(&mut conn, 3, &mut others).await,
        Some(Seen::Head(true))
    );
    let recent = gate.debug_recent().await;
    let e = &recent["errors"][0];
    assert_eq!(
        (&e["code"], &e["verb"]),
        (&431.into(), &"(unread)".into()),
        "{recent}"
    );
    assert!(
        e["message"]
            .as_str()
            .is_some_and(|m| m.contains("131072 bytes") && m.contains("HTTP/2")),
        "{recent}"
    );
    assert_eq!(e["client"], "address 127.0.0.1", "{recent}");
}
