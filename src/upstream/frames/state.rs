//! What one frame-level upstream connection knows: its streams, the frames waiting to go out, and
//! both sides' flow-control windows. Everything here runs under the connection's one lock, held
//! for a few hundred instructions at a time by the connection's task (a frame in) or by a request
//! (a stream opened, data taken, a handle dropped); on a worker the two are the same thread.

use std::io;
use std::sync::Arc;

use bytes::Bytes;
use h2::Reason;
use h2::frame::{Data, Frame, Headers, Reset, StreamId, WindowUpdate};
use http::{HeaderMap, StatusCode};

use super::CONNECTION_WINDOW;
use super::stream::{self, UpstreamStream};
use super::windows::Shrink;
use crate::http2core::{Bounds, Conn, MAX_STREAM_ID, Role, Store};
use crate::http2core::{Failure, wake};
use crate::upstream::budget::{Level, ResponseBudget, SMALL_WINDOW};

/// The connection's state.
pub(super) struct LinkState {
    /// The streams held, by slab key and by id (`http2core::Store`).
    pub(super) streams: Store<UpstreamStream>,
    /// The connection's own: stream ids, its windows, SETTINGS (each of skewgate's with the
    /// smaller window it carried, applied at its acknowledgement), the frames to write, GOAWAY
    /// (`http2core::Conn`).
    pub(super) conn: Conn<Option<Shrink>>,
    /// Set once the connection cannot take new streams: failed, closed, or GOAWAY received.
    pub(super) closing: Option<Failure>,
    /// Set once the connection itself failed: every stream fails with it.
    pub(super) failed: Option<Failure>,
    /// Set once the pool let go of the connection: it ends when its last stream has.
    pub(super) released_by_pool: bool,
    /// The bound on response data held, for the process (`budget.rs`).
    pub(super) budget: Arc<ResponseBudget>,
    /// Response data this connection's streams hold, counted in `budget` too.
    pub(super) held: usize,
    /// What this connection's streams may still be sent (their windows, while they receive),
    /// counted in `budget` too (`windows.rs`).
    pub(super) promised: usize,
    /// The budget's level as announced last: the initial window of the streams opened since.
    pub(super) level: Level,
}

/// Streams skewgate may reset for the apiserver's fault (a malformed response, data past a window)
/// before it ends the connection: h2's bound, as for a client.
const MAX_LOCAL_RESETS: usize = 1024;

impl LinkState {
    pub(super) fn new(budget: Arc<ResponseBudget>) -> LinkState {
        LinkState {
            streams: Store::default(),
            conn: Conn::new(
                Role::Client,
                Bounds {
                    recv_window: CONNECTION_WINDOW,
                    max_local_resets: MAX_LOCAL_RESETS,
                },
            ),
            closing: None,
            failed: None,
            released_by_pool: false,
            budget,
            held: 0,
            promised: 0,
            level: Level::Normal,
        }
    }

    /// Queues `frame` and wakes the connection's task to write it.
    pub(super) fn push(&mut self, frame: Frame<Bytes>) {
        self.conn.push(frame);
    }

    /// Whether a new stream may be opened now; why not, if not.
    pub(super) fn can_open(&mut self) -> Result<(), Failure> {
        if self.conn.next_local() > MAX_STREAM_ID {
            self.closing.get_or_insert(Failure::Closed(
                io::ErrorKind::Other,
                "stream ids exhausted",
            ));
        }
        match &self.closing {
            Some(why) => Err(why.clone()),
            None => Ok(()),
        }
    }

    /// Opens a stream (after `can_open`) with `headers`, given its stream id; its slab key.
    pub(super) fn open(&mut self, headers: impl FnOnce(StreamId) -> Headers) -> usize {
        self.follow_pressure();
        // `can_open` saw an id left.
        let id = self
            .conn
            .open_local()
            .unwrap_or(StreamId::from(MAX_STREAM_ID));
        let frame = headers(id);
        let end = frame.is_end_stream();
        let send_window = self.conn.peer_initial_window.window();
        let stream = stream::open(id, end, self.level.window(), send_window);
        let key = self.streams.insert(u32::from(id), stream);
        self.recount(key);
        self.push(frame.into());
        key
    }

