//! The upstream HTTP/2 client's core (src/upstream/frames) without a socket: any bytes an apiserver
//! sends on a connection with requests open, read frame by frame into the connection's state, half
//! the responses read as they come, and after every read the invariants no apiserver may break
//! (windows within 2^31-1, data held within the window skewgate granted, the write queue bounded).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    skewgate::upstream::fuzz_http2_upstream(data);
});
