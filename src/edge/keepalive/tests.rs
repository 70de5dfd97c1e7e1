use super::*;
use bytes::Bytes;
use std::convert::Infallible;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

const GET: &[u8] = b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n";

/// A server of one connection that answers every request `ok` (through hyper only), and its
/// exchanges.
async fn serve_one(idle: Duration) -> (TcpStream, Arc<Exchanges>, tokio::task::JoinHandle<()>) {
    serve_with(idle, true).await
}

/// The fast path's answer to every request: `fast`.
fn fast_answer(_req: http::Request<RequestBody>) -> std::future::Ready<http::Response<ProxyBody>> {
    std::future::ready(http::Response::new(ProxyBody::full(Bytes::from_static(
        b"fast",
    ))))
}

/// A server of one connection: requests the fast path takes are answered `fast` (unless
/// `hyper_only`), the others `ok` by hyper; and its exchanges.
async fn serve_with(
    idle: Duration,
    hyper_only: bool,
) -> (TcpStream, Arc<Exchanges>, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let client = TcpStream::connect(listener.local_addr().expect("addr"))
        .await
        .expect("connect");
    let (server, _) = listener.accept().await.expect("accept");
    let exchanges = Arc::new(Exchanges::default());
    let begun = exchanges.clone();
    let service = hyper::service::service_fn(move |_req| {
        let exchange = begun.begin();
        async move {
            let body = ProxyBody::full(Bytes::from_static(b"ok")).with_exchange(Some(exchange));
            Ok::<_, Infallible>(http::Response::new(body))
        }
    });
    let ex = exchanges.clone();
    let served = tokio::spawn(async move {
        let h1 = http1::Builder::new();
        let stop = CancellationToken::new();
        let mut fast = FastPath::new(fast_answer, 16 << 10, idle);
        if hyper_only {
            fast = fast.hyper_only();
        }
        let _ = serve(server, &h1, service, ex, &mut fast, &stop).await;
    });
    (client, exchanges, served)
}

/// Reads responses until `n` have ended (each is `ok`, two bytes, with a content-length).
async fn read_responses(client: &mut TcpStream, n: usize) -> String {
    read_until(client, "\r\n\r\nok", n).await
}

/// Reads until `end` (each response's last bytes) has come `n` times.
async fn read_until(client: &mut TcpStream, end: &str, n: usize) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while String::from_utf8_lossy(&got).matches(end).count() < n {
        let read = tokio::time::timeout(Duration::from_secs(5), client.read(&mut buf))
            .await
            .expect("a response in time")
            .expect("read");
        assert!(read > 0, "closed after {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..read]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

fn bursts(e: &Exchanges) -> u32 {
    e.bursts.load(Ordering::Relaxed)
}

#[tokio::test]
async fn an_idle_connection_gives_its_buffers_back_and_serves_the_next_request() {
    let (mut client, exchanges, _served) = serve_one(Duration::from_secs(60)).await;
    for round in 1..=3 {
        client.write_all(GET).await.expect("write");
        let got = read_responses(&mut client, 1).await;
        assert!(got.starts_with("HTTP/1.1 200"), "{got}");
        // Each request came to a new hyper connection: the last one let its stream go.
        assert_eq!(bursts(&exchanges), round);
        tokio::time::sleep(SWEEP * 3).await;
    }
}

#[tokio::test]
async fn a_head_sent_in_two_parts_is_waited_for_not_cut_off() {
    let (mut client, exchanges, _served) = serve_one(Duration::from_secs(60)).await;
    let (first, rest) = GET.split_at(20);
    client.write_all(first).await.expect("write");
    tokio::time::sleep(SWEEP * 3).await;
    client.write_all(rest).await.expect("write");
    let got = read_responses(&mut client, 1).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert_eq!(bursts(&exchanges), 1, "the half head was kept");
}

#[tokio::test]
async fn pipelined_requests_are_all_answered() {
    let (mut client, _, _served) = serve_one(Duration::from_secs(60)).await;
    client.write_all(&GET.repeat(3)).await.expect("write");
    let got = read_responses(&mut client, 3).await;
    assert_eq!(got.matches("HTTP/1.1 200").count(), 3, "{got}");
}

#[tokio::test]
async fn back_to_back_requests_each_go_to_hyper_alone_and_come_back_when_answered() {
    // hyper is lent the stream for one request of known length at a time (so that what follows
    // is read by the fast path, as Go reads it), and gives it back as its response ends, not at
    // the sweep's tick: twenty requests, twenty bursts, none waiting for a tick.
    let (mut client, exchanges, _served) = serve_one(Duration::from_secs(60)).await;
    for _ in 0..20 {
        client.write_all(GET).await.expect("write");
        read_responses(&mut client, 1).await;
    }
    assert_eq!(bursts(&exchanges), 20);
}

#[tokio::test]
async fn a_connection_idle_past_the_idle_timeout_is_closed_and_a_busy_one_is_not() {
    let (mut client, exchanges, served) = serve_one(SWEEP * 3).await;
    // Requests 2.5 s apart: each gives its buffers back (after one to two ticks), and then
    // waits less than the timeout for the next.
    for _ in 0..3 {
        client.write_all(GET).await.expect("write");
        read_responses(&mut client, 1).await;
        tokio::time::sleep(SWEEP * 2 + Duration::from_millis(500)).await;
    }
    assert_eq!(bursts(&exchanges), 3);
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(10), client.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0))), "{read:?}");
    tokio::time::timeout(Duration::from_secs(10), served)
        .await
        .expect("the connection ended")
        .expect("served");
}

