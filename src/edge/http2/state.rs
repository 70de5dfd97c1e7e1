//! What one HTTP/2 client connection knows: its streams, the frames waiting to go out, both sides'
//! flow-control windows, and the limits a client is held to. Everything here runs under the
//! connection's one lock, taken by the connection's task once per turn (frames in and out) and by a
//! stream's handles (a response sent, request data taken); all of them run on the connection's
//! task, so the lock is never contended.

use std::collections::{HashMap, VecDeque};
use std::task::Waker;

use bytes::{Bytes, BytesMut};
use h2::Reason;
use h2::frame::{Frame, GoAway, Reset, StreamId};
use http::{HeaderMap, Request};

use super::Limits;
use super::closed::{ClosedStreams, Gone};
use crate::http2core::{Ends, InitialWindow, StreamState, Window};
use crate::upstream::frames::{Chunks, Failure, wake};

/// How many control frames (acknowledgements, resets, window updates) may wait to be written
/// before the connection stops reading: a client that sends PINGs or SETTINGS and does not read
/// its socket is not read either, as h2 does not read past an unsent PONG.
pub(super) const MAX_QUEUED: usize = 256;

/// One stream of the connection.
pub(super) struct Stream {
    pub(super) id: StreamId,
    // The request, as the client sends it.
    /// Request data not yet taken by the request's body, and its length (`small` with it).
    pub(super) data: Chunks,
    pub(super) held: usize,
    /// Payloads of small DATA frames, copied together after `data`: a client that sends its body
    /// in frames of a few bytes holds no more chunks than bytes allow, nor pins the read buffers
    /// they came in (h2 bounds them with its `data_frame_budget`).
    pub(super) small: BytesMut,
    /// Boxed: few requests have trailers.
    pub(super) trailers: Option<Box<HeaderMap>>,
    /// Which ends are closed (RFC 9113, 5.1): the request's by END_STREAM received, the
    /// response's once its end was queued to be written; both by a reset.
    pub(super) ends: Ends,
    /// How much more the client may send on the stream, as skewgate granted it.
    pub(super) recv_window: Window,
    /// Data the request took and skewgate has not given back to the client yet.
    pub(super) released: u32,
    /// What the request's `content-length` says is still to come.
    pub(super) content_length: Option<u64>,
    pub(super) reader: Option<Waker>,
    // The response, as skewgate sends it.
    /// How much more skewgate may send on the stream, as the client granted it.
    pub(super) send_window: Window,
    /// Response data queued and not yet written.
    pub(super) queued: Chunks,
    pub(super) queued_len: usize,
    /// The response's end (END_STREAM, or trailers) comes after what is queued.
    pub(super) end_queued: Option<Option<Box<HeaderMap>>>,
    /// In the queue of streams with data to write.
    pub(super) in_ready: bool,
    /// The stream's response (its pipe), waiting for room or for a reset.
    pub(super) writer: Option<Waker>,
    pub(super) failure: Option<Failure>,
    /// How the stream closed, when it was reset: what the client may still send on it.
    pub(super) gone: Option<Gone>,
    /// The handles still held: the request body's and the response's.
    pub(super) recv_handle: bool,
    pub(super) send_handle: bool,
    /// Counted among the open streams.
    pub(super) open: bool,
}

/// The connection's state.
pub(super) struct State {
    pub(super) streams: slab::Slab<Stream>,
    /// Stream id to slab key, for the frames coming in.
    /// The ids are the client's choice: hashed with a seed of the connection's own, as h2's store
    /// hashes them.
    pub(super) ids: HashMap<u32, usize, foldhash::fast::RandomState>,
    /// Streams closed and forgotten, the latest of them, for the frames still in flight.
    pub(super) closed: ClosedStreams,
    /// Empty DATA frames without END_STREAM the client sent (h2's bound: 100 in a connection's
    /// life, then GOAWAY ENHANCE_YOUR_CALM).
    pub(super) empty_data: usize,
    /// Frames to write before any stream's data, in order.
    pub(super) out: VecDeque<Frame<Bytes>>,
    /// Streams with data queued and room in their own window, in turn.
    pub(super) ready: VecDeque<usize>,
    /// The connection's task, woken when a frame is queued.
    pub(super) waker: Waker,
    pub(super) limits: Limits,
    /// The highest stream id the client opened.
    pub(super) last_id: u32,
    /// Streams open (not closed both ways, not reset), against the stream limit.
    pub(super) open: u32,
    /// The client's connection-level window for what skewgate sends.
    pub(super) send_window: Window,
    /// The client's `SETTINGS_INITIAL_WINDOW_SIZE`, given to each new stream.
    pub(super) peer_initial_window: InitialWindow,
    /// The largest DATA payload the client accepts.
    pub(super) max_frame: usize,
    /// How much more the client may send on the connection.
    pub(super) recv_window: Window,
    /// Data taken (or dropped) and not yet given back in a connection WINDOW_UPDATE.
    pub(super) unacked: u32,
    /// The connection's task is in its turn: a frame queued is written in it, no wake-up needed.
    pub(super) quiet: bool,
    /// Streams skewgate reset for the client's fault (malformed, over a limit).
    pub(super) local_resets: usize,
    /// Of those, the ones already told to the connection's owner (`Wire::faults`).
    pub(super) told_resets: usize,
    /// GOAWAY sent: streams above this id are not taken.
    pub(super) going_away: Option<u32>,
    /// The connection failed: every stream fails with it.
    pub(super) failed: Option<Failure>,
    /// The connection is to close (a connection error, GOAWAY queued): the reason, for the caller.
    pub(super) error: Option<Reason>,
    /// The client answered skewgate's keep-alive PING.
    pub(super) ponged: bool,
    /// Woken by the answer.
    pub(super) pong_waker: Option<Waker>,
}

