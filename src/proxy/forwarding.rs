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
pub(super) fn credential_of(identity: Option<&Identity>, headers: &HeaderMap) -> Credential {
    if identity.is_some() || headers.contains_key(header::AUTHORIZATION) {
        Credential::FrontProxy
    } else {
        Credential::Anonymous
    }
}

/// The request's URI as the endpoint is asked for it.
pub(super) fn upstream_uri(uri: &Uri, endpoint: &EndpointPool) -> Result<Uri, UpstreamError> {
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

pub(super) fn strip_hop_by_hop(headers: &mut HeaderMap) {
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

pub(super) fn prepare_headers(headers: &mut HeaderMap, remote: SocketAddr) {
    strip_hop_by_hop(headers);
    // The upstream request carries its authority in the URI.
    headers.remove(header::HOST);
    // X-Forwarded-For: the existing list, then this client; formatted on the stack.
    let existing_len = headers.get(&X_FORWARDED_FOR).map_or(0, |v| v.len());
    if existing_len > 400 {
        let value = format!(
            "{}, {}",
            String::from_utf8_lossy(
                headers
                    .get(&X_FORWARDED_FOR)
                    .map_or(&[][..], |v| v.as_bytes())
            ),
            remote.ip()
        );
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert(X_FORWARDED_FOR.clone(), v);
        }
        return;
    }
    let mut buf = [0u8; 512];
    let mut w = std::io::Cursor::new(&mut buf[..]);
    if let Some(existing) = headers.get(&X_FORWARDED_FOR) {
        let _ = std::io::Write::write_all(&mut w, existing.as_bytes());
        let _ = std::io::Write::write_all(&mut w, b", ");
    }
    if std::io::Write::write_fmt(&mut w, format_args!("{}", remote.ip())).is_ok() {
        let n = w.position() as usize;
        if let Ok(v) = HeaderValue::from_bytes(&buf[..n]) {
            headers.insert(X_FORWARDED_FOR.clone(), v);
        }
    }
}
