//! Responses out of the connection's state: the streams with data to write in turn, within the
//! windows the client grants (WINDOW_UPDATE, SETTINGS_INITIAL_WINDOW_SIZE) and its frame size.

use bytes::Bytes;
use h2::Reason;
use h2::frame::{Data, Frame, Headers, StreamId};
use http::HeaderMap;

use super::state::{ConnState, count_queued};
use crate::http2core::Window;
use crate::http2core::wake;

impl ConnState {
    /// WINDOW_UPDATE from the client: more room for responses.
    pub(super) fn on_window_update(&mut self, id: StreamId, increment: u32) {
        let initial = self.send_initial;
        let Some((key, s)) = self.stream(id) else {
            return;
        };
        if s.failure.is_some() {
            return;
        }
        let was_shut = s.role.send_window.size(initial) <= s.role.queued_len as i64;
        if let Err(reason) = s.role.send_window.widen(initial, increment) {
            return self.reset_for(key, reason);
        }
        let offset = s.role.send_window.offset();
        // A pipe waiting for room takes from the apiserver's answer again (`poll_room`).
        if was_shut && s.role.send_window.size(initial) > s.role.queued_len as i64 {
            wake(&mut s.send_task);
        }
        self.send_peak = self.send_peak.max(offset);
        self.schedule(key);
    }

    /// The client's new SETTINGS_INITIAL_WINDOW_SIZE: every open stream's window moves by the
    /// difference (RFC 9113, 6.9.2), at once (`SendWindow`); one taken past 2^31-1 is the
    /// connection's FLOW_CONTROL_ERROR. The streams are looked at one by one only when the
    /// largest window could pass it, and only those waiting for room are woken when it grows.
    pub(super) fn on_initial_window(&mut self, delta: i64) {
        let initial = self.send_initial + delta;
        if delta > 0 && initial + self.send_peak > Window::MAX {
            let largest = self
                .streams
                .iter()
                .map(|(_, s)| s.role.send_window.offset())
                .max();
            self.send_peak = largest.unwrap_or(0);
            if initial + self.send_peak > Window::MAX {
                return self.go_away(Reason::FLOW_CONTROL_ERROR);
            }
        }
        self.send_initial = initial;
        if delta > 0 {
            for key in std::mem::take(&mut self.blocked) {
                if let Some(s) = self.streams.get_mut(key) {
                    s.role.in_blocked = false;
                    wake(&mut s.send_task);
                }
                self.schedule(key);
            }
        }
    }

    /// Stream `key` waits for room in its own window: woken when a SETTINGS widens it.
    pub(super) fn block(&mut self, key: usize) {
        list_once(&mut self.streams, &mut self.blocked, key, |s| {
            &mut s.role.in_blocked
        });
    }

    /// Puts stream `key` in the queue of streams with data to write, if it has some and room.
    pub(super) fn schedule(&mut self, key: usize) {
        if let Some(s) = self.streams.get_mut(key)
            && !s.role.in_ready
            && s.failure.is_none()
            && (s.role.end_queued.is_some()
                || (!s.role.queued.is_empty() && !s.role.send_window.is_shut(self.send_initial)))
        {
            s.role.in_ready = true;
            self.ready.push_back(key);
            self.conn.wake();
        }
    }

    /// Queues response data on stream `key` (with the response's end after it, if `end`); the
    /// connection's task writes it as the windows allow.
    pub(super) fn queue_data(
        &mut self,
        key: usize,
        chunk: Bytes,
        end: Option<Option<Box<HeaderMap>>>,
    ) {
        let Some(s) = self.streams.get_mut(key) else {
            return;
        };
        if s.failure.is_some() || s.ends.send_closed() {
            return;
        }
        if !chunk.is_empty() {
            s.role.queued_len += chunk.len();
            let n = chunk.len();
            s.role.queued.push_back(chunk);
            count_queued(&mut self.queued_total, self.budget.as_deref(), n as isize);
        }
        if let Some(end) = end {
            s.role.end_queued = Some(end);
            s.ends.close_send();
        }
        self.schedule(key);
    }