/// A request the client opened, to be handed to the proxy.
pub(super) struct Opened {
    pub(super) key: usize,
    pub(super) request: Request<()>,
    pub(super) end_stream: bool,
}

impl State {
    pub(super) fn new(limits: Limits, waker: Waker) -> State {
        State {
            streams: slab::Slab::new(),
            ids: HashMap::default(),
            closed: ClosedStreams::default(),
            empty_data: 0,
            out: VecDeque::new(),
            ready: VecDeque::new(),
            waker,
            last_id: 0,
            open: 0,
            send_window: Window::new(65_535),
            peer_initial_window: InitialWindow::default(),
            max_frame: 16_384,
            recv_window: Window::new(limits.connection_window),
            unacked: 0,
            quiet: false,
            local_resets: 0,
            told_resets: 0,
            going_away: None,
            failed: None,
            error: None,
            ponged: false,
            pong_waker: None,
            limits,
        }
    }

    /// Queues `frame` before any stream's data and wakes the connection's task to write it.
    pub(super) fn push(&mut self, frame: Frame<Bytes>) {
        self.out.push_back(frame);
        if !self.quiet {
            self.waker.wake_by_ref();
        }
    }

    /// The connection is broken by the client: GOAWAY with `reason`, and no frame read after it.
    pub(super) fn go_away(&mut self, reason: Reason) {
        if self.error.is_none() {
            self.error = Some(reason);
            let last = StreamId::from(self.last_id);
            self.push(GoAway::new(last, reason).into());
        }
    }

    /// Stops taking new streams: GOAWAY naming the last stream taken; those open finish.
    pub(super) fn graceful_go_away(&mut self) {
        if self.going_away.is_none() && self.error.is_none() {
            self.going_away = Some(self.last_id);
            self.push(GoAway::new(StreamId::from(self.last_id), Reason::NO_ERROR).into());
        }
    }

    /// Whether the connection has nothing left to do after a GOAWAY: no stream open, nothing to
    /// write.
    pub(super) fn finished(&self) -> bool {
        (self.going_away.is_some() || self.error.is_some())
            && self.open == 0
            && self.out.is_empty()
            && self.ready.is_empty()
    }

    /// With no stream left, the memory streams took is given back: a kubelet fleet holds thousands
    /// of connections idle between bursts (the allocations come back with the next burst).
    pub(super) fn release_if_idle(&mut self) {
        if !self.streams.is_empty() || self.streams.capacity() == 0 {
            return;
        }
        self.streams = slab::Slab::new();
        self.ids = HashMap::default();
        self.closed.shrink();
        if self.out.is_empty() {
            self.out = VecDeque::new();
        }
        if self.ready.is_empty() {
            self.ready = VecDeque::new();
        }
    }

    /// Whether frames may be read: the connection is not closing, and what it owes the client has
    /// mostly been written.
    pub(super) fn reading(&self) -> bool {
        self.error.is_none() && self.out.len() < MAX_QUEUED
    }

    /// Resets stream `id` for the client's fault, counted against the client: a client that makes
    /// skewgate reset too many is sent GOAWAY ENHANCE_YOUR_CALM (h2's and hyper's bound, 1024).
    pub(super) fn refuse(&mut self, id: StreamId, reason: Reason) {
        self.push(Reset::new(id, reason).into());
        self.local_resets += 1;
        if self.local_resets > self.limits.max_local_error_resets {
            tracing::debug!("an HTTP/2 client made skewgate reset too many streams; GOAWAY");
            self.go_away(Reason::ENHANCE_YOUR_CALM);
        }
    }

