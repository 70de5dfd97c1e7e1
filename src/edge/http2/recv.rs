//! Frames from the client into the connection's state: requests opened (HEADERS), their bodies
//! (DATA, trailers) within the windows skewgate grants, and the client's resets.

use bytes::Bytes;
use h2::Reason;
use h2::frame::{Data, Headers, Pseudo, StreamId, WindowUpdate};
use http::{HeaderMap, StatusCode};

use super::closed::{Gone, Verdict};
use super::request::{self, Malformed};
use super::state::{Opened, State, Stream};
use crate::http2core::{Ends, Window};
use crate::upstream::frames::{Chunks, Failure, wake};

impl State {
    /// A HEADERS frame: a new request, or a request's trailers. Returns the request opened.
    pub(super) fn on_headers(&mut self, frame: Headers) -> Option<Opened> {
        let id = frame.stream_id();
        if u32::from(id) % 2 == 0 {
            self.go_away(Reason::PROTOCOL_ERROR);
            return None;
        }
        if u32::from(id) <= self.last_id {
            self.on_headers_again(id, frame);
            return None;
        }
        self.last_id = u32::from(id);
        let end_stream = frame.is_end_stream();
        if !self.admit(id, &frame) {
            self.remember_refused(id, end_stream);
            return None;
        }
        let (pseudo, fields) = frame.into_parts();
        let (request, content_length) = match request::make(pseudo, fields, end_stream) {
            Ok(made) => made,
            Err(Malformed(why)) => {
                tracing::debug!(stream = ?id, why, "malformed request from an HTTP/2 client");
                self.refuse(id, Reason::PROTOCOL_ERROR);
                self.remember_refused(id, end_stream);
                return None;
            }
        };
        let key = self.open_stream(id, end_stream, content_length);
        Some(Opened {
            key,
            request,
            end_stream,
        })
    }

    /// HEADERS on a stream opened before: an open stream's trailers, or a frame on a closed one
    /// (RFC 9113, 5.1): ignored in flight after skewgate's reset, a stream error after the
    /// client's, a connection error after both ends; on a stream forgotten or never opened (a lower
    /// id than one opened since), GOAWAY PROTOCOL_ERROR (5.1.1), as h2 answers it.
    fn on_headers_again(&mut self, id: StreamId, frame: Headers) {
        let end = frame.is_end_stream();
        if let Some((key, s)) = self.stream(id) {
            return match &mut s.gone {
                None => self.on_trailers(key, frame),
                Some(gone) => {
                    let verdict = gone.on_headers(end);
                    self.judge(id, verdict, 0);
                }
            };
        }
        match self.closed.get_mut(u32::from(id)) {
            Some(gone) => {
                let verdict = gone.on_headers(end);
                self.judge(id, verdict, 0);
            }
            None => self.go_away(Reason::PROTOCOL_ERROR),
        }
    }

    /// What a frame on a closed stream comes to, carried out; `flow`, its flow-controlled length,
    /// given back to the connection's window.
    fn judge(&mut self, id: StreamId, verdict: Verdict, flow: usize) {
        self.give_back(flow);
        match verdict {
            Verdict::Ignore => {}
            Verdict::StreamError => self.refuse(id, Reason::STREAM_CLOSED),
            Verdict::ConnectionError => self.go_away(Reason::STREAM_CLOSED),
        }
    }

    /// A stream refused as it opened: the client may have its body in flight.
    fn remember_refused(&mut self, id: StreamId, end_stream: bool) {
        let gone = if end_stream {
            Gone::Closed
        } else {
            Gone::Reset {
                window: i64::from(self.limits.stream_window),
            }
        };
        self.closed.remember(u32::from(id), gone);
    }

