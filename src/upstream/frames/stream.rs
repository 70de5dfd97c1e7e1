//! One stream of an upstream connection (`http2core::Stream`): its response received as its
//! receiving half; what only the client keeps beside it is here.

use h2::frame::StreamId;

use crate::http2core::{Ends, Stream, Window};

/// One stream: its response received, its request sent from the client's part.
pub(super) type UpstreamStream = Stream<ClientPart>;

/// What only the client keeps of a stream: the response head until the request takes it, what
/// its request may still send, and what the stream is counted for in the response budget.
pub(super) struct ClientPart {
    /// The response head, until the request takes it.
    pub(super) head: Option<http::response::Parts>,
    /// Whether the (final) response head has come.
    pub(super) head_seen: bool,
    /// How much more the request's body may send on the stream, as the apiserver granted it.
    pub(super) send_window: Window,
    /// What the stream may still be sent, as counted in the budget (`windows.rs`).
    pub(super) promised: u32,
}

/// A stream opened as `id`, its request whole already when `end`: the apiserver may send
/// `window`, and the request's body `send_window`.
#[inline]
pub(super) fn open(id: StreamId, end: bool, window: u32, send_window: Window) -> UpstreamStream {
    let part = ClientPart {
        head: None,
        head_seen: false,
        send_window,
        promised: 0,
    };
    Stream::new(id, Ends::new(false, end), window, part)
}
