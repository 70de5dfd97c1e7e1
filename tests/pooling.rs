//! Many client connections share a few upstream HTTP/2 connections, and watches never wait behind a
//! connection that is full.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

const DEFAULT_OLD: &str = "writes:\n  default: old\nreads:\n  default: old\n";

/// One HTTP/1.1 connection that sends `n` requests one after another.
async fn client_connection(addr: std::net::SocketAddr, n: usize) -> usize {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let mut ok = 0;
    for i in 0..n {
        let req = http::Request::get(format!("/api/v1/namespaces/ns-{}/configmaps", i % 7))
            .header("host", "skewgate")
            .body(Empty::<Bytes>::new())
            .expect("request");
        let resp = send.send_request(req).await.expect("response");
        if resp.status() == 200 {
            ok += 1;
        }
        let _ = resp.into_body().collect().await;
    }
    ok
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_client_connections_share_a_handful_of_upstream_connections() {
    let sims = sims().await;
    // The 500 connections stand for 500 kubelets, each a client of its own; here they all come from
    // one address, which the per-client limit would take for one client.
    let routes_file = temp_dir("pooling").join("routes.yaml");
    std::fs::write(&routes_file, routes(&sims, DEFAULT_OLD)).expect("routes");
    let settings = skewgate::proxy::ProxySettings {
        max_requests_per_client: 0,
        ..Default::default()
    };
    let gate = gate_on(&routes_file, settings).await;
    let addr = gate.server.addr;
    let before = sims.old.accepted_connections();
    let tasks: Vec<_> = (0..500)
        .map(|_| tokio::spawn(client_connection(addr, 4)))
        .collect();
    let mut ok = 0;
    for t in tasks {
        ok += t.await.expect("task");
    }
    assert_eq!(ok, 2000, "every request succeeded");
    let upstream = sims.old.accepted_connections() - before;
    println!("500 client connections, 2000 requests: {upstream} upstream connection(s) opened");
    // At most 500 requests are in flight at once: at most 100 streams a connection, on each worker
    // thread's own connections, plus the health checks' connection.
    let workers = std::thread::available_parallelism().map_or(1, usize::from);
    let bound = 500usize.div_ceil(100) + workers + 1;
    assert!(
        upstream <= bound,
        "{upstream} upstream connections for 500 client connections (bound {bound})"
    );
    let m = gate.metrics().await;
    assert!(
        metric(&m, "skewgate_upstream_connections{backend=\"old\"") <= bound as f64,
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_watches_spread_over_connections_of_100_streams() {
    let sims = sims_with(100).await;
    let gate = gate(&routes(&sims, DEFAULT_OLD)).await;
    let client = h2();
    let mut watches = Vec::new();
    for i in 0..300 {
        let resp = client
            .get(format!(
                "{}/api/v1/namespaces/default/configmaps?watch=1&w={i}",
                gate.url()
            ))
            .send()
            .await
            .expect("watch");
        assert_eq!(resp.status(), 200, "watch {i}");
        watches.push(resp.bytes_stream());
    }
    // Every watch is live: one write reaches all 300.
    let create = serde_json::json!({"metadata": {"name": "hello"}});
    let r = h1()
        .post(format!(
            "{}/api/v1/namespaces/default/configmaps",
            sims.new.url()
        ))
        .json(&create)
        .send()
        .await
        .expect("create");
    assert_eq!(r.status(), 201);
    for (i, w) in watches.iter_mut().enumerate() {
        let chunk = tokio::time::timeout(Duration::from_secs(10), w.next())
            .await
            .unwrap_or_else(|_| panic!("watch {i} got no event"))
            .expect("open")
            .expect("chunk");
        assert!(
            String::from_utf8_lossy(&chunk).contains("hello"),
            "watch {i}"
        );
    }
    let m = gate.metrics().await;
    let conns = metric(&m, "skewgate_upstream_connections{backend=\"old\"");
    let streams = metric(&m, "skewgate_upstream_streams{backend=\"old\"");
    println!("300 watches: {conns} upstream connections, {streams} streams");
    assert!(streams >= 300.0, "{m}");
    assert!(
        (3.0..=4.0).contains(&conns),
        "300 watches need 3 connections of 100 streams (4 with the health check's): {conns}"
    );
    assert!(sims.old.accepted_connections() >= 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_upstream_connections_are_closed_but_one_per_worker_stays_warm() {
    // Two streams per connection: a burst of ten slow writes needs five connections.
    let sims = sims_with(2).await;
    sims.old
        .controls
        .write_delay
        .store(300, std::sync::atomic::Ordering::Relaxed);
    let routes_file = temp_dir("idle-upstream").join("routes.yaml");
    std::fs::write(&routes_file, routes(&sims, DEFAULT_OLD)).expect("routes");
    let settings = (
        skewgate::proxy::ProxySettings {
            pool: skewgate::upstream::PoolSettings {
                idle_timeout: Duration::from_millis(400),
                ..Default::default()
            },
            ..Default::default()
        },
        skewgate::edge::EdgeSettings {
            workers: 1,
            ..skewgate::edge::EdgeSettings::default()
        },
    );
    let gate = gate_on(&routes_file, settings).await;
    let burst: Vec<_> = (0..10)
        .map(|i| {
            let url = format!("{}/api/v1/namespaces/default/configmaps", gate.url());
            tokio::spawn(async move {
                let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("b-{i}")}});
                let r = h2().post(url).json(&cm).send().await.expect("create");
                let status = r.status();
                (status, r.text().await.unwrap_or_default())
            })
        })
        .collect();
    for b in burst {
        let (status, body) = b.await.expect("join");
        assert_eq!(status, 201, "{body}");
    }
    let open = |m: &str| metric(m, "skewgate_upstream_connections{backend=\"old\"");
    let busy = open(&gate.metrics().await);
    assert!(busy >= 5.0, "the burst needed {busy} connections");
    // Idle: down to the worker's one and the health checks' one.
    let settled = eventually(10, || async { open(&gate.metrics().await) <= 2.0 }).await;
    assert!(settled, "{}", gate.metrics().await);
    let r = h1()
        .get(format!("{}/api/v1/namespaces", gate.url()))
        .send()
        .await
        .expect("read");
    assert_eq!(r.status(), 200);
}

/// An h2c connection that has had one GET answered, kept open while the returned sender lives.
async fn h2c_connection(
    addr: std::net::SocketAddr,
) -> hyper::client::conn::http2::SendRequest<Empty<Bytes>> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        TokioIo::new(tcp),
    )
    .await
    .expect("handshake");
    tokio::spawn(conn);
    let req = http::Request::get(format!(
        "http://{addr}/api/v1/namespaces/default/configmaps"
    ))
    .body(Empty::<Bytes>::new())
    .expect("request");
    let resp = send.send_request(req).await.expect("response");
    assert_eq!(resp.status(), 200);
    let _ = resp.into_body().collect().await;
    send
}

