//! skewgate: an L7 proxy that steers Kubernetes API traffic between apiserver versions during an upgrade.
//!
//! The crate is split into rooms, one job each (see docs/design.md): `classify` turns a request head into the
//! apiserver's own RequestInfo, `config` turns route files into a validated route table, and `steer`
//! decides which backend serves a request and why.

#![warn(unreachable_pub)]

/// `impl AsyncWrite for $wrapper<S>` that passes every write through to its `inner` stream: for
/// wrappers that only look at what is read (protocol detection, the upstream SETTINGS reader).
macro_rules! forward_async_write {
    ($wrapper:ident) => {
        impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for $wrapper<S> {
            fn poll_write(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
            }

            fn poll_write_vectored(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                self.inner.is_write_vectored()
            }

            fn poll_flush(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.inner).poll_flush(cx)
            }

            fn poll_shutdown(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
            }
        }
    };
}

pub(crate) mod admin;
pub mod app;
pub mod classify;
pub mod cluster;
pub mod config;
pub mod edge;
#[cfg(any(test, feature = "fuzzing"))]
mod fuzz_io;
mod http2core;

/// For the fuzz target over the HTTP/2 connection core both engines share
/// (`fuzz/fuzz_targets/http2_core.rs`): the first byte picks the side, the rest is the peer's
/// frames; the core's invariants are checked after every frame.
#[cfg(feature = "fuzzing")]
pub fn fuzz_http2_core(input: &[u8]) {
    http2core::fuzzing::drive(input);
}
/// For the fuzz target over protobuf bodies (`fuzz/fuzz_targets/protobuf_body.rs`): the first
/// byte splits the rest into a stored object and an update's body, each decoded, viewed and
/// encoded again, the body's lost fields put back from the stored object.
#[cfg(feature = "fuzzing")]
pub fn fuzz_protobuf_body(input: &[u8]) {
    protobuf::fuzzing::drive(input);
}
/// For the fuzz target over the replicas' reports (`fuzz/fuzz_targets/fleet_reports.rs`): the
/// first byte a clock offset, the rest a Lease list, read into a replica's gates of a pin's moves.
#[cfg(feature = "fuzzing")]
pub fn fuzz_fleet_reports(input: &[u8]) {
    cluster::fuzzing::drive(input);
}
/// For the fuzz target over a shared watch (`fuzz/fuzz_targets/shared_watch.rs`): the first byte
/// picks the encoding and where the hub begins, the rest is what the apiserver sends, delivered
/// to clients of several starts; the invariants are checked after every event.
#[cfg(feature = "fuzzing")]
pub fn fuzz_shared_watch(input: &[u8]) {
    proxy::fuzz_shared_watch(input);
}
pub mod identity;
mod keys;
pub(crate) mod metrics;
pub mod protobuf;
pub mod proxy;
mod runtime;
pub mod skew;
pub mod steer;
pub mod upstream;

/// skewgate's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit it was built from (`build.rs`), or `unknown`.
pub const COMMIT: &str = env!("SKEWGATE_COMMIT");