    /// Data the request's body took off stream `key`: given back to the apiserver once half the
    /// stream's window has been taken (as h2 does), unless the stream is done receiving; no more
    /// than keeps what the apiserver may send and what the stream holds within the window (the
    /// small one under pressure).
    pub(super) fn release(&mut self, key: usize, len: usize) {
        let target = self.target();
        let Some(s) = self.streams.get_mut(key) else {
            return;
        };
        // Only what the response budget has room for: it is a bound for the process.
        let budget = &self.budget;
        if let Some((id, grant)) = s.release(len, target, |grant| budget.has_room(grant)) {
            self.push(WindowUpdate::new(id, grant).into());
            self.recount(key);
        }
    }

    /// Resets stream `key` with `reason` (unless it is over already): RST_STREAM out, its
    /// handles told.
    pub(super) fn reset(&mut self, key: usize, reason: Reason) {
        if let Some(id) = self.stop(key, reason) {
            self.push(Reset::new(id, reason).into());
        }
    }

    /// Resets stream `key` for the apiserver's fault (a malformed response, data past the
    /// window): as `reset`, and counted against the apiserver (`Conn::refuse`).
    fn refuse(&mut self, key: usize, reason: Reason) {
        if let Some(id) = self.stop(key, reason) {
            self.conn.refuse(id, reason);
        }
    }

    /// Stream `key` fails with `reason` unless it is over already: its data dropped, its handles
    /// told; its id, to reset it.
    fn stop(&mut self, key: usize, reason: Reason) -> Option<StreamId> {
        let s = self.streams.get_mut(key)?;
        if s.ends.is_closed() || !s.fail(Failure::Reset(reason)) {
            return None;
        }
        s.ends.close_send();
        let dropped = s.recv.drop_held();
        let id = s.id;
        self.taken(dropped);
        self.recount(key);
        Some(id)
    }

    /// One handle of stream `key` is gone; the stream is forgotten with its last, and reset if it
    /// is not over (the client went away: the apiserver stops sending in vain).
    pub(super) fn drop_handle(&mut self, key: usize, recv: bool) {
        let Some(s) = self.streams.get_mut(key) else {
            return;
        };
        if recv {
            s.recv_handle = false;
        } else {
            s.send_handle = false;
        }
        let (id, gone) = (s.id, !s.recv_handle && !s.send_handle);
        if recv || gone {
            self.reset(key, Reason::CANCEL);
        }
        if gone && let Some(s) = self.streams.remove(key, u32::from(id)) {
            self.taken(s.recv.held());
            self.unpromise(s.role.promised as usize);
            // The pool let go of the connection: it ends with its last stream.
            if self.released_by_pool && self.streams.is_empty() {
                self.conn.wake();
            }
        }
    }

    /// The stream a frame from the apiserver is for, if skewgate still has it.
    fn stream(&mut self, id: StreamId) -> Option<(usize, &mut UpstreamStream)> {
        self.streams.find(u32::from(id))
    }

    /// A HEADERS frame from the apiserver: the response head, an informational head (skipped), or
    /// the trailers.
    pub(super) fn on_headers(&mut self, frame: Headers) {
        let (id, end) = (frame.stream_id(), frame.is_end_stream());
        let Some((key, s)) = self.stream(id) else {
            return self.conn.closed_headers(id, end);
        };
        if !s.receiving() {
            return;
        }
        let (pseudo, fields) = frame.into_parts();
        let wellformed = match (!s.role.head_seen, pseudo.status) {
            // An informational head is skipped; one that ends the stream is malformed (RFC 9113,
            // 8.1), and no client is to take it for the final answer.
            (true, Some(status)) if status.is_informational() => {
                if !end {
                    return;
                }
                false
            }
            (true, Some(status)) => {
                s.role.head = Some(response_head(status, fields));
                s.role.head_seen = true;
                true
            }
            // Trailers end the stream; a second head that does not is malformed.
            (false, None) if end => {
                s.recv.trailers = Some(Box::new(fields));
                true
            }
            _ => false,
        };
        if !wellformed {
            return self.refuse(key, Reason::PROTOCOL_ERROR);
        }
        if end {
            s.ends.close_recv();
        }
        wake(&mut s.recv.task);
        self.recount(key);
    }

