//! The pool's slot reservation and connection rate, against an in-process HTTP/2 server.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;

use super::*;

#[test]
fn new_connections_are_bounded_per_second() {
    let mut rate = ConnectRate::default();
    let t0 = std::time::Instant::now();
    for _ in 0..3 {
        assert_eq!(rate.admit(t0, 3), None);
    }
    let wait = rate.admit(t0 + Duration::from_millis(400), 3);
    assert_eq!(wait, Some(Duration::from_millis(600)));
    assert_eq!(rate.admit(t0 + Duration::from_millis(1000), 3), None);
}

/// An HTTP/2 server allowing `streams` concurrent streams per connection that never answers (the
/// streams stay open); returns its address and how many connections it accepted.
async fn server(streams: u32) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::Builder::new()
                    .max_concurrent_streams(streams)
                    .handshake::<_, Bytes>(tcp)
                    .await
                else {
                    return;
                };
                let mut held = Vec::new();
                while let Some(Ok(stream)) = conn.accept().await {
                    held.push(stream);
                }
            });
        }
    });
    (addr, accepted)
}

fn pool(addr: SocketAddr) -> Arc<EndpointPool> {
    pool_with(addr, PoolSettings::default())
}

fn pool_with(addr: SocketAddr, settings: PoolSettings) -> Arc<EndpointPool> {
    let endpoint = Endpoint {
        url: format!("http://{addr}"),
        tls: false,
        host: addr.ip().to_string(),
        port: addr.port(),
        server_name: addr.ip().to_string(),
    };
    let gauge = || IntGauge::new("g", "g").expect("gauge");
    Arc::new(EndpointPool::new(
        endpoint,
        settings,
        [gauge(), gauge(), gauge()],
    ))
}

#[tokio::test]
async fn a_connection_takes_streams_up_to_the_peers_limit_then_another_opens() {
    let (addr, accepted) = server(2).await;
    let pool = pool(addr);
    let a = pool.acquire(Credential::FrontProxy).await.expect("slot");
    // The peer's SETTINGS (2 streams) have arrived once a connection is in the pool.
    let b = pool.acquire(Credential::FrontProxy).await.expect("slot");
    assert_eq!((pool.connections(), pool.active_streams()), (1, 2));
    let c = pool.acquire(Credential::FrontProxy).await.expect("slot");
    assert_eq!(
        pool.connections(),
        2,
        "a full connection is never queued behind"
    );
    drop(b);
    let d = pool.acquire(Credential::FrontProxy).await.expect("slot");
    assert_eq!(
        (pool.connections(), pool.active_streams()),
        (2, 3),
        "a freed slot is taken again before anything opens"
    );
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
    drop((a, c, d));
    assert_eq!(pool.active_streams(), 0);
}

#[tokio::test]
async fn a_retired_connection_takes_no_new_stream() {
    let (addr, accepted) = server(100).await;
    let pool = pool(addr);
    let a = pool.acquire(Credential::FrontProxy).await.expect("slot");
    a.retire_connection(&pool);
    assert_eq!(pool.connections(), 0);
    let b = pool.acquire(Credential::FrontProxy).await.expect("slot");
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "a new connection opened"
    );
    drop(a);
    // retire_all (a reloaded TLS configuration) leaves the open stream to finish elsewhere.
    pool.retire_all();
    assert_eq!(pool.connections(), 0);
    assert_eq!(pool.active_streams(), 1);
    drop(b);
    assert_eq!(pool.active_streams(), 0);
}

#[tokio::test]
async fn a_refused_connect_marks_the_endpoint_down_with_its_reason() {
    // A port nothing listens on.
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    };
    let pool = pool(addr);
    let err = match pool.acquire(Credential::FrontProxy).await {
        Err(e) => e,
        Ok(_) => panic!("nothing listens there"),
    };
    assert!(
        matches!(err, UpstreamError::Connect(DialError::Tcp { .. })),
        "{err}"
    );
    assert!(
        std::error::Error::source(&err).is_some(),
        "the cause is kept"
    );
    assert_eq!(pool.state(), EndpointState::Down);
    let failure = pool.failure().expect("a reason");
    assert!(
        failure.why.starts_with(&format!("http://{addr}: ")),
        "{failure}"
    );
}

/// A raw HTTP/2 server that never answers a PING; while `busy`, it sends a frame every 50 ms (a
/// WINDOW_UPDATE on the connection, as a stream of responses would keep the connection talking).
async fn deaf_server(busy: bool) -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut rd, mut wr) = tcp.into_split();
                // Its SETTINGS, and the acknowledgement of the client's.
                let hello = [[0u8, 0, 0, 4, 0, 0, 0, 0, 0], [0, 0, 0, 4, 1, 0, 0, 0, 0]].concat();
                if wr.write_all(&hello).await.is_err() {
                    return;
                }
                tokio::spawn(async move {
                    let mut sink = [0u8; 4096];
                    while rd.read(&mut sink).await.is_ok_and(|n| n > 0) {}
                });
                loop {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    let update = [0u8, 0, 4, 8, 0, 0, 0, 0, 0, 0, 0, 0, 1];
                    if busy && wr.write_all(&update).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

fn pinging_pool(addr: SocketAddr) -> Arc<EndpointPool> {
    let settings = PoolSettings {
        ping_interval: Duration::from_millis(100),
        ping_timeout: Duration::from_millis(300),
        ..PoolSettings::default()
    };
    pool_with(addr, settings)
}

#[tokio::test]
async fn a_connection_that_answers_anything_survives_its_late_ping_and_a_silent_one_is_dropped() {
    let busy = pinging_pool(deaf_server(true).await);
    let silent = pinging_pool(deaf_server(false).await);
    busy.set_state(EndpointState::Ready);
    silent.set_state(EndpointState::Ready);
    let _a = busy.acquire(Credential::FrontProxy).await.expect("slot");
    let _b = silent.acquire(Credential::FrontProxy).await.expect("slot");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        busy.connections(),
        1,
        "a busy apiserver's connection was dropped"
    );
    assert_eq!(busy.state(), EndpointState::Ready);
    assert_eq!(silent.connections(), 0, "a silent connection was kept");
    assert_eq!(silent.state(), EndpointState::Down);
    let why = silent.failure().expect("a reason").why.clone();
    assert!(why.contains("PING"), "{why}");
}
