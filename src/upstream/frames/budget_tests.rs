//! The response budget at the frame level (`upstream/budget.rs`): the small window announced under
//! pressure and held once acknowledged, and streams whose clients do not read cut at the bound.

use std::sync::Arc;

use h2::Reason;
use h2::frame::{Frame, Settings};

use super::STREAM_WINDOW;
use super::tests::{body_frame, connect_with, get};
use crate::upstream::ResponseBudget;
use crate::upstream::budget::SMALL_WINDOW;

static CHUNK: [u8; 16 << 10] = [b'x'; 16 << 10];

/// Waits (a second at most) for the connection's task to have taken in what was sent: `held` held.
async fn holds(budget: &ResponseBudget, held: usize) {
    for _ in 0..100 {
        if budget.held() == held {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(budget.held(), held);
}

#[tokio::test]
async fn under_pressure_new_streams_get_the_small_window_and_older_ones_once_acknowledged() {
    let budget = Arc::new(ResponseBudget::new(2 * STREAM_WINDOW as usize));
    let (link, mut peer, _) = connect_with(Settings::default(), budget.clone()).await;
    peer.send(Settings::ack()).await;
    // Stream A's window promises half the budget: its first DATA finds the budget under pressure.
    let (a, _) = link.send_request(get("/a"), true).expect("sent");
    let a_id = peer.next_headers().await;
    peer.respond(a_id, 200, false).await;
    let (_, _a_body) = a.await.expect("head");
    peer.data(a_id, &CHUNK, false).await;
    match peer.next().await {
        Some(Frame::Settings(s)) => assert_eq!(s.initial_window_size(), Some(SMALL_WINDOW)),
        other => panic!("expected SETTINGS with the small window, got {other:?}"),
    }
    // B, opened after that SETTINGS, has the small window at once: a byte past it resets B.
    let (b, _) = link.send_request(get("/b"), true).expect("sent");
    let b_id = peer.next_headers().await;
    peer.respond(b_id, 200, false).await;
    let (_, _b_body) = b.await.expect("head");
    peer.data(b_id, &CHUNK, false).await;
    peer.data(b_id, b"x", false).await;
    expect_reset(&mut peer, b_id, Reason::FLOW_CONTROL_ERROR).await;
    // A, opened before it, keeps its window until the apiserver acknowledges: then it has what
    // the small window leaves after what it was sent (nothing), and a byte more resets it.
    peer.data(a_id, &CHUNK, false).await;
    peer.send(Settings::ack()).await;
    peer.data(a_id, b"x", false).await;
    expect_reset(&mut peer, a_id, Reason::FLOW_CONTROL_ERROR).await;
    holds(&budget, 0).await;
    assert_eq!(
        budget.promised(),
        0,
        "nothing promised by streams that were reset"
    );
}

#[tokio::test]
async fn over_the_bound_a_client_that_asks_waits_for_room_and_a_non_reader_is_cut() {
    // The peer does not acknowledge skewgate's SETTINGS here: A keeps the window it opened with.
    let budget = Arc::new(ResponseBudget::new(STREAM_WINDOW as usize));
    let (link, mut peer, _) = connect_with(Settings::default(), budget.clone()).await;
    let open = |path: &'static str| link.send_request(get(path), true).expect("sent").0;
    // A's window promises the whole budget: B and C are opened with none.
    let (a, b, c) = (open("/a"), open("/b"), open("/c"));
    let a_id = peer.next_headers().await;
    match peer.next().await {
        Some(Frame::Settings(s)) => assert_eq!(s.initial_window_size(), Some(0)),
        other => panic!("expected SETTINGS with no window, got {other:?}"),
    }
    let b_id = peer.next_headers().await;
    let c_id = peer.next_headers().await;
    for id in [a_id, b_id, c_id] {
        peer.respond(id, 200, false).await;
    }
    let (_, mut a_body) = a.await.expect("head");
    let (_, _b_body) = b.await.expect("head");
    let (_, mut c_body) = c.await.expect("head");
    // C's client asks for data, but A's window holds the whole budget: C waits for room.
    let asked = std::future::poll_fn(|cx| std::task::Poll::Ready(c_body.poll_frame(cx))).await;
    assert!(asked.is_pending());
    assert!(budget.stalls().any_waiting(), "C waits for room");
    // A's client reads nothing: over the bound, its first chunk is held and its second cuts it.
    peer.data(a_id, &CHUNK, false).await;
    peer.data(a_id, &CHUNK, false).await;
    expect_reset(&mut peer, a_id, Reason::CANCEL).await;
    let error = body_frame(&mut a_body)
        .await
        .expect("an end")
        .expect_err("cut");
    assert_eq!(error.reason(), Some(Reason::CANCEL));
    // A's share is back: C, asking again, is given the small window. B asks nothing and gets
    // nothing.
    let asked = std::future::poll_fn(|cx| std::task::Poll::Ready(c_body.poll_frame(cx))).await;
    assert!(asked.is_pending());
    match peer.next_on_stream().await {
        Frame::WindowUpdate(w) => {
            assert_eq!(w.stream_id(), c_id);
            assert_eq!(w.size_increment(), SMALL_WINDOW);
        }
        other => panic!("expected C's WINDOW_UPDATE, got {other:?}"),
    }
    peer.data(c_id, &CHUNK, false).await;
    body_frame(&mut c_body).await.expect("data").expect("ok");
    peer.data(b_id, b"x", false).await;
    expect_reset(&mut peer, b_id, Reason::FLOW_CONTROL_ERROR).await;
}

/// The next frame on a stream is RST_STREAM of `id` with `reason` (C's window given back as its
/// client reads may come first).
async fn expect_reset(peer: &mut super::tests::Peer, id: h2::frame::StreamId, reason: Reason) {
    loop {
        match peer.next_on_stream().await {
            Frame::Reset(r) => {
                assert_eq!(r.stream_id(), id);
                assert_eq!(r.reason(), reason);
                return;
            }
            Frame::WindowUpdate(w) if w.stream_id() != id => {}
            other => panic!("expected RST_STREAM, got {other:?}"),
        }
    }
}
