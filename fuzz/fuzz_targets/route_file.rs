//! Route-file loading: any text an operator (or a broken ConfigMap) can put in the file.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data)
        && let Err(errors) =
            skewgate::config::parse_route_table(std::path::Path::new("f.yaml"), text)
    {
        assert!(!errors.0.is_empty());
    }
});
