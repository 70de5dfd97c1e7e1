//! What one HTTP/2 client connection knows: its streams, the frames waiting to go out, both sides'
//! flow-control windows, and the limits a client is held to. Everything here runs under the
//! connection's one lock, taken by the connection's task once per turn (frames in and out) and by a
//! stream's handles (a response sent, request data taken); all of them run on the connection's
//! task, so the lock is never contended.

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::Waker;

use bytes::Bytes;
use h2::Reason;
use h2::frame::{Frame, Reset, StreamId};
use http::{HeaderMap, Request};

use super::Limits;
pub(super) use super::send_window::SendWindow;
use crate::http2core::{Bounds, Conn, Gone, Role, Store, Stream, StreamState};
use crate::http2core::{Chunks, Failure, wake};
use crate::upstream::ResponseBudget;

/// How many control frames (acknowledgements, resets, window updates) may wait to be written
/// before the connection stops reading: a client that sends PINGs or SETTINGS and does not read
/// its socket is not read either, as h2 does not read past an unsent PONG.
pub(super) const MAX_QUEUED: usize = 256;

/// One stream of the connection (`http2core::Stream`): its request received as its receiving
/// half, its response sent from the server's part.
pub(super) type ServerStream = Stream<ServerPart>;

/// What only the server keeps of a stream: what the request's `content-length` still allows, the
/// response queued and the client's window for it, and how the stream closed.
pub(super) struct ServerPart {
    /// What the request's `content-length` says is still to come.
    pub(super) content_length: Option<u64>,
    /// How much more skewgate may send on the stream, as the client granted it, beside its
    /// initial window (`ConnState::send_initial`).
    pub(super) send_window: SendWindow,
    /// In `ConnState::blocked`.
    pub(super) in_blocked: bool,
    /// In `ConnState::held_back`.
    pub(super) in_held_back: bool,
    /// Response data queued and not yet written.
    pub(super) queued: Chunks,
    pub(super) queued_len: usize,
    /// The response's end (END_STREAM, or trailers) comes after what is queued.
    pub(super) end_queued: Option<Option<Box<HeaderMap>>>,
    /// In the queue of streams with data to write.
    pub(super) in_ready: bool,
    /// How the stream closed, when it was reset: what the client may still send on it.
    pub(super) gone: Option<Gone>,
    /// Counted among the open streams.
    pub(super) open: bool,
}

impl ServerPart {
    /// A stream just opened, its request's `content-length` as it said.
    #[inline]
    pub(super) fn new(content_length: Option<u64>) -> ServerPart {
        ServerPart {
            content_length,
            send_window: SendWindow::default(),
            in_blocked: false,
            in_held_back: false,
            queued: Chunks::default(),
            queued_len: 0,
            end_queued: None,
            in_ready: false,
            gone: None,
            open: true,
        }
    }
}

/// The connection's state.
pub(super) struct ConnState {
    /// The streams held, by slab key and by id (`http2core::Store`).
    pub(super) streams: Store<ServerStream>,
    /// The connection's own: stream ids, its windows, SETTINGS, the frames it owes the client,
    /// GOAWAY, and the bounds on the client (`http2core::Conn`).
    pub(super) conn: Conn<()>,
    /// Streams with data queued and room in their own window, in turn.
    pub(super) ready: VecDeque<usize>,
    /// The client's SETTINGS_INITIAL_WINDOW_SIZE now: each stream's window is this and its own
    /// offset (`SendWindow`).
    pub(super) send_initial: i64,
    /// At least the largest stream window's offset: a SETTINGS that would take it past 2^31-1
    /// looks at the streams' windows one by one.
    pub(super) send_peak: i64,
    /// Streams whose response waits for room in their own window: woken when it grows.
    pub(super) blocked: Vec<usize>,
    /// Streams that wait, held back by the spent response budget, for the connection's data to
    /// be written.
    pub(super) held_back: Vec<usize>,
    /// The socket did not take all the codec had for it at the connection's last turn.
    pub(super) unflushed: bool,
    pub(super) limits: Limits,
    /// Streams open (not closed both ways, not reset), against the stream limit.
    pub(super) open: u32,
    /// The connection failed: every stream fails with it.
    pub(super) failed: Option<Failure>,
    /// The process's bound on response data held (`upstream::ResponseBudget`), which counts what
    /// this connection's streams hold unwritten beside what upstream streams hold, and the sum
    /// of those here.
    pub(super) budget: Option<Arc<ResponseBudget>>,
    pub(super) queued_total: usize,
    /// DATA frames handed to the codec so far: the client takes what it is sent.
    pub(super) written: u64,
    /// The client answered skewgate's keep-alive PING.
    pub(super) ponged: bool,
    /// Heads over the header-list bound answered 431 since the connection's owner last looked.
    pub(super) heads_too_large: usize,
    /// Woken by the answer.
    pub(super) pong_waker: Option<Waker>,
}

