//! The connection core driven alone, for fuzzing (`fuzz/fuzz_targets/http2_core`) and its unit
//! test: the first byte picks the side (server or client) and whether the peer reads what is
//! written; the rest is the peer's frames, decoded by h2's codec and fed to `Conn::recv`. A small
//! engine beside it holds at most `MAX_HELD` streams with their windows and ends, as the real ones
//! do, and after every frame the invariants no peer may break are checked: windows within 2^31-1,
//! the connection's receive window within what was granted, stream ids only growing, streams held
//! within the limit, closed streams remembered and frames queued within their bounds, skewgate's
//! own SETTINGS acknowledged in order, nothing done after a connection error.

use std::collections::HashMap;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use futures_util::Stream as _;
use h2::frame::{Settings, StreamId};
use h2::{Codec, CodecError, Reason};

use super::conn::{MAX_ANSWERS, MAX_STREAM_ID};
use super::{Bounds, Conn, Ends, Event, Gone, InitialWindow, Role, Window};
use crate::fuzz_io::Sink;

/// The streams the harness holds open at once (the server's SETTINGS_MAX_CONCURRENT_STREAMS).
const MAX_HELD: usize = 8;

const BOUNDS: Bounds = Bounds {
    recv_window: 1 << 20,
    max_local_resets: 64,
};

/// The window each stream grants the peer.
const STREAM_WINDOW: u32 = 65_535;

/// A stream the harness holds.
struct Held {
    ends: Ends,
    recv: Window,
    send: Window,
}

/// Serves `input`; panics when an invariant breaks.
pub(crate) fn drive(input: &[u8]) {
    let Some((&first, rest)) = input.split_first() else {
        return;
    };
    let role = if first & 1 == 0 {
        Role::Server
    } else {
        Role::Client
    };
    let reads = first & 2 == 0;
    let mut h = Harness::new(role);
    let mut cx = Context::from_waker(Waker::noop());
    let mut codec: Codec<Sink, bytes::Bytes> = Codec::new(Sink::new(rest));
    loop {
        let polled = Pin::new(&mut codec).poll_next(&mut cx);
        let before = (h.conn.error, h.conn.out.len());
        match polled {
            Poll::Ready(Some(Ok(frame))) => {
                let event = h.conn.recv(frame);
                h.carry_out(event);
            }
            Poll::Ready(Some(Err(CodecError::Reset(id, reason, _)))) => {
                if h.conn.error.is_none() {
                    h.conn.refuse_unopened(id, reason, STREAM_WINDOW);
                }
            }
            Poll::Ready(Some(Err(CodecError::GoAway(_, reason, _)))) => h.conn.go_away(reason),
            _ => return,
        }
        if before.0.is_some() {
            // After a connection error nothing more is done, nor queued.
            assert_eq!(h.conn.error, before.0);
            assert!(h.conn.out.len() <= before.1);
        }
        h.check();
        if reads {
            h.conn.out.clear();
        }
    }
}

struct Harness {
    role: Role,
    conn: Conn<u32>,
    held: HashMap<u32, Held>,
    /// The tag of the next own SETTINGS to be acknowledged, and of the next sent.
    next_ack: u32,
    next_sent: u32,
    last_id: u32,
    peer_initial: InitialWindow,
}

impl Harness {
    fn new(role: Role) -> Harness {
        let mut conn = Conn::new(role, BOUNDS);
        conn.start(Settings::default(), 0);
        let mut h = Harness {
            role,
            conn,
            held: HashMap::new(),
            next_ack: 0,
            next_sent: 1,
            last_id: 0,
            peer_initial: InitialWindow::default(),
        };
        if role == Role::Client {
            // Requests open, half of them still sending a body.
            for i in 0..MAX_HELD {
                let id = h.conn.open_local().expect("ids");
                let held = Held {
                    ends: Ends::new(false, i % 2 == 0),
                    recv: Window::new(STREAM_WINDOW),
                    send: h.conn.peer_initial_window.window(),
                };
                h.held.insert(u32::from(id), held);
            }
        }
        h
    }

