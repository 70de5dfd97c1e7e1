//! Exec, attach and port-forward (SPDY/3.1 and WebSocket upgrades) tunnel bytes both ways through
//! skewgate, and `logs -f` streams.

mod common;

use std::time::Duration;

use common::*;
use futures_util::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const BIG: u32 = 200_000;
const TO_OLD: &str = "writes:\n  default: old\nreads:\n  default: old\n";

/// Sends an upgrade request on a raw connection; returns the connection after the 101 response.
async fn upgrade(
    addr: std::net::SocketAddr,
    path: &str,
    protocol: &str,
    extra: &str,
) -> (TcpStream, String) {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: skewgate\r\nConnection: Upgrade\r\nUpgrade: {protocol}\r\n{extra}Content-Length: 0\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.expect("write");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut byte))
            .await
            .expect("response in time")
            .expect("read");
        assert!(
            n == 1,
            "connection closed before the response head: {}",
            String::from_utf8_lossy(&head)
        );
        head.push(byte[0]);
    }
    (s, String::from_utf8_lossy(&head).into_owned())
}

async fn echo(s: &mut TcpStream, payload: &[u8]) -> Vec<u8> {
    s.write_all(payload).await.expect("write");
    let mut got = vec![0u8; payload.len()];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut got))
        .await
        .expect("echo in time")
        .expect("read");
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_attach_and_port_forward_round_trip_bytes() {
    let sims = sims().await;
    let gate = gate(&routes(&sims, TO_OLD)).await;
    let addr = gate.server.addr;
    let cases = [
        (
            "/api/v1/namespaces/default/pods/p/exec?command=cat&stdin=true&stdout=true",
            "SPDY/3.1",
            "X-Stream-Protocol-Version: v4.channel.k8s.io\r\n",
        ),
        (
            "/api/v1/namespaces/default/pods/p/attach?stdin=true&stdout=true",
            "SPDY/3.1",
            "",
        ),
        (
            "/api/v1/namespaces/default/pods/p/portforward?ports=80",
            "SPDY/3.1",
            "X-Stream-Protocol-Version: portforward.k8s.io\r\n",
        ),
        (
            "/api/v1/namespaces/default/pods/p/exec?command=cat&stdin=true",
            "websocket",
            "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: v4.channel.k8s.io\r\n",
        ),
        (
            "/api/v1/namespaces/default/pods/p/portforward?ports=80",
            "websocket",
            "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: portforward.k8s.io\r\n",
        ),
    ];
    for (path, protocol, extra) in cases {
        let (mut s, head) = upgrade(addr, path, protocol, extra).await;
        assert!(head.starts_with("HTTP/1.1 101"), "{path}: {head}");
        assert!(
            head.to_ascii_lowercase()
                .contains(&format!("upgrade: {}", protocol.to_ascii_lowercase())),
            "{head}"
        );
        assert_eq!(
            echo(&mut s, b"hello through skewgate\n").await,
            b"hello through skewgate\n"
        );
        let big: Vec<u8> = (0..BIG).map(|i| (i % 251) as u8).collect();
        assert_eq!(
            echo(&mut s, &big).await,
            big,
            "{path}: a large payload crosses intact"
        );
    }
    // A refused upgrade is passed on as the apiserver answered it.
    let (_, head) = upgrade(
        addr,
        "/api/v1/namespaces/default/pods/p/nothing",
        "SPDY/3.1",
        "",
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
}

#[tokio::test]
async fn logs_follow_streams_lines_as_they_come() {
    let sims = sims().await;
    let gate = gate(&routes(&sims, TO_OLD)).await;
    let resp = h1()
        .get(format!(
            "{}/api/v1/namespaces/default/pods/p/log?follow=true",
            gate.url()
        ))
        .send()
        .await
        .expect("logs");
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    let mut text = String::new();
    while !text.contains("log line 5\n") {
        let chunk = tokio::time::timeout(Duration::from_secs(5), body.next())
            .await
            .expect("a line in time")
            .expect("open")
            .expect("chunk");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.starts_with("log line 1\nlog line 2\n"), "{text}");
    // A log is long-running: it is not timed as a request.
    let m = gate.metrics().await;
    assert_eq!(
        metric(
            &m,
            "skewgate_request_duration_seconds_count{backend=\"old\",class=\"read\",verb=\"get\"}"
        ),
        0.0,
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_session_counts_in_flight_until_it_closes() {
    let sims = sims().await;
    let gate = gate(&routes(&sims, TO_OLD)).await;
    let in_flight = || async {
        let m = gate.metrics().await;
        metric(
            &m,
            "skewgate_inflight_requests{backend=\"old\",class=\"read\"}",
        ) + metric(
            &m,
            "skewgate_inflight_requests{backend=\"old\",class=\"write\"}",
        )
    };
    let (mut s, head) = upgrade(
        gate.server.addr,
        "/api/v1/namespaces/default/pods/p/exec?command=cat&stdin=true&stdout=true",
        "SPDY/3.1",
        "X-Stream-Protocol-Version: v4.channel.k8s.io\r\n",
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert_eq!(echo(&mut s, b"still here\n").await, b"still here\n");
    assert_eq!(in_flight().await, 1.0, "the open session is in flight");
    drop(s);
    assert!(
        eventually(5, || async { in_flight().await == 0.0 }).await,
        "a closed session is no longer in flight"
    );
}