    /// A DATA frame from the apiserver (taken from the connection's window, `Conn::recv`): kept
    /// for the stream's body, within the window skewgate granted the stream; the connection's
    /// window is given back at once (backpressure is per stream).
    pub(super) fn on_data(&mut self, frame: Data<Bytes>) {
        self.follow_pressure();
        let (id, end) = (frame.stream_id(), frame.is_end_stream());
        let flow_len = frame.flow_controlled_len();
        self.conn.give_back(flow_len);
        // Not `stream()`: the budget is looked at while the stream is held.
        let Some(key) = self.streams.key(u32::from(id)) else {
            // Forgotten (`closed_data`): its length was given back.
            return;
        };
        let Some(s) = self.streams.get_mut(key) else {
            return;
        };
        if !s.receiving() {
            return;
        }
        let within = s.recv.window.receive(flow_len);
        if !s.role.head_seen || within.is_err() {
            // Data before the head, or past the window skewgate granted.
            let reason = within.err().unwrap_or(Reason::PROTOCOL_ERROR);
            return self.refuse(key, reason);
        }
        let payload = frame.into_payload();
        if !payload.is_empty() {
            // The budget is spent, and this stream's client has not read what it holds: the
            // response is cut rather than held (`budget.rs`).
            if s.recv.held() >= SMALL_WINDOW as usize && self.budget.over() {
                self.budget.count_reset();
                tracing::debug!(
                    stream = u32::from(s.id),
                    held = s.recv.held(),
                    "upstream stream reset: the response buffer is at its bound and the client does not read"
                );
                return self.reset(key, Reason::CANCEL);
            }
            self.held += payload.len();
            self.budget.add(payload.len());
            s.recv.hold(payload);
        }
        if end {
            s.ends.close_recv();
        }
        wake(&mut s.recv.task);
        self.recount(key);
    }

    /// RST_STREAM from the apiserver.
    pub(super) fn on_reset(&mut self, id: StreamId, reason: Reason) {
        let Some((key, s)) = self.stream(id) else {
            return;
        };
        if s.fail(Failure::Reset(reason)) {
            s.ends.close_send();
            self.recount(key);
        }
    }

    /// The connection's window grew (`Conn::recv` checked it): streams waiting for room go on.
    pub(super) fn on_connection_window(&mut self) {
        for (_, s) in self.streams.iter_mut() {
            wake(&mut s.send_task);
        }
    }

    /// WINDOW_UPDATE from the apiserver on a stream: more room for its request body. A window past
    /// 2^31-1 is the stream's error (RFC 9113, 6.9.1), as the server side checks it. (A zero
    /// increment is the codec's connection error, on any stream, before it gets here.)
    pub(super) fn on_window_update(&mut self, id: StreamId, increment: u32) {
        if let Some((key, s)) = self.stream(id) {
            if let Err(reason) = s.role.send_window.widen(increment) {
                return self.refuse(key, reason);
            }
            wake(&mut s.send_task);
        }
    }

    /// The apiserver's new SETTINGS_INITIAL_WINDOW_SIZE moved every stream's window by `delta`
    /// (RFC 9113, 6.9.2); one moved past 2^31-1 is the connection's FLOW_CONTROL_ERROR.
    pub(super) fn on_initial_window(&mut self, delta: i64) -> Result<(), Reason> {
        for (_, s) in self.streams.iter_mut() {
            s.role.send_window.shift(delta)?;
            if delta > 0 {
                wake(&mut s.send_task);
            }
        }
        Ok(())
    }

    /// GOAWAY from the apiserver: no new streams; those above `last` were never processed.
    pub(super) fn on_go_away(&mut self, last: StreamId) {
        self.closing.get_or_insert(Failure::Refused);
        for (_, s) in self.streams.iter_mut() {
            if s.id > last {
                s.fail(Failure::Refused);
            }
        }
        self.recount_all();
    }

    /// The connection ended: every stream not over fails with it.
    pub(super) fn fail(&mut self, why: Failure) {
        self.closing.get_or_insert(why.clone());
        self.failed.get_or_insert(why.clone());
        for (_, s) in self.streams.iter_mut() {
            if s.failure.is_none() && !s.ends.is_closed() {
                s.failure = Some(why.clone());
            }
            s.wake_both();
        }
        self.recount_all();
    }
}

/// A response head as http has it.
fn response_head(status: StatusCode, fields: HeaderMap) -> http::response::Parts {
    let mut head = http::Response::new(());
    *head.status_mut() = status;
    *head.version_mut() = http::Version::HTTP_2;
    *head.headers_mut() = fields;
    head.into_parts().0
}

impl Drop for LinkState {
    fn drop(&mut self) {
        self.budget.sub(self.held);
        self.unpromise(self.promised);
    }
}
