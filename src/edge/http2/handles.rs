//! What a request holds of its stream: the request body's reader (`RecvBody`) and the response's
//! sender (`Responder`). Each takes the connection's lock for one step and lets go.

use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::Bytes;
use h2::Reason;
use h2::frame::{Headers, Pseudo};
use http::HeaderMap;

use super::state::ConnState;
use crate::http2core::{Next, store_waker};
use crate::proxy::wire::{StreamBody, StreamSource};

/// What the connection's task and its streams' handles share.
pub(super) struct Shared {
    state: Mutex<ConnState>,
}

impl Shared {
    pub(super) fn new(state: ConnState) -> Arc<Shared> {
        Arc::new(Shared {
            state: Mutex::new(state),
        })
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, ConnState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A request's body, as the client sends it: data within the stream's window, then trailers.
/// The window data took is given back to the client as it is taken: the upstream stream's window
/// is what holds a client that sends faster than the apiserver reads.
impl StreamSource for Shared {
    fn poll_frame(
        &self,
        key: usize,
        ended: &mut bool,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, h2::Error>>> {
        let mut state = self.lock();
        let failed = state.failed.clone();
        let Some(s) = state.streams.get_mut(key) else {
            return Poll::Ready(None);
        };
        if let Some(error) = s.failed(failed.as_ref()) {
            return Poll::Ready(Some(Err(error)));
        }
        let (taken, end) = s.take();
        if !matches!(taken, Next::Nothing) {
            *ended = end;
        }
        match taken {
            Next::Data(data) => {
                state.release(key, data.len());
                Poll::Ready(Some(Ok(http_body::Frame::data(data))))
            }
            Next::Trailers(trailers) => {
                Poll::Ready(Some(Ok(http_body::Frame::trailers(*trailers))))
            }
            Next::End => Poll::Ready(None),
            Next::Nothing => {
                store_waker(&mut s.recv.task, cx);
                Poll::Pending
            }
        }
    }

    fn body_dropped(&self, key: usize) {
        let mut state = self.lock();
        if let Some(s) = state.streams.get_mut(key) {
            s.recv_handle = false;
            // What came and was not read is not held any longer.
            let held = s.recv.drop_held();
            state.release(key, held);
        }
        state.settle(key);
    }
}

/// A request's body on stream `key` of the connection `shared`.
pub(super) fn request_body(shared: &Arc<Shared>, key: usize, end_stream: bool) -> StreamBody {
    StreamBody::new(shared.clone(), key, end_stream)
}

/// The sender of a stream's response.
pub(super) struct Responder {
    shared: Arc<Shared>,
    key: usize,
    /// Let go of the stream already (`send_whole`): dropping it takes no lock.
    released: bool,
    /// The client's window for the stream was shut by what the last send queued: no more is to
    /// be taken from the apiserver's answer until it opens (`poll_room`).
    shut: bool,
}

impl Responder {
    pub(super) fn new(shared: Arc<Shared>, key: usize) -> Responder {
        Responder {
            shared,
            key,
            released: false,
            shut: false,
        }
    }

    /// Whether the client's window for the stream was shut by what the last send queued.
    pub(super) fn is_shut(&self) -> bool {
        self.shut
    }

    /// Ready once the client's window for the stream has room beyond what is queued (or the
    /// stream failed): a response taken from the apiserver no faster than its client reads it, so
    /// that what a client does not read stays upstream, within the response budget.
    pub(super) fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), h2::Error>> {
        let mut state = self.shared.lock();
        let (failed, initial) = (state.failed.clone(), state.send_initial);
        let held = state.held_back_by_budget();
        let Some(s) = state.streams.get_mut(self.key) else {
            return Poll::Ready(Err(h2::Error::from(Reason::CANCEL)));
        };
        if let Some(error) = s.failed(failed.as_ref()) {
            return Poll::Ready(Err(error));
        }
        let room = s.role.send_window.size(initial) > s.role.queued_len as i64;
        if room && !held {
            self.shut = false;
            return Poll::Ready(Ok(()));
        }
        store_waker(&mut s.send_task, cx);
        if room {
            state.hold_back(self.key);
        } else {
            state.block(self.key);
        }
        Poll::Pending
    }

    /// Queues the whole response: its head, and its one chunk (or none) with the end, and lets go
    /// of the stream, under one lock.
    pub(super) fn send_whole(&mut self, head: http::response::Parts, chunk: Option<Bytes>) {
        let mut state = self.shared.lock();
        let Some(s) = state.streams.get_mut(self.key) else {
            return;
        };
        if s.failure.is_some() || s.ends.send_closed() {
            return;
        }
        let mut frame = Headers::new(s.id, Pseudo::response(head.status), head.headers);
        if chunk.is_none() {
            frame.set_end_stream();
            s.ends.close_send();
        }
        s.send_handle = false;
        state.push(frame.into());
        if let Some(chunk) = chunk {
            state.queue_data(self.key, chunk, Some(None));
        }
        state.settle(self.key);
        self.released = true;
    }

    /// Ready when the stream was reset by the client (or the connection failed).
    pub(super) fn poll_reset(&mut self, cx: &mut Context<'_>) -> Poll<h2::Error> {
        let mut state = self.shared.lock();
        let failed = state.failed.clone();
        let Some(s) = state.streams.get_mut(self.key) else {
            return Poll::Ready(h2::Error::from(Reason::CANCEL));
        };
        match s.failed(failed.as_ref()) {
            Some(error) => Poll::Ready(error),
            None => {
                store_waker(&mut s.send_task, cx);
                Poll::Pending
            }
        }
    }

    /// Queues the response's head, its body to follow. False when the stream is reset.
    pub(super) fn send_head(&mut self, head: http::response::Parts) -> bool {
        let mut state = self.shared.lock();
        let (initial, held) = (state.send_initial, state.held_back_by_budget());
        let Some(s) = state.streams.get_mut(self.key) else {
            return false;
        };
        if s.failure.is_some() || s.ends.send_closed() {
            return false;
        }
        // A client whose window is shut already is sent nothing of the body until it opens.
        self.shut = s.role.send_window.is_shut(initial) || held;
        let frame = Headers::new(s.id, Pseudo::response(head.status), head.headers);
        state.push(frame.into());
        true
    }

    /// Queues `chunk` (taken from the slot) once the stream holds nothing unwritten, or less than
    /// the client's windows and the send buffer take, and the response's end after it when `end`;
    /// pending while it holds that much.
    pub(super) fn poll_send(
        &mut self,
        cx: &mut Context<'_>,
        chunk: &mut Option<Bytes>,
        end: Option<Option<Box<HeaderMap>>>,
    ) -> Poll<Result<(), h2::Error>> {
        let mut state = self.shared.lock();
        let failed = state.failed.clone();
        let (limit, connection_window) = (state.limits.send_buffer, state.conn.send_window);
        let (initial, spent) = (state.send_initial, state.budget_spent());
        let Some(s) = state.streams.get_mut(self.key) else {
            return Poll::Ready(Err(h2::Error::from(Reason::CANCEL)));
        };
        if let Some(error) = s.failed(failed.as_ref()) {
            return Poll::Ready(Err(error));
        }
        // Beyond one chunk, no more is held than the client's windows take at once: a client that
        // does not read holds one chunk here, and the apiserver's stream window upstream.
        let room = s
            .role
            .send_window
            .size(initial)
            .min(connection_window.size())
            .min(limit as i64);
        if s.role.queued_len > 0 && s.role.queued_len as i64 >= room && end.is_none() {
            store_waker(&mut s.send_task, cx);
            state.block(self.key);
            return Poll::Pending;
        }
        let data = chunk.take().unwrap_or_default();
        self.shut = s.role.send_window.size(initial) <= (s.role.queued_len + data.len()) as i64
            || (spent && !data.is_empty());
        state.queue_data(self.key, data, end);
        Poll::Ready(Ok(()))
    }

    /// Resets the stream (the response's body failed).
    pub(super) fn send_reset(&mut self, reason: Reason) {
        self.shared.lock().reset(self.key, reason);
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let mut state = self.shared.lock();
        if let Some(s) = state.streams.get_mut(self.key) {
            s.send_handle = false;
            if !s.ends.send_closed() {
                // The response was dropped unfinished: the client is told at once.
                state.reset(self.key, Reason::CANCEL);
            }
        }
        state.settle(self.key);
    }
}
