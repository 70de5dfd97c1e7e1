//! The request header list's size as HTTP/2 counts it, to hold it against the limit the apiserver
//! advertises (`frames::Link::header_list_limit`).
//!
//! h2's codec does not enforce the limit the peer advertises for the header lists it accepts
//! (`SETTINGS_MAX_HEADER_LIST_SIZE`). A request whose header list is larger makes the apiserver
//! fail the stream or the whole connection, and with it every other client's stream on it; so
//! skewgate answers such a request 431 itself, before sending it.

/// The size of a header list as HTTP/2 counts it (RFC 9113 6.5.2): each field's name and value
/// plus 32, pseudo-headers included.
pub(super) fn header_list_size(head: &http::request::Parts) -> usize {
    let fields: usize = head
        .headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 32)
        .sum();
    let path = head.uri.path_and_query().map_or(1, |p| p.as_str().len());
    let authority = head.uri.authority().map_or(0, |a| a.as_str().len());
    // :method, :scheme (https, the longer), :path and :authority: names, values and 32 each.
    let names = ":method".len() + ":scheme".len() + ":path".len() + ":authority".len();
    fields + names + head.method.as_str().len() + "https".len() + path + authority + 4 * 32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_list_is_measured_as_http2_counts_it() {
        let head = http::Request::get("https://a:1/p?q")
            .header("x-remote-user", "alice")
            .body(())
            .expect("request");
        // RFC 9113 6.5.2: name + value + 32 for every field, pseudo-headers included.
        let expected = (13 + 5 + 32) // x-remote-user: alice
            + (7 + 3 + 32) // :method GET
            + (7 + 5 + 32) // :scheme https
            + (5 + 4 + 32) // :path /p?q
            + (10 + 3 + 32); // :authority a:1
        assert_eq!(header_list_size(&head.into_parts().0), expected);
    }
}
