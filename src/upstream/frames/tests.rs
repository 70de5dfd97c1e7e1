//! The frame-level client against a peer that speaks raw HTTP/2 frames (h2's codec on the other end
//! of an in-memory pipe), so that each test sees exactly the frames skewgate writes, and sends
//! exactly those an apiserver would, misbehaving ones included.

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;
use h2::Codec;
use h2::Reason;
use h2::frame::{
    Data, Frame, GoAway, Headers, Ping, Pseudo, Reset, Settings, StreamId, WindowUpdate,
};
use http::{HeaderMap, Request, StatusCode};
use tokio::io::{AsyncReadExt, DuplexStream};

use super::*;
use crate::upstream::head;

/// The apiserver's end of the connection.
pub(super) struct Peer {
    codec: Codec<DuplexStream, Bytes>,
}

impl Peer {
    pub(super) async fn send(&mut self, frame: impl Into<Frame<Bytes>>) {
        self.codec.buffer(frame.into()).expect("buffer a frame");
        poll_fn(|cx| self.codec.flush(cx)).await.expect("flush");
    }

    /// The next frame from skewgate, within a second; `None` if the connection ended.
    pub(super) async fn next(&mut self) -> Option<Frame> {
        let next = poll_fn(|cx| Pin::new(&mut self.codec).poll_next(cx));
        match tokio::time::timeout(Duration::from_secs(1), next).await {
            Ok(Some(Ok(frame))) => Some(frame),
            Ok(_) => None,
            Err(_) => panic!("no frame from skewgate within a second"),
        }
    }

    /// The next frame that is not about the connection as a whole (SETTINGS, its ACK, PINGs, the
    /// connection's window).
    pub(super) async fn next_on_stream(&mut self) -> Frame {
        loop {
            match self.next().await.expect("a frame") {
                Frame::Settings(_) | Frame::Ping(_) => {}
                Frame::WindowUpdate(w) if w.stream_id().is_zero() => {}
                frame => return frame,
            }
        }
    }

    /// Whether skewgate sends nothing on a stream for a while.
    pub(super) async fn quiet(&mut self) -> bool {
        let next = async {
            loop {
                match poll_fn(|cx| Pin::new(&mut self.codec).poll_next(cx)).await {
                    Some(Ok(Frame::Settings(_) | Frame::Ping(_))) => {}
                    other => return other,
                }
            }
        };
        tokio::time::timeout(Duration::from_millis(200), next)
            .await
            .is_err()
    }

    /// The stream id of skewgate's next HEADERS frame, which must come next.
    pub(super) async fn next_headers(&mut self) -> StreamId {
        match self.next_on_stream().await {
            Frame::Headers(h) => h.stream_id(),
            other => panic!("expected HEADERS, got {other:?}"),
        }
    }

    pub(super) async fn respond(&mut self, id: StreamId, status: u16, end: bool) {
        let mut head = Headers::new(
            id,
            Pseudo::response(StatusCode::from_u16(status).expect("status")),
            HeaderMap::new(),
        );
        if end {
            head.set_end_stream();
        }
        self.send(head).await;
    }

    pub(super) async fn data(&mut self, id: StreamId, payload: &'static [u8], end: bool) {
        let mut data = Data::new(id, Bytes::from_static(payload));
        data.set_end_stream(end);
        self.send(data).await;
    }
}

/// What the pool learns from the connection.
pub(super) struct Learned {
    settled: Arc<tokio::sync::Notify>,
    went_away: Arc<AtomicBool>,
}

/// A connection to a peer that sends `settings` first and has read skewgate's preface, SETTINGS
/// and connection window.
async fn connect(settings: Settings) -> (Link, Peer, Learned) {
    connect_with(settings, Arc::default()).await
}