/// Reads until `n` responses of the fast path (`fast`) have ended.
async fn read_fast(client: &mut TcpStream, n: usize) -> String {
    read_until(client, "\r\n\r\nfast", n).await
}

#[tokio::test]
async fn requests_without_a_body_are_served_by_the_fast_path_one_after_another_and_pipelined() {
    let (mut client, exchanges, _served) = serve_with(Duration::from_secs(60), false).await;
    for _ in 0..3 {
        client.write_all(GET).await.expect("write");
        let got = read_fast(&mut client, 1).await;
        assert!(
            got.starts_with("HTTP/1.1 200 OK\r\ndate: ")
                && got.ends_with("content-length: 4\r\n\r\nfast"),
            "{got}"
        );
    }
    client.write_all(&GET.repeat(3)).await.expect("write");
    assert_eq!(
        read_fast(&mut client, 3)
            .await
            .matches("HTTP/1.1 200")
            .count(),
        3
    );
    assert_eq!(bursts(&exchanges), 0, "hyper served none of them");
}

#[tokio::test]
async fn a_request_with_a_body_goes_to_hyper_whole_and_the_next_get_to_the_fast_path() {
    let (mut client, exchanges, _served) = serve_with(Duration::from_secs(60), false).await;
    client
        .write_all(b"PUT /x HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
        .await
        .expect("write");
    let got = read_responses(&mut client, 1).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert_eq!(bursts(&exchanges), 1);
    // Once hyper gave the idle stream back (a sweep tick or two), a GET is the fast path's again.
    tokio::time::sleep(SWEEP * 3).await;
    client.write_all(GET).await.expect("write");
    read_fast(&mut client, 1).await;
    assert_eq!(bursts(&exchanges), 1);
}

#[tokio::test]
async fn connection_close_is_answered_and_then_the_connection_closes() {
    let (mut client, _, served) = serve_with(Duration::from_secs(60), false).await;
    client
        .write_all(b"GET /version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .expect("write");
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut got))
        .await
        .expect("closed in time")
        .expect("read");
    let got = String::from_utf8_lossy(&got);
    assert!(got.ends_with("connection: close\r\n\r\nfast"), "{got}");
    tokio::time::timeout(Duration::from_secs(5), served)
        .await
        .expect("the connection ended")
        .expect("served");
}
