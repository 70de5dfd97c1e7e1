//! Tests of `head.rs`.

use super::*;

#[test]
fn a_requests_length_is_known_from_its_content_length_or_its_chunked_coding() {
    let head = "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n";
    assert_eq!(
        request_len(format!("{head}{{}}GET /b").as_bytes()),
        Some(RequestLen::Known(head.len() + 2))
    );
    let bare = "GET /a HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_eq!(
        request_len(bare.as_bytes()),
        Some(RequestLen::Known(bare.len()))
    );
    let old = "POST /a HTTP/1.0\r\nHost: x\r\nContent-Length: 2\r\n\r\n";
    assert_eq!(
        request_len(old.as_bytes()),
        Some(RequestLen::Known(old.len() + 2))
    );
    let chunked = "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n";
    assert_eq!(
        request_len(format!("{chunked}0\r\n\r\n").as_bytes()),
        Some(RequestLen::Chunked(chunked.len()))
    );
    for unknown in [
        "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n",
        "POST /a HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
        "GET /a HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        "POST /a HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n",
        "POST /a HTTP/1.1\r\nContent-Length: +2\r\n\r\n",
        "POST /a HTTP/1.1\r\nHost: x\r\n",
    ] {
        assert_eq!(request_len(unknown.as_bytes()), None, "{unknown}");
    }
}

fn parsed(raw: &[u8]) -> (Option<Head>, Parsed, BytesMut) {
    let mut buf = BytesMut::from(raw);
    let mut slot = None;
    let p = parse(&mut buf, &mut slot);
    (slot, p, buf)
}

#[test]
fn a_get_is_taken_with_its_fields_and_what_follows_it_stays() {
    let raw =
        b"GET /api/v1/pods?watch=1 HTTP/1.1\r\nHost: x\r\nAccept: a\r\nAccept: b\r\n\r\nGET /";
    let (head, p, rest) = parsed(raw);
    assert!(matches!(p, Parsed::Head));
    let head = head.expect("taken");
    assert_eq!(head.request.method(), Method::GET);
    assert_eq!(head.request.uri(), "/api/v1/pods?watch=1");
    assert_eq!(head.request.headers().get_all("accept").iter().count(), 2);
    assert!(!head.close);
    assert!(head.request.body().is_end_stream());
    assert_eq!(&rest[..], b"GET /");
}

#[test]
fn connection_close_is_noted_and_a_partial_head_is_kept_whole() {
    let (head, _, _) = parsed(b"DELETE /x HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n");
    assert!(head.is_some_and(|h| h.close));
    let (_, p, rest) = parsed(b"GET /x HTTP/1.1\r\nHost: ");
    assert!(matches!(p, Parsed::Partial));
    assert_eq!(&rest[..], b"GET /x HTTP/1.1\r\nHost: ");
}

#[test]
fn a_hash_in_the_target_stays_in_the_path_as_go_reads_it() {
    let raw = b"DELETE /api/v1/namespaces/b/configmaps/keep#not-this-one HTTP/1.1\r\n\r\n";
    let (head, _, _) = parsed(raw);
    let head = head.expect("taken");
    assert_eq!(
        head.request.uri().path(),
        "/api/v1/namespaces/b/configmaps/keep%23not-this-one"
    );
    let put = Bytes::from_static(b"PUT /a#b?c=d#e HTTP/1.1\r\nHost: x#y\r\n\r\n");
    assert_eq!(
        &escape_hash_in_request_line(put)[..],
        b"PUT /a%23b?c=d%23e HTTP/1.1\r\nHost: x#y\r\n\r\n"
    );
}

#[test]
fn a_request_line_of_another_protocol_closes_the_connection() {
    // h2spec 3.5/2's invalid preface; an HTTP/2 version on an HTTP/1 line.
    for raw in [
        &b"INVALID CONNECTION PREFACE\r\n\r\n"[..],
        b"GET / HTTP/2.0\r\n\r\n",
        b"GET / SPDY/3\r\n",
    ] {
        let (head, p, _) = parsed(raw);
        assert!(
            matches!(p, Parsed::NotHttp1),
            "{}",
            String::from_utf8_lossy(raw)
        );
        assert!(head.is_none());
    }
}

