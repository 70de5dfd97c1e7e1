//! Clients that keep misbehaving are cut off and then held back, and only they: after a rapid-reset
//! attacker's connection was closed, or a client sent malformed requests on fresh connections as
//! fast as it was answered, its address's faults wait out a hold for their answers, while other
//! clients, on the same address too and over either protocol, are served as before.

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use common::*;
use tokio::net::TcpStream;

const DEFAULTS: &str = "writes:\n  default: old\nreads:\n  default: old\n";

/// An h2c client whose connections come from `ip`.
fn h2_from(ip: Ipv4Addr) -> reqwest::Client {
    reqwest::Client::builder()
        .http2_prior_knowledge()
        .local_address(IpAddr::V4(ip))
        .build()
        .expect("client")
}

/// The offender (127.0.0.1, known only by its address) has just been struck (and that is
/// counted): a malformed head from the address waits out the hold for its 400, while an HTTP/2
/// and an HTTP/1.1 client on the same address and a client from another (127.0.0.2) are served
/// at once: the address may be many clients, and only the faults wait.
///
/// The hold is 1 s from the strike: the offender's answer must still be pending when the others'
/// come, the strike's metric having been read and three requests served since, which take
/// milliseconds.
async fn assert_held_back_alone(gate: &Gate) {
    // The strike is counted as the offending connection ends, just after its answer.
    assert!(
        eventually(5, || async {
            metric(&gate.metrics().await, "skewgate_clients_held_back_total") >= 1.0
        })
        .await,
        "no hold counted"
    );
    let addr = gate.server.addr;
    let bad = b"G@T /api/v1/namespaces HTTP/1.1\r\nHost: x\r\n\r\n";
    let held = tokio::spawn(async move { raw_h1(addr, bad).await });
    let url = format!("{}/api/v1/namespaces", gate.url());
    for (who, client) in [
        ("an HTTP/2 neighbour", h2_from(Ipv4Addr::LOCALHOST)),
        ("an HTTP/1.1 neighbour", h1()),
        ("another address", h2_from(Ipv4Addr::new(127, 0, 0, 2))),
    ] {
        let resp = client.get(&url).send().await.expect(who);
        assert_eq!(resp.status(), 200, "{who}");
    }
    assert!(
        !held.is_finished(),
        "the offender's malformed head was answered before the others' requests"
    );
    let (code, _) = tokio::time::timeout(Duration::from_secs(20), held)
        .await
        .expect("the offender is answered once its hold is over")
        .expect("task");
    assert_eq!(code, 400);
    let delayed = metric(
        &gate.metrics().await,
        "skewgate_client_connections_delayed_total",
    );
    assert_eq!(delayed, 0.0, "a connection from the address waited");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rapid_reset_is_cut_off_never_reaches_the_apiserver_in_bulk_and_the_client_is_held_back() {
    let sims = sims().await;
    let gate = gate(&routes(&sims, DEFAULTS)).await;
    let accepted_before = sims.old.accepted_connections();
    let before = sims
        .old
        .controls
        .requests
        .load(std::sync::atomic::Ordering::Relaxed);
    // The apiserver takes a while: the resets land while the requests are in flight.
    sims.old
        .controls
        .write_delay
        .store(50, std::sync::atomic::Ordering::Relaxed);

    // HEADERS, then RST_STREAM once skewgate has sent the request on, one stream after another
    // (CVE-2023-44487 paced so that h2's limit on streams reset before they are accepted never
    // sees it).
    let tcp = TcpStream::connect(gate.server.addr).await.expect("connect");
    let (send, conn) = h2::client::handshake(tcp).await.expect("h2");
    let conn = tokio::spawn(async move {
        let ended = conn.await;
        println!("abusive connection ended: {ended:?}");
    });
    let mut send = send;
    let mut sent = 0;
    for i in 0..1000 {
        send = match send.ready().await {
            Ok(s) => s,
            Err(_) => break,
        };
        let req = http::Request::post(format!(
            "http://{}/api/v1/namespaces/ns-{}/configmaps",
            gate.server.addr,
            i % 10
        ))
        .body(())
        .expect("request");
        let Ok((resp, mut stream)) = send.send_request(req, true) else {
            break;
        };
        tokio::time::sleep(Duration::from_millis(2)).await;
        stream.send_reset(h2::Reason::CANCEL);
        drop(resp);
        sent += 1;
    }
    // skewgate closes the abuser's connection.
    let closed = tokio::time::timeout(Duration::from_secs(10), conn).await;
    assert!(
        closed.is_ok(),
        "the abusive connection is still open after {sent} resets"
    );

    // The apiserver saw a bounded share of them, on few new connections; others are served.
    let reached = sims
        .old
        .controls
        .requests
        .load(std::sync::atomic::Ordering::Relaxed)
        - before;
    let opened = sims.old.accepted_connections() - accepted_before;
    println!(
        "{sent} HEADERS+RST_STREAM sent; {reached} reached the apiserver on {opened} new connection(s)"
    );
    assert!(
        reached <= 300,
        "{reached} of {sent} reset requests reached the apiserver"
    );
    assert!(opened <= 4, "{opened} new upstream connections");
    assert_held_back_alone(&gate).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_sending_malformed_requests_in_a_loop_is_held_back() {
    let sims = sims().await;
    let gate = gate(&routes(&sims, DEFAULTS)).await;
    let bad = b"GET /api/v1/namespaces HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n";
    // Nineteen are forgiven: a client with a bug is no attacker.
    for _ in 0..19 {
        let (code, body) = raw_h1(gate.server.addr, bad).await;
        assert_eq!(code, 400, "{body}");
    }
    let ok = h2_from(Ipv4Addr::LOCALHOST)
        .get(format!("{}/api/v1/namespaces", gate.url()))
        .send()
        .await
        .expect("answer");
    assert_eq!(ok.status(), 200);
    // The twentieth within the second earns a hold.
    let (code, body) = raw_h1(gate.server.addr, bad).await;
    assert_eq!(code, 400, "{body}");
    assert_held_back_alone(&gate).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_sending_oversized_heads_in_a_loop_is_held_back() {
    let sims = sims().await;
    let gate = gate(&routes(&sims, DEFAULTS)).await;
    // Over twice the header bound: cut off by the HTTP/1.1 server before it is read whole.
    let mut big = b"GET /api/v1/namespaces HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
    big.extend(std::iter::repeat_n(b'a', 300_000));
    big.extend_from_slice(b"\r\n\r\n");
    for _ in 0..20 {
        let (code, _) = raw_h1(gate.server.addr, &big).await;
        assert_eq!(code, 431);
    }
    // The status page lists them once, counted, though none became a request. Each is recorded
    // as its connection ends, which may be just after the client read the answer.
    let counted = eventually(5, || async {
        gate.debug_recent().await["errors"][0]["times"] == 20
    })
    .await;
    let recent = gate.debug_recent().await;
    assert!(counted, "{recent}");
    let e = &recent["errors"][0];
    assert_eq!(
        (&e["code"], &e["times"]),
        (&431.into(), &20.into()),
        "{recent}"
    );
    assert!(
        e["message"]
            .as_str()
            .is_some_and(|m| m.contains("HTTP/1.1")),
        "{recent}"
    );
    assert_held_back_alone(&gate).await;
}

/// Clients known only by their address share it behind SNAT, an L4 balancer or a node's host
/// network: once the address is held back, its offender's malformed heads wait out the hold for
/// their answers, while a well-behaved client on the same address is served on fresh connections
/// meanwhile, one after another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_neighbour_on_an_offenders_address_keeps_its_service() {
    let sims = sims().await;
    let gate = gate(&routes(&sims, DEFAULTS)).await;
    let addr = gate.server.addr;
    let bad = b"G@T /api/v1/namespaces HTTP/1.1\r\nHost: x\r\n\r\n";
    for _ in 0..20 {
        let (code, body) = raw_h1(addr, bad).await;
        assert_eq!(code, 400, "{body}");
    }
    assert!(
        eventually(5, || async {
            metric(&gate.metrics().await, "skewgate_clients_held_back_total") >= 1.0
        })
        .await,
        "no hold counted"
    );
    let offender = tokio::spawn(async move { raw_h1(addr, bad).await });
    let url = format!("{}/api/v1/namespaces", gate.url());
    for i in 0..10 {
        let resp = h1().get(&url).send().await.expect("the neighbour's answer");
        assert_eq!(resp.status(), 200, "request {i}");
    }
    assert!(
        !offender.is_finished(),
        "the offender's malformed head was answered before its hold ended"
    );
    let (code, _) = tokio::time::timeout(Duration::from_secs(20), offender)
        .await
        .expect("answered once the hold is over")
        .expect("task");
    assert_eq!(code, 400);
}
