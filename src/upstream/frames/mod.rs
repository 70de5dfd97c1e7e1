//! skewgate's own HTTP/2 client for its upstream connections, at the frame level.
//!
//! Why not h2's client: measured with callgrind, h2's client stream machinery (its stream store of
//! linked queues, reference-counted stream handles, per-stream send and receive queues, and the
//! layers of actions around them) costs about 5,100 instructions per proxied GET, a sixth of what
//! HAProxy spends on the whole request (bench/bare_path.rs, `bare` against `bare+frames`). An
//! upstream connection of skewgate's has one kind of peer (an apiserver) and one use (requests the
//! pool admitted under the peer's stream limit), so it needs much less: h2's codec (framing and
//! HPACK, unchanged), a slab of streams keyed by stream id, one queue of frames to write, and flow
//! control by two numbers per stream. That is this module.
//!
//! - `state`: the streams and windows, under the connection's one lock; `stream`: one stream.
//! - `drive`: the connection's task: frames in to the state, frames out to the socket, SETTINGS,
//!   PING and GOAWAY.
//! - here: the connection as the pool holds it (`Link`), and the stream it opens for a request;
//!   `handles`: what the request holds of its stream (`ResponseFuture`, `RecvBody`, `SendBody`).
//!
//! What it leaves out of HTTP/2, because an apiserver connection never needs it: server push
//! (refused in SETTINGS, a PUSH_PROMISE ends the connection), priorities (ignored), extended
//! CONNECT (upgrades go over HTTP/1.1, see `proxy::upgrade`), and content-length checks of
//! responses (hyper checks what it sends to the client).

mod drive;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod fuzzing;
mod handles;
mod state;
mod stream;
mod windows;

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use h2::frame::{Headers, Pseudo};
use http::{HeaderMap, header};

pub(crate) use drive::{Hooks, handshake};
// The stream parts the frame-level server for HTTP/2 clients shares (`edge::http2`).
use handles::Handle;
pub(crate) use handles::{RecvBody, ResponseFuture, SendBody};
use state::LinkState;

use super::Head;

pub(crate) use super::budget::STREAM_WINDOW;

/// The connection's window is the largest HTTP/2 allows (2^31 - 1), far above what all its streams
/// may buffer (streams x `STREAM_WINDOW`), so that unread data of some streams (a client that does
/// not read, a slow watcher) never holds back the others: backpressure is per stream only, and the
/// connection's window is given back as data arrives. Memory stays bounded by the per-stream window.
pub(crate) const CONNECTION_WINDOW: u32 = (1 << 31) - 1;

/// What the connection's task and its handles share.
struct Shared {
    state: Mutex<LinkState>,
    /// The apiserver's SETTINGS_MAX_CONCURRENT_STREAMS (the pool's initial guess until it comes).
    max_streams: AtomicUsize,
    /// The apiserver's SETTINGS_MAX_HEADER_LIST_SIZE (`u32::MAX` until it says).
    header_list_limit: AtomicU32,
    /// Notified when the apiserver acknowledges skewgate's PING.
    pong: tokio::sync::Notify,
    /// Frames received from the apiserver: one that answers anything is alive, even when its
    /// PING's answer waits behind a backlog of responses.
    heard: std::sync::atomic::AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, LinkState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Why a request could not be opened as a stream.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// The connection takes no new streams (GOAWAY received, failed, or closed).
    Closing(h2::Error),
    /// The request carries a header HTTP/2 forbids (RFC 9113, 8.2.2); nothing was sent.
    Malformed(&'static str),
}

/// The pool's handle on one connection. Dropping it lets the connection close once its last stream
/// has ended.
pub(crate) struct Link {
    shared: Arc<Shared>,
    /// The endpoint's authority, the `:authority` of every request to it, made once: h2 would copy
    /// it into a new buffer for each request.
    authority: h2::BytesStr,
}

impl Link {
    /// The most streams the apiserver allows open at once.
    pub(crate) fn max_streams(&self) -> usize {
        self.shared.max_streams.load(Ordering::Relaxed)
    }