/// `connect`, with the response budget `budget`.
pub(super) async fn connect_with(
    settings: Settings,
    budget: Arc<crate::upstream::ResponseBudget>,
) -> (Link, Peer, Learned) {
    let (ours, theirs) = tokio::io::duplex(1 << 20);
    let learned = Learned {
        settled: Arc::new(tokio::sync::Notify::new()),
        went_away: Arc::new(AtomicBool::new(false)),
    };
    let went_away = learned.went_away.clone();
    let hooks = Hooks {
        settled: learned.settled.clone(),
        on_go_away: Box::new(move || went_away.store(true, Ordering::SeqCst)),
    };
    let authority = http::uri::Authority::from_static("apiserver:6443");
    let (link, task) = handshake(ours, &authority, 100, hooks, budget)
        .await
        .expect("handshake");
    tokio::spawn(task);
    let mut theirs = theirs;
    let mut preface = [0u8; 24];
    theirs.read_exact(&mut preface).await.expect("preface");
    assert_eq!(&preface, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    let mut peer = Peer {
        codec: Codec::new(theirs),
    };
    match peer.next().await {
        Some(Frame::Settings(s)) => {
            assert_eq!(s.is_push_enabled(), Some(false));
            assert_eq!(s.initial_window_size(), Some(STREAM_WINDOW));
        }
        other => panic!("expected skewgate's SETTINGS first, got {other:?}"),
    }
    match peer.next().await {
        Some(Frame::WindowUpdate(w)) => {
            assert!(w.stream_id().is_zero());
            assert_eq!(w.size_increment(), CONNECTION_WINDOW - 65_535);
        }
        other => panic!("expected the connection's window, got {other:?}"),
    }
    peer.send(settings).await;
    learned.settled.notified().await;
    (link, peer, learned)
}

pub(super) fn get(path: &str) -> Head {
    head(
        Request::get(format!("https://apiserver:6443{path}"))
            .header("x-remote-user", "alice")
            .body(())
            .expect("request"),
    )
}

pub(super) async fn body_frame(
    body: &mut RecvBody,
) -> Option<Result<http_body::Frame<Bytes>, h2::Error>> {
    tokio::time::timeout(Duration::from_secs(1), poll_fn(|cx| body.poll_frame(cx)))
        .await
        .expect("a body frame within a second")
}

#[tokio::test]
async fn a_get_goes_out_as_one_headers_frame_and_its_response_streams_back() {
    let mut settings = Settings::default();
    settings.set_max_concurrent_streams(Some(7));
    settings.set_max_header_list_size(Some(4096));
    let (link, mut peer, _) = connect(settings).await;
    assert_eq!(link.max_streams(), 7);
    assert_eq!(link.header_list_limit(), 4096);
    let (response, body) = link
        .send_request(get("/api/v1/pods?limit=1"), true)
        .expect("sent");
    assert!(
        body.is_none(),
        "a request without a body has no body sender"
    );
    let Frame::Headers(head) = peer.next_on_stream().await else {
        panic!("expected HEADERS");
    };
    assert!(head.is_end_stream());
    let id = head.stream_id();
    assert_eq!(u32::from(id), 1);
    let (pseudo, fields) = head.into_parts();
    assert_eq!(pseudo.method, Some(http::Method::GET));
    assert_eq!(pseudo.path.as_deref(), Some("/api/v1/pods?limit=1"));
    assert_eq!(pseudo.authority.as_deref(), Some("apiserver:6443"));
    assert_eq!(fields["x-remote-user"], "alice");
    // An informational head first, as a Go server may send: skipped.
    peer.respond(id, 100, false).await;
    peer.respond(id, 200, false).await;
    peer.data(id, b"{\"kind\":", false).await;
    peer.data(id, b"\"PodList\"}", false).await;
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", "0".parse().expect("value"));
    let mut end = Headers::trailers(id, trailers);
    end.set_end_stream();
    peer.send(end).await;
    let (head, mut body) = response.await.expect("response head");
    assert_eq!(head.status, StatusCode::OK);
    let mut got = Vec::new();
    while let Some(frame) = body_frame(&mut body).await {
        let frame = frame.expect("no error");
        match frame.into_data() {
            Ok(data) => got.extend_from_slice(&data),
            Err(frame) => {
                let trailers = frame.into_trailers().expect("trailers");
                assert_eq!(trailers["grpc-status"], "0");
            }
        }
    }
    assert_eq!(got, b"{\"kind\":\"PodList\"}");
    assert!(body.is_end_stream());
    drop(body);
    // The stream ended both ways: it is forgotten without a reset, and the next one is 3.
    assert!(peer.quiet().await, "no RST_STREAM for a stream that ended");
    assert_eq!(link.shared.lock().streams.len(), 0);
    let _next = link.send_request(get("/"), true).expect("sent");
    let Frame::Headers(head) = peer.next_on_stream().await else {
        panic!("expected HEADERS");
    };
    assert_eq!(u32::from(head.stream_id()), 3);
}

#[tokio::test]
async fn a_response_is_held_to_its_window_until_the_client_reads_it() {
    let (link, mut peer, _) = connect(Settings::default()).await;
    let (response, _) = link.send_request(get("/big"), true).expect("sent");
    let id = peer.next_headers().await;
    peer.respond(id, 200, false).await;
    let (_, mut body) = response.await.expect("head");
    // The whole window, unread: no grant comes back.
    static CHUNK: [u8; 16 << 10] = [b'x'; 16 << 10];
    for _ in 0..(STREAM_WINDOW as usize / CHUNK.len()) {
        peer.data(id, &CHUNK, false).await;
    }
    assert!(
        peer.quiet().await,
        "nothing is given back before the client reads"
    );
    // Reading half of it gives that half back on the stream.
    for _ in 0..(STREAM_WINDOW as usize / CHUNK.len() / 2) {
        body_frame(&mut body)
            .await
            .expect("data")
            .expect("no error");
    }
    match peer.next_on_stream().await {
        Frame::WindowUpdate(w) => {
            assert_eq!(w.stream_id(), id);
            assert_eq!(w.size_increment(), STREAM_WINDOW / 2);
        }
        other => panic!("expected the stream's WINDOW_UPDATE, got {other:?}"),
    }
    // Past the window: the stream is reset, the client's body fails.
    for _ in 0..(STREAM_WINDOW as usize / CHUNK.len() / 2 + 1) {
        peer.data(id, &CHUNK, false).await;
    }
    match peer.next_on_stream().await {
        Frame::Reset(r) => {
            assert_eq!(r.stream_id(), id);
            assert_eq!(r.reason(), Reason::FLOW_CONTROL_ERROR);
        }
        other => panic!("expected RST_STREAM, got {other:?}"),
    }
    let error = loop {
        match body_frame(&mut body).await {
            Some(Ok(_)) => {}
            Some(Err(e)) => break e,
            None => panic!("the body ended cleanly after a reset"),
        }
    };
    assert_eq!(error.reason(), Some(Reason::FLOW_CONTROL_ERROR));
}

#[tokio::test]
async fn a_request_body_is_sent_within_the_apiservers_windows_and_frame_size() {
    let mut settings = Settings::default();
    settings.set_initial_window_size(Some(10));
    let (link, mut peer, _) = connect(settings).await;
    let req = Request::patch("https://apiserver/api/v1/namespaces/a/pods/p")
        .body(())
        .expect("request");
    let (_response, body) = link.send_request(head(req), false).expect("sent");
    let mut body = body.expect("a body sender");
    let Frame::Headers(head) = peer.next_on_stream().await else {
        panic!("expected HEADERS");
    };
    assert!(!head.is_end_stream());
    let id = head.stream_id();
    // Another authority than the connection's own: sent as the request names it.
    let (pseudo, _) = head.into_parts();
    assert_eq!(pseudo.authority.as_deref(), Some("apiserver"));
    let sender = tokio::spawn(async move {
        let mut data = Bytes::from_static(b"0123456789abcdefghijklmno");
        poll_fn(|cx| body.poll_send(cx, &mut data, true))
            .await
            .expect("sent");
        body
    });
    let Frame::Data(first) = peer.next_on_stream().await else {
        panic!("expected DATA");
    };
    assert_eq!(first.payload().as_ref(), b"0123456789");
    assert!(!first.is_end_stream());
    assert!(peer.quiet().await, "nothing past the stream's window");
    peer.send(WindowUpdate::new(id, 100)).await;
    let Frame::Data(rest) = peer.next_on_stream().await else {
        panic!("expected DATA");
    };
    assert_eq!(rest.payload().as_ref(), b"abcdefghijklmno");
    assert!(rest.is_end_stream());
    drop(sender.await.expect("sender"));
}

#[tokio::test]
async fn a_response_dropped_before_its_end_resets_the_stream() {
    let (link, mut peer, _) = connect(Settings::default()).await;
    let (response, _) = link.send_request(get("/watch"), true).expect("sent");
    let id = peer.next_headers().await;
    peer.respond(id, 200, false).await;
    let (_, body) = response.await.expect("head");
    drop(body);
    match peer.next_on_stream().await {
        Frame::Reset(r) => {
            assert_eq!(r.stream_id(), id);
            assert_eq!(r.reason(), Reason::CANCEL);
        }
        other => panic!("expected RST_STREAM, got {other:?}"),
    }
    assert_eq!(link.shared.lock().streams.len(), 0);
    // Data the apiserver had in flight for it is dropped, and the connection goes on.
    peer.data(id, b"late", false).await;
    let (response, _) = link.send_request(get("/"), true).expect("sent");
    let id = peer.next_headers().await;
    peer.respond(id, 200, true).await;
    let (head, _) = response.await.expect("head");
    assert_eq!(head.status, StatusCode::OK);
}

#[tokio::test]
async fn goaway_refuses_the_streams_it_did_not_take_and_the_connection_takes_no_more() {
    let (link, mut peer, learned) = connect(Settings::default()).await;
    let (taken, _) = link.send_request(get("/a"), true).expect("sent");
    let (refused, _) = link.send_request(get("/b"), true).expect("sent");
    let first = peer.next_headers().await;
    let _second = peer.next_on_stream().await;
    peer.send(GoAway::new(first, Reason::NO_ERROR)).await;
    let error = refused.await.expect_err("refused");
    assert_eq!(error.reason(), Some(Reason::REFUSED_STREAM));
    assert!(learned.went_away.load(Ordering::SeqCst), "the pool is told");
    match link.send_request(get("/c"), true) {
        Err((OpenError::Closing(_), head)) => assert_eq!(head.uri.path(), "/c"),
        Err((e, _)) => panic!("expected Closing, got {e:?}"),
        Ok(_) => panic!("a stream opened after GOAWAY"),
    }
    // The stream it took still completes.
    peer.respond(first, 200, true).await;
    let (head, _) = taken.await.expect("head");
    assert_eq!(head.status, StatusCode::OK);
}

#[tokio::test]
async fn pings_are_answered_and_skewgates_own_resolve_on_the_answer() {
    let (link, mut peer, _) = connect(Settings::default()).await;
    peer.send(Ping::new(*b"apiservr")).await;
    loop {
        match peer.next().await.expect("a frame") {
            Frame::Ping(p) if p.is_ack() => {
                assert_eq!(p.payload(), b"apiservr");
                break;
            }
            _ => {}
        }
    }
    let pinger = link.pinger();
    let ping = tokio::spawn(async move { pinger.ping().await });
    let payload = loop {
        match peer.next().await.expect("a frame") {
            Frame::Ping(p) if !p.is_ack() => break *p.payload(),
            _ => {}
        }
    };
    // An acknowledgement of some other PING is no answer.
    peer.send(Ping::pong(*b"whatever")).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!ping.is_finished());
    peer.send(Ping::pong(payload)).await;
    tokio::time::timeout(Duration::from_secs(1), ping)
        .await
        .expect("answered")
        .expect("ping task");
}

