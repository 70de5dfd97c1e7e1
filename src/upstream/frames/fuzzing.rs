//! The upstream HTTP/2 client's core driven without a socket, for fuzzing
//! (`fuzz/fuzz_targets/http2_upstream`) and its unit test: ten requests open (two still sending a
//! body), an apiserver's bytes read by the connection's own `Wire::read` into its `LinkState`, half the
//! responses read as they come, what the connection queues written to a sink, and after every read
//! the invariants an apiserver must not be able to break checked: windows within 2^31-1, data held
//! within the window skewgate granted, the queue of frames to write bounded.

use std::sync::atomic::{AtomicU32, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::task::{Context, Waker};

use h2::Codec;
use h2::frame::{Headers, Pseudo};
use http::{HeaderMap, Method, Uri};

use super::drive::Wire;
use super::state::LinkState;
use super::{STREAM_WINDOW, Shared};
use crate::fuzz_io::Sink;
use crate::upstream::ResponseBudget;
use crate::upstream::budget::SMALL_WINDOW;

/// The response budget of the fuzzed connection: small, so that its pressure and its bound are
/// reached (ten streams' windows are 2.5 MiB).
const BUDGET: usize = 512 << 10;

/// Serves `input` as what an apiserver sends on a connection with ten requests open; panics when
/// an invariant breaks.
pub(crate) fn answer_frames(input: &[u8]) {
    let waker = Waker::noop();
    let mut cx = Context::from_waker(waker);
    let budget = Arc::new(ResponseBudget::new(BUDGET));
    let shared = Shared {
        state: Mutex::new(LinkState::new(budget.clone())),
        max_streams: AtomicUsize::new(100),
        header_list_limit: AtomicU32::new(u32::MAX),
        pong: tokio::sync::Notify::new(),
        heard: std::sync::atomic::AtomicU64::new(0),
    };
    let mut state = shared.lock();
    for i in 0..10 {
        let end = i < 8;
        state.open(|id| {
            let pseudo = Pseudo::request(Method::GET, Uri::from_static("/api/v1/pods"), None);
            let mut h = Headers::new(id, pseudo, HeaderMap::new());
            if end {
                h.set_end_stream();
            }
            h
        });
    }
    let sink = Sink::new(input);
    let mut wire = Wire {
        codec: Codec::new(sink),
        hooks: None,
        settled: false,
    };
    let mut went_away = false;
    for _ in 0..input.len() / 9 + 2 {
        // An error fails the connection (and every stream with it): nothing more is read.
        let Ok(read) = wire.read(&mut cx, &shared, &mut state, &mut went_away) else {
            return;
        };
        take_responses(&mut state);
        let written = wire.write(&mut cx, &mut state);
        check(&state, &budget);
        if read == 0 || written.is_err() {
            return;
        }
    }
}

/// What the even streams' responses have, taken and given back (as their bodies take it).
fn take_responses(state: &mut LinkState) {
    let keys = state.streams.keys();
    for key in keys.into_iter().filter(|k| k % 2 == 0) {
        let Some(s) = state.streams.get_mut(key) else {
            continue;
        };
        s.role.head.take();
        let mut taken = 0;
        while let Some(chunk) = s.recv.data.pop_front() {
            taken += chunk.len();
        }
        state.taken(taken);
        state.release(key, taken);
    }
}

/// The invariants no apiserver can break.
fn check(state: &LinkState, budget: &ResponseBudget) {
    const MAX_WINDOW: i64 = (1 << 31) - 1;
    assert!(state.conn.send_window.size() <= MAX_WINDOW);
    assert!(
        state.conn.out.len() <= 4096 + 64,
        "{} frames queued",
        state.conn.out.len()
    );
    let (mut held, mut promised) = (0, 0);
    for (_, s) in state.streams.iter() {
        assert!(s.role.send_window.size() <= MAX_WINDOW);
        assert!(s.recv.window.size() <= i64::from(STREAM_WINDOW));
        // No stream holds more than its window, and none is given more than that.
        assert!(
            s.recv.data.len() <= STREAM_WINDOW as usize,
            "{} held",
            s.recv.data.len()
        );
        assert!(s.recv.window.size() + s.recv.data.len() as i64 <= i64::from(STREAM_WINDOW));
        held += s.recv.data.len();
        promised += s.role.promised as usize;
    }
    assert_eq!(promised, state.promised);
    assert_eq!(promised, budget.promised());
    // Every byte held is counted, and the count is within the bound but for what streams holding
    // less than the small window add (a frame each at most).
    assert_eq!(held, state.held);
    assert_eq!(held, budget.held());
    let slack = state.streams.len() * (SMALL_WINDOW as usize + 16_384);
    assert!(held <= BUDGET + slack, "{held} held");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz_io::frame;

    /// Seeds of the fuzz target's corpus: answers, data past the window, resets, windows, GOAWAY.
    #[test]
    fn seeds_are_answered_within_the_invariants() {
        let ok = [0x88]; // :status 200
        let mut answers = frame(0x4, 0, 0, &[0, 4, 0, 0, 0, 0]);
        for id in (1..=19u32).step_by(2) {
            answers.extend(frame(0x1, 0x4, id, &ok));
            for _ in 0..20 {
                answers.extend(frame(0x0, 0, id, &[b'x'; 16_384]));
            }
            answers.extend(frame(0x8, 0, id, &0x7fff_0000u32.to_be_bytes()));
        }
        answers.extend(frame(0x3, 0, 5, &8u32.to_be_bytes()));
        answers.extend(frame(0x7, 0, 0, &[0, 0, 0, 9, 0, 0, 0, 0]));
        for input in [
            answers,
            frame(0x8, 0, 0, &0x7fff_ffffu32.to_be_bytes()),
            frame(0x4, 0, 0, &[0, 4, 0x7f, 0xff, 0xff, 0xff]),
            vec![0xff; 64],
        ] {
            answer_frames(&input);
        }
    }
}
