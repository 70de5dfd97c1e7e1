//! What Go's net/http refuses in an HTTP/1.1 head before kube-apiserver's handlers see it, refused
//! the same way here, so that skewgate sends on nothing the apiserver would not have taken: no
//! `Host` or more than one (400), more than one `Transfer-Encoding` field or a transfer coding other
//! than `chunked` alone (501: `chunked, chunked` and `gzip, chunked`, which hyper takes), a path
//! with a malformed escape (400: `ParseRequestURI`'s "invalid URL escape"; skewgate answered 502
//! when the apiserver's connection refused it). Each answer as kube-apiserver v1.35.6 gave it to
//! the same bytes (`../shared/envtest` pair, 2026-11-26).

use http::request::Parts;
use http::{StatusCode, Version, header};

use super::status::ProxyError;
use crate::classify::escapes_are_whole;

/// The head's framing as Go's server checks it (`readRequest`, `readTransfer`).
pub(crate) fn check(parts: &Parts) -> Result<(), ProxyError> {
    if parts.version != Version::HTTP_11 {
        return Ok(());
    }
    let refuse = |code, why| Err(ProxyError::MalformedHead { code, why });
    if !escapes_are_whole(parts.uri.path()) {
        return refuse(StatusCode::BAD_REQUEST, "invalid URL escape in the path");
    }
    let mut hosts = parts.headers.get_all(header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (None, _) if parts.method != http::Method::CONNECT => {
            return refuse(StatusCode::BAD_REQUEST, "missing required Host header");
        }
        (Some(_), Some(_)) => return refuse(StatusCode::BAD_REQUEST, "too many Host headers"),
        _ => {}
    }
    let mut codings = parts.headers.get_all(header::TRANSFER_ENCODING).iter();
    match (codings.next(), codings.next()) {
        (None, _) => Ok(()),
        (Some(_), Some(_)) => refuse(StatusCode::NOT_IMPLEMENTED, "too many transfer encodings"),
        (Some(v), None) if v.as_bytes().eq_ignore_ascii_case(b"chunked") => Ok(()),
        (Some(_), None) => refuse(StatusCode::NOT_IMPLEMENTED, "unsupported transfer encoding"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each head with kube-apiserver's (Go net/http's) answer to it (`None`: served).
    #[test]
    fn heads_are_refused_as_go_refuses_them() {
        for (fields, go) in [
            (&[("host", "a")][..], None),
            (&[], Some(400)),
            (&[("host", "a"), ("host", "a")], Some(400)),
            (&[("host", "a"), ("transfer-encoding", "chunked")], None),
            (&[("host", "a"), ("transfer-encoding", "Chunked")], None),
            (
                &[("host", "a"), ("transfer-encoding", "chunked, chunked")],
                Some(501),
            ),
            (
                &[("host", "a"), ("transfer-encoding", "gzip, chunked")],
                Some(501),
            ),
            (&[("host", "a"), ("transfer-encoding", "gzip")], Some(501)),
            (
                &[
                    ("host", "a"),
                    ("transfer-encoding", "chunked"),
                    ("transfer-encoding", "chunked"),
                ],
                Some(501),
            ),
        ] {
            let mut req = http::Request::builder().uri("/api/v1/pods");
            for (name, value) in fields {
                req = req.header(*name, *value);
            }
            let (parts, ()) = req.body(()).expect("request").into_parts();
            let got = match check(&parts) {
                Ok(()) => None,
                Err(ProxyError::MalformedHead { code, .. }) => Some(code.as_u16()),
                Err(_) => Some(0),
            };
            assert_eq!(got, go, "{fields:?}");
        }
        for (path, whole) in [
            ("/a%2Fb", true),
            ("/a%zz", false),
            ("/a%", false),
            ("/a%4", false),
        ] {
            assert_eq!(escapes_are_whole(path), whole, "{path}");
        }
        // HTTP/2 requests carry `:authority`, not `Host`.
        let (parts, ()) = http::Request::builder()
            .version(Version::HTTP_2)
            .body(())
            .expect("request")
            .into_parts();
        assert!(check(&parts).is_ok());
    }
}