    /// Whether a new stream is taken: not after GOAWAY, not with a head over the header-list bound
    /// (answered 431), not over the stream limit (REFUSED_STREAM).
    fn admit(&mut self, id: StreamId, frame: &Headers) -> bool {
        if self.going_away.is_some() {
            return false;
        }
        if frame.is_over_size() {
            // As h2: 431 for a head larger than SETTINGS_MAX_HEADER_LIST_SIZE, and the stream
            // reset, so that none of its data is sent.
            let pseudo = Pseudo::response(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
            let mut answer = Headers::new(id, pseudo, HeaderMap::new());
            answer.set_end_stream();
            self.push(answer.into());
            self.refuse(id, Reason::PROTOCOL_ERROR);
            return false;
        }
        if self.open >= self.limits.max_concurrent_streams {
            self.refuse(id, Reason::REFUSED_STREAM);
            return false;
        }
        true
    }

    /// A new stream, open; its slab key.
    fn open_stream(
        &mut self,
        id: StreamId,
        end_stream: bool,
        content_length: Option<u64>,
    ) -> usize {
        let key = self.streams.insert(Stream {
            id,
            data: Chunks::default(),
            held: 0,
            small: bytes::BytesMut::new(),
            trailers: None,
            ends: Ends::new(end_stream, false),
            recv_window: Window::new(self.limits.stream_window),
            released: 0,
            content_length,
            reader: None,
            send_window: self.peer_initial_window.window(),
            queued: Chunks::default(),
            queued_len: 0,
            end_queued: None,
            in_ready: false,
            writer: None,
            failure: None,
            gone: None,
            recv_handle: !end_stream,
            send_handle: true,
            open: true,
        });
        self.ids.insert(u32::from(id), key);
        self.open += 1;
        key
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
        if s.ends.recv_closed() {
            // As DATA on a half-closed or closed stream (`on_data`).
            if s.is_over() {
                return self.go_away(Reason::STREAM_CLOSED);
            }
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
        s.ends.close_recv();
        wake(&mut s.reader);
        self.settle(key);
    }

    /// A DATA frame: kept for the request's body, within the windows skewgate granted.
    pub(super) fn on_data(&mut self, frame: Data<Bytes>) {
        let id = frame.stream_id();
        let flow = frame.flow_controlled_len();
        if let Err(reason) = self.recv_window.receive(flow) {
            return self.go_away(reason);
        }
        if self.idle(id) {
            return self.go_away(Reason::PROTOCOL_ERROR);
        }
        let end = frame.is_end_stream();
        if frame.payload().is_empty() && !end && !self.count_empty_data() {
            return;
        }
        let Some((key, s)) = self.stream(id) else {
            // Closed and forgotten: RST_STREAM STREAM_CLOSED, as h2 answers it.
            let verdict = match self.closed.get_mut(u32::from(id)) {
                Some(gone) => gone.on_data(flow, end),
                None => Verdict::StreamError,
            };
            return self.judge(id, verdict, flow);
        };
        if let Some(gone) = &mut s.gone {
            let verdict = gone.on_data(flow, end);
            return self.judge(id, verdict, flow);
        }
        if s.failure.is_some() {
            // The connection failed: dropped, its window given back.
            return self.give_back(flow);
        }
        if s.ends.recv_closed() {
            // Half-closed (remote): a stream error, or a connection error once the response is
            // written whole too (closed: RFC 9113, 5.1).
            let over = s.is_over();
            self.give_back(flow);
            if over {
                return self.go_away(Reason::STREAM_CLOSED);
            }
            return self.reset_for(key, Reason::STREAM_CLOSED);
        }
        let payload = frame.into_payload();
        // Padding is given back at once; the payload when the body takes it.
        let mut given_back = flow - payload.len();
        if !s.recv_handle {
            return self.drop_unread(key, flow, end);
        }
        let within = s.recv_window.receive(flow).is_ok();
        let over_length = s.count_length(payload.len(), end);
        if !within || over_length {
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
            s.recv_window.grant(flow);
        } else {
            s.recv_window.grant(given_back);
            s.hold(payload);
        }
        if end {
            s.ends.close_recv();
        }
        wake(&mut s.reader);
        self.give_back(given_back);
        if end {
            self.settle(key);
        }
    }

    /// Data on a stream nobody reads any more (the request was answered without its body): dropped,
    /// and both windows given back, so that the client can finish sending.
    fn drop_unread(&mut self, key: usize, flow: usize, end: bool) {
        let Some(s) = self.streams.get_mut(key) else {
            return;
        };
        if end {
            s.ends.close_recv();
        }
        let id = s.id;
        let grant = u32::try_from(flow).unwrap_or(u32::MAX);
        if grant > 0 && !end {
            self.push(WindowUpdate::new(id, grant).into());
        }
        self.give_back(flow);
        if end {
            self.settle(key);
        }
    }

    /// Connection window taken by data skewgate will not hold: given back once half the window is.
    pub(super) fn give_back(&mut self, len: usize) {
        if len == 0 {
            return;
        }
        self.recv_window.grant(len);
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
            Some(s) if !s.ends.recv_closed() && s.failure.is_none() => {
                s.released = s.released.saturating_add(len as u32);
                (s.released >= self.limits.stream_window / 2).then(|| {
                    let grant = std::mem::take(&mut s.released);
                    s.recv_window.grant(grant as usize);
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
            s.gone = Some(Gone::Closed);
            self.close(key);
        }
    }

    /// Counts an empty DATA frame without END_STREAM; false (and GOAWAY ENHANCE_YOUR_CALM) past
    /// h2's bound: such a frame carries nothing and costs a turn of the connection.
    fn count_empty_data(&mut self) -> bool {
        self.empty_data += 1;
        if self.empty_data > MAX_EMPTY_DATA {
            tracing::debug!("an HTTP/2 client sent too many empty DATA frames; GOAWAY");
            self.go_away(Reason::ENHANCE_YOUR_CALM);
            return false;
        }
        true
    }
}

/// Empty DATA frames without END_STREAM a client may send in a connection's life (h2's
/// `MAX_RECV_EMPTY_DATA_FRAMES`).
const MAX_EMPTY_DATA: usize = 100;

/// A DATA payload shorter than this is copied into the stream's `small` buffer (h2's
/// `DEFAULT_DATA_FRAME_OVERHEAD_THRESHOLD`: about what one held chunk costs beside its bytes).
const SMALL_DATA: usize = 256;

impl Stream {
    /// Holds a payload for the request's body: a small one copied behind the others, a larger one
    /// as it came (after the small ones held before it).
    fn hold(&mut self, payload: Bytes) {
        self.held += payload.len();
        if payload.len() < SMALL_DATA {
            self.small.extend_from_slice(&payload);
            return;
        }
        if !self.small.is_empty() {
            self.data.push_back(self.small.split().freeze());
        }
        self.data.push_back(payload);
    }

    /// Counts `len` bytes of data against the request's `content-length`; whether they go past it,
    /// or end the body short of it.
    fn count_length(&mut self, len: usize, end: bool) -> bool {
        let Some(left) = &mut self.content_length else {
            return false;
        };
        match left.checked_sub(len as u64) {
            Some(rest) => {
                *left = rest;
                end && rest != 0
            }
            None => true,
        }
    }
}
