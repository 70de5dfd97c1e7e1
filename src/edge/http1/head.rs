//! A request head read by the fast path: parsed with httparse, taken when it is a request the fast
//! path serves, left to hyper when it is not.

use std::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, EXPECT, TRANSFER_ENCODING, UPGRADE};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Uri, Version};

use crate::proxy::entry::Incoming;

/// Header fields a head may have, as hyper's server allows (`h1_max_headers`).
const MAX_HEADERS: usize = 100;

/// What the bytes read so far hold.
pub(super) enum Parsed {
    /// A whole head the fast path serves (put in the caller's slot).
    Head,
    /// The beginning of a head.
    Partial,
    /// Something hyper is to answer: a body, an upgrade, HTTP/1.0, `HEAD`, `Expect`, a malformed
    /// head (hyper's 400: `Malformed` says which).
    Hyper,
    /// A head that does not parse: hyper answers it 400.
    Malformed,
    /// A request line whose version is not HTTP/1.x (an HTTP/2 client's broken preface, or not
    /// HTTP at all): the connection is closed without an answer, as RFC 9113 (3.4) closes on an
    /// invalid preface; an HTTP/1.1 answer would be garbage to such a peer.
    NotHttp1,
}

/// A request without a body, and what its connection does after its response.
pub(super) struct Head {
    pub request: Request<Incoming>,
    /// The client asked for the connection to close after the response.
    pub close: bool,
    /// The bytes the head was read from, given back to the worker's buffers once the request no
    /// longer refers to them.
    pub bytes: Bytes,
}

/// Parses the head at the start of `buf`; a whole head is taken out of `buf` (bytes after it, a
/// pipelined request, stay) into `slot`.
pub(super) fn parse(buf: &mut BytesMut, slot: &mut Option<Head>) -> Parsed {
    let all = std::mem::take(buf).freeze();
    match parse_frozen(&all, slot) {
        Ok(Some(len)) => {
            if len < all.len() {
                *buf = BytesMut::from(&all[len..]);
            }
            if let Some(head) = slot {
                head.bytes = all;
            }
            Parsed::Head
        }
        Ok(None) => {
            *buf = all
                .try_into_mut()
                .unwrap_or_else(|b| BytesMut::from(&b[..]));
            Parsed::Partial
        }
        Err(Unsupported::NotHttp1) => Parsed::NotHttp1,
        Err(kind @ (Unsupported::Hyper | Unsupported::Malformed)) => {
            *buf = all
                .try_into_mut()
                .unwrap_or_else(|b| BytesMut::from(&b[..]));
            if matches!(kind, Unsupported::Malformed) {
                Parsed::Malformed
            } else {
                Parsed::Hyper
            }
        }
    }
}

/// `target` with each `#` written `%23`: the path Go's `ParseRequestURI` reads from it.
pub(super) fn escape_hash(target: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(target.len() + 4);
    for &b in target {
        if b == b'#' {
            out.extend_from_slice(b"%23");
        } else {
            out.push(b);
        }
    }
    out
}

/// The bytes of a head handed to hyper, with each `#` of its request line (when it is whole)
/// written `%23`, so that hyper's `http::Uri` does not cut the path there (`escape_hash`).
pub(super) fn escape_hash_in_request_line(bytes: Bytes) -> Bytes {
    let Some(end) = bytes.iter().position(|&b| b == b'\n') else {
        return bytes;
    };
    if !bytes[..end].contains(&b'#') {
        return bytes;
    }
    let mut out = escape_hash(&bytes[..end]);
    out.extend_from_slice(&bytes[end..]);
    Bytes::from(out)
}

/// How far the request at the start of `bytes` reaches, when its framing says it without reading
/// on: HTTP/1.1 or 1.0, no upgrade, a body of one `Content-Length` (or none), or an HTTP/1.1 body
/// of `Transfer-Encoding: chunked` alone (its end found as it passes, `chunked.rs`). hyper is lent
/// the stream for that request only, and the requests after it are the fast path's again
/// (`keepalive::Lent`); `None` leaves hyper the stream as long as it reads requests.
pub(crate) fn request_len(bytes: &[u8]) -> Option<RequestLen> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut fields);
    let httparse::Status::Complete(head) = req.parse(bytes).ok()? else {
        return None;
    };
    if req.method == Some("CONNECT") {
        return None;
    }
    let version = req.version?;
    let (mut body, mut chunked) = (None, false);
    for field in req.headers.iter() {
        let name = field.name;
        if name.eq_ignore_ascii_case("upgrade") {
            return None;
        }
        if name.eq_ignore_ascii_case("transfer-encoding") {
            // One field, `chunked` alone, on HTTP/1.1: as the fast path's `framing` and Go take it.
            let only_chunked = field.value.trim_ascii().eq_ignore_ascii_case(b"chunked");
            if chunked || !only_chunked || version != 1 {
                return None;
            }
            chunked = true;
        }
        if name.eq_ignore_ascii_case("content-length") {
            let text = std::str::from_utf8(field.value).ok()?;
            if body.is_some() || text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            body = Some(text.parse::<usize>().ok()?);
        }
    }
    match (chunked, body) {
        (true, Some(_)) => None,
        (true, None) => Some(RequestLen::Chunked(head)),
        (false, body) => head.checked_add(body.unwrap_or(0)).map(RequestLen::Known),
    }
}