    /// The next DATA (or trailers) frame to write from the streams in turn, within the windows and
    /// the client's frame size; `None` when no stream has one to write now.
    pub(super) fn next_data(&mut self) -> Option<Frame<Bytes>> {
        while let Some(key) = self.ready.pop_front() {
            let Some(s) = self.streams.get_mut(key) else {
                continue;
            };
            s.role.in_ready = false;
            match self.take_frame(key) {
                Taken::Frame(frame) => {
                    self.schedule(key);
                    self.settle(key);
                    return Some(frame);
                }
                Taken::Nothing => self.settle(key),
                Taken::ConnectionWindowShut => {
                    // The stream waits in turn for the connection's window.
                    if let Some(s) = self.streams.get_mut(key) {
                        s.role.in_ready = true;
                    }
                    self.ready.push_front(key);
                    return None;
                }
            }
        }
        None
    }

    /// The next frame stream `key` has to write now: a DATA frame as large as the windows and
    /// the frame size allow, or the response's end.
    fn take_frame(&mut self, key: usize) -> Taken {
        let Some(s) = self.streams.get_mut(key) else {
            return Taken::Nothing;
        };
        if s.failure.is_some() {
            return Taken::Nothing;
        }
        let Some(mut chunk) = s.role.queued.pop_front() else {
            return match s.role.end_queued.take() {
                Some(Some(trailers)) => {
                    let mut frame = Headers::trailers(s.id, *trailers);
                    frame.set_end_stream();
                    Taken::Frame(frame.into())
                }
                Some(None) => {
                    let mut frame = Data::new(s.id, Bytes::new());
                    frame.set_end_stream(true);
                    Taken::Frame(frame.into())
                }
                None => Taken::Nothing,
            };
        };
        let initial = self.send_initial;
        let room = s
            .role
            .send_window
            .size(initial)
            .min(self.conn.send_window.size())
            .min(self.conn.max_frame as i64);
        if room <= 0 {
            s.role.queued.push_front(chunk);
            // Shut by the stream's own window, it waits out of turn for its WINDOW_UPDATE.
            return if self.conn.send_window.is_shut() && !s.role.send_window.is_shut(initial) {
                Taken::ConnectionWindowShut
            } else {
                self.block(key);
                Taken::Nothing
            };
        }
        if chunk.len() as i64 > room {
            let rest = chunk.split_off(room as usize);
            s.role.queued.push_front(rest);
        }
        let n = chunk.len();
        s.role.send_window.spend(n);
        self.conn.send_window.spend(n);
        s.role.queued_len -= n;
        count_queued(
            &mut self.queued_total,
            self.budget.as_deref(),
            -(n as isize),
        );
        let last = s.role.queued.is_empty() && matches!(s.role.end_queued, Some(None));
        if last {
            s.role.end_queued = None;
        }
        self.written += 1;
        let mut frame = Data::new(s.id, chunk);
        frame.set_end_stream(last);
        // The pipe may take more now (it checks how much).
        wake(&mut s.send_task);
        if self.queued_total == 0 && !self.held_back.is_empty() {
            self.release_held_back();
        }
        Taken::Frame(frame.into())
    }
}

/// What a stream in turn had to write.
enum Taken {
    Frame(Frame<Bytes>),
    /// Nothing now (reset, or its own window shut, or all written).
    Nothing,
    ConnectionWindowShut,
}

/// Lists stream `key` in `list` once (`flag` says it is listed). Streams gone since they were
/// listed leave their keys: none is kept past twice the streams held.
pub(super) fn list_once(
    streams: &mut crate::http2core::Store<super::state::ServerStream>,
    list: &mut Vec<usize>,
    key: usize,
    flag: fn(&mut super::state::ServerStream) -> &mut bool,
) {
    if let Some(s) = streams.get_mut(key) {
        let listed = flag(s);
        if !*listed {
            *listed = true;
            list.push(key);
        }
    }
    if list.len() > 2 * streams.len() + 64 {
        *list = streams
            .iter_mut()
            .filter_map(|(key, s)| (*flag(s)).then_some(key))
            .collect();
    }
}
