//! What one HTTP/2 client connection knows: its streams, the frames waiting to go out, both sides'
//! flow-control windows, and the limits a client is held to. Everything here runs under the
//! connection's one lock, taken by the connection's task once per turn (frames in and out) and by a
//! stream's handles (a response sent, request data taken); all of them run on the connection's
//! task, so the lock is never contended.

use std::collections::{HashMap, VecDeque};
use std::task::Waker;

use bytes::Bytes;
use h2::Reason;
use h2::frame::{Data, Frame, GoAway, Headers, Pseudo, Reset, StreamId, WindowUpdate};
use http::{HeaderMap, Request, StatusCode};

use super::Limits;
use super::request::{self, Malformed};
use crate::upstream::frames::{Chunks, Failure, wake};

/// The largest flow-control window HTTP/2 allows (RFC 9113, 6.9.1).
const MAX_WINDOW: i64 = (1 << 31) - 1;

/// How many control frames (acknowledgements, resets, window updates) may wait to be written
/// before the connection stops reading: a client that sends PINGs or SETTINGS and does not read
/// its socket is not read either, as h2 does not read past an unsent PONG.
pub(super) const MAX_QUEUED: usize = 256;

/// One stream of the connection.
pub(super) struct Stream {
    pub(super) id: StreamId,
    // The request, as the client sends it.
    /// Request data not yet taken by the request's body, and its length.
    pub(super) data: Chunks,
    pub(super) held: usize,
    /// Boxed: few requests have trailers.
    pub(super) trailers: Option<Box<HeaderMap>>,
    /// END_STREAM received (or the stream was reset).
    pub(super) recv_closed: bool,
    /// How much more the client may send on the stream, as skewgate granted it.
    recv_window: i64,
    /// Data the request took and skewgate has not given back to the client yet.
    released: u32,
    /// What the request's `content-length` says is still to come.
    content_length: Option<u64>,
    pub(super) reader: Option<Waker>,
    // The response, as skewgate sends it.
    /// How much more skewgate may send on the stream, as the client granted it.
    send_window: i64,
    /// Response data queued and not yet written.
    pub(super) queued: Chunks,
    pub(super) queued_len: usize,
    /// The response's end (END_STREAM, or trailers) comes after what is queued.
    end_queued: Option<Option<Box<HeaderMap>>>,
    /// The response's end was queued to be written (or the stream was reset).
    pub(super) send_closed: bool,
    /// In the queue of streams with data to write.
    in_ready: bool,
    /// The stream's response (its pipe), waiting for room or for a reset.
    pub(super) writer: Option<Waker>,
    pub(super) failure: Option<Failure>,
    /// The handles still held: the request body's and the response's.
    pub(super) recv_handle: bool,
    pub(super) send_handle: bool,
    /// Counted among the open streams.
    open: bool,
}

