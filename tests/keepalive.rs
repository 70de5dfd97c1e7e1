//! Idle client connections through the real server let their buffers go: HTTP/1.1 keep-alive
//! (`edge::keepalive`), and h2 connections each time they wait for their client (the patch in
//! vendor/h2). That never costs a client a byte of a response or its connection.

mod common;
#[path = "common/pki.rs"]
mod pki;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

const DEFAULTS: &str = "writes:\n  default: old\nreads:\n  default: old\n";

/// Longer than a connection takes to give its buffers back when quiet (one to two seconds).
const IDLE: Duration = Duration::from_millis(2500);

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

async fn http1_connection<I>(io: I) -> Sender
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    send
}

async fn get(send: &mut Sender, path: &str) -> http::Response<hyper::body::Incoming> {
    let req = http::Request::get(path)
        .header("host", "skewgate")
        .body(Empty::new())
        .expect("request");
    let sent = async {
        send.ready().await.expect("the connection is still open");
        send.send_request(req).await.expect("response")
    };
    tokio::time::timeout(Duration::from_secs(10), sent)
        .await
        .expect("an answer within 10 s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_of_a_large_list_gets_it_whole_and_keeps_its_connection() {
    let sims = sims().await;
    big_configmaps(&sims, 40, 50_000).await;
    let gate = gate(&routes(&sims, DEFAULTS)).await;
    let tcp = TcpStream::connect(gate.server.addr).await.expect("connect");
    let mut send = http1_connection(tcp).await;

    let resp = get(&mut send, "/api/v1/namespaces/default/configmaps").await;
    assert_eq!(resp.status(), 200);
    // Not read for a while: skewgate's writes wait on a full socket, the response half sent.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    let list: serde_json::Value = serde_json::from_slice(&body).expect("a whole JSON list");
    assert_eq!(list["items"].as_array().map(Vec::len), Some(40));

    // Idle between requests (long enough for skewgate to let its buffers go), then on the same
    // connection.
    for _ in 0..2 {
        tokio::time::sleep(IDLE).await;
        let resp = get(&mut send, "/version").await;
        assert_eq!(resp.status(), 200);
        resp.into_body().collect().await.expect("body");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_http1_connection_serves_requests_after_idle_pauses() {
    let p = pki::pki();
    let sims = sims().await;
    let routes_file = temp_dir("keepalive-tls").join("routes.yaml");
    std::fs::write(&routes_file, routes(&sims, DEFAULTS)).expect("routes");
    let gate = gate_on(&routes_file, pki::settings(&p, true)).await;
    let tcp = TcpStream::connect(gate.server.addr).await.expect("connect");
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let alice = pki::client_config(&p.ca, Some(&p.alice), &[b"http/1.1"]);
    let tls = tokio_rustls::TlsConnector::from(alice)
        .connect(name, tcp)
        .await
        .expect("handshake");
    let mut send = http1_connection(tls).await;
    for _ in 0..3 {
        let resp = get(&mut send, "/api/v1/namespaces/default/configmaps").await;
        assert_eq!(resp.status(), 200);
        resp.into_body().collect().await.expect("body");
        tokio::time::sleep(IDLE).await;
    }
}

/// A connection quiet from the start gives its stream back before any request, and serves the
/// request that comes later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http1_connection_quiet_before_its_first_request_is_served() {
    let sims = sims().await;
    let gate = gate(&routes(&sims, DEFAULTS)).await;
    let tcp = TcpStream::connect(gate.server.addr).await.expect("connect");
    let mut send = http1_connection(tcp).await;
    tokio::time::sleep(IDLE).await;
    let resp = get(&mut send, "/version").await;
    assert_eq!(resp.status(), 200);
}

/// The h2 side: a server connection frees its buffers and its streams' slabs every time it waits
/// with no stream open, and keeps HPACK entries that outlive the buffers they were decoded from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2_connection_that_waits_between_requests_serves_each_whole() {
    let sims = sims().await;
    big_configmaps(&sims, 20, 50_000).await;
    let gate = gate(&routes(&sims, DEFAULTS)).await;
    let client = h2();
    let list = format!("{}/api/v1/namespaces/default/configmaps", gate.url());
    let pause = Duration::from_millis(300);
    for round in 0..3 {
        // The same path and headers each round: from the second on, the client sends them as
        // references to the HPACK entries the first round added.
        let resp = client.get(&list).send().await.expect("list");
        assert_eq!(resp.status(), 200, "round {round}");
        let body: serde_json::Value = resp.json().await.expect("a whole JSON list");
        assert_eq!(
            body["items"].as_array().map(Vec::len),
            Some(20),
            "round {round}"
        );
        tokio::time::sleep(pause).await;
    }
    // A request body after a pause: read into buffers allocated anew.
    let blob = "y".repeat(100_000);
    let created = client
        .post(&list)
        .json(&serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "after-a-pause", "namespace": "default"},
            "data": {"blob": blob},
        }))
        .send()
        .await
        .expect("create");
    assert_eq!(created.status(), 201);
    tokio::time::sleep(pause).await;
    let got: serde_json::Value = client
        .get(format!("{list}/after-a-pause"))
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("JSON");
    assert_eq!(got["data"]["blob"].as_str(), Some(blob.as_str()));
    // All of it on one connection.
    let m = gate.metrics().await;
    assert_eq!(
        metric(&m, "skewgate_client_connections{protocol=\"http2\"}"),
        1.0,
        "{m}"
    );
}

