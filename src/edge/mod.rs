//! The edge: the wire clients speak to skewgate on. It accepts TCP (each connection handed to the
//! worker serving the fewest, `balance`), tells TLS, HTTP/2 and HTTP/1.1 apart (`detect`,
//! `handshake`), serves HTTP/1.1 (`http1`, and hyper's bursts for the rest, `keepalive`) and HTTP/2
//! (`http2`, frame by frame), bounds what a client may do on a connection (`resets`, and what a
//! connection watches beside its requests, `signals`), holds back offenders before they are
//! served, and hands each request to the pipeline (`crate::proxy::service`). It depends on the
//! pipeline; the pipeline names none of its types (`crate::proxy::wire`).

mod balance;
mod detect;
mod ending;
mod handshake;
pub(crate) mod http1;
pub(crate) mod http2;
mod keepalive;
mod listener;
mod resets;
mod server;
mod signals;

pub(crate) use listener::serve;
pub use server::{ServeOptions, Server};

/// The HTTP/2 server's frames-in, frames-out core driven by `input` as a client's bytes after the
/// preface, its invariants checked after every read (`fuzz/fuzz_targets/http2_server.rs`).
#[cfg(feature = "fuzzing")]
pub fn fuzz_http2_server(input: &[u8]) {
    http2::fuzzing::serve_frames(input);
}