#[test]
fn bodies_upgrades_and_what_hyper_answers_are_left_to_hyper_untouched() {
    for raw in [
        &b"PUT /x HTTP/1.1\r\nContent-Length: 2\r\n\r\nok"[..],
        b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"GET /x HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        b"POST /x HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n",
        b"GET /x HTTP/1.0\r\n\r\n",
        b"HEAD /x HTTP/1.1\r\n\r\n",
        b"GET http://a/x HTTP/1.1\r\n\r\n",
    ] {
        let (_, p, rest) = parsed(raw);
        assert!(
            matches!(p, Parsed::Hyper),
            "{}",
            String::from_utf8_lossy(raw)
        );
        assert_eq!(&rest[..], raw, "kept for hyper");
    }
    // Malformed: hyper answers 400 (a client on probation waits first).
    for raw in [
        &b"GET /x HTTP/1.1\r\nBad Header: x\r\n\r\n"[..],
        b"G@T /x HTTP/1.1\r\n\r\n",
    ] {
        let (_, p, rest) = parsed(raw);
        assert!(
            matches!(p, Parsed::Malformed),
            "{}",
            String::from_utf8_lossy(raw)
        );
        assert_eq!(&rest[..], raw, "kept for hyper");
    }
    let (_, p, _) = parsed(b"GET /x HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    assert!(matches!(p, Parsed::Head));
}

/// A head as clients send them, or nearly: a method, a path, fields (some that send the request
/// to hyper), a length, and what follows.
fn near_heads() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    use proptest::prelude::*;
    let field = prop_oneof![
        ("[A-Za-z-]{1,12}", "[ -~]{0,20}").prop_map(|(k, v)| format!("{k}: {v}\r\n")),
        Just("Content-Length: 0\r\n".to_owned()),
        Just("Content-Length: 3\r\n".to_owned()),
        Just("Transfer-Encoding: chunked\r\n".to_owned()),
        Just("Connection: close\r\n".to_owned()),
    ];
    (
        prop_oneof![
            Just("GET"),
            Just("DELETE"),
            Just("PUT"),
            Just("HEAD"),
            Just("G T")
        ],
        "/[a-z0-9/?=&%]{0,40}",
        prop_oneof![Just("HTTP/1.1"), Just("HTTP/1.0"), Just("HTTP/2")],
        proptest::collection::vec(field, 0..5),
        proptest::collection::vec(any::<u8>(), 0..20),
        0usize..8,
    )
        .prop_map(|(method, path, version, fields, tail, cut)| {
            let mut raw =
                format!("{method} {path} {version}\r\n{}\r\n", fields.concat()).into_bytes();
            raw.extend_from_slice(&tail);
            raw.truncate(raw.len() - cut.min(raw.len()));
            raw
        })
}

proptest::proptest! {
    #[test]
    fn bytes_are_taken_as_a_head_kept_or_left_to_hyper_untouched(
        raw in proptest::prop_oneof![near_heads(), proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)]
    ) {
        let mut buf = BytesMut::from(&raw[..]);
        let mut slot = None;
        match parse(&mut buf, &mut slot) {
            Parsed::Head => {
                let head = slot.expect("a head in the slot");
                let len = raw.len() - buf.len();
                // What stays is what followed the head, and the head ends its lines.
                proptest::prop_assert_eq!(&raw[len..], &buf[..]);
                proptest::prop_assert!(raw[..len].ends_with(b"\r\n\r\n") || raw[..len].ends_with(b"\n\n"));
                proptest::prop_assert!(head.request.body().is_end_stream());
                proptest::prop_assert!(head.request.method() != Method::HEAD);
                let path = head.request.uri().path_and_query().map(|p| p.as_str().to_owned());
                // As it came, or with its `#` escaped as Go reads it.
                let escaped = escape_hash(&raw);
                let found = |p: &str, bytes: &[u8]| bytes.windows(p.len()).any(|w| w == p.as_bytes());
                proptest::prop_assert!(path.is_some_and(|p| found(&p, &raw) || found(&p, &escaped)));
            }
            Parsed::Partial | Parsed::Hyper | Parsed::Malformed => {
                proptest::prop_assert!(slot.is_none());
                proptest::prop_assert_eq!(&raw[..], &buf[..]);
            }
            Parsed::NotHttp1 => {
                // Only a request line whose version is not HTTP/1.x closes the connection.
                proptest::prop_assert!(slot.is_none());
                let mut fields = [httparse::EMPTY_HEADER; 8];
                let version = httparse::Request::new(&mut fields).parse(&raw);
                proptest::prop_assert!(matches!(version, Err(httparse::Error::Version)));
            }
        }
    }
}
