//! Protobuf bodies as a client sends them and an apiserver answers them, read with skewgate's
//! compiled-in Kubernetes schema: decoded, viewed as JSON, encoded again, lost fields put back.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    skewgate::fuzz_protobuf_body(data);
});
