//! One stream of an upstream connection, as its state holds it: what has come of its response,
//! what its request may still send, and why it failed if it did.

use std::collections::VecDeque;
use std::io;
use std::task::Waker;

use bytes::Bytes;
use h2::Reason;
use h2::frame::StreamId;
use http::HeaderMap;

use crate::http2core::{Ends, Window};

/// Why a stream, or the whole connection, can go no further. Kept as data (h2's error is not
/// `Clone`) and turned into an `h2::Error` for each one who asks.
#[derive(Clone, Debug)]
pub(crate) enum Failure {
    /// The stream was reset, by the apiserver or by skewgate.
    Reset(Reason),
    /// The apiserver sent GOAWAY before it took the stream: the stream was never processed.
    Refused,
    /// The connection failed or closed.
    Closed(io::ErrorKind, &'static str),
}

impl Failure {
    pub(crate) fn to_error(&self) -> h2::Error {
        match self {
            Failure::Reset(reason) => h2::Error::from(*reason),
            Failure::Refused => h2::Error::from(Reason::REFUSED_STREAM),
            Failure::Closed(kind, what) => h2::Error::from(io::Error::new(*kind, *what)),
        }
    }
}

/// One stream: what has come of its response, and what its request may still send.
pub(super) struct Stream {
    pub(super) id: StreamId,
    /// The response head, until the request takes it.
    pub(super) head: Option<http::response::Parts>,
    /// Whether the (final) response head has come.
    pub(super) head_seen: bool,
    /// Response data not yet taken by the request's body.
    pub(super) data: Chunks,
    /// Boxed: few responses have trailers, and every stream would carry an inline map's size.
    pub(super) trailers: Option<Box<HeaderMap>>,
    /// Which ends are closed (RFC 9113, 5.1): the response's by END_STREAM received, the
    /// request's by END_STREAM or RST_STREAM sent.
    pub(super) ends: Ends,
    pub(super) failure: Option<Failure>,
    /// How much more the apiserver may send on the stream, as skewgate granted it.
    pub(super) recv_window: Window,
    /// Data the request took and skewgate has not given back to the apiserver yet.
    pub(super) released: u32,
    /// How much more the request's body may send on the stream, as the apiserver granted it.
    pub(super) send_window: Window,
    pub(super) recv_task: Option<Waker>,
    pub(super) send_task: Option<Waker>,
    /// The handles still held: the response's (head, then body) and the request body's sender.
    pub(super) recv_handle: bool,
    pub(super) send_handle: bool,
    /// What the stream may still be sent, as counted in the budget (`windows.rs`).
    pub(super) promised: u32,
}

/// A stream's response data not yet taken, oldest first. The first chunk is held inline: most
/// responses are one DATA frame, and a queue would allocate for it.
#[derive(Default)]
pub(crate) struct Chunks {
    first: Option<Bytes>,
    more: VecDeque<Bytes>,
    /// Bytes held.
    len: usize,
}

impl Chunks {
    pub(crate) fn push_back(&mut self, chunk: Bytes) {
        self.len += chunk.len();
        if self.first.is_none() && self.more.is_empty() {
            self.first = Some(chunk);
        } else {
            self.more.push_back(chunk);
        }
    }

    /// Puts back what was taken off the front and not used (a chunk larger than a window).
    pub(crate) fn push_front(&mut self, chunk: Bytes) {
        self.len += chunk.len();
        if let Some(first) = self.first.replace(chunk) {
            self.more.push_front(first);
        }
    }

    pub(crate) fn pop_front(&mut self) -> Option<Bytes> {
        let chunk = self.first.take().or_else(|| self.more.pop_front())?;
        self.len -= chunk.len();
        Some(chunk)
    }

    /// Bytes held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.first.is_none() && self.more.is_empty()
    }

    pub(crate) fn clear(&mut self) {
        self.len = 0;
        self.first = None;
        self.more.clear();
    }
}

pub(crate) fn wake(task: &mut Option<Waker>) {
    if let Some(task) = task.take() {
        task.wake();
    }
}