#[tokio::test]
async fn a_closed_connection_fails_the_open_streams_and_refuses_new_ones() {
    let (link, mut peer, _) = connect(Settings::default()).await;
    let (response, _) = link.send_request(get("/a"), true).expect("sent");
    let _ = peer.next_on_stream().await;
    drop(peer);
    let error = tokio::time::timeout(Duration::from_secs(1), response)
        .await
        .expect("fails at once")
        .expect_err("failed");
    assert!(error.is_io(), "{error}");
    assert!(matches!(
        link.send_request(get("/b"), true),
        Err((OpenError::Closing(_), _))
    ));
}

#[tokio::test]
async fn a_reset_from_the_apiserver_fails_the_response() {
    let (link, mut peer, _) = connect(Settings::default()).await;
    let (response, _) = link.send_request(get("/a"), true).expect("sent");
    let id = peer.next_headers().await;
    peer.send(Reset::new(id, Reason::INTERNAL_ERROR)).await;
    let error = response.await.expect_err("reset");
    assert_eq!(error.reason(), Some(Reason::INTERNAL_ERROR));
    // Nothing goes back for a stream the apiserver reset.
    assert!(peer.quiet().await);
}

#[tokio::test]
async fn a_window_past_its_largest_is_the_streams_error_and_on_stream_zero_the_connections() {
    let (link, mut peer, _) = connect(Settings::default()).await;
    let (response, _) = link.send_request(get("/a"), true).expect("sent");
    let id = peer.next_headers().await;
    // 65,535 + 2^31-1: past the largest window (RFC 9113, 6.9.1).
    peer.send(WindowUpdate::new(id, 0x7fff_ffff)).await;
    match peer.next_on_stream().await {
        Frame::Reset(r) => assert_eq!(r.reason(), Reason::FLOW_CONTROL_ERROR),
        other => panic!("expected RST_STREAM, got {other:?}"),
    }
    assert!(response.await.is_err());
    let (response, _) = link.send_request(get("/b"), true).expect("sent");
    let _ = peer.next_headers().await;
    peer.send(WindowUpdate::new(StreamId::zero(), 0x7fff_ffff))
        .await;
    loop {
        if let Frame::GoAway(g) = peer.next().await.expect("a frame") {
            break assert_eq!(g.reason(), Reason::FLOW_CONTROL_ERROR);
        }
    }
    assert!(
        response.await.is_err(),
        "the connection's streams fail with it"
    );
}

