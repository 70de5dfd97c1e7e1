//! Endpoint authorities (`host:port`), kept for the life of the process.
//!
//! Every request names its endpoint's authority twice (in its URI, and as `:authority` on the
//! upstream connection), each a clone of a `Bytes`. Cloned from one shared buffer, each clone and
//! each drop wrote that buffer's reference count: a line every worker wrote on every request. A
//! `Bytes` of a `'static` string is cloned and dropped without a write, so each authority is made
//! `'static` once: the table holds one copy of each authority ever configured (a few, however
//! often the route file is reloaded).

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use http::uri::{Authority, InvalidUri};

static AUTHORITIES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);

/// `authority`, as a string that lives as long as the process (one per distinct value).
pub(crate) fn interned(authority: &str) -> &'static str {
    let mut table = AUTHORITIES.lock().unwrap_or_else(PoisonError::into_inner);
    let table = table.get_or_insert_with(HashSet::new);
    if let Some(&kept) = table.get(authority) {
        return kept;
    }
    let kept: &'static str = Box::leak(authority.to_owned().into_boxed_str());
    table.insert(kept);
    kept
}

/// `authority` parsed, over its interned string: its clones write no reference count.
pub(crate) fn static_authority(authority: &str) -> Result<Authority, InvalidUri> {
    Authority::from_maybe_shared(Bytes::from_static(interned(authority).as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_string_per_distinct_authority() {
        let a = interned("apiserver-a:6443");
        let b = interned(&String::from("apiserver-a:6443"));
        assert!(std::ptr::eq(a, b));
        assert_ne!(interned("apiserver-b:6443"), a);
        let parsed = static_authority("apiserver-a:6443").unwrap();
        assert_eq!(parsed.as_str(), "apiserver-a:6443");
        assert!(std::ptr::eq(parsed.as_str(), a));
        assert!(static_authority("bad authority").is_err());
    }
}
