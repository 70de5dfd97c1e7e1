//! Keys made of several strings (a group, version and resource), hashed once for the tables that
//! every request looks up. foldhash over the strings in place, with a seed drawn once per process:
//! one-shot xxh3 needed the strings copied into a zeroed stack buffer first (65 instructions of
//! copies a request, two keys, callgrind), and its fixed seed let a client who names a resource
//! work out which served resource its key collides with.

use std::hash::BuildHasher;
use std::sync::LazyLock;

use foldhash::fast::RandomState;

static SEED: LazyLock<RandomState> = LazyLock::new(RandomState::default);

/// The hash of `parts`. Each string is hashed with its length's terminator (0xff, as `str`'s `Hash`
/// writes it), so that ("ab", "c") and ("a", "bc") differ.
pub(crate) fn key_of(parts: &[&str]) -> u64 {
    SEED.hash_one(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_stable_and_parts_do_not_run_together() {
        let long = "r".repeat(300);
        assert_eq!(key_of(&["g", &long]), key_of(&["g", &long]));
        assert_eq!(key_of(&["g", "v", "r"]), key_of(&["g", "v", "r"]));
        assert_ne!(key_of(&["ab", "c"]), key_of(&["a", "bc"]));
        assert_ne!(key_of(&["", "v1", "pods"]), key_of(&["", "v1pods"]));
        assert_ne!(
            key_of(&["apps", "v1", "deployments"]),
            key_of(&["apps", "v1", "replicasets"])
        );
    }
}