    /// A stream the codec found malformed (its header block): reset, counted against the client.
    pub(super) fn refuse_stream(&mut self, id: StreamId, reason: Reason) {
        if let Some((key, _)) = self.stream(id) {
            return self.reset_for(key, reason);
        }
        let raw = u32::from(id);
        if raw % 2 == 1 && raw > self.last_id {
            self.last_id = raw;
            let window = i64::from(self.limits.stream_window);
            self.closed.remember(raw, Gone::Reset { window });
        }
        self.refuse(id, reason);
    }

    /// The stream a frame is for, if skewgate still has it.
    pub(super) fn stream(&mut self, id: StreamId) -> Option<(usize, &mut Stream)> {
        let key = *self.ids.get(&u32::from(id))?;
        self.streams.get_mut(key).map(|s| (key, s))
    }

    /// Whether `id` names a stream the client never opened (a connection error for any frame but
    /// HEADERS and PRIORITY, RFC 9113 5.1).
    pub(super) fn idle(&self, id: StreamId) -> bool {
        let id = u32::from(id);
        id % 2 == 0 || id > self.last_id
    }

    /// Resets stream `key` with `reason` for the client's fault: RST_STREAM out, its handles told.
    pub(super) fn reset_for(&mut self, key: usize, reason: Reason) {
        let Some(s) = self.streams.get_mut(key) else {
            return;
        };
        if s.failure.is_some() {
            return;
        }
        let id = s.id;
        s.failure = Some(Failure::Reset(reason));
        s.gone = Some(s.gone_by_reset());
        self.close(key);
        self.refuse(id, reason);
    }

    /// Resets stream `key` for skewgate's side (its response failed or was dropped), unless it is
    /// over both ways.
    pub(super) fn reset(&mut self, key: usize, reason: Reason) {
        let Some(s) = self.streams.get_mut(key) else {
            return;
        };
        if s.is_over() {
            return;
        }
        let id = s.id;
        s.failure = Some(Failure::Reset(reason));
        s.gone = Some(s.gone_by_reset());
        self.close(key);
        self.push(Reset::new(id, reason).into());
    }

    /// A stream failed: nothing more is sent or received on it, and its handles are told.
    pub(super) fn close(&mut self, key: usize) {
        if let Some(s) = self.streams.get_mut(key) {
            s.ends.close();
            let dropped = std::mem::take(&mut s.held);
            s.data.clear();
            s.small = BytesMut::new();
            s.queued.clear();
            s.queued_len = 0;
            s.end_queued = None;
            wake(&mut s.reader);
            wake(&mut s.writer);
            self.give_back(dropped);
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
        if over && std::mem::take(&mut s.open) {
            self.open -= 1;
        }
        if s.recv_handle || s.send_handle || s.in_ready {
            return;
        }
        if !over {
            if s.ends.send_closed() && (!s.queued.is_empty() || s.end_queued.is_some()) {
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
        let (id, gone) = (u32::from(s.id), s.gone.unwrap_or(Gone::Ended));
        self.streams.remove(key);
        self.ids.remove(&id);
        self.closed.remember(id, gone);
    }

    /// The connection ended: every stream not over fails with it.
    pub(super) fn fail(&mut self, why: Failure) {
        self.failed.get_or_insert(why.clone());
        let keys: Vec<usize> = self.streams.iter().map(|(key, _)| key).collect();
        for key in keys {
            if let Some(s) = self.streams.get_mut(key)
                && s.failure.is_none()
            {
                s.failure = Some(why.clone());
                self.close(key);
            }
        }
        self.ready.clear();
        for (_, s) in self.streams.iter_mut() {
            s.in_ready = false;
        }
    }
}

impl Stream {
    /// How the stream closes when it is reset now: what the client may still send on it, if it
    /// had not ended its side.
    pub(super) fn gone_by_reset(&self) -> Gone {
        match self.ends.state() {
            // The client's side was closed already: nothing of it may come.
            StreamState::HalfClosedRemote | StreamState::Closed => Gone::Closed,
            // Still open: what was in flight, up to its window, may come yet.
            StreamState::Open | StreamState::HalfClosedLocal => Gone::Reset {
                window: self.recv_window.size().max(0),
            },
        }
    }

    /// Over both ways: reset, or the request received whole and the response's end written.
    pub(super) fn is_over(&self) -> bool {
        self.failure.is_some()
            || (self.ends.is_closed() && self.queued.is_empty() && self.end_queued.is_none())
    }
}