/// The connection's state.
pub(super) struct State {
    pub(super) streams: slab::Slab<Stream>,
    /// Stream id to slab key, for the frames coming in.
    ids: HashMap<u32, usize, foldhash::fast::FixedState>,
    /// Frames to write before any stream's data, in order.
    pub(super) out: VecDeque<Frame<Bytes>>,
    /// Streams with data queued and room in their own window, in turn.
    ready: VecDeque<usize>,
    /// The connection's task, woken when a frame is queued.
    waker: Waker,
    pub(super) limits: Limits,
    /// The highest stream id the client opened.
    pub(super) last_id: u32,
    /// Streams open (not closed both ways, not reset), against the stream limit.
    open: u32,
    /// The client's connection-level window for what skewgate sends.
    send_window: i64,
    /// The client's `SETTINGS_INITIAL_WINDOW_SIZE`, given to each new stream.
    peer_initial_window: i64,
    /// The largest DATA payload the client accepts.
    pub(super) max_frame: usize,
    /// How much more the client may send on the connection.
    recv_window: i64,
    /// Data taken (or dropped) and not yet given back in a connection WINDOW_UPDATE.
    unacked: u32,
    /// The connection's task is in its turn: a frame queued is written in it, no wake-up needed.
    pub(super) quiet: bool,
    /// Streams skewgate reset for the client's fault (malformed, over a limit).
    local_resets: usize,
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
            out: VecDeque::new(),
            ready: VecDeque::new(),
            waker,
            last_id: 0,
            open: 0,
            send_window: 65_535,
            peer_initial_window: 65_535,
            max_frame: 16_384,
            recv_window: i64::from(limits.connection_window),
            unacked: 0,
            quiet: false,
            local_resets: 0,
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
    fn refuse(&mut self, id: StreamId, reason: Reason) {
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
        }
        self.refuse(id, reason);
    }

    /// The stream a frame is for, if skewgate still has it.
    fn stream(&mut self, id: StreamId) -> Option<(usize, &mut Stream)> {
        let key = *self.ids.get(&u32::from(id))?;
        self.streams.get_mut(key).map(|s| (key, s))
    }

    /// Whether `id` names a stream the client never opened (a connection error for any frame but
    /// HEADERS and PRIORITY, RFC 9113 5.1).
    fn idle(&self, id: StreamId) -> bool {
        let id = u32::from(id);
        id % 2 == 0 || id > self.last_id
    }

    /// A HEADERS frame: a new request, or a request's trailers. Returns the request opened.
    pub(super) fn on_headers(&mut self, frame: Headers) -> Option<Opened> {
        let id = frame.stream_id();
        if u32::from(id) % 2 == 0 {
            self.go_away(Reason::PROTOCOL_ERROR);
            return None;
        }
        if let Some((key, _)) = self.stream(id) {
            self.on_trailers(key, frame);
            return None;
        }
        if u32::from(id) <= self.last_id {
            // A stream closed already (skewgate may have reset it): nothing to do.
            return None;
        }
        self.last_id = u32::from(id);
        if self.going_away.is_some() {
            return None;
        }
        if frame.is_over_size() {
            // As h2: 431 for a head larger than SETTINGS_MAX_HEADER_LIST_SIZE, and the stream
            // reset, so that none of its data is sent.
            let pseudo = Pseudo::response(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
            let mut answer = Headers::new(id, pseudo, HeaderMap::new());
            answer.set_end_stream();
            self.push(answer.into());
            self.refuse(id, Reason::PROTOCOL_ERROR);
            return None;
        }
        if self.open >= self.limits.max_concurrent_streams {
            self.refuse(id, Reason::REFUSED_STREAM);
            return None;
        }
        let end_stream = frame.is_end_stream();
        let (pseudo, fields) = frame.into_parts();
        let (request, content_length) = match request::make(pseudo, fields, end_stream) {
            Ok(made) => made,
            Err(Malformed(why)) => {
                tracing::debug!(stream = ?id, why, "malformed request from an HTTP/2 client");
                self.refuse(id, Reason::PROTOCOL_ERROR);
                return None;
            }
        };
        let key = self.streams.insert(Stream {
            id,
            data: Chunks::default(),
            held: 0,
            trailers: None,
            recv_closed: end_stream,
            recv_window: i64::from(self.limits.stream_window),
            released: 0,
            content_length,
            reader: None,
            send_window: self.peer_initial_window,
            queued: Chunks::default(),
            queued_len: 0,
            end_queued: None,
            send_closed: false,
            in_ready: false,
            writer: None,
            failure: None,
            recv_handle: !end_stream,
            send_handle: true,
            open: true,
        });
        self.ids.insert(u32::from(id), key);
        self.open += 1;
        Some(Opened {
            key,
            request,
            end_stream,
        })
    }

    /// A second HEADERS frame on an open stream: the request's trailers, which end it.
    fn on_trailers(&mut self, key: usize, frame: Headers) {
        let Some(s) = self.streams.get_mut(key) else {
            return;
        };
        if s.failure.is_some() {
            return;
        }
        let id = s.id;
        if s.recv_closed {
            return self.reset_for(key, Reason::STREAM_CLOSED);
        }
        let end = frame.is_end_stream();
        let (pseudo, fields) = frame.into_parts();
        let pseudo_free = pseudo.method.is_none()
            && pseudo.scheme.is_none()
            && pseudo.authority.is_none()
            && pseudo.path.is_none()
            && pseudo.protocol.is_none()
            && pseudo.status.is_none();
        if !end || !pseudo_free || s.content_length.is_some_and(|left| left != 0) {
            tracing::debug!(stream = ?id, "malformed trailers from an HTTP/2 client");
            return self.reset_for(key, Reason::PROTOCOL_ERROR);
        }
        s.trailers = Some(Box::new(fields));
        s.recv_closed = true;
        wake(&mut s.reader);
        self.settle(key);
    }

    /// A DATA frame: kept for the request's body, within the windows skewgate granted.
    pub(super) fn on_data(&mut self, frame: Data<Bytes>) {
        let id = frame.stream_id();
        let flow = frame.flow_controlled_len();
        self.recv_window -= flow as i64;
        if self.recv_window < 0 {
            return self.go_away(Reason::FLOW_CONTROL_ERROR);
        }
        if self.idle(id) {
            return self.go_away(Reason::PROTOCOL_ERROR);
        }
        let end = frame.is_end_stream();
        let payload = frame.into_payload();
        // Padding is given back at once; the payload when the body takes it.
        let mut given_back = flow - payload.len();
        let Some((key, s)) = self.stream(id) else {
            return self.give_back(flow);
        };
        if s.failure.is_some() {
            // Reset already: dropped, its window given back.
            return self.give_back(flow);
        }
        if s.recv_closed {
            self.give_back(flow);
            return self.reset_for(key, Reason::STREAM_CLOSED);
        }
        if !s.recv_handle {
            // Nobody reads it any more (the request was answered without it): dropped, and both
            // windows given back, so that the client can finish sending.
            s.recv_closed = end;
            let id = s.id;
            let grant = u32::try_from(flow).unwrap_or(u32::MAX);
            if grant > 0 && !end {
                self.push(WindowUpdate::new(id, grant).into());
            }
            self.give_back(flow);
            if end {
                self.settle(key);
            }
            return;
        }
        s.recv_window -= flow as i64;
        let over_length = match &mut s.content_length {
            Some(left) => match left.checked_sub(payload.len() as u64) {
                Some(rest) => {
                    *left = rest;
                    end && rest != 0
                }
                None => true,
            },
            None => false,
        };
        if s.recv_window < 0 || over_length {
            let reason = if over_length {
                Reason::PROTOCOL_ERROR
            } else {
                Reason::FLOW_CONTROL_ERROR
            };
            self.give_back(flow);
            return self.reset_for(key, reason);
        }
        if payload.is_empty() {
            given_back = flow;
            s.recv_window += flow as i64;
        } else {
            s.recv_window += given_back as i64;
            s.held += payload.len();
            s.data.push_back(payload);
        }
        s.recv_closed = end;
        wake(&mut s.reader);
        self.give_back(given_back);
        if end {
            self.settle(key);
        }
    }

    /// Connection window taken by data skewgate will not hold: given back once half the window is.
    fn give_back(&mut self, len: usize) {
        if len == 0 {
            return;
        }
        self.recv_window += len as i64;
        self.unacked = self.unacked.saturating_add(len as u32);
        if self.unacked >= self.limits.connection_window / 2 {
            let grant = std::mem::take(&mut self.unacked);
            self.push(WindowUpdate::new(StreamId::zero(), grant).into());
        }
    }

    /// Data the request's body took off stream `key`: the stream's window given back once half of
    /// it was taken (as h2 does), unless the stream is done receiving; the connection's with it.
    pub(super) fn release(&mut self, key: usize, len: usize) {
        let stream_grant = match self.streams.get_mut(key) {
            Some(s) if !s.recv_closed && s.failure.is_none() => {
                s.released = s.released.saturating_add(len as u32);
                (s.released >= self.limits.stream_window / 2).then(|| {
                    let grant = std::mem::take(&mut s.released);
                    s.recv_window += i64::from(grant);
                    (s.id, grant)
                })
            }
            _ => None,
        };
        if let Some((id, grant)) = stream_grant {
            self.push(WindowUpdate::new(id, grant).into());
        }
        self.give_back(len);
    }

    /// RST_STREAM from the client: its request is dropped, its response stops.
    pub(super) fn on_reset(&mut self, id: StreamId, reason: Reason) {
        if self.idle(id) {
            return self.go_away(Reason::PROTOCOL_ERROR);
        }
        if let Some((key, s)) = self.stream(id)
            && s.failure.is_none()
        {
            s.failure = Some(Failure::Reset(reason));
            self.close(key);
        }
    }

    /// WINDOW_UPDATE from the client: more room for responses.
    pub(super) fn on_window_update(&mut self, id: StreamId, increment: u32) {
        if id.is_zero() {
            self.send_window += i64::from(increment);
            if increment == 0 || self.send_window > MAX_WINDOW {
                let reason = if increment == 0 {
                    Reason::PROTOCOL_ERROR
                } else {
                    Reason::FLOW_CONTROL_ERROR
                };
                self.go_away(reason);
            }
            return;
        }
        if self.idle(id) {
            return self.go_away(Reason::PROTOCOL_ERROR);
        }
        let Some((key, s)) = self.stream(id) else {
            return;
        };
        if s.failure.is_some() {
            return;
        }
        if increment == 0 {
            return self.reset_for(key, Reason::PROTOCOL_ERROR);
        }
        s.send_window += i64::from(increment);
        if s.send_window > MAX_WINDOW {
            return self.reset_for(key, Reason::FLOW_CONTROL_ERROR);
        }
        self.schedule(key);
    }

    /// The client's new SETTINGS_INITIAL_WINDOW_SIZE: every open stream's window moves by the
    /// difference (RFC 9113, 6.9.2).
    pub(super) fn on_initial_window(&mut self, size: u32) {
        let delta = i64::from(size) - self.peer_initial_window;
        self.peer_initial_window = i64::from(size);
        let keys: Vec<usize> = self.streams.iter().map(|(key, _)| key).collect();
        for key in keys {
            if let Some(s) = self.streams.get_mut(key) {
                s.send_window += delta;
                if s.send_window > MAX_WINDOW {
                    return self.go_away(Reason::FLOW_CONTROL_ERROR);
                }
            }
            self.schedule(key);
        }
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
        self.close(key);
        self.push(Reset::new(id, reason).into());
    }

    /// A stream failed: nothing more is sent or received on it, and its handles are told.
    fn close(&mut self, key: usize) {
        if let Some(s) = self.streams.get_mut(key) {
            s.recv_closed = true;
            s.send_closed = true;
            let dropped = std::mem::take(&mut s.held);
            s.data.clear();
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
            // Both handles gone before the stream ended: the client is told (to stop sending, with
            // NO_ERROR, when its response is complete: RFC 9113, 8.1), and the stream is forgotten
            // by the reset's own settling.
            let reason = if s.send_closed {
                Reason::NO_ERROR
            } else {
                Reason::CANCEL
            };
            return self.reset(key, reason);
        }
        let id = u32::from(s.id);
        self.streams.remove(key);
        self.ids.remove(&id);
    }

    /// Puts stream `key` in the queue of streams with data to write, if it has some and room.
    fn schedule(&mut self, key: usize) {
        if let Some(s) = self.streams.get_mut(key)
            && !s.in_ready
            && s.failure.is_none()
            && (s.end_queued.is_some() || (!s.queued.is_empty() && s.send_window > 0))
        {
            s.in_ready = true;
            self.ready.push_back(key);
            if !self.quiet {
                self.waker.wake_by_ref();
            }
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
        if s.failure.is_some() || s.send_closed {
            return;
        }
        if !chunk.is_empty() {
            s.queued_len += chunk.len();
            s.queued.push_back(chunk);
        }
        if let Some(end) = end {
            s.end_queued = Some(end);
            s.send_closed = true;
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
            s.in_ready = false;
            if s.failure.is_some() {
                self.settle(key);
                continue;
            }
            let room = s
                .send_window
                .min(self.send_window)
                .min(self.max_frame as i64);
            let frame = if let Some(chunk) = s.queued.pop_front() {
                if room <= 0 {
                    s.queued.push_front(chunk);
                    if self.send_window <= 0 && s.send_window > 0 {
                        // The connection's window is shut: the stream waits in turn for it.
                        s.in_ready = true;
                        self.ready.push_front(key);
                        return None;
                    }
                    continue;
                }
                let mut chunk = chunk;
                if chunk.len() as i64 > room {
                    let rest = chunk.split_off(room as usize);
                    s.queued.push_front(rest);
                }
                let n = chunk.len();
                s.send_window -= n as i64;
                self.send_window -= n as i64;
                s.queued_len -= n;
                let last = s.queued.is_empty() && matches!(s.end_queued, Some(None));
                if last {
                    s.end_queued = None;
                }
                let mut frame = Data::new(s.id, chunk);
                frame.set_end_stream(last);
                if s.queued_len < self.limits.send_buffer {
                    wake(&mut s.writer);
                }
                frame.into()
            } else {
                match s.end_queued.take() {
                    Some(Some(trailers)) => {
                        let mut frame = Headers::trailers(s.id, *trailers);
                        frame.set_end_stream();
                        frame.into()
                    }
                    Some(None) => {
                        let mut frame = Data::new(s.id, Bytes::new());
                        frame.set_end_stream(true);
                        frame.into()
                    }
                    None => {
                        self.settle(key);
                        continue;
                    }
                }
            };
            self.schedule(key);
            self.settle(key);
            return Some(frame);
        }
        None
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
    /// Over both ways: reset, or the request received whole and the response's end written.
    fn is_over(&self) -> bool {
        self.failure.is_some()
            || (self.recv_closed
                && self.send_closed
                && self.queued.is_empty()
                && self.end_queued.is_none())
    }
}
