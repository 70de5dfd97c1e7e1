//! Identity-header hygiene: whatever names a client sends, no identity header it sent passes.
#![no_main]

use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use skewgate::identity::{IdentityHeaders, forward_identity};

fuzz_target!(|data: &[u8]| {
    let mut headers = HeaderMap::new();
    for line in data.split(|b| *b == b'\n') {
        let (name, value) = match line.iter().position(|b| *b == b':') {
            Some(i) => (&line[..i], &line[i + 1..]),
            None => (line, &b""[..]),
        };
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
            headers.append(n, v);
        }
    }
    forward_identity(&IdentityHeaders::default(), &mut headers, None);
    for name in headers.keys() {
        assert!(
            !name.as_str().replace('_', "-").starts_with("x-remote-"),
            "{name} passed"
        );
    }
});
