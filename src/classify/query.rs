//! The two list options that change a request's RequestInfo: `watch` and a `metadata.name` field selector.

use std::borrow::Cow;

use skewgate_shared::go_query;

/// What a collection GET's query says about its verb and name.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ListOptions<'a> {
    /// The list is a watch.
    pub watch: bool,
    /// The field selector requires `metadata.name` to equal this valid name.
    pub name: Option<Cow<'a, str>>,
}

/// Reads `watch` and `fieldSelector` from a raw query string, as kube-apiserver's requestinfo.go
/// does: the pairs as Go's `url.ParseQuery` keeps them (`go_query`), the first value of each
/// option; `watch` is true unless it is `0` or `false` (any case), and an empty value counts as
/// true. When an option fails to decode (a field or label selector that does not parse, a `limit` or
/// `timeoutSeconds` that is not an integer), the apiserver drops them all but `watch`: no name.
pub(crate) fn list_options(query: Option<&str>) -> ListOptions<'_> {
    let mut options = ListOptions::default();
    let Some(query) = query else {
        return options;
    };
    let (mut watch, mut selector, mut limit, mut timeout) = (None, None, None, None);
    let mut labels = None;
    for (key, value) in go_query::pairs(query) {
        let slot = match &*key {
            "watch" => &mut watch,
            "fieldSelector" => &mut selector,
            "limit" => &mut limit,
            "timeoutSeconds" => &mut timeout,
            "labelSelector" => &mut labels,
            _ => continue,
        };
        slot.get_or_insert(value);
    }
    if let Some(value) = watch {
        options.watch = !(value == "0" || value.eq_ignore_ascii_case("false"));
    }
    let integers_decode = [limit, timeout]
        .iter()
        .flatten()
        .all(|v| go_parse_int(v).is_some());
    let labels_decode = labels.is_none_or(|l| super::labels::parses(&l));
    if let Some(selector) = selector
        && integers_decode
        && labels_decode
    {
        // Borrowed from the query when it needed no decoding, to stay allocation-free.
        options.name = match selector {
            Cow::Borrowed(v) => required_name(v),
            Cow::Owned(v) => required_name(&v).map(|n| Cow::Owned(n.into_owned())),
        };
    }
    options
}

/// Go's `strconv.ParseInt(s, 10, 64)`: an optional sign and decimal digits, within 64 bits.
fn go_parse_int(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// The name a field selector requires with `metadata.name=X` or `metadata.name==X`, as
/// `fields.ParseSelector` and `RequiresExactMatch` find it: every term must parse (an operator, a
/// value with no unescaped `,` or `=` and no unknown escape), the terms are sorted by their text,
/// and the first equality on `metadata.name` counts; the name must be a valid path segment. An
/// unparseable selector yields no name, as in the apiserver (which then answers 400).
pub(crate) fn required_name(selector: &str) -> Option<Cow<'_, str>> {
    let mut found: Option<(&str, Cow<'_, str>)> = None;
    let mut start = 0;
    while start <= selector.len() {
        let end = next_unescaped_comma(selector, start);
        let term = &selector[start..end];
        start = end + 1;
        if term.is_empty() {
            continue;
        }
        let (field, op, raw) = split_term(term)?;
        let value = unescape(raw)?;
        // Sorted by the term's text, `metadata.name=` and the escaped value: the smallest
        // escaped value is the first equality on the field.
        if field == "metadata.name" && op != "!=" && found.as_ref().is_none_or(|(r, _)| raw < *r) {
            found = Some((raw, value));
        }
    }
    found
        .map(|(_, name)| name)
        .filter(|n| valid_path_segment_name(n))
}

/// The index of the first comma at or after `from` that no backslash escapes, or the end.
fn next_unescaped_comma(s: &str, from: usize) -> usize {
    let bytes = s.as_bytes();
    let mut i = from;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b',' => return i,
            _ => i += 1,
        }
    }
    bytes.len()
}

/// Splits one term at its first operator, `!=`, `==` or `=`, as Go's `splitTerm` does (it does not
/// look at escapes: a backslash before an operator leaves a field that ends with one).
fn split_term(term: &str) -> Option<(&str, &str, &str)> {
    let bytes = term.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'!' | b'=' if bytes[i..].starts_with(b"!=") || bytes[i..].starts_with(b"==") => {
                return Some((&term[..i], &term[i..i + 2], &term[i + 2..]));
            }
            b'=' => return Some((&term[..i], "=", &term[i + 1..])),
            _ => i += 1,
        }
    }
    None
}

/// Go's `fields.UnescapeValue`: removes the escapes `\\`, `\,` and `\=`; any other escape, an
/// unescaped `,` or `=`, or a trailing backslash makes the selector invalid.
fn unescape(value: &str) -> Option<Cow<'_, str>> {
    if !value.contains(['\\', ',', '=']) {
        return Some(Cow::Borrowed(value));
    }
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                _ => return None,
            },
            ',' | '=' => return None,
            c => out.push(c),
        }
    }
    Some(Cow::Owned(out))
}

