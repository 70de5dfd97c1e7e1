//! The HTTP/2 connection core both engines share (src/http2core), alone: the first byte picks the
//! side (server or client) and whether the peer reads what is written, the rest is the peer's
//! frames. After every frame the invariants no peer may break: windows within 2^31-1, stream ids
//! only growing, streams within the limit, closed streams and queued frames within their bounds,
//! skewgate's SETTINGS acknowledged in order, nothing done after a connection error.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    skewgate::fuzz_http2_core(data);
});