/// A handful of busy HTTP/2 connections (kube-controller-manager's, the scheduler's) is spread over
/// the workers, not left on whichever worker's accept came first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_connections_are_spread_evenly_over_the_workers() {
    let sims = sims().await;
    let routes_file = temp_dir("spread").join("routes.yaml");
    std::fs::write(&routes_file, routes(&sims, DEFAULT_OLD)).expect("routes");
    let settings = (
        skewgate::proxy::ProxySettings::default(),
        skewgate::edge::EdgeSettings {
            workers: 2,
            ..skewgate::edge::EdgeSettings::default()
        },
    );
    let gate = gate_on(&routes_file, settings).await;
    let mut open = Vec::new();
    for _ in 0..16 {
        open.push(h2c_connection(gate.server.addr).await);
    }
    let m = gate.metrics().await;
    for worker in ["0", "1"] {
        let line = format!("skewgate_worker_connections{{worker=\"{worker}\"}}");
        assert_eq!(metric(&m, &line), 8.0, "{m}");
    }
    // A closed connection leaves its worker's count, so the next choice sees the workers as they are.
    drop(open);
    let drained = eventually(10, || async {
        let m = gate.metrics().await;
        metric(&m, "skewgate_worker_connections") == 0.0
    })
    .await;
    assert!(drained, "{}", gate.metrics().await);
}
