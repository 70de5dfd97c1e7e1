//! The request as it goes upstream: its URI on the endpoint, its headers (hop-by-hop removed, the
//! client added to X-Forwarded-For) and the credential of the connection it is sent on.

use std::net::SocketAddr;

use http::Uri;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::{PathAndQuery, Scheme};

use crate::identity::Identity;
use crate::upstream::{Credential, EndpointPool, UpstreamError};

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// Headers that describe one connection, not the request: never forwarded (RFC 9110 7.6.1).
const HOP_BY_HOP: [HeaderName; 6] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
];

/// A client with neither a verified certificate nor a token reaches the apiserver with no
/// credentials at all, so that the apiserver's own anonymous policy decides about it.
pub(crate) fn credential_of(identity: Option<&Identity>, headers: &HeaderMap) -> Credential {
    if identity.is_some() || headers.contains_key(header::AUTHORIZATION) {
        Credential::FrontProxy
    } else {
        Credential::Anonymous
    }
}

/// The request's URI as the endpoint is asked for it.
pub(crate) fn upstream_uri(uri: &Uri, endpoint: &EndpointPool) -> Result<Uri, UpstreamError> {
    let path = uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    let mut parts = http::uri::Parts::default();
    parts.scheme = Some(if endpoint.endpoint.tls {
        Scheme::HTTPS
    } else {
        Scheme::HTTP
    });
    parts.authority = Some(endpoint.authority.clone());
    parts.path_and_query = Some(path);
    Uri::from_parts(parts)
        .map_err(|e| UpstreamError::Protocol(format!("cannot build the upstream URI: {e}").into()))
}

pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most requests and every HTTP/2 response carry none: one pass over the names (comparisons of
    // known names, no hashing) finds out, and only then are they looked up and removed.
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    // Headers named in Connection are hop-by-hop too.
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
    // `te: trailers` is the one TE value HTTP/2 allows; anything else goes.
    if headers.get(header::TE).is_some_and(|v| v != "trailers") {
        headers.remove(header::TE);
    }
}

/// Whether `name` is hop-by-hop, or TE (which may be).
fn is_hop_by_hop(name: &HeaderName) -> bool {
    *name == header::TE || HOP_BY_HOP.contains(name)
}

/// The request's headers as they go upstream: hop-by-hop ones and Host removed, and the client's
/// address (`forwarded_for`, formatted once per connection) added to X-Forwarded-For.
pub(crate) fn prepare_headers(
    headers: &mut HeaderMap,
    remote: SocketAddr,
    forwarded_for: &HeaderValue,
) {
    strip_hop_by_hop(headers);
    // The upstream request carries its authority in the URI.
    headers.remove(header::HOST);
    match headers.entry(&X_FORWARDED_FOR) {
        header::Entry::Vacant(e) => {
            e.insert(forwarded_for.clone());
        }
        header::Entry::Occupied(mut e) => {
            // The existing list (every value the client sent), then this client.
            let mut list = String::new();
            for v in e.iter() {
                list.push_str(&String::from_utf8_lossy(v.as_bytes()));
                list.push_str(", ");
            }
            list.push_str(&remote.ip().to_string());
            if let Ok(v) = HeaderValue::from_str(&list) {
                e.insert(v);
            }
        }
    }
}

/// A client's address as an X-Forwarded-For value.
pub(crate) fn forwarded_for(remote: SocketAddr) -> HeaderValue {
    HeaderValue::from_str(&remote.ip().to_string())
        .unwrap_or_else(|_| HeaderValue::from_static("unknown"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        h
    }

    fn names(h: &HeaderMap) -> Vec<&str> {
        let mut n: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        n.sort_unstable();
        n
    }

    #[test]
    fn hop_by_hop_headers_and_those_connection_names_never_pass() {
        let mut h = map(&[
            ("connection", "close, x-private"),
            ("x-private", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("upgrade", "h2c"),
            ("transfer-encoding", "chunked"),
            ("proxy-authorization", "Basic eA=="),
            ("te", "gzip"),
            ("accept", "application/json"),
            ("user-agent", "kubectl/v1.30.0"),
        ]);
        strip_hop_by_hop(&mut h);
        assert_eq!(names(&h), ["accept", "user-agent"]);
        // `te: trailers` alone is end-to-end.
        let mut h = map(&[("te", "trailers"), ("accept", "*/*")]);
        strip_hop_by_hop(&mut h);
        assert_eq!(names(&h), ["accept", "te"]);
    }

    #[test]
    fn the_client_is_added_to_x_forwarded_for_and_host_goes() {
        let remote: SocketAddr = "10.1.2.3:5555".parse().unwrap();
        let value = forwarded_for(remote);
        let mut h = map(&[("host", "k8s"), ("accept", "*/*")]);
        prepare_headers(&mut h, remote, &value);
        assert_eq!(names(&h), ["accept", "x-forwarded-for"]);
        assert_eq!(h[&X_FORWARDED_FOR], "10.1.2.3");
        let mut h = map(&[
            ("x-forwarded-for", "192.0.2.1"),
            ("x-forwarded-for", "192.0.2.2"),
        ]);
        prepare_headers(&mut h, remote, &value);
        let all: Vec<_> = h.get_all(&X_FORWARDED_FOR).iter().collect();
        assert_eq!(all, ["192.0.2.1, 192.0.2.2, 10.1.2.3"]);
    }
}
