//! The connection's state and a stream's handles, driven directly: what a response may hold in
//! skewgate for a client that does not read.

use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use h2::frame::{Frame, Headers, Pseudo, StreamId};
use http::{HeaderMap, Method, Uri};

use super::Limits;
use super::handles::{Responder, Shared};
use super::state::ConnState;
use crate::http2core::Event;

fn limits() -> Limits {
    super::limits(100, 1 << 20, 8 << 20, 64 << 10, 64 << 10)
}

/// A connection with one request open on stream 1; the client's stream window is `window`.
fn connection_with_a_request(window: u32) -> (Arc<Shared>, usize) {
    let mut state = ConnState::new(limits(), Waker::noop().clone());
    let mut settings = h2::frame::Settings::default();
    settings.set_initial_window_size(Some(window));
    let Event::Settings(_, Some(delta)) = state.conn.recv(settings.into()) else {
        panic!("settings");
    };
    state.on_initial_window(delta);
    let opened = open_get(&mut state, "/api/v1/pods").expect("opened");
    let key = opened.key;
    (Shared::new(state), key)
}

/// A GET of `path` on stream 1, read through the connection's core: the request opened, if taken.
fn open_get(state: &mut ConnState, path: &str) -> Option<super::state::Opened> {
    open_get_on(state, 1, path)
}

/// A GET of `path` on stream `id`.
fn open_get_on(state: &mut ConnState, id: u32, path: &str) -> Option<super::state::Opened> {
    let uri: Uri = format!("http://skewgate.test{path}").parse().expect("uri");
    let mut head = Headers::new(
        StreamId::from(id),
        Pseudo::request(Method::GET, uri, None),
        HeaderMap::new(),
    );
    head.set_end_stream();
    let Event::Open(head) = state.conn.recv(head.into()) else {
        panic!("a stream opened");
    };
    state.on_open(head)
}

/// The DATA frames written now, and their bytes.
fn written(shared: &Shared) -> (usize, usize) {
    let mut state = shared.lock();
    state.conn.out.clear();
    let (mut frames, mut bytes) = (0, 0);
    while let Some(frame) = state.next_data() {
        if let Frame::Data(d) = frame {
            frames += 1;
            bytes += d.payload().len();
        }
    }
    (frames, bytes)
}

#[test]
fn a_response_holds_one_chunk_for_a_client_whose_window_is_shut_and_goes_on_when_it_opens() {
    let (shared, key) = connection_with_a_request(0);
    let mut respond = Responder::new(shared.clone(), key);
    assert!(respond.send_head(http::Response::new(()).into_parts().0));
    let mut cx = Context::from_waker(Waker::noop());
    let chunk = || Some(Bytes::from(vec![b'x'; 16 << 10]));
    // The first chunk is taken; with the window shut, not a second.
    assert!(matches!(
        respond.poll_send(&mut cx, &mut chunk(), None),
        Poll::Ready(Ok(()))
    ));
    let mut second = chunk();
    assert!(respond.poll_send(&mut cx, &mut second, None).is_pending());
    assert!(second.is_some(), "the second chunk stays with the body");
    assert_eq!(
        written(&shared),
        (0, 0),
        "nothing goes out on a shut window"
    );
    // The client opens its window by 20 KiB: the first chunk goes out, and the second is taken.
    shared.lock().on_window_update(StreamId::from(1), 20 << 10);
    assert_eq!(written(&shared), (1, 16 << 10));
    assert!(matches!(
        respond.poll_send(&mut cx, &mut second, None),
        Poll::Ready(Ok(()))
    ));
    assert_eq!(
        written(&shared),
        (1, 4 << 10),
        "as much as the window has left"
    );
}

