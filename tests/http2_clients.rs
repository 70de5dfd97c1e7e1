//! What an HTTP/2 client's connection gets from skewgate's own HTTP/2 server (src/edge/http2):
//! keep-alive PINGs that close a connection whose client no longer answers, and a stream the client
//! resets ending its request at once, before or after the response's head, while the connection's
//! other streams go on; frames read whole however the client's writes cut them, and a frame over
//! the size skewgate accepts ending its own connection alone.

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

/// What a raw client saw on its connection.
#[derive(Debug, Default)]
struct Seen {
    pings: usize,
    goaway: bool,
    /// Streams answered (a HEADERS frame received on them).
    answered: Vec<u32>,
    closed: bool,
}

/// Speaks HTTP/2 frame by frame for `secs`: acknowledges SETTINGS, answers PINGs when `answer_pings`,
/// and sends a GET on stream 1 after the first PING it saw.
async fn raw_client(addr: std::net::SocketAddr, answer_pings: bool, secs: u64) -> Seen {
    let mut conn = connect(addr).await;
    let mut seen = Seen::default();
    let until = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let read = tokio::time::timeout_at(until, read_frame(&mut conn)).await;
        let Ok(read) = read else {
            return seen;
        };
        let Some(Frame {
            kind,
            flags,
            stream,
            payload,
        }) = read
        else {
            seen.closed = true;
            return seen;
        };
        let reply = match kind {
            SETTINGS if flags & ACK == 0 => frame(SETTINGS, ACK, 0, &[]),
            PING if flags & ACK == 0 => {
                seen.pings += 1;
                let mut out = Vec::new();
                if answer_pings {
                    out = frame(PING, ACK, 0, &payload);
                }
                if seen.pings == 1 {
                    out.extend(frame(
                        HEADERS,
                        END_STREAM | END_HEADERS,
                        1,
                        &get("/api/v1/namespaces/default/configmaps"),
                    ));
                }
                out
            }
            GOAWAY => {
                seen.goaway = true;
                Vec::new()
            }
            HEADERS => {
                seen.answered.push(stream);
                Vec::new()
            }
            _ => Vec::new(),
        };
        if !reply.is_empty() && conn.write_all(&reply).await.is_err() {
            seen.closed = true;
            return seen;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_answering_pings_is_closed_and_one_that_answers_is_served_on() {
    let sims = sims().await;
    let settings = (
        ProxySettings::default(),
        EdgeSettings {
            client_ping_every: Duration::from_millis(200),
            client_ping_timeout: Duration::from_secs(1),
            ..EdgeSettings::default()
        },
    );
    let text = routes(&sims, "writes:\n  default: old\nreads:\n  default: old\n");
    let gate = gate_with(&text, settings).await;
    let addr = gate.server.addr;
    let (answering, silent) = tokio::join!(raw_client(addr, true, 4), raw_client(addr, false, 4));
    // PINGed every 200 ms for 4 s and answering: open to the end, and its GET answered.
    assert!(answering.pings >= 5, "{answering:?}");
    assert!(!answering.closed && !answering.goaway, "{answering:?}");
    assert_eq!(answering.answered, vec![1], "{answering:?}");
    // Silent: one PING, unanswered for 1 s, and the connection is closed (its request was
    // answered before that: a connection is judged by its PINGs, not its requests).
    assert_eq!(silent.pings, 1, "{silent:?}");
    assert!(silent.closed, "{silent:?}");
}

/// Requests being served now through `gate`, by the in-flight gauge.
async fn inflight(gate: &Gate) -> f64 {
    let m = gate.metrics().await;
    m.lines()
        .filter(|l| l.starts_with("skewgate_inflight_requests{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_stream_ends_its_request_at_once_and_the_connections_other_streams_go_on() {
    let sims = sims().await;
    let (frozen, _hole) = black_hole().await;
    let text = routes_with_frozen_namespace(&sims, &frozen);
    let gate = gate(&text).await;
    let addr = gate.server.addr;
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (send, conn) = h2::client::handshake(tcp).await.expect("handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut send = send.ready().await.expect("ready");
    let request = |path: &str| {
        http::Request::get(format!("http://{addr}{path}"))
            .body(())
            .expect("request")
    };
    // Before its head: a GET waiting on a frozen apiserver (70 s before it would time out).
    let (waiting, mut waiting_stream) = send
        .send_request(request("/api/v1/namespaces/frozen/configmaps/x"), true)
        .expect("send");
    // After its head: a watch, its events still to come.
    let (watch, _) = send
        .send_request(
            request("/api/v1/namespaces/default/configmaps?watch=true"),
            true,
        )
        .expect("send");
    let watch = watch.await.expect("watch head");
    assert_eq!(watch.status(), 200);
    assert!(
        eventually(5, || async { inflight(&gate).await == 2.0 }).await,
        "both requests in flight"
    );
    waiting_stream.send_reset(h2::Reason::CANCEL);
    drop(waiting);
    drop(watch);
    assert!(
        eventually(5, || async { inflight(&gate).await == 0.0 }).await,
        "reset requests still in flight: {}",
        inflight(&gate).await
    );
    // The connection serves on.
    let mut send = send.ready().await.expect("ready");
    let (ok, _) = send
        .send_request(request("/api/v1/namespaces/default/configmaps"), true)
        .expect("send");
    assert_eq!(ok.await.expect("answer").status(), 200);
}

/// Sends `bytes` one byte per write, with a pause between, so that every frame arrives cut.
async fn dribble(conn: &mut TcpStream, bytes: &[u8]) {
    conn.set_nodelay(true).expect("nodelay");
    for b in bytes {
        conn.write_all(std::slice::from_ref(b))
            .await
            .expect("write");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Reads frames (acknowledging SETTINGS) until a GOAWAY or the end of the stream `id`; returns
/// the GOAWAY's error code, or `None` when the stream ended.
async fn until_goaway_or_end_of(conn: &mut TcpStream, id: u32) -> Option<u32> {
    while let Some(f) = read_frame(conn).await {
        if f.kind == SETTINGS && f.flags & ACK == 0 {
            let _ = conn.write_all(&frame(SETTINGS, ACK, 0, &[])).await;
        }
        if f.kind == GOAWAY {
            return Some(u32::from_be_bytes([
                f.payload[4],
                f.payload[5],
                f.payload[6],
                f.payload[7],
            ]));
        }
        if f.stream == id && f.flags & END_STREAM != 0 {
            return None;
        }
    }
    panic!("the connection ended without GOAWAY and without the stream's end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_cut_anywhere_are_read_whole_and_an_oversized_frame_ends_its_own_connection_alone() {
    let sims = sims().await;
    let text = routes(&sims, "writes:\n  default: old\nreads:\n  default: old\n");
    let gate = gate_with(&text, ProxySettings::default()).await;
    let addr = gate.server.addr;
    let get_frame = |id| {
        frame(
            HEADERS,
            END_STREAM | END_HEADERS,
            id,
            &get("/api/v1/namespaces/default/configmaps"),
        )
    };
    // One client writes byte by byte: heads and payloads arrive in pieces.
    let cut = async {
        let mut conn = TcpStream::connect(addr).await.expect("connect");
        let mut hello = PREFACE.to_vec();
        hello.extend(frame(SETTINGS, 0, 0, &[]));
        hello.extend(get_frame(1));
        hello.extend(get_frame(3));
        dribble(&mut conn, &hello).await;
        let first = until_goaway_or_end_of(&mut conn, 1).await;
        let second = until_goaway_or_end_of(&mut conn, 3).await;
        (first, second)
    };
    // Another announces a frame one byte over the 16 KiB every HTTP/2 peer accepts by default.
    let oversized = async {
        let mut conn = TcpStream::connect(addr).await.expect("connect");
        let mut hello = PREFACE.to_vec();
        hello.extend(frame(SETTINGS, 0, 0, &[]));
        hello.extend(get_frame(1));
        conn.write_all(&hello).await.expect("preface");
        let served = until_goaway_or_end_of(&mut conn, 1).await;
        let mut big = frame(
            HEADERS,
            END_STREAM | END_HEADERS,
            3,
            &get("/api/v1/namespaces"),
        );
        let len = (16_384u32 + 1).to_be_bytes();
        big[..3].copy_from_slice(&len[1..]);
        conn.write_all(&big).await.expect("oversized head");
        (served, until_goaway_or_end_of(&mut conn, 3).await)
    };
    let both = tokio::time::timeout(Duration::from_secs(20), async {
        tokio::join!(cut, oversized)
    });
    let ((first, second), (served, refused)) = both.await.expect("both clients answered");
    assert_eq!(
        (first, second),
        (None, None),
        "the cut client's two GETs are answered"
    );
    assert_eq!(served, None, "a GET before the oversized frame is answered");
    assert_eq!(refused, Some(0x6), "GOAWAY with FRAME_SIZE_ERROR");
}