    /// What an engine does with `event`, in small.
    fn carry_out(&mut self, event: Event<u32>) {
        match event {
            Event::Done | Event::ConnectionWindow | Event::GoAway(..) => {}
            Event::Open(headers) => self.open(headers.stream_id(), headers.is_end_stream()),
            Event::Headers(headers) => {
                let (id, end) = (headers.stream_id(), headers.is_end_stream());
                let Some(s) = self.held.get_mut(&u32::from(id)) else {
                    return self.conn.closed_headers(id, end);
                };
                if end && !s.ends.recv_closed() {
                    s.ends.close_recv();
                    self.settle(id);
                } else if self.role == Role::Server {
                    // Trailers that do not end the stream, or HEADERS after its end.
                    self.refuse(id, Reason::PROTOCOL_ERROR);
                }
            }
            Event::Data(data) => {
                let (id, end) = (data.stream_id(), data.is_end_stream());
                let flow = data.flow_controlled_len();
                let Some(s) = self.held.get_mut(&u32::from(id)) else {
                    return self.conn.closed_data(id, flow, end);
                };
                self.conn.give_back(flow);
                let taken = match s.ends.recv_closed() {
                    true => Err(Reason::STREAM_CLOSED),
                    false => s.recv.receive(flow),
                };
                if let Err(reason) = taken {
                    return self.refuse(id, reason);
                }
                // Taken by the body at once, and given back.
                s.recv.grant(flow);
                if end {
                    s.ends.close_recv();
                    self.settle(id);
                }
            }
            Event::Reset(id, _) => {
                if self.held.remove(&u32::from(id)).is_some() {
                    self.conn.remember(id, Gone::Closed);
                }
            }
            Event::StreamWindow(id, increment) => {
                let widened = match self.held.get_mut(&u32::from(id)) {
                    Some(s) => s.send.widen(increment),
                    None => Ok(()),
                };
                if let Err(reason) = widened {
                    self.refuse(id, reason);
                }
            }
            Event::Settings(settings, delta) => {
                if let Some(size) = settings.initial_window_size() {
                    let moved = self.peer_initial.set(size);
                    assert_eq!(Some(moved), delta);
                }
                for s in self.held.values_mut() {
                    if let Err(reason) = s.send.shift(delta.unwrap_or(0)) {
                        return self.conn.go_away(reason);
                    }
                }
            }
            Event::SettingsAcked(tag) => {
                assert_eq!(tag, self.next_ack, "acknowledged out of order");
                self.next_ack += 1;
            }
            Event::Pong(_) => {
                // More SETTINGS of skewgate's, to be acknowledged in turn.
                self.conn.push_settings(Settings::default(), self.next_sent);
                self.next_sent += 1;
            }
        }
    }

    /// A stream the peer opens: held within the limit, answered at once on every other id.
    fn open(&mut self, id: StreamId, end: bool) {
        if self.held.len() >= MAX_HELD {
            self.conn.refuse(id, Reason::REFUSED_STREAM);
            return self.conn.refused(id, end, STREAM_WINDOW);
        }
        let answered = u32::from(id) % 4 == 1;
        let held = Held {
            ends: Ends::new(end, answered),
            recv: Window::new(STREAM_WINDOW),
            send: self.conn.peer_initial_window.window(),
        };
        self.held.insert(u32::from(id), held);
        self.settle(id);
    }

    /// A stream over both ways is forgotten, remembered as ended.
    fn settle(&mut self, id: StreamId) {
        let raw = u32::from(id);
        if self.held.get(&raw).is_some_and(|s| s.ends.is_closed()) {
            self.held.remove(&raw);
            self.conn.remember(id, Gone::Ended);
        }
    }

    /// Resets a held stream for the peer's fault.
    fn refuse(&mut self, id: StreamId, reason: Reason) {
        if let Some(s) = self.held.remove(&u32::from(id)) {
            let gone = match s.ends.recv_closed() {
                true => Gone::Closed,
                false => Gone::Reset {
                    window: s.recv.size().max(0),
                },
            };
            self.conn.remember(id, gone);
        }
        self.conn.refuse(id, reason);
    }