/// The apiserver's `IsValidPathSegmentName`: not `.` or `..`, and no `/` or `%`.
fn valid_path_segment_name(name: &str) -> bool {
    name != "." && name != ".." && !name.contains(['/', '%'])
}

/// Whether each `%` of `path` starts an escape of two hex digits (Go's `unescape` in path mode).
pub(crate) fn escapes_are_whole(path: &str) -> bool {
    let bytes = path.as_bytes();
    let mut i = 0;
    while let Some(at) = bytes[i..].iter().position(|&b| b == b'%') {
        let start = i + at;
        match bytes.get(start + 1..start + 3) {
            Some([a, b]) if a.is_ascii_hexdigit() && b.is_ascii_hexdigit() => i = start + 3,
            _ => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_values() {
        for (q, watch) in [
            ("watch=true", true),
            ("watch=1", true),
            ("watch=", true),
            ("watch", true),
            ("watch=yes", true),
            ("watch=0", false),
            ("watch=false", false),
            ("watch=FALSE", false),
            ("watch=False&watch=true", false),
            ("resourceVersion=1", false),
        ] {
            assert_eq!(list_options(Some(q)).watch, watch, "{q}");
        }
        assert!(!list_options(None).watch);
    }

    #[test]
    fn field_selector_names() {
        for (sel, name) in [
            ("metadata.name=name1", Some("name1")),
            ("metadata.name==name1", Some("name1")),
            ("metadata.name!=name1", None),
            ("foo=bar", None),
            ("metadata.name=name1,foo", None),
            ("spec.nodeName=n1,metadata.name=pod-a", Some("pod-a")),
            ("metadata.name=a\\,b", Some("a,b")),
            ("metadata.name=a\\qb", None),
            ("metadata.name=..", None),
            ("metadata.name=a/b", None),
            ("metadata.name=", Some("")),
            ("metadata.name=a=b", None),
            ("metadata.name=a,metadata.name=b\\=c", Some("a")),
            ("metadata.name=b,metadata.name=a", Some("a")),
            ("metadata.name\\=x=y", None),
            ("", None),
        ] {
            assert_eq!(required_name(sel).as_deref(), name, "{sel}");
        }
    }

    /// Each query of a collection GET with what kube-apiserver's requestinfo.go (Go's
    /// `url.ParseQuery`, the parameter codec, `fields.ParseSelector`) makes of it: a watch or not,
    /// and the name.
    #[test]
    fn list_options_are_what_the_apiserver_reads() {
        for (query, go_watch, go_name) in [
            ("watch=false;", false, None),
            ("watch=%zz", false, None),
            ("watch=%zz&watch=1", true, None),
            ("watch=false%3B", true, None),
            ("watch=true;&watch=0", false, None),
            (
                "fieldSelector=metadata.name=zz,metadata.name=aa",
                false,
                Some("aa"),
            ),
            (
                "fieldSelector=metadata.name%3Dzz%2Cmetadata.name%3Daa",
                false,
                Some("aa"),
            ),
            (
                "fieldSelector=metadata.name=a\\,b,metadata.name=a",
                false,
                Some("a"),
            ),
            ("fieldSelector=metadata.name=a=b", false, None),
            ("fieldSelector=metadata.name=a\\", false, None),
            ("fieldSelector=metadata.name=x&limit=x", false, None),
            (
                "fieldSelector=metadata.name%3Dc1&labelSelector=!!",
                false,
                None,
            ),
            (
                "fieldSelector=metadata.name%3Dc1&labelSelector=!!&watch",
                true,
                None,
            ),
            (
                "fieldSelector=metadata.name%3Dc1&labelSelector=app%20in%20(a)",
                false,
                Some("c1"),
            ),
            ("fieldSelector=metadata.name=x&limit=x&watch=1", true, None),
            ("fieldSelector=metadata.name=x&limit=", false, None),
            (
                "fieldSelector=metadata.name=x&limit=-5&timeoutSeconds=%2B3",
                false,
                Some("x"),
            ),
            // `+` is a space in a query: " 3" is no integer.
            (
                "fieldSelector=metadata.name=x&timeoutSeconds=+3",
                false,
                None,
            ),
            (
                "fieldSelector=metadata.name=x&limit=99999999999999999999",
                false,
                None,
            ),
            ("fieldSelector=metadata.name=x;", false, None),
            (
                "fieldSelector=metadata.name=x&fieldSelector=metadata.name=y",
                false,
                Some("x"),
            ),
            (
                "fieldSelector=metadata.name%zz&fieldSelector=metadata.name=y",
                false,
                Some("y"),
            ),
        ] {
            let opts = list_options(Some(query));
            assert_eq!(
                (opts.watch, opts.name.as_deref()),
                (go_watch, go_name),
                "{query}"
            );
        }
    }

    #[test]
    fn query_escapes_are_decoded_before_the_selector() {
        let opts = list_options(Some("fieldSelector=metadata.name%3Dweb-0&watch=true"));
        assert!(opts.watch);
        assert_eq!(opts.name.as_deref(), Some("web-0"));
    }
}
