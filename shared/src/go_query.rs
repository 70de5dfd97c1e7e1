//! A query string's pairs as Go's `url.ParseQuery` reads them (kube-apiserver reads its list options
//! from `req.URL.Query()`, which is `ParseQuery` with its error ignored): pairs split at `&` only; a
//! pair with a `;` in it dropped (Go 1.17 and later); a pair whose key or value has a malformed
//! escape (`%zz`, a `%` without two hex digits) dropped; `+` a space; empty pairs skipped.
//!
//! `form_urlencoded`, which skewgate used before, keeps a malformed escape as it is and the `;` in a
//! value, so that `watch=false;` and `watch=%zz` were watches to skewgate and LISTs to the
//! apiserver.

use std::borrow::Cow;

/// The pairs of `query`, in order, decoded, those Go drops left out.
pub fn pairs(query: &str) -> impl Iterator<Item = (Cow<'_, str>, Cow<'_, str>)> {
    query.split('&').filter_map(|pair| {
        if pair.is_empty() || pair.contains(';') {
            return None;
        }
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        Some((unescape(key)?, unescape(value)?))
    })
}

/// Go's `QueryUnescape`: `%XX` with two hex digits decoded, `+` a space; `None` for a malformed
/// escape. Bytes that are not UTF-8 once decoded are replaced (Go keeps them; no name or option
/// skewgate reads can hold them and still be valid).
pub fn unescape(s: &str) -> Option<Cow<'_, str>> {
    if !s.contains(['%', '+']) {
        return Some(Cow::Borrowed(s));
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                let digit = |b: u8| (b as char).to_digit(16);
                out.push((digit(hex[0])? * 16 + digit(hex[1])?) as u8);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Some(Cow::Owned(String::from_utf8_lossy(&out).into_owned()))
}

/// The first value of `key` in `query`, as Go's `Values.Get` after `ParseQuery`.
pub fn first<'a>(query: &'a str, key: &str) -> Option<Cow<'a, str>> {
    pairs(query).find(|(k, _)| k == key).map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each query with what Go 1.24's `url.ParseQuery` makes of it (the pairs it keeps).
    #[test]
    fn pairs_are_those_go_keeps() {
        for (query, go) in [
            (
                "watch=true&limit=5",
                &[("watch", "true"), ("limit", "5")][..],
            ),
            ("watch=false;", &[]),
            ("a=1;b=2&watch=1", &[("watch", "1")]),
            ("watch=%zz&limit=1", &[("limit", "1")]),
            ("watch=%4", &[]),
            ("wat%63h=1", &[("watch", "1")]),
            ("%zz=1&watch", &[("watch", "")]),
            ("&&watch=&", &[("watch", "")]),
            ("a+b=c+d%2B", &[("a b", "c d+")]),
            ("k=a=b", &[("k", "a=b")]),
            ("=v", &[("", "v")]),
        ] {
            let got: Vec<(String, String)> = pairs(query)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect();
            let want: Vec<(String, String)> = go
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            assert_eq!(got, want, "{query}");
        }
    }

    #[test]
    fn unescaping_borrows_when_nothing_is_escaped() {
        assert!(matches!(unescape("plain"), Some(Cow::Borrowed("plain"))));
        assert_eq!(unescape("%41%2f").as_deref(), Some("A/"));
        assert_eq!(unescape("%"), None);
        assert_eq!(
            first("a=1&timeout=30s&timeout=1s", "timeout").as_deref(),
            Some("30s")
        );
    }
}
