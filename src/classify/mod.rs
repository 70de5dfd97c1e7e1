//! Turns a request head (method, path, query, User-Agent) into the apiserver's own RequestInfo and client.
//!
//! The rules follow kube-apiserver's `endpoints/request/requestinfo.go`, so that a selector in a route
//! file means exactly what it means in the apiserver's RBAC and audit. Pure functions, no I/O, and no
//! allocation unless the path is percent-encoded.

mod builtin;
mod client;
mod component;
mod labels;
mod query;
mod verb;

use std::borrow::Cow;

pub use builtin::{BUILTIN_RESOURCES, builtin_resources};
pub use client::Client;
pub(crate) use client::ClientVersion;
pub use component::{Component, ComponentSet};
pub(crate) use query::escapes_are_whole;
pub(crate) use verb::Verb;

/// The apiserver's view of one request: what it does (verb) to what (group, version, resource,
/// subresource, namespace, name). Fields borrow from the request when it needs no decoding.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestInfo<'a> {
    /// True for `/api/...` and `/apis/...` paths that name a resource; false for everything else
    /// (`/version`, `/healthz`, discovery documents).
    pub is_resource: bool,
    /// The Kubernetes verb (`list`, `watch`, `update`, ...); for non-resource requests the lower-case
    /// HTTP method, as the apiserver does.
    pub verb: Verb,
    /// `api` or `apis` (empty for non-resource requests).
    pub api_prefix: Cow<'a, str>,
    /// The API group; empty for the core group.
    pub api_group: Cow<'a, str>,
    /// The API version (`v1`, `v1beta1`).
    pub api_version: Cow<'a, str>,
    /// The namespace; empty for cluster-scoped requests and for lists across all namespaces.
    pub namespace: Cow<'a, str>,
    /// The resource (`pods`, `deployments`), plural and lower case as in the URL.
    pub resource: Cow<'a, str>,
    /// The subresource (`status`, `log`, `exec`), if any.
    pub subresource: Cow<'a, str>,
    /// The object's name, from the path or from a `metadata.name=` field selector.
    pub name: Cow<'a, str>,
}

impl RequestInfo<'_> {
    /// Whether the apiserver treats this request as long-running (no request timeout): watches,
    /// proxying, and the streaming subresources.
    pub fn is_long_running(&self) -> bool {
        matches!(self.verb, Verb::Watch | Verb::Proxy)
            || (self.is_resource
                && matches!(
                    &*self.subresource,
                    "attach" | "exec" | "proxy" | "log" | "portforward"
                ))
    }

    /// Takes ownership of every borrowed field, for callers that must keep the info past the request.
    pub fn into_owned(self) -> RequestInfo<'static> {
        RequestInfo {
            is_resource: self.is_resource,
            verb: self.verb,
            api_prefix: Cow::Owned(self.api_prefix.into_owned()),
            api_group: Cow::Owned(self.api_group.into_owned()),
            api_version: Cow::Owned(self.api_version.into_owned()),
            namespace: Cow::Owned(self.namespace.into_owned()),
            resource: Cow::Owned(self.resource.into_owned()),
            subresource: Cow::Owned(self.subresource.into_owned()),
            name: Cow::Owned(self.name.into_owned()),
        }
    }
}

/// Computes the RequestInfo of a request from its method, its path (as sent, percent-encoded) and its
/// raw query string (without `?`).
///
/// Never fails: a path that is not an API resource path is a non-resource request, as in the apiserver.
pub fn classify<'a>(method: &str, path: &'a str, query: Option<&'a str>) -> RequestInfo<'a> {
    if !path.contains('%') {
        return classify_decoded(method, path, query, Cow::Borrowed);
    }
    match percent_encoding::percent_decode_str(path).decode_utf8_lossy() {
        Cow::Borrowed(p) => classify_decoded(method, p, query, Cow::Borrowed),
        Cow::Owned(p) => classify_decoded(method, &p, query, |s: &str| Cow::Owned(s.to_owned())),
    }
}

/// The most path segments that can matter: `apis/{group}/{version}/watch/namespaces/{ns}/{resource}/{name}/{sub}`.
const MAX_SEGMENTS: usize = 9;