/// How far a request hyper is lent the stream for reaches (`request_len`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RequestLen {
    /// Its head and body are this long.
    Known(usize),
    /// Its head is this long, and a chunked body follows.
    Chunked(usize),
}

/// A head the fast path does not serve: hyper's, or nobody's.
enum Unsupported {
    /// hyper serves it (or answers it 400).
    Hyper,
    /// httparse found it malformed: hyper answers it 400.
    Malformed,
    NotHttp1,
}

/// The head at the start of `all`, into `slot`, and its length; `None` while it is partial.
fn parse_frozen(all: &Bytes, slot: &mut Option<Head>) -> Result<Option<usize>, Unsupported> {
    let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let len = match req.parse_with_uninit_headers(all, &mut fields) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::Version) => return Err(Unsupported::NotHttp1),
        Err(httparse::Error::TooManyHeaders) => return Err(Unsupported::Hyper),
        Err(_) => return Err(Unsupported::Malformed),
    };
    if req.version != Some(1) {
        return Err(Unsupported::Hyper);
    }
    let method = match req.method.map(|m| Method::from_bytes(m.as_bytes())) {
        Some(Ok(m)) if m != Method::HEAD && m != Method::CONNECT => m,
        _ => return Err(Unsupported::Hyper),
    };
    let uri = match req.path {
        // `#` is no fragment in a request target: Go's `ParseRequestURI` keeps it in the path, and
        // the apiserver reads it in the name; `http::Uri` would cut the path there.
        Some(p) if p.starts_with('/') && p.contains('#') => {
            Uri::try_from(escape_hash(p.as_bytes())).map_err(|_| Unsupported::Hyper)?
        }
        Some(p) if p.starts_with('/') => {
            Uri::from_maybe_shared(all.slice_ref(p.as_bytes())).map_err(|_| Unsupported::Hyper)?
        }
        _ => return Err(Unsupported::Hyper),
    };
    let mut headers = HeaderMap::with_capacity(req.headers.len());
    let mut close = false;
    for field in req.headers.iter() {
        let name = HeaderName::from_bytes(field.name.as_bytes()).map_err(|_| Unsupported::Hyper)?;
        check_field(&name, field.value, &mut close)?;
        // SAFETY: httparse took the value for a field value, as `HeaderValue` takes one: no byte
        // below 0x20 but horizontal tab, and no DEL (hyper builds its values so, too).
        let value = unsafe { HeaderValue::from_maybe_shared_unchecked(all.slice_ref(field.value)) };
        headers.append(name, value);
    }
    let mut request = Request::new(Incoming::Empty);
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = Version::HTTP_11;
    *request.headers_mut() = headers;
    *slot = Some(Head {
        request,
        close,
        bytes: Bytes::new(),
    });
    Ok(Some(len))
}

/// Whether the fast path serves a request with this field: no body (a `content-length` of 0 at
/// most), no upgrade, no `Expect`. `Connection: close` is noted.
fn check_field(name: &HeaderName, value: &[u8], close: &mut bool) -> Result<(), Unsupported> {
    if name == CONTENT_LENGTH {
        return if value.trim_ascii() == b"0" {
            Ok(())
        } else {
            Err(Unsupported::Hyper)
        };
    }
    if name == TRANSFER_ENCODING || name == UPGRADE || name == EXPECT {
        return Err(Unsupported::Hyper);
    }
    if name == CONNECTION {
        for token in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
            if token.eq_ignore_ascii_case(b"close") {
                *close = true;
            } else if token.eq_ignore_ascii_case(b"upgrade") {
                return Err(Unsupported::Hyper);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "head_tests.rs"]
mod tests;
