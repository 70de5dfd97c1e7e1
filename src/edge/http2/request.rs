//! A client's request made from its decoded header block, checked as h2's server checks it
//! (`server::Peer::convert_poll_message` and `Recv::recv_headers`): a request that fails a check is
//! malformed, and its stream is reset with PROTOCOL_ERROR (RFC 9113, 8.1.1).
//!
//! What h2's codec checked already, as it decoded the block: pseudo-headers before regular fields
//! and none unknown or repeated, no connection-specific field, `te` only `trailers`, names in lower
//! case.

use h2::frame::Pseudo;
use http::uri::{Authority, Parts, PathAndQuery, Scheme};
use http::{HeaderMap, Method, Request, Uri, Version, header};

/// Why a request is malformed.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Malformed(pub(super) &'static str);

/// The request, and the length its `content-length` announces.
pub(super) fn make(
    pseudo: Pseudo,
    fields: HeaderMap,
    end_stream: bool,
) -> Result<(Request<()>, Option<u64>), Malformed> {
    let mut request = Request::new(());
    *request.version_mut() = Version::HTTP_2;
    let Some(method) = pseudo.method else {
        return Err(Malformed("missing :method"));
    };
    let is_connect = method == Method::CONNECT;
    *request.method_mut() = method;
    // Extended CONNECT is not enabled (skewgate's upgrades go over HTTP/1.1).
    if pseudo.protocol.is_some() {
        return Err(Malformed(":protocol without extended CONNECT"));
    }
    if pseudo.status.is_some() {
        return Err(Malformed(":status in a request"));
    }
    let mut parts = Parts::default();
    if let Some(authority) = pseudo.authority {
        let authority = Authority::from_maybe_shared(authority.into_inner())
            .map_err(|_| Malformed("malformed :authority"))?;
        parts.authority = Some(authority);
    }
    match pseudo.scheme {
        Some(_) if is_connect => return Err(Malformed(":scheme in CONNECT")),
        Some(scheme) => {
            let scheme: Scheme = (*scheme)
                .parse()
                .map_err(|_| Malformed("malformed :scheme"))?;
            // A URI has no form with a scheme and a path alone: the scheme is kept only beside an
            // authority, as h2 keeps it.
            if parts.authority.is_some() {
                parts.scheme = Some(scheme);
            }
        }
        None if !is_connect => return Err(Malformed("missing :scheme")),
        None => {}
    }
    match pseudo.path {
        // RFC 9113, 8.3.1 (h2 lets it through, as a request for an empty target).
        None if !is_connect => return Err(Malformed("missing :path")),
        Some(_) if is_connect => return Err(Malformed(":path in CONNECT")),
        Some(path) if path.is_empty() => return Err(Malformed("empty :path")),
        // A fragment is no part of a request's target (RFC 9113, 8.3.1); `http::Uri` would cut the
        // path there, where the apiserver reads it in the name.
        Some(path) if path.contains('#') => return Err(Malformed("'#' in :path")),
        // Go's HTTP/2 server resets such a stream (PROTOCOL_ERROR, "bad_path").
        Some(path) if !crate::classify::escapes_are_whole(path.split('?').next().unwrap_or("")) => {
            return Err(Malformed("invalid URL escape in :path"));
        }
        Some(path) => {
            let path = PathAndQuery::from_maybe_shared(path.into_inner())
                .map_err(|_| Malformed("malformed :path"))?;
            parts.path_and_query = Some(path);
        }
        None => {}
    }
    *request.uri_mut() = Uri::from_parts(parts).map_err(|_| Malformed("no request target"))?;
    let mut fields = fields;
    let content_length = content_length(&mut fields)?;
    // RFC 9113, 8.2.1: a field value does not start or end with whitespace (h2's codec lets it
    // through; the apiserver's Go server would not take it).
    if fields
        .values()
        .any(|v| matches!(v.as_bytes(), [b' ' | b'\t', ..] | [.., b' ' | b'\t']))
    {
        return Err(Malformed(
            "a field value with leading or trailing whitespace",
        ));
    }
    if end_stream && content_length.is_some_and(|len| len > 0) {
        return Err(Malformed("END_STREAM on a head announcing a body"));
    }
    *request.headers_mut() = fields;
    Ok((request, content_length))
}

