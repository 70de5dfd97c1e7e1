//! Keys made of several strings (a group, version and resource), hashed once for the tables that
//! every request looks up: one-shot xxh3 over a stack buffer, as a streaming hasher costs more to
//! set up than to feed such short input.

use xxhash_rust::xxh3::{Xxh3, xxh3_64};

/// The hash of `parts`, each followed by 0xff (a byte no UTF-8 string holds), so that
/// ("ab", "c") and ("a", "bc") differ.
pub(crate) fn key_of(parts: &[&str]) -> u64 {
    let mut buf = [0u8; 256];
    let mut n = 0;
    for part in parts {
        let bytes = part.as_bytes();
        if n + bytes.len() + 1 > buf.len() {
            return streamed(parts);
        }
        buf[n..n + bytes.len()].copy_from_slice(bytes);
        buf[n + bytes.len()] = 0xff;
        n += bytes.len() + 1;
    }
    xxh3_64(&buf[..n])
}

fn streamed(parts: &[&str]) -> u64 {
    let mut h = Xxh3::new();
    for part in parts {
        h.update(part.as_bytes());
        h.update(&[0xff]);
    }
    h.digest()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_keys_hash_as_short_ones_do_and_parts_do_not_run_together() {
        let long = "r".repeat(300);
        assert_eq!(key_of(&["g", &long]), streamed(&["g", &long]));
        assert_eq!(key_of(&["g", "v", "r"]), streamed(&["g", "v", "r"]));
        assert_ne!(key_of(&["ab", "c"]), key_of(&["a", "bc"]));
    }
}
