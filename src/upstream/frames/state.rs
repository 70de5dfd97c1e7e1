//! What one frame-level upstream connection knows: its streams, the frames waiting to go out, and
//! both sides' flow-control windows. Everything here runs under the connection's one lock, held
//! for a few hundred instructions at a time by the connection's task (a frame in) or by a request
//! (a stream opened, data taken, a handle dropped); on a worker the two are the same thread.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::Arc;
use std::task::Waker;

use bytes::Bytes;
use h2::Reason;
use h2::frame::{Data, Frame, Headers, Reset, StreamId, WindowUpdate};
use http::{HeaderMap, StatusCode};

use super::CONNECTION_WINDOW;
use super::stream::{Chunks, Failure, Stream, wake};
use super::windows::Shrink;
use crate::http2core::{Ends, InitialWindow, Window};
use crate::upstream::budget::{Level, ResponseBudget, SMALL_WINDOW};

/// The connection's state.
pub(super) struct State {
    pub(super) streams: slab::Slab<Stream>,
    /// Stream id to slab key, for the frames coming in.
    ids: HashMap<u32, usize, foldhash::fast::FixedState>,
    /// Frames to write, in order.
    pub(super) out: VecDeque<Frame<Bytes>>,
    /// The connection's task, to be woken when `out` gets a frame.
    pub(super) task: Option<Waker>,
    pub(super) next_id: u32,
    /// The apiserver's connection-level window for what skewgate sends.
    pub(super) send_window: Window,
    /// The apiserver's `SETTINGS_INITIAL_WINDOW_SIZE`, given to each new stream.
    pub(super) peer_initial_window: InitialWindow,
    /// The largest DATA payload the apiserver accepts.
    pub(super) max_frame: usize,
    /// Data received on the connection and not yet given back in a connection WINDOW_UPDATE.
    unacked: u32,
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
    /// skewgate's SETTINGS not acknowledged yet, oldest first, with the smaller window each
    /// carried (applied at its acknowledgement).
    pub(super) settings_unacked: VecDeque<Option<Shrink>>,
}

/// The most frames queued before answers to the apiserver's PINGs and SETTINGS are dropped.
const MAX_QUEUED: usize = 4096;

/// The largest stream id a client may use.
const MAX_STREAM_ID: u32 = (1 << 31) - 1;

impl State {
    pub(super) fn new(budget: Arc<ResponseBudget>) -> State {
        State {
            streams: slab::Slab::new(),
            ids: HashMap::default(),
            out: VecDeque::new(),
            task: None,
            next_id: 1,
            send_window: Window::new(65_535),
            peer_initial_window: InitialWindow::default(),
            max_frame: 16_384,
            unacked: 0,
            closing: None,
            failed: None,
            released_by_pool: false,
            budget,
            held: 0,
            promised: 0,
            level: Level::Normal,
            settings_unacked: VecDeque::new(),
        }
    }

    /// Queues `frame` and wakes the connection's task to write it.
    pub(super) fn push(&mut self, frame: Frame<Bytes>) {
        self.out.push_back(frame);
        if let Some(task) = self.task.take() {
            task.wake();
        }
    }

