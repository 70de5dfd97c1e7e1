//! The HTTP/2 server's core (src/edge/http2) without a socket: any bytes a client sends after its
//! preface, read frame by frame into the connection's state, its requests answered, and after every
//! read the invariants no client may break (windows within 2^31-1, open streams within the limit,
//! request data within the stream's window, the control-frame queue and the streams held bounded).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    skewgate::edge::fuzz_http2_server(data);
});