    /// The invariants no peer can break.
    fn check(&mut self) {
        let conn = &self.conn;
        let broken = conn.error.is_some();
        assert!(conn.send_window.size() <= Window::MAX || broken);
        assert!(conn.recv_window.size() <= i64::from(BOUNDS.recv_window));
        assert!(conn.recv_window.size() >= 0 || broken);
        let (remembered, unacked) = conn.held();
        assert!(remembered <= 64);
        assert!(unacked < BOUNDS.recv_window / 2);
        let last = conn.last_id();
        assert!(last >= self.last_id && last <= MAX_STREAM_ID);
        assert!(last == 0 || last % 2 == 1);
        self.last_id = last;
        assert!(self.held.len() <= MAX_HELD);
        for (id, s) in &self.held {
            assert!(*id <= last && id % 2 == 1);
            assert!(s.send.size() <= Window::MAX || broken);
            assert!(s.recv.size() <= i64::from(STREAM_WINDOW));
        }
        let slack = BOUNDS.max_local_resets + 8;
        assert!(conn.out.len() <= MAX_ANSWERS + slack, "{}", conn.out.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz_io::frame;

    /// Seeds of the fuzz target's corpus, on both sides: streams opened and ended, data past a
    /// window, frames on closed and idle streams, SETTINGS and their acknowledgements, PINGs.
    #[test]
    fn seeds_are_driven_within_the_invariants() {
        let get = [0x83, 0x86, 0x84, 0x41, 0x01, b'a'];
        let ok = [0x88];
        let mut server = vec![0];
        server.extend(frame(0x4, 0, 0, &[0, 4, 0, 0, 0, 0]));
        server.extend(frame(0x4, 1, 0, &[]));
        for i in 0..40u32 {
            let id = 2 * i + 1;
            server.extend(frame(0x1, 0x4, id, &get));
            server.extend(frame(0x0, 0, id, &[b'x'; 100]));
            server.extend(frame(0x0, 1, id, b"end"));
            server.extend(frame(0x0, 0, id, b"late"));
            server.extend(frame(0x6, 0, 0, b"skewgate"));
            server.extend(frame(0x4, 1, 0, &[]));
        }
        let mut client = vec![1];
        client.extend(frame(0x4, 1, 0, &[]));
        for id in (1..=15u32).step_by(2) {
            client.extend(frame(0x1, 0x4, id, &ok));
            client.extend(frame(0x0, 0, id, &[b'x'; 1000]));
            client.extend(frame(0x3, 0, id, &8u32.to_be_bytes()));
            client.extend(frame(0x0, 1, id, b"after the reset"));
        }
        // A frame on a stream never opened: the connection's error.
        client.extend(frame(0x0, 0, 41, b"idle"));
        client.extend(frame(0x6, 0, 0, b"after it"));
        let mut unasked = vec![2];
        unasked.extend(frame(0x4, 1, 0, &[]));
        unasked.extend(frame(0x4, 1, 0, &[]));
        for input in [server, client, unasked, vec![3, 0xff, 0xff, 0xff]] {
            drive(&input);
        }
    }

    #[test]
    fn an_acknowledgement_not_asked_for_is_a_protocol_error() {
        let mut conn: Conn<u32> = Conn::new(Role::Server, BOUNDS);
        conn.start(Settings::default(), 7);
        assert!(matches!(
            conn.recv(Settings::ack().into()),
            Event::SettingsAcked(7)
        ));
        assert!(matches!(conn.recv(Settings::ack().into()), Event::Done));
        assert_eq!(conn.error, Some(Reason::PROTOCOL_ERROR));
    }

    #[test]
    fn the_client_takes_no_frame_on_a_stream_it_never_opened_and_ignores_forgotten_ones() {
        let mut conn: Conn<()> = Conn::new(Role::Client, BOUNDS);
        let id = conn.open_local().expect("id");
        assert_eq!(u32::from(id), 1);
        assert_eq!(conn.next_local(), 3);
        // Data on the forgotten stream 1 is ignored, its length given back.
        let late = h2::frame::Data::new(id, bytes::Bytes::from_static(b"late"));
        let Event::Data(data) = conn.recv(late.into()) else {
            panic!("data on an opened stream");
        };
        conn.closed_data(id, data.flow_controlled_len(), false);
        assert!(conn.out.is_empty() && conn.error.is_none());
        // On stream 3, never opened: GOAWAY PROTOCOL_ERROR.
        let idle = h2::frame::Data::new(StreamId::from(3), bytes::Bytes::new());
        assert!(matches!(conn.recv(idle.into()), Event::Done));
        assert_eq!(conn.error, Some(Reason::PROTOCOL_ERROR));
    }
}