#[tokio::test]
async fn connection_specific_headers_are_refused_unsent() {
    let (link, mut peer, _) = connect(Settings::default()).await;
    let mut req = get("/a");
    req.headers
        .insert("connection", "close".parse().expect("value"));
    match link.send_request(req, true) {
        Err((OpenError::Malformed(name), _)) => assert_eq!(name, "connection"),
        _ => panic!("a request with `connection` was sent"),
    }
    let mut req = get("/a");
    req.headers.insert("te", "gzip".parse().expect("value"));
    match link.send_request(req, true) {
        Err((OpenError::Malformed(name), _)) => assert_eq!(name, "te"),
        _ => panic!("a request with `te: gzip` was sent"),
    }
    let mut req = get("/a");
    req.headers.insert("te", "trailers".parse().expect("value"));
    assert!(
        link.send_request(req, true).is_ok(),
        "te: trailers is allowed"
    );
    assert!(matches!(peer.next_on_stream().await, Frame::Headers(_)));
}

#[tokio::test]
async fn the_connection_ends_when_the_pool_lets_go_and_its_last_stream_is_over() {
    let (link, mut peer, _) = connect(Settings::default()).await;
    let (response, _) = link.send_request(get("/a"), true).expect("sent");
    let id = peer.next_headers().await;
    drop(link);
    // Still open for the stream in flight.
    assert!(peer.quiet().await);
    peer.respond(id, 200, true).await;
    let (_, body) = response.await.expect("head");
    drop(body);
    let ended = async {
        while let Some(frame) = peer.next().await {
            assert!(!matches!(frame, Frame::Reset(_)), "{frame:?}");
        }
    };
    tokio::time::timeout(Duration::from_secs(1), ended)
        .await
        .expect("the connection closes");
}