/// What a client like client-go sends: `:path` and `:authority` as HPACK literals with
/// incremental indexing, then, on the next request, as references to those table entries. Between
/// the two the connection waits and frees the buffers the entries were decoded from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hpack_entries_indexed_before_a_pause_still_name_the_same_path_after_it() {
    let sims = sims().await;
    big_configmaps(&sims, 1, 1_000).await;
    let gate = gate(&routes(&sims, DEFAULTS)).await;
    let mut conn = raw_h2::Conn::open(gate.server.addr).await;
    let path = b"/api/v1/namespaces/default/configmaps/big-1000-0";
    // :method GET, :scheme http (static 2, 6); :path and :authority indexed by name (static 4, 1)
    // and added to the table: :path becomes entry 63, :authority 62.
    let mut first = vec![0x82, 0x86, 0x44, u8::try_from(path.len()).expect("short")];
    first.extend_from_slice(path);
    first.extend_from_slice(&[0x41, 8]);
    first.extend_from_slice(b"skewgate");
    for (stream, block) in [(1, first), (3, vec![0x82, 0x86, 0xbf, 0xbe])] {
        let (status, body) = conn.request(stream, &block).await;
        assert_eq!(
            status, 0x88,
            "stream {stream}: :status 200 (static entry 8)"
        );
        let cm: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
        assert_eq!(cm["metadata"]["name"], "big-1000-0", "stream {stream}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Just enough of an HTTP/2 client to send header blocks encoded by hand.
mod raw_h2 {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    pub struct Conn(TcpStream);

    impl Conn {
        pub async fn open(addr: std::net::SocketAddr) -> Conn {
            let mut tcp = TcpStream::connect(addr).await.expect("connect");
            tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
                .await
                .expect("preface");
            let mut conn = Conn(tcp);
            conn.frame(4, 0, 0, &[]).await;
            conn
        }

        async fn frame(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
            let len = u32::try_from(payload.len()).expect("small").to_be_bytes();
            let mut f = vec![len[1], len[2], len[3], kind, flags];
            f.extend_from_slice(&stream.to_be_bytes());
            f.extend_from_slice(payload);
            self.0.write_all(&f).await.expect("write");
        }

        /// Sends a GET's header block on `stream`; returns the first byte of the response's
        /// header block and the response's body.
        pub async fn request(&mut self, stream: u32, block: &[u8]) -> (u8, Vec<u8>) {
            // END_STREAM | END_HEADERS
            self.frame(1, 0x5, stream, block).await;
            let read = async {
                let (mut status, mut body) = (0, Vec::new());
                loop {
                    let mut head = [0u8; 9];
                    self.0.read_exact(&mut head).await.expect("frame head");
                    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
                    let (kind, flags) = (head[3], head[4]);
                    let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
                    let mut payload = vec![0u8; len];
                    self.0
                        .read_exact(&mut payload)
                        .await
                        .expect("frame payload");
                    match kind {
                        4 if flags & 1 == 0 => self.frame(4, 1, 0, &[]).await,
                        1 if id == stream => status = payload.first().copied().unwrap_or(0),
                        0 if id == stream => body.extend_from_slice(&payload),
                        3 | 7 => panic!("stream {stream}: reset or GOAWAY (frame type {kind})"),
                        _ => {}
                    }
                    if id == stream && flags & 1 == 1 && (kind == 0 || kind == 1) {
                        return (status, body);
                    }
                }
            };
            tokio::time::timeout(Duration::from_secs(10), read)
                .await
                .expect("an answer within 10 s")
        }
    }
}
