//! A shared watch (src/proxy/share): the first byte picks the encoding and where the hub begins,
//! the rest is what the apiserver sends, cut into pieces; every event is delivered to clients of
//! several starts, and each client gets only whole events newer than its start and than what it
//! had, within its queue's bound. Bytes that are no watch event end the watch, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    skewgate::fuzz_shared_watch(data);
});