    /// The largest header list the apiserver accepts (`u32::MAX` until it says). h2's codec does
    /// not enforce it, and a larger list makes the apiserver fail the stream or the whole
    /// connection; the pool refuses such a request before it is sent.
    pub(crate) fn header_list_limit(&self) -> usize {
        self.shared.header_list_limit.load(Ordering::Relaxed) as usize
    }

    /// Sends `head` as a new stream, with END_STREAM when `end_of_stream`; the response to come,
    /// and the sender of the request's body unless it ended with the head. On failure nothing was
    /// sent, and the head comes back.
    pub(crate) fn send_request(
        &self,
        head: Head,
        end_of_stream: bool,
    ) -> Result<(ResponseFuture, Option<SendBody>), (OpenError, Head)> {
        if let Err(name) = check_headers(&head.headers) {
            return Err((OpenError::Malformed(name), head));
        }
        let mut state = self.shared.lock();
        if let Err(why) = state.can_open() {
            return Err((OpenError::Closing(why.to_error()), head));
        }
        let parts = *head;
        let key = state.open(|id| {
            // Compared as written (the pool wrote both), not case-insensitively as `Authority`.
            let same = parts.uri.authority().map(|a| a.as_str()) == Some(&*self.authority);
            let pseudo = if same {
                Pseudo::request_to(parts.method, parts.uri, self.authority.clone())
            } else {
                Pseudo::request(parts.method, parts.uri, None)
            };
            let mut frame = Headers::new(id, pseudo, parts.headers);
            if end_of_stream {
                frame.set_end_stream();
            }
            frame
        });
        drop(state);
        let handle = |recv| Handle::new(self.shared.clone(), key, recv);
        let body = (!end_of_stream).then(|| SendBody::new(handle(false)));
        Ok((ResponseFuture::new(handle(true)), body))
    }

    /// A handle that PINGs the connection (and does not hold it open).
    pub(crate) fn pinger(&self) -> Pinger {
        Pinger {
            shared: self.shared.clone(),
        }
    }
}

/// PINGs one connection.
pub(crate) struct Pinger {
    shared: Arc<Shared>,
}

impl Pinger {
    /// Frames received from the apiserver so far.
    pub(crate) fn heard(&self) -> u64 {
        self.shared.heard.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Sends a PING; resolves when the apiserver answers it.
    pub(crate) async fn ping(&self) {
        let pong = self.shared.pong.notified();
        self.shared
            .lock()
            .push(h2::frame::Ping::new(drive::PING_PAYLOAD).into());
        pong.await;
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.released_by_pool = true;
        state.conn.wake();
    }
}

/// Rejects the connection-specific header fields HTTP/2 forbids, as h2's client does (skewgate's
/// forwarding strips them; this is the last line). One pass over the names: a name whose first
/// byte none of them begins with (most of them) is passed over with one bit test.
fn check_headers(headers: &HeaderMap) -> Result<(), &'static str> {
    static FORBIDDEN: [header::HeaderName; 5] = [
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        header::HeaderName::from_static("keep-alive"),
        header::HeaderName::from_static("proxy-connection"),
    ];
    // c(onnection), t(ransfer-encoding, e), u(pgrade), k(eep-alive), p(roxy-connection).
    const FIRST: u128 = 1 << b'c' | 1 << b't' | 1 << b'u' | 1 << b'k' | 1 << b'p';
    for (name, value) in headers {
        let first = name.as_str().as_bytes().first().copied().unwrap_or(0);
        if first >= 128 || FIRST & (1 << first) == 0 {
            continue;
        }
        if let Some(forbidden) = FORBIDDEN.iter().find(|f| *f == name) {
            return Err(forbidden.as_str());
        }
        if name == header::TE && value != "trailers" {
            return Err("te");
        }
    }
    Ok(())
}

#[cfg(test)]
mod budget_tests;
#[cfg(test)]
mod tests;
