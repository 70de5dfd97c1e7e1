//! One stream of an upstream connection, as its state holds it: what has come of its response,
//! what its request may still send, and why it failed if it did.

use std::task::Waker;

use h2::frame::StreamId;
use http::HeaderMap;

use crate::http2core::{Chunks, Ends, Failure, Window};

/// One stream: what has come of its response, and what its request may still send.
pub(super) struct UpstreamStream {
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
