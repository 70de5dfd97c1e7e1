//! HTTP/1.1 keep-alive through the real server: an idle connection lets its buffers go
//! (`proxy::keepalive`), and that never costs a client a byte of a response or its connection.

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