#[test]
fn a_response_is_taken_from_the_apiserver_no_faster_than_its_clients_window_opens() {
    // Shut from the start: nothing is to be taken (what is not taken stays upstream, where the
    // response budget counts it).
    let (shared, key) = connection_with_a_request(0);
    let mut respond = Responder::new(shared.clone(), key);
    assert!(respond.send_head(http::Response::new(()).into_parts().0));
    assert!(respond.is_shut());
    let mut cx = Context::from_waker(Waker::noop());
    assert!(respond.poll_room(&mut cx).is_pending());
    // Open by 8 KiB: room. A chunk of 16 KiB queued shuts it again.
    shared.lock().on_window_update(StreamId::from(1), 8 << 10);
    assert!(matches!(respond.poll_room(&mut cx), Poll::Ready(Ok(()))));
    let mut chunk = Some(Bytes::from(vec![b'x'; 16 << 10]));
    assert!(matches!(
        respond.poll_send(&mut cx, &mut chunk, None),
        Poll::Ready(Ok(()))
    ));
    assert!(respond.is_shut());
    assert!(respond.poll_room(&mut cx).is_pending());
    // The client's window opens past what is queued: room again.
    shared.lock().on_window_update(StreamId::from(1), 16 << 10);
    assert!(matches!(respond.poll_room(&mut cx), Poll::Ready(Ok(()))));
}

#[test]
fn a_response_holds_up_to_what_an_open_window_takes_at_once() {
    let (shared, key) = connection_with_a_request(32 << 10);
    let mut respond = Responder::new(shared.clone(), key);
    assert!(respond.send_head(http::Response::new(()).into_parts().0));
    let mut cx = Context::from_waker(Waker::noop());
    let mut taken = 0;
    loop {
        let mut chunk = Some(Bytes::from(vec![b'x'; 8 << 10]));
        match respond.poll_send(&mut cx, &mut chunk, None) {
            Poll::Ready(Ok(())) => taken += 1,
            _ => break,
        }
    }
    // Four chunks fill the 32 KiB window; the fifth waits.
    assert_eq!(taken, 4);
}

#[test]
fn a_whole_response_goes_out_head_then_data_with_its_end_and_the_stream_is_forgotten() {
    let (shared, key) = connection_with_a_request(65_535);
    let mut respond = Responder::new(shared.clone(), key);
    respond.send_whole(
        http::Response::new(()).into_parts().0,
        Some(Bytes::from_static(b"{}")),
    );
    drop(respond);
    let mut state = shared.lock();
    let head = state.conn.out.pop_back().expect("head");
    assert!(matches!(&head, Frame::Headers(h) if !h.is_end_stream()));
    let Some(Frame::Data(data)) = state.next_data() else {
        panic!("no data");
    };
    assert!(data.is_end_stream());
    assert_eq!(data.payload().as_ref(), b"{}");
    assert!(state.next_data().is_none());
    assert!(
        state.streams.is_empty(),
        "the stream is forgotten once written"
    );
    state.graceful_go_away();
    state.conn.out.clear();
    assert!(state.finished(), "no stream counts as open");
}

#[test]
fn a_stream_opened_after_a_graceful_goaway_is_refused_and_not_counted_against_the_client() {
    let mut state = ConnState::new(limits(), Waker::noop().clone());
    state.graceful_go_away();
    state.conn.out.clear();
    assert!(
        open_get(&mut state, "/version").is_none(),
        "not taken after GOAWAY"
    );
    let Some(Frame::Reset(reset)) = state.conn.out.pop_front() else {
        panic!("no RST_STREAM");
    };
    assert_eq!(reset.stream_id(), StreamId::from(1));
    assert_eq!(reset.reason(), h2::Reason::REFUSED_STREAM);
    assert_eq!(state.conn.faults(), 0, "the client's fault it is not");
}

