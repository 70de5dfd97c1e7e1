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
    // What kube-apiserver's request-header authenticator reads with kubeadm's flags.
    for name in headers.keys() {
        let dashed = name.as_str().replace('_', "-");
        let identity = matches!(dashed.as_str(), "x-remote-user" | "x-remote-group" | "x-remote-uid")
            || dashed.starts_with("x-remote-extra-");
        assert!(!identity, "{name} passed");
    }
});