/// The `content-length` of a request: every value a number, all the same; repeated, it is sent on
/// once (RFC 9110, 8.6).
fn content_length(fields: &mut HeaderMap) -> Result<Option<u64>, Malformed> {
    let mut found = None;
    let mut count = 0;
    for value in fields.get_all(header::CONTENT_LENGTH) {
        let len = h2::frame::parse_u64(value.as_bytes())
            .map_err(|_| Malformed("malformed content-length"))?;
        if found.is_some_and(|first| first != len) {
            return Err(Malformed("conflicting content-length"));
        }
        found = Some(len);
        count += 1;
    }
    if let Some(len) = found
        && count > 1
    {
        fields.insert(header::CONTENT_LENGTH, http::HeaderValue::from(len));
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use h2::BytesStr;

    fn text(s: &'static str) -> Option<BytesStr> {
        BytesStr::try_from(Bytes::from_static(s.as_bytes())).ok()
    }

    fn get(path: &'static str) -> Pseudo {
        let mut pseudo = Pseudo::response(http::StatusCode::OK);
        pseudo.status = None;
        pseudo.method = Some(Method::GET);
        pseudo.scheme = text("https");
        pseudo.authority = text("kubernetes.default");
        pseudo.path = text(path);
        pseudo
    }

    #[test]
    fn a_well_formed_request_is_made_with_its_target_and_length() {
        let mut fields = HeaderMap::new();
        fields.insert(header::CONTENT_LENGTH, "12".parse().unwrap());
        let mut pseudo = get("/api/v1/pods?limit=5");
        pseudo.method = Some(Method::POST);
        let (req, len) = make(pseudo, fields, false).unwrap();
        assert_eq!(req.method(), Method::POST);
        assert_eq!(
            req.uri().to_string(),
            "https://kubernetes.default/api/v1/pods?limit=5"
        );
        assert_eq!(req.version(), Version::HTTP_2);
        assert_eq!(len, Some(12));
    }

    #[test]
    fn requests_h2_would_refuse_are_malformed() {
        let refused =
            |pseudo: Pseudo, fields: HeaderMap, end: bool| make(pseudo, fields, end).err();
        let mut no_method = get("/");
        no_method.method = None;
        assert_eq!(
            refused(no_method, HeaderMap::new(), true),
            Some(Malformed("missing :method"))
        );
        let mut no_scheme = get("/");
        no_scheme.scheme = None;
        assert_eq!(
            refused(no_scheme, HeaderMap::new(), true),
            Some(Malformed("missing :scheme"))
        );
        assert_eq!(
            refused(get(""), HeaderMap::new(), true),
            Some(Malformed("empty :path"))
        );
        let mut status = get("/");
        status.status = Some(http::StatusCode::OK);
        assert!(refused(status, HeaderMap::new(), true).is_some());
        let mut lengths = HeaderMap::new();
        lengths.append(header::CONTENT_LENGTH, "3".parse().unwrap());
        lengths.append(header::CONTENT_LENGTH, "4".parse().unwrap());
        assert_eq!(
            refused(get("/"), lengths, false),
            Some(Malformed("conflicting content-length"))
        );
        let mut bad = HeaderMap::new();
        bad.insert(header::CONTENT_LENGTH, "-1".parse().unwrap());
        assert!(refused(get("/"), bad, false).is_some());
        let mut body = HeaderMap::new();
        body.insert(header::CONTENT_LENGTH, "5".parse().unwrap());
        assert!(refused(get("/"), body, true).is_some());
        let mut connect = get("/");
        connect.method = Some(Method::CONNECT);
        assert_eq!(
            refused(connect, HeaderMap::new(), true),
            Some(Malformed(":scheme in CONNECT"))
        );
        assert_eq!(
            refused(get("/a#b"), HeaderMap::new(), true),
            Some(Malformed("'#' in :path"))
        );
        for value in [" x", "x ", "\tx", "x\t"] {
            let mut spaced = HeaderMap::new();
            spaced.insert(header::ACCEPT, value.parse().unwrap());
            assert!(refused(get("/"), spaced, true).is_some(), "{value:?}");
        }
    }

    #[test]
    fn a_repeated_content_length_is_sent_on_once() {
        let mut lengths = HeaderMap::new();
        lengths.append(header::CONTENT_LENGTH, "3".parse().unwrap());
        lengths.append(header::CONTENT_LENGTH, "3".parse().unwrap());
        let mut post = get("/");
        post.method = Some(Method::POST);
        let (req, len) = make(post, lengths, false).unwrap();
        assert_eq!(len, Some(3));
        assert_eq!(
            req.headers().get_all(header::CONTENT_LENGTH).iter().count(),
            1
        );
    }
}
