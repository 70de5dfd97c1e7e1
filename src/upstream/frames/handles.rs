//! What a request holds of its upstream stream: the response to come (`ResponseFuture`), its body
//! (`RecvBody`), and the sender of the request's body (`SendBody`). Each takes the connection's
//! lock for one step and lets go; the stream is forgotten with the last of them (`Handle`).

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use h2::Reason;
use h2::frame::{Data, Headers};
use http::HeaderMap;

use super::Shared;
use crate::http2core::{Next, store_waker};

/// A stream held by one of its two handles: the response's, or the request body's.
pub(super) struct Handle {
    shared: Arc<Shared>,
    key: usize,
    recv: bool,
    /// Given up already, under a lock held for something else: its key may belong to another
    /// stream now, and dropping it takes no lock.
    released: std::cell::Cell<bool>,
}

impl Handle {
    pub(super) fn new(shared: Arc<Shared>, key: usize, recv: bool) -> Handle {
        Handle {
            shared,
            key,
            recv,
            released: std::cell::Cell::new(false),
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        if !self.released.get() {
            self.shared.lock().drop_handle(self.key, self.recv);
        }
    }
}

/// The response head to come on a stream.
pub(crate) struct ResponseFuture {
    handle: Option<Handle>,
}

impl ResponseFuture {
    pub(super) fn new(handle: Handle) -> ResponseFuture {
        ResponseFuture {
            handle: Some(handle),
        }
    }
}

impl Future for ResponseFuture {
    type Output = Result<(http::response::Parts, RecvBody), h2::Error>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(handle) = &self.handle else {
            return Poll::Ready(Err(h2::Error::from(Reason::INTERNAL_ERROR)));
        };
        let head = {
            let mut state = handle.shared.lock();
            let failed = state.failed.clone();
            let Some(s) = state.streams.get_mut(handle.key) else {
                return Poll::Ready(Err(h2::Error::from(Reason::INTERNAL_ERROR)));
            };
            if let Some(head) = s.role.head.take() {
                head
            } else if let Some(error) = s.failed(failed.as_ref()) {
                return Poll::Ready(Err(error));
            } else {
                store_waker(&mut s.recv.task, cx);
                return Poll::Pending;
            }
        };
        let body = RecvBody {
            handle: self.handle.take(),
            ended: false,
        };
        Poll::Ready(Ok((head, body)))
    }
}

/// A response body, as the apiserver sends it: data within the stream's window, then trailers.
pub(crate) struct RecvBody {
    handle: Option<Handle>,
    /// Whether the body was found at its end.
    ended: bool,
}

impl std::fmt::Debug for RecvBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBody")
            .field("stream", &self.handle.as_ref().map(|h| h.key))
            .field("ended", &self.ended)
            .finish()
    }
}

impl RecvBody {
    /// The next data or trailers; `None` at the end.
    pub(crate) fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, h2::Error>>> {
        let Some(handle) = self.handle.as_ref().filter(|h| !h.released.get()) else {
            return Poll::Ready(None);
        };
        let mut state = handle.shared.lock();
        let failed = state.failed.clone();
        let Some(s) = state.streams.get_mut(handle.key) else {
            return Poll::Ready(None);
        };
        let (next, ended) = s.take();
        match next {
            Next::Data(data) => {
                self.ended = ended;
                let both = ended && s.ends.send_closed();
                state.taken(data.len());
                if both {
                    // Over both ways with this frame (a small GET's whole answer): the stream is
                    // given up now, under this lock, rather than by another when the body is
                    // dropped.
                    state.drop_handle(handle.key, true);
                    handle.released.set(true);
                } else {
                    state.release(handle.key, data.len());
                }
                Poll::Ready(Some(Ok(http_body::Frame::data(data))))
            }
            Next::Trailers(trailers) => {
                self.ended = true;
                Poll::Ready(Some(Ok(http_body::Frame::trailers(*trailers))))
            }
            Next::End => {
                self.ended = true;
                Poll::Ready(None)
            }
            Next::Nothing => {
                if let Some(error) = s.failed(failed.as_ref()) {
                    return Poll::Ready(Some(Err(error)));
                }
                store_waker(&mut s.recv.task, cx);
                // Nothing held: a stream the budget shut is given a small window (`budget.rs`).
                if s.recv.window.is_shut() {
                    state.demand(handle.key, cx.waker());
                }
                Poll::Pending
            }
        }
    }

    /// Whether the body is known to be at its end (no lock: as of the last poll).
    pub(crate) fn is_end_stream(&self) -> bool {
        self.ended
    }
}

/// The sender of a request's body, within the windows the apiserver grants.
pub(crate) struct SendBody {
    handle: Handle,
}

impl SendBody {
    pub(super) fn new(handle: Handle) -> SendBody {
        SendBody { handle }
    }

    /// Sends all of `data` (END_STREAM with its last frame when `end`), in frames as large as the
    /// windows and the apiserver's frame size allow; pending while they are closed.
    pub(crate) fn poll_send(
        &mut self,
        cx: &mut Context<'_>,
        data: &mut Bytes,
        end: bool,
    ) -> Poll<Result<(), h2::Error>> {
        let mut state = self.handle.shared.lock();
        loop {
            let st = &mut *state;
            let failed = st.failed.clone();
            let Some(s) = st.streams.get_mut(self.handle.key) else {
                return Poll::Ready(Err(h2::Error::from(Reason::CANCEL)));
            };
            if let Some(error) = s.failed(failed.as_ref()) {
                return Poll::Ready(Err(error));
            }
            if s.ends.send_closed() {
                return Poll::Ready(Ok(()));
            }
            let room = s
                .role
                .send_window
                .size()
                .min(st.conn.send_window.size())
                .min(st.conn.max_frame as i64);
            if room <= 0 && !data.is_empty() {
                store_waker(&mut s.send_task, cx);
                return Poll::Pending;
            }
            let chunk = data.split_to((room.max(0) as usize).min(data.len()));
            let last = end && data.is_empty();
            s.role.send_window.spend(chunk.len());
            if last {
                s.ends.close_send();
            }
            let id = s.id;
            st.conn.send_window.spend(chunk.len());
            let mut frame = Data::new(id, chunk);
            frame.set_end_stream(last);
            st.push(frame.into());
            if data.is_empty() {
                return Poll::Ready(Ok(()));
            }
        }
    }

    /// Ends the request with trailers.
    pub(crate) fn send_trailers(&mut self, trailers: HeaderMap) {
        let mut state = self.handle.shared.lock();
        let Some(s) = state.streams.get_mut(self.handle.key) else {
            return;
        };
        if s.failure.is_some() || s.ends.send_closed() {
            return;
        }
        s.ends.close_send();
        let mut frame = Headers::trailers(s.id, trailers);
        frame.set_end_stream();
        state.push(frame.into());
    }

    /// Resets the stream (the client's body failed).
    pub(crate) fn send_reset(&mut self, reason: Reason) {
        self.handle.shared.lock().reset(self.handle.key, reason);
    }
}
