//! Request classification: any method, path and query a client can send.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.splitn(3, '\n');
    let method = parts.next().unwrap_or("");
    let path = parts.next().unwrap_or("");
    let query = parts.next();
    let info = skewgate::classify::classify(method, path, query);
    if info.is_resource {
        assert!(info.api_prefix == "api" || info.api_prefix == "apis");
        assert!(!info.namespace.contains('/'));
    }
    let _ = skewgate::classify::Client::from_user_agent(Some(path));
});
