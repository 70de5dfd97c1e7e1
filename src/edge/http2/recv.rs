//! Frames from the client into the connection's state: requests opened (HEADERS), their bodies
//! (DATA, trailers) within the windows skewgate grants, and the client's resets.

use bytes::Bytes;
use h2::Reason;
use h2::frame::{Data, Headers, Pseudo, Reset, StreamId, WindowUpdate};
use http::{HeaderMap, StatusCode};

use super::request::{self, Malformed};
use super::state::{ConnState, Opened, ServerPart, ServerStream};
use crate::http2core::{Ends, Failure, Gone, Stream, wake};

impl ConnState {
    /// A HEADERS frame opening a stream (an odd id above any before, `Conn::recv`). Returns the
    /// request opened.
    pub(super) fn on_open(&mut self, frame: Headers) -> Option<Opened> {
        let id = frame.stream_id();
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
    pub(super) fn on_headers(&mut self, frame: Headers) {
        let (id, end) = (frame.stream_id(), frame.is_end_stream());
        let Some((key, s)) = self.stream(id) else {
            return self.conn.closed_headers(id, end);
        };
        match &mut s.role.gone {
            None => self.on_trailers(key, frame),
            Some(gone) => {
                let verdict = gone.on_headers(end);
                self.conn.judge(id, verdict, 0);
            }
        }
    }

    /// A stream refused as it opened: the client may have its body in flight.
    fn remember_refused(&mut self, id: StreamId, end_stream: bool) {
        self.conn.refused(id, end_stream, self.limits.stream_window);
    }

    /// Whether a new stream is taken: not after GOAWAY (REFUSED_STREAM, not the client's fault:
    /// it opened the stream before it read the GOAWAY, and may send it again on a new
    /// connection), not with a head over the header-list bound (answered 431), not over the stream
    /// limit (REFUSED_STREAM, counted against the client).
    fn admit(&mut self, id: StreamId, frame: &Headers) -> bool {
        if self.conn.going_away.is_some() {
            self.push(Reset::new(id, Reason::REFUSED_STREAM).into());
            return false;
        }
        if frame.is_over_size() {
            // As h2: 431 for a head larger than SETTINGS_MAX_HEADER_LIST_SIZE, and the stream
            // reset, so that none of its data is sent.
            self.heads_too_large += 1;
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
        let ends = Ends::new(end_stream, false);
        let window = self.limits.stream_window;
        let stream = Stream::new(id, ends, window, ServerPart::new(content_length));
        let key = self.streams.insert(u32::from(id), stream);
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
        if !end || !pseudo_free || s.role.content_length.is_some_and(|left| left != 0) {
            tracing::debug!(stream = ?id, "malformed trailers from an HTTP/2 client");
            return self.reset_for(key, Reason::PROTOCOL_ERROR);
        }
        s.recv.trailers = Some(Box::new(fields));
        s.ends.close_recv();
        wake(&mut s.recv.task);
        self.settle(key);
    }

    /// A DATA frame (taken from the connection's window, `Conn::recv`): kept for the request's
    /// body, within the stream's window skewgate granted.
    pub(super) fn on_data(&mut self, frame: Data<Bytes>) {
        let id = frame.stream_id();
        let flow = frame.flow_controlled_len();
        let end = frame.is_end_stream();
        let Some((key, s)) = self.stream(id) else {
            // Closed and forgotten: RST_STREAM STREAM_CLOSED, as h2 answers it.
            return self.conn.closed_data(id, flow, end);
        };
        if let Some(gone) = &mut s.role.gone {
            let verdict = gone.on_data(flow, end);
            return self.conn.judge(id, verdict, flow);
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
        let within = s.recv.window.receive(flow).is_ok();
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
            s.recv.window.grant(flow);
        } else {
            s.recv.window.grant(given_back);
            s.recv.hold_coalesced(payload);
        }
        if end {
            s.ends.close_recv();
        }
        wake(&mut s.recv.task);
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
        self.conn.give_back(len);
    }

    /// Data the request's body took off stream `key`: the stream's window given back once half of
    /// it was taken (as h2 does), unless the stream is done receiving; the connection's with it.
    pub(super) fn release(&mut self, key: usize, len: usize) {
        let target = self.limits.stream_window;
        let grant = self
            .streams
            .get_mut(key)
            .and_then(|s| s.release(len, target, |_| true));
        if let Some((id, grant)) = grant {
            self.push(WindowUpdate::new(id, grant).into());
        }
        self.give_back(len);
    }

    /// RST_STREAM from the client: its request is dropped, its response stops.
    pub(super) fn on_reset(&mut self, id: StreamId, reason: Reason) {
        if let Some((key, s)) = self.stream(id)
            && s.fail(Failure::Reset(reason))
        {
            s.role.gone = Some(Gone::Closed);
            self.close(key);
        }
    }
}

impl ServerStream {
    /// Counts `len` bytes of data against the request's `content-length`; whether they go past it,
    /// or end the body short of it.
    fn count_length(&mut self, len: usize, end: bool) -> bool {
        let Some(left) = &mut self.role.content_length else {
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