/// A request the client opened, to be handed to the proxy.
pub(super) struct Opened {
    pub(super) key: usize,
    pub(super) request: Request<()>,
    pub(super) end_stream: bool,
}

impl ConnState {
    pub(super) fn new(limits: Limits, waker: Waker) -> ConnState {
        let bounds = Bounds {
            recv_window: limits.connection_window,
            max_local_resets: limits.max_local_error_resets,
        };
        let mut conn = Conn::new(Role::Server, bounds);
        conn.set_waker(&waker);
        ConnState {
            streams: Store::default(),
            conn,
            ready: VecDeque::new(),
            send_initial: i64::from(h2::frame::DEFAULT_INITIAL_WINDOW_SIZE),
            send_peak: 0,
            blocked: Vec::new(),
            held_back: Vec::new(),
            unflushed: false,
            open: 0,
            failed: None,
            budget: None,
            queued_total: 0,
            written: 0,
            ponged: false,
            heads_too_large: 0,
            pong_waker: None,
            limits,
        }
    }

    /// Queues `frame` before any stream's data and wakes the connection's task to write it.
    pub(super) fn push(&mut self, frame: Frame<Bytes>) {
        self.conn.push(frame);
    }

    /// The connection is broken by the client: GOAWAY with `reason`, and no frame read after it.
    pub(super) fn go_away(&mut self, reason: Reason) {
        self.conn.go_away(reason);
    }

    /// Stops taking new streams: GOAWAY naming the last stream taken; those open finish.
    pub(super) fn graceful_go_away(&mut self) {
        self.conn.graceful_go_away();
    }

    /// Whether the connection has nothing left to do after a GOAWAY: no stream open, nothing to
    /// write.
    pub(super) fn finished(&self) -> bool {
        (self.conn.going_away.is_some() || self.conn.error.is_some())
            && self.open == 0
            && self.conn.out.is_empty()
            && self.ready.is_empty()
    }

    /// With no stream left, the memory streams took is given back: a kubelet fleet holds thousands
    /// of connections idle between bursts (the allocations come back with the next burst).
    pub(super) fn release_if_idle(&mut self) {
        if !self.streams.release_if_idle() {
            return;
        }
        self.conn.shrink();
        if self.ready.is_empty() {
            self.ready = VecDeque::new();
        }
    }

    /// Whether frames may be read: the connection is not closing, and what it owes the client has
    /// mostly been written.
    pub(super) fn reading(&self) -> bool {
        self.conn.error.is_none() && self.conn.out.len() < MAX_QUEUED
    }

    /// Resets stream `id` for the client's fault, counted against the client: a client that makes
    /// skewgate reset too many is sent GOAWAY ENHANCE_YOUR_CALM (h2's and hyper's bound, 1024).
    pub(super) fn refuse(&mut self, id: StreamId, reason: Reason) {
        self.conn.refuse(id, reason);
    }

    /// A stream the codec found malformed (its header block): reset, counted against the client.
    pub(super) fn refuse_stream(&mut self, id: StreamId, reason: Reason) {
        if let Some((key, _)) = self.stream(id) {
            return self.reset_for(key, reason);
        }
        self.conn
            .refuse_unopened(id, reason, self.limits.stream_window);
    }

    /// The stream a frame is for, if skewgate still has it.
    pub(super) fn stream(&mut self, id: StreamId) -> Option<(usize, &mut ServerStream)> {
        self.streams.find(u32::from(id))
    }

    /// Resets stream `key` with `reason` for the client's fault: RST_STREAM out, its handles told.
    pub(super) fn reset_for(&mut self, key: usize, reason: Reason) {
        let Some(s) = self.streams.get_mut(key) else {
            return;
        };
        if !s.fail(Failure::Reset(reason)) {
            return;
        }
        let id = s.id;
        s.role.gone = Some(s.gone_by_reset());
        self.close(key);
        self.refuse(id, reason);
    }

    /// Resets stream `key` for skewgate's side (its response failed or was dropped), unless it is
    /// over both ways.
    pub(super) fn reset(&mut self, key: usize, reason: Reason) {
        let Some(s) = self.streams.get_mut(key) else {
            return;
        };
        if s.is_over() || !s.fail(Failure::Reset(reason)) {
            return;
        }
        let id = s.id;
        s.role.gone = Some(s.gone_by_reset());
        self.close(key);
        self.push(Reset::new(id, reason).into());
    }

    /// A stream failed: nothing more is sent or received on it, and its handles are told.
    pub(super) fn close(&mut self, key: usize) {
        if let Some(s) = self.streams.get_mut(key) {
            s.ends.close();
            let dropped = s.recv.drop_held();
            s.role.queued.clear();
            let unwritten = std::mem::take(&mut s.role.queued_len);
            s.role.end_queued = None;
            s.wake_both();
            self.give_back(dropped);
            self.count_queued(-(unwritten as isize));
        }
        self.settle(key);
    }

