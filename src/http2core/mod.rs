//! What skewgate's two HTTP/2 engines share: the server for clients (`edge::http2`) and the
//! client to apiservers (`upstream::frames`), each on h2's codec for framing and HPACK. Both hold
//! their streams under one lock per connection and read frames into that state without I/O; what
//! RFC 9113 asks of both alike lives here once, so that the checks are the same on both sides.
//!
//! - `window`: a flow-control window (RFC 9113, 6.9) and its checks: a WINDOW_UPDATE of 0 or one
//!   past 2^31-1, a change of SETTINGS_INITIAL_WINDOW_SIZE that takes a window past it, data
//!   received beyond what was granted.
//! - `stream`: a stream's states once open (RFC 9113, 5.1), each end closed once.
//! - `settings`: the peer's SETTINGS as both apply them (its codec's, and the initial window).

mod settings;
mod stream;
mod window;

pub(crate) use settings::{InitialWindow, apply_codec_settings};
pub(crate) use stream::{Ends, StreamState};
pub(crate) use window::Window;