/// The first `MAX_SEGMENTS` segments of `path` between slashes, and how many there are. Every
/// request's path goes through here: `str::split('/')` searched for each slash with a general
/// character searcher (about 150 instructions a segment), a loop over bytes took 400 for a typical
/// path, and this looks at eight bytes at a time (`slashes`), about half that.
fn split_segments(path: &str) -> ([&str; MAX_SEGMENTS], usize) {
    let mut segments = [""; MAX_SEGMENTS];
    let mut n = 0;
    let mut start = 0;
    let mut cut = |i: usize| {
        // A slash is one byte, never inside a character: `start..i` are boundaries.
        segments[n] = path.get(start..i).unwrap_or_default();
        n += 1;
        start = i + 1;
        n == MAX_SEGMENTS
    };
    let bytes = path.as_bytes();
    let mut words = bytes.chunks_exact(8);
    let mut base = 0;
    for word in &mut words {
        let mut found = slashes(word);
        while found != 0 {
            if cut(base + (found.trailing_zeros() / 8) as usize) {
                return (segments, n);
            }
            found &= found - 1;
        }
        base += 8;
    }
    for (i, &b) in words.remainder().iter().enumerate() {
        if b == b'/' && cut(base + i) {
            return (segments, n);
        }
    }
    segments[n] = path.get(start..).unwrap_or_default();
    (segments, n + 1)
}

/// The slashes among eight bytes: the high bit of each byte that is `/`, little-endian (the first
/// byte lowest). Exact per byte: `(x & 0x7f) + 0x7f` carries into the high bit for every byte but
/// zero and never into the next byte.
fn slashes(word: &[u8]) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(word);
    let x = u64::from_le_bytes(bytes) ^ 0x2f2f_2f2f_2f2f_2f2f;
    !(((x & LOW7) + LOW7) | x | LOW7)
}

/// The apiserver's algorithm on an already decoded path. `keep` turns a slice of that path into a field:
/// a borrow when the path is the caller's, a copy when it was decoded into a temporary.
fn classify_decoded<'a, 'p>(
    method: &str,
    path: &'p str,
    query: Option<&'a str>,
    keep: impl Fn(&'p str) -> Cow<'a, str>,
) -> RequestInfo<'a> {
    let mut info = RequestInfo {
        verb: Verb::from_http_method(method),
        ..RequestInfo::default()
    };
    // As Go's strings.Split after trimming slashes: empty segments between `//` are kept.
    let trimmed = path.trim_matches('/');
    if trimmed.is_empty() {
        return info;
    }
    let (segments, n) = split_segments(trimmed);
    let segments = &segments[..n];
    if n < 3 {
        return info;
    }
    let (group, rest) = match segments[0] {
        "api" => ("", &segments[1..]),
        "apis" if n >= 4 => (segments[1], &segments[2..]),
        _ => return info,
    };
    info.is_resource = true;
    info.api_prefix = keep(segments[0]);
    info.api_group = keep(group);
    info.api_version = keep(rest[0]);
    resolve_resource(&mut info, method, &rest[1..], query, &keep);
    info
}

/// The part of the apiserver's algorithm after prefix, group and version: special verbs, namespace,
/// resource, name, subresource, then list/watch/deletecollection from the query.
fn resolve_resource<'a, 'p>(
    info: &mut RequestInfo<'a>,
    method: &str,
    mut parts: &[&'p str],
    query: Option<&'a str>,
    keep: &impl Fn(&'p str) -> Cow<'a, str>,
) {
    match parts.first().and_then(|p| Verb::special(p)) {
        Some(special) => {
            info.verb = special;
            if parts.len() < 2 {
                // The apiserver answers this with an error: a resource request naming no resource.
                return;
            }
            parts = &parts[1..];
        }
        None => info.verb = Verb::from_resource_method(method),
    }

    if parts.first() == Some(&"namespaces") && parts.len() > 1 {
        info.namespace = keep(parts[1]);
        if parts.len() > 2 && !matches!(parts[2], "status" | "finalize") {
            parts = &parts[2..];
        }
    }

    if parts.len() >= 3 && info.verb != Verb::Proxy {
        info.subresource = keep(parts[2]);
    }
    if parts.len() >= 2 {
        info.name = keep(parts[1]);
    }
    if let Some(resource) = parts.first() {
        info.resource = keep(resource);
    }

    if info.name.is_empty() && info.verb == Verb::Get {
        let list = query::list_options(query);
        info.verb = if list.watch { Verb::Watch } else { Verb::List };
        if let Some(name) = list.name {
            info.name = name;
        }
    }
    if info.name.is_empty() && info.verb == Verb::Delete {
        info.verb = Verb::DeleteCollection;
    }
}

#[cfg(test)]
mod tests;
