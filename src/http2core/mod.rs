//! What skewgate's two HTTP/2 engines share: the server for clients (`edge::http2`) and the
//! client to apiservers (`upstream::frames`), each on h2's codec for framing and HPACK. Both hold
//! their streams under one lock per connection and read frames into that state without I/O; what
//! RFC 9113 asks of both alike lives here once, so that the checks are the same on both sides.
//!
//! - `window`: a flow-control window (RFC 9113, 6.9) and its checks: a WINDOW_UPDATE of 0 or one
//!   past 2^31-1, a change of SETTINGS_INITIAL_WINDOW_SIZE that takes a window past it, data
//!   received beyond what was granted.
//! - `stream`: a stream as both keep it (h2's `Stream`): its states once open (RFC 9113, 5.1),
//!   each end closed once, its failure, its handles, and what only its role keeps beside.
//! - `recv`: a stream's receiving half: the body held for its reader, its trailers, the window
//!   granted for it and given back as the reader takes the body.
//! - `settings`: the peer's SETTINGS as both apply them (its codec's, and the initial window).
//! - `closed`: the streams closed and forgotten, and what a frame on one comes to.
//! - `held`: what a stream of either side holds beside its states: data not yet taken, why it
//!   failed, its tasks to wake.
//! - `conn`: the connection's no-I/O core: frames in, what they come to out, the stream-id space,
//!   the connection's windows, both sides' SETTINGS, PING, GOAWAY, and the bounds on the peer.

mod closed;
mod conn;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod fuzzing;
mod held;
mod recv;
mod settings;
mod store;
mod stream;
mod window;

pub(crate) use closed::Gone;
pub(crate) use conn::{Bounds, Conn, Event, MAX_STREAM_ID, Role};
pub(crate) use held::{Chunks, Failure, store_waker, wake};
pub(crate) use recv::Next;
pub(crate) use settings::{InitialWindow, apply_codec_settings};
pub(crate) use store::Store;
pub(crate) use stream::{Ends, Stream, StreamState};
pub(crate) use window::Window;
