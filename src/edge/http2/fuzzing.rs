//! The HTTP/2 server's core driven without a socket, for fuzzing (`fuzz/fuzz_targets/http2_server`)
//! and its unit test: a client's bytes after the preface read by the connection's own `Wire::read`
//! into its `ConnState`, every request opened answered (half of them reading their bodies, half
//! dropping them unread), what the connection queues written to a sink, and after every read the
//! invariants a client must not be able to break checked: windows within 2^31-1, open streams
//! within the limit, request data held within the stream's window, the queue of control frames
//! bounded, the streams skewgate holds bounded, response data held unwritten counted whole.

use std::task::{Context, Waker};

use bytes::Bytes;
use h2::Codec;
use h2::frame::{Headers, Pseudo};
use http::{HeaderMap, StatusCode};

use super::conn::{Read, Wire};
use super::state::{ConnState, MAX_QUEUED, Opened};
use crate::fuzz_io::Sink;
use crate::http2core::Window;

/// Serves `input` as the frames a client sends after its preface; panics when an invariant breaks.
pub(crate) fn serve_frames(input: &[u8]) {
    let limits = super::limits(100, 1 << 20, 8 << 20, 64 << 10, 16 << 10);
    let waker = Waker::noop();
    let mut cx = Context::from_waker(waker);
    let mut state = ConnState::new(limits, waker.clone());
    let sink = Sink::new(input);
    let mut codec = Codec::new(sink);
    codec.set_max_recv_header_list_size(limits.max_header_list_size as usize);
    let mut wire = Wire {
        codec,
        faults: Default::default(),
        block: Default::default(),
        stall: Default::default(),
        unflushed: false,
    };
    // Each turn reads at most a batch of frames: the input ends in a bounded number of them.
    for _ in 0..input.len() / 9 + 2 {
        let mut opened = Vec::new();
        let read = wire.read(&mut cx, &mut state, &mut |o: Opened| opened.push(o));
        for o in opened {
            answer(&mut state, o);
        }
        read_bodies(&mut state);
        let _ = wire.write(&mut cx, &mut state);
        check(&state);
        match read {
            Ok(Read::End) | Err(_) => return,
            _ if state.conn.error.is_some() => return,
            _ => {}
        }
    }
}

/// Answers a request at once: a head and a small body; odd streams keep reading their bodies.
fn answer(state: &mut ConnState, o: Opened) {
    let Some(s) = state.streams.get_mut(o.key) else {
        return;
    };
    let id = s.id;
    s.send_handle = false;
    if o.key.is_multiple_of(2) {
        s.recv_handle = false;
    }
    state.push(Headers::new(id, Pseudo::response(StatusCode::OK), HeaderMap::new()).into());
    state.queue_data(
        o.key,
        Bytes::from_static(b"{\"kind\":\"Status\"}"),
        Some(None),
    );
    state.settle(o.key);
}

/// What the reading streams' bodies have, taken (as `RecvBody` takes it); a body at its end lets
/// go of its stream.
fn read_bodies(state: &mut ConnState) {
    let keys = state.streams.keys();
    for key in keys {
        let Some(s) = state.streams.get_mut(key) else {
            continue;
        };
        if !s.recv_handle {
            continue;
        }
        let taken = s.recv.drop_held();
        if s.ends.recv_closed() || s.failure.is_some() {
            s.recv_handle = false;
            state.release(key, taken);
            state.settle(key);
        } else {
            state.release(key, taken);
        }
    }
}

/// The invariants no client can break.
fn check(state: &ConnState) {
    let limits = &state.limits;
    assert!(state.conn.send_window.size() <= Window::MAX || state.conn.error.is_some());
    assert!(state.conn.recv_window.size() <= i64::from(limits.connection_window));
    assert!(state.open <= limits.max_concurrent_streams);
    // Open streams, and those over but not yet written out or let go of.
    assert!(state.streams.len() <= 2 * limits.max_concurrent_streams as usize + 64);
    assert!(
        state.conn.out.len() <= MAX_QUEUED + 3 * 32 + 8,
        "{}",
        state.conn.out.len()
    );
    // What the responses hold unwritten is counted whole (`count_queued`, the response budget's).
    let queued: usize = state.streams.iter().map(|(_, s)| s.role.queued_len).sum();
    assert_eq!(queued, state.queued_total);
    for (_, s) in state.streams.iter() {
        let window = s.role.send_window.size(state.send_initial);
        assert!(window <= Window::MAX || state.conn.error.is_some());
        assert!(s.recv.window.size() <= i64::from(limits.stream_window));
        let held = s.recv.held();
        assert!(held <= limits.stream_window as usize, "{held} held");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz_io::frame;

    /// Seeds of the fuzz target's corpus, each served whole with its invariants: requests with
    /// bodies, resets, window updates, settings, and bytes that are no frame.
    #[test]
    fn seeds_are_served_within_the_invariants() {
        let get = [0x83, 0x86, 0x84, 0x41, 0x01, b'a'];
        let mut many = frame(0x4, 0, 0, &[0, 4, 0, 0, 0, 0]);
        for i in 0..150u32 {
            let id = 2 * i + 1;
            many.extend(frame(0x1, 0x4, id, &get));
            many.extend(frame(0x0, 0, id, b"x"));
            many.extend(frame(0x0, 0, id, &[b'y'; 300]));
            if i % 3 == 0 {
                many.extend(frame(0x3, 0, id, &8u32.to_be_bytes()));
                many.extend(frame(0x0, 1, id, b"late"));
            }
            many.extend(frame(0x8, 0, id, &0x7fff_0000u32.to_be_bytes()));
        }
        for input in [
            many,
            frame(0x8, 0, 0, &0x7fff_ffffu32.to_be_bytes()),
            vec![0xff; 64],
            frame(0x1, 0x5, 3, &get)
                .into_iter()
                .chain(frame(0x1, 0x5, 1, &get))
                .collect(),
        ] {
            serve_frames(&input);
        }
    }
}