#[test]
fn what_a_response_holds_unwritten_is_counted_in_the_response_budget_until_written_or_dropped() {
    let budget = Arc::new(crate::upstream::ResponseBudget::new(1 << 20));
    let (shared, key) = connection_with_a_request(0);
    shared.lock().budget = Some(budget.clone());
    let mut respond = Responder::new(shared.clone(), key);
    assert!(respond.send_head(http::Response::new(()).into_parts().0));
    let mut cx = Context::from_waker(Waker::noop());
    let mut chunk = Some(Bytes::from(vec![b'x'; 16 << 10]));
    assert!(matches!(
        respond.poll_send(&mut cx, &mut chunk, None),
        Poll::Ready(Ok(()))
    ));
    assert_eq!(budget.held(), 16 << 10, "held for a shut window");
    // 4 KiB go out: 12 KiB are still held.
    shared.lock().on_window_update(StreamId::from(1), 4 << 10);
    assert_eq!(written(&shared), (1, 4 << 10));
    assert_eq!(budget.held(), 12 << 10);
    // The stream is reset: what it held is dropped, and so is its count; and with the connection.
    shared.lock().reset(key, h2::Reason::CANCEL);
    assert_eq!(budget.held(), 0);
    let mut chunk = Some(Bytes::from(vec![b'y'; 100]));
    let (other, key) = connection_with_a_request(0);
    other.lock().budget = Some(budget.clone());
    let mut respond = Responder::new(other.clone(), key);
    assert!(respond.send_head(http::Response::new(()).into_parts().0));
    assert!(respond.poll_send(&mut cx, &mut chunk, None).is_ready());
    assert_eq!(budget.held(), 100);
    drop(respond);
    drop(other);
    assert_eq!(budget.held(), 0, "dropped with the connection");
}

/// A SETTINGS_INITIAL_WINDOW_SIZE read through the connection's core and applied.
fn initial_window(state: &mut ConnState, size: u32) {
    let mut settings = h2::frame::Settings::default();
    settings.set_initial_window_size(Some(size));
    if let Event::Settings(_, Some(delta)) = state.conn.recv(settings.into()) {
        state.on_initial_window(delta);
    }
}

#[test]
fn a_settings_moves_every_streams_window_and_touches_only_the_streams_waiting_for_room() {
    let mut limits = limits();
    limits.max_concurrent_streams = 1_000;
    let mut state = ConnState::new(limits, Waker::noop().clone());
    let keys: Vec<usize> = (0..1_000)
        .map(|n| {
            let opened = open_get_on(&mut state, 2 * n + 1, "/api/v1/pods?watch=1");
            opened.expect("opened").key
        })
        .collect();
    let shared = Shared::new(state);
    // One stream waits for room: the client's window is shut under its chunk.
    let mut respond = Responder::new(shared.clone(), keys[7]);
    assert!(respond.send_head(http::Response::new(()).into_parts().0));
    let mut cx = Context::from_waker(Waker::noop());
    let mut chunk = Some(Bytes::from(vec![b'x'; 70_000]));
    assert!(respond.poll_send(&mut cx, &mut chunk, None).is_ready());
    assert!(respond.poll_room(&mut cx).is_pending());
    let mut state = shared.lock();
    // A client alternating its initial window: each SETTINGS is the same work, whatever the
    // streams open, as only the waiting stream is listed.
    for size in [0, 1 << 20, 0, 1 << 20] {
        initial_window(&mut state, size);
        assert!(state.blocked.len() <= 1, "{}", state.blocked.len());
    }
    let initial = state.send_initial;
    for key in &keys {
        let s = state.streams.get_mut(*key).expect("stream");
        assert_eq!(s.role.send_window.size(initial), 1 << 20);
    }
    assert!(state.conn.error.is_none());
    // A window taken past 2^31-1 by a SETTINGS is the connection's FLOW_CONTROL_ERROR.
    let big = u32::try_from(crate::http2core::Window::MAX - (2 << 20)).expect("31 bits");
    state.on_window_update(StreamId::from(1), big);
    initial_window(&mut state, 4 << 20);
    assert_eq!(state.conn.error, Some(h2::Reason::FLOW_CONTROL_ERROR));
}
