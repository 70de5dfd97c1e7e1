//! The two list options that change a request's RequestInfo: `watch` and a `metadata.name` field selector.

use std::borrow::Cow;

/// What a collection GET's query says about its verb and name.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ListOptions<'a> {
    /// The list is a watch.
    pub watch: bool,
    /// The field selector requires `metadata.name` to equal this valid name.
    pub name: Option<Cow<'a, str>>,
}

/// Reads `watch` and `fieldSelector` from a raw query string, as the apiserver's parameter codec does:
/// the first value of each counts; `watch` is true unless it is `0` or `false` (any case), and an
/// empty value counts as true.
pub(crate) fn list_options(query: Option<&str>) -> ListOptions<'_> {
    let mut options = ListOptions::default();
    let Some(query) = query else {
        return options;
    };
    let (mut seen_watch, mut seen_selector) = (false, false);
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        match &*key {
            "watch" if !seen_watch => {
                seen_watch = true;
                options.watch = !(value == "0" || value.eq_ignore_ascii_case("false"));
            }
            "fieldSelector" if !seen_selector => {
                seen_selector = true;
                // Borrow from the query when it needed no decoding, to stay allocation-free.
                options.name = match value {
                    Cow::Borrowed(v) => required_name(v),
                    Cow::Owned(v) => required_name(&v).map(|n| Cow::Owned(n.into_owned())),
                };
            }
            _ => {}
        }
        if seen_watch && seen_selector {
            break;
        }
    }
    options
}

/// The name a field selector requires with `metadata.name=X` or `metadata.name==X`, if the selector
/// parses and the name is a valid path segment. An unparseable selector yields no name, as in the
/// apiserver (which then answers 400).
pub(crate) fn required_name(selector: &str) -> Option<Cow<'_, str>> {
    let mut found = None;
    let mut start = 0;
    while start <= selector.len() {
        let end = next_unescaped_comma(selector, start);
        let term = &selector[start..end];
        start = end + 1;
        if term.is_empty() {
            continue;
        }
        let (field, op, value) = split_term(term)?;
        let value = unescape(value)?;
        if field == "metadata.name" && op != "!=" && found.is_none() {
            found = Some(value);
        }
    }
    found.filter(|n| valid_path_segment_name(n))
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

/// Splits one term at its first unescaped operator: `!=`, `==` or `=`. Only ASCII positions are cut,
/// so a multi-byte character after a backslash cannot split a character.
fn split_term(term: &str) -> Option<(&str, &str, &str)> {
    let bytes = term.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'!' | b'=' if bytes[i..].starts_with(b"!=") || bytes[i..].starts_with(b"==") => {
                return Some((&term[..i], &term[i..i + 2], &term[i + 2..]));
            }
            b'=' => return Some((&term[..i], "=", &term[i + 1..])),
            _ => i += 1,
        }
    }
    None
}

/// Removes the selector escapes `\\`, `\,` and `\=`; any other escape makes the selector invalid.
fn unescape(value: &str) -> Option<Cow<'_, str>> {
    if !value.contains('\\') {
        return Some(Cow::Borrowed(value));
    }
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                _ => return None,
            }
        } else {
            out.push(c);
        }
    }
    Some(Cow::Owned(out))
}

/// The apiserver's `IsValidPathSegmentName`: not `.` or `..`, and no `/` or `%`.
fn valid_path_segment_name(name: &str) -> bool {
    name != "." && name != ".." && !name.contains(['/', '%'])
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
            ("", None),
        ] {
            assert_eq!(required_name(sel).as_deref(), name, "{sel}");
        }
    }

    #[test]
    fn query_escapes_are_decoded_before_the_selector() {
        let opts = list_options(Some("fieldSelector=metadata.name%3Dweb-0&watch=true"));
        assert!(opts.watch);
        assert_eq!(opts.name.as_deref(), Some("web-0"));
    }
}