    /// Whether a new stream may be opened now; why not, if not.
    pub(super) fn can_open(&mut self) -> Result<(), Failure> {
        if self.next_id > MAX_STREAM_ID {
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

    /// Queues an answer the connection owes the apiserver (a SETTINGS or PING acknowledgement),
    /// unless more than `MAX_QUEUED` frames wait already: an apiserver that sends PINGs and does not
    /// read its socket does not grow skewgate's queue without bound.
    pub(super) fn push_answer(&mut self, frame: Frame<Bytes>) {
        if self.out.len() < MAX_QUEUED {
            self.push(frame);
        }
    }

    /// Opens a stream (after `can_open`) with `headers`, given its stream id; its slab key.
    pub(super) fn open(&mut self, headers: impl FnOnce(StreamId) -> Headers) -> usize {
        self.follow_pressure();
        let id = self.next_id;
        self.next_id += 2;
        let frame = headers(StreamId::from(id));
        let end = frame.is_end_stream();
        let key = self.streams.insert(Stream {
            id: StreamId::from(id),
            head: None,
            head_seen: false,
            data: Chunks::default(),
            trailers: None,
            ends: Ends::new(false, end),
            failure: None,
            recv_window: Window::new(self.level.window()),
            released: 0,
            send_window: self.peer_initial_window.window(),
            recv_task: None,
            send_task: None,
            recv_handle: true,
            send_handle: !end,
            promised: 0,
        });
        self.recount(key);
        self.ids.insert(id, key);
        self.push(frame.into());
        key
    }

    /// Data the request's body took off stream `key`: given back to the apiserver once half the
    /// stream's window has been taken (as h2 does), unless the stream is done receiving; no more
    /// than keeps what the apiserver may send and what the stream holds within the window (the
    /// small one under pressure).
    pub(super) fn release(&mut self, key: usize, len: usize) {
        let target = i64::from(self.target());
        let Some(s) = self.streams.get_mut(key) else {
            return;
        };
        if s.ends.recv_closed() || s.failure.is_some() {
            return;
        }
        s.released = s.released.saturating_add(len as u32);
        if i64::from(s.released) >= target / 2 {
            let credit = s.recv_window.size() + s.data.len() as i64;
            let grant = (target - credit).min(i64::from(std::mem::take(&mut s.released)));
            if grant > 0 {
                s.recv_window.grant(grant as usize);
                let id = s.id;
                self.push(WindowUpdate::new(id, grant as u32).into());
                self.recount(key);
            }
        }
    }

    /// Resets stream `key` with `reason` (unless it is over already): RST_STREAM out, its
    /// handles told.
    pub(super) fn reset(&mut self, key: usize, reason: Reason) {
        let Some(s) = self.streams.get_mut(key) else {
            return;
        };
        if s.failure.is_some() || s.ends.is_closed() {
            return;
        }
        s.failure = Some(Failure::Reset(reason));
        s.ends.close_send();
        let dropped = s.data.len();
        s.data.clear();
        wake(&mut s.recv_task);
        wake(&mut s.send_task);
        let id = s.id;
        self.taken(dropped);
        self.recount(key);
        self.push(Reset::new(id, reason).into());
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
        if gone {
            let s = self.streams.remove(key);
            self.taken(s.data.len());
            self.unpromise(s.promised as usize);
            self.ids.remove(&u32::from(id));
            // The pool let go of the connection: it ends with its last stream.
            if self.released_by_pool && self.streams.is_empty() {
                wake(&mut self.task);
            }
        }
    }

    /// The stream a frame from the apiserver is for, if skewgate still has it.
    fn stream(&mut self, id: StreamId) -> Option<(usize, &mut Stream)> {
        let key = *self.ids.get(&u32::from(id))?;
        self.streams.get_mut(key).map(|s| (key, s))
    }

    /// A HEADERS frame from the apiserver: the response head, an informational head (skipped), or
    /// the trailers.
    pub(super) fn on_headers(&mut self, frame: Headers) {
        let end = frame.is_end_stream();
        let Some((key, s)) = self.stream(frame.stream_id()) else {
            return;
        };
        if s.failure.is_some() || s.ends.recv_closed() {
            return;
        }
        let (pseudo, fields) = frame.into_parts();
        let wellformed = match (!s.head_seen, pseudo.status) {
            // An informational head is skipped; one that ends the stream is malformed (RFC 9113,
            // 8.1), and no client is to take it for the final answer.
            (true, Some(status)) if status.is_informational() => {
                if !end {
                    return;
                }
                false
            }
            (true, Some(status)) => {
                s.head = Some(response_head(status, fields));
                s.head_seen = true;
                true
            }
            // Trailers end the stream; a second head that does not is malformed.
            (false, None) if end => {
                s.trailers = Some(Box::new(fields));
                true
            }
            _ => false,
        };
        if !wellformed {
            return self.reset(key, Reason::PROTOCOL_ERROR);
        }
        if end {
            s.ends.close_recv();
        }
        wake(&mut s.recv_task);
        self.recount(key);
    }

    /// A DATA frame from the apiserver: kept for the stream's body, within the window skewgate
    /// granted the stream; the connection's window is given back at once (backpressure is per
    /// stream).
    pub(super) fn on_data(&mut self, frame: Data<Bytes>, flow_len: usize) {
        self.follow_pressure();
        self.unacked = self.unacked.saturating_add(flow_len as u32);
        if self.unacked >= CONNECTION_WINDOW / 2 {
            let grant = std::mem::take(&mut self.unacked);
            self.push(WindowUpdate::new(StreamId::zero(), grant).into());
        }
        let end = frame.is_end_stream();
        // Not `stream()`: the budget is looked at while the stream is held.
        let Some(&key) = self.ids.get(&u32::from(frame.stream_id())) else {
            return;
        };
        let Some(s) = self.streams.get_mut(key) else {
            return;
        };
        if s.failure.is_some() || s.ends.recv_closed() {
            return;
        }
        let within = s.recv_window.receive(flow_len);
        if !s.head_seen || within.is_err() {
            // Data before the head, or past the window skewgate granted.
            let reason = within.err().unwrap_or(Reason::PROTOCOL_ERROR);
            return self.reset(key, reason);
        }
        let payload = frame.into_payload();
        if !payload.is_empty() {
            // The budget is spent, and this stream's client has not read what it holds: the
            // response is cut rather than held (`budget.rs`).
            if s.data.len() >= SMALL_WINDOW as usize && self.budget.over() {
                self.budget.count_reset();
                tracing::debug!(
                    stream = u32::from(s.id),
                    held = s.data.len(),
                    "upstream stream reset: the response buffer is at its bound and the client does not read"
                );
                return self.reset(key, Reason::CANCEL);
            }
            self.held += payload.len();
            self.budget.add(payload.len());
            s.data.push_back(payload);
        }
        if end {
            s.ends.close_recv();
        }
        wake(&mut s.recv_task);
        self.recount(key);
    }

    /// RST_STREAM from the apiserver.
    pub(super) fn on_reset(&mut self, id: StreamId, reason: Reason) {
        let Some((key, s)) = self.stream(id) else {
            return;
        };
        if s.failure.is_none() {
            s.failure = Some(Failure::Reset(reason));
            s.ends.close_send();
            wake(&mut s.recv_task);
            wake(&mut s.send_task);
            self.recount(key);
        }
    }

    /// WINDOW_UPDATE from the apiserver: more room for request bodies. A window past 2^31-1 is the
    /// connection's error on stream 0 (`Err`, its GOAWAY reason) and the stream's otherwise (RFC
    /// 9113, 6.9.1), as the server side checks it. (A zero increment is the codec's connection
    /// error, on any stream, before it gets here.)
    pub(super) fn on_window_update(&mut self, id: StreamId, increment: u32) -> Result<(), Reason> {
        if id.is_zero() {
            self.send_window.widen(increment)?;
            for (_, s) in self.streams.iter_mut() {
                wake(&mut s.send_task);
            }
        } else if let Some((key, s)) = self.stream(id) {
            if let Err(reason) = s.send_window.widen(increment) {
                self.reset(key, reason);
                return Ok(());
            }
            wake(&mut s.send_task);
        }
        Ok(())
    }

    /// The apiserver's new SETTINGS_INITIAL_WINDOW_SIZE: every open stream's window moves by the
    /// difference (RFC 9113, 6.9.2); one moved past 2^31-1 is the connection's FLOW_CONTROL_ERROR.
    pub(super) fn on_initial_window(&mut self, size: u32) -> Result<(), Reason> {
        let delta = self.peer_initial_window.set(size);
        for (_, s) in self.streams.iter_mut() {
            s.send_window.shift(delta)?;
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
            if s.id > last && s.failure.is_none() {
                s.failure = Some(Failure::Refused);
                wake(&mut s.recv_task);
                wake(&mut s.send_task);
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
            wake(&mut s.recv_task);
            wake(&mut s.send_task);
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

impl Drop for State {
    fn drop(&mut self) {
        self.budget.sub(self.held);
        self.unpromise(self.promised);
    }
}