    /// A stream that is over both ways no longer counts against the stream limit; one whose
    /// handles are both gone is forgotten.
    pub(super) fn settle(&mut self, key: usize) {
        let Some(s) = self.streams.get_mut(key) else {
            return;
        };
        let over = s.is_over();
        if over && std::mem::take(&mut s.role.open) {
            self.open -= 1;
        }
        if s.recv_handle || s.send_handle || s.role.in_ready {
            return;
        }
        if !over {
            if s.ends.send_closed() && (!s.role.queued.is_empty() || s.role.end_queued.is_some()) {
                // The response is whole but not yet written (it waits for the client's window):
                // settled again when its end is written.
                return;
            }
            // Both handles gone before the stream ended: the client is told (to stop sending, with
            // NO_ERROR, when its response is complete: RFC 9113, 8.1), and the stream is forgotten
            // by the reset's own settling.
            let reason = if s.ends.send_closed() {
                Reason::NO_ERROR
            } else {
                Reason::CANCEL
            };
            return self.reset(key, reason);
        }
        let (id, gone) = (u32::from(s.id), s.role.gone.unwrap_or(Gone::Ended));
        self.streams.remove(key, id);
        self.conn.remember(StreamId::from(id), gone);
    }

    /// Whether the response budget is spent: a stream then takes more only once its client took
    /// what it holds.
    pub(super) fn budget_spent(&self) -> bool {
        self.budget.as_deref().is_some_and(ResponseBudget::over)
    }

    /// Whether the connection's streams take nothing more from the apiservers now: the response
    /// budget is spent and the client has not taken all the connection holds for it. Room freed
    /// goes to clients that read (`upstream/stalls.rs`); the streams held back go on once the
    /// connection's data is written (`hold_back`).
    pub(super) fn held_back_by_budget(&self) -> bool {
        (self.queued_total > 0 || self.unflushed) && self.budget_spent()
    }

    /// Stream `key` waits, held back by the budget, for the connection's data to be written.
    pub(super) fn hold_back(&mut self, key: usize) {
        let list = &mut self.held_back;
        super::send::list_once(&mut self.streams, list, key, |s| &mut s.role.in_held_back);
    }

    /// The connection's data is all written: the streams held back by the budget go on.
    pub(super) fn release_held_back(&mut self) {
        for key in std::mem::take(&mut self.held_back) {
            if let Some(s) = self.streams.get_mut(key) {
                s.role.in_held_back = false;
                wake(&mut s.send_task);
            }
        }
    }

    /// Response data queued (`delta` > 0) or written or dropped (< 0), counted in the budget.
    pub(super) fn count_queued(&mut self, delta: isize) {
        count_queued(&mut self.queued_total, self.budget.as_deref(), delta);
    }

    /// The connection ended: every stream not over fails with it.
    pub(super) fn fail(&mut self, why: Failure) {
        self.failed.get_or_insert(why.clone());
        let keys = self.streams.keys();
        for key in keys {
            if let Some(s) = self.streams.get_mut(key)
                && s.fail(why.clone())
            {
                self.close(key);
            }
        }
        self.ready.clear();
        for (_, s) in self.streams.iter_mut() {
            s.role.in_ready = false;
        }
    }
}

impl Stream<ServerPart> {
    /// How the stream closes when it is reset now: what the client may still send on it, if it
    /// had not ended its side.
    pub(super) fn gone_by_reset(&self) -> Gone {
        match self.ends.state() {
            // The client's side was closed already: nothing of it may come.
            StreamState::HalfClosedRemote | StreamState::Closed => Gone::Closed,
            // Still open: what was in flight, up to its window, may come yet.
            StreamState::Open | StreamState::HalfClosedLocal => Gone::Reset {
                window: self.recv.window.size().max(0),
            },
        }
    }

    /// Over both ways: reset, or the request received whole and the response's end written.
    pub(super) fn is_over(&self) -> bool {
        self.failure.is_some()
            || (self.ends.is_closed()
                && self.role.queued.is_empty()
                && self.role.end_queued.is_none())
    }
}

impl Drop for ConnState {
    fn drop(&mut self) {
        // What the streams still held unwritten goes with the connection.
        let total = std::mem::take(&mut self.queued_total);
        self.count_queued(-(total as isize));
    }
}

/// `ConnState::count_queued`, for a caller that holds one of the connection's streams.
pub(super) fn count_queued(total: &mut usize, budget: Option<&ResponseBudget>, delta: isize) {
    *total = total.wrapping_add_signed(delta);
    match (budget, delta) {
        (Some(budget), d) if d > 0 => budget.add(d.unsigned_abs()),
        (Some(budget), d) if d < 0 => budget.sub(d.unsigned_abs()),
        _ => {}
    }
}