#[tokio::test]
async fn a_body_read_to_its_end_lets_go_of_its_stream_and_dropping_it_later_touches_no_other() {
    let (link, mut peer, _) = connect(Settings::default()).await;
    let (response, _) = link.send_request(get("/a"), true).expect("sent");
    let id = peer.next_headers().await;
    peer.respond(id, 200, false).await;
    peer.data(id, b"{}", true).await;
    let (_, mut body) = response.await.expect("head");
    let data = body_frame(&mut body)
        .await
        .expect("data")
        .expect("no error");
    assert_eq!(data.into_data().expect("data").as_ref(), b"{}");
    assert!(body.is_end_stream());
    assert_eq!(
        link.shared.lock().streams.len(),
        0,
        "given up with its last frame"
    );
    assert!(body_frame(&mut body).await.is_none());
    // The next stream may take the same slot; the old body, dropped now, leaves it alone.
    let (next, _) = link.send_request(get("/b"), true).expect("sent");
    let next_id = peer.next_headers().await;
    drop(body);
    assert!(peer.quiet().await, "no RST_STREAM for either stream");
    peer.respond(next_id, 200, true).await;
    let (head, _) = next.await.expect("the next stream's head");
    assert_eq!(head.status, StatusCode::OK);
}

#[tokio::test]
async fn an_informational_head_that_ends_the_stream_is_no_answer() {
    let (link, mut peer, _) = connect(Settings::default()).await;
    let (response, _) = link.send_request(get("/a"), true).expect("sent");
    let id = peer.next_headers().await;
    peer.respond(id, 103, true).await;
    let error = response.await.expect_err("no final head");
    assert_eq!(error.reason(), Some(Reason::PROTOCOL_ERROR));
    match peer.next_on_stream().await {
        Frame::Reset(r) => assert_eq!(r.reason(), Reason::PROTOCOL_ERROR),
        other => panic!("expected RST_STREAM, got {other:?}"),
    }
}
