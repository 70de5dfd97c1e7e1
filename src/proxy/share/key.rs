//! Which watches may share, and the key of the one upstream watch they share: the same backend,
//! path, selectors and encoding. What each client may ask differently (where it starts, how long
//! it lasts, whether it wants bookmarks) is its own and not in the key.

use std::time::Duration;

use http::HeaderMap;
use http::header;

/// The parameters that are each client's own: not in the key.
const OWN: &[&str] = &[
    "watch",
    "resourceVersion",
    "timeoutSeconds",
    "allowWatchBookmarks",
];

/// The key of a distinct watch.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub backend: String,
    pub path: String,
    /// The other parameters, decoded, in order.
    pub query: Vec<(String, String)>,
    /// The client's `Accept`, which decides the encoding.
    pub accept: String,
}

impl Key {
    /// The path and query of the shared watch's own request from `rv`: its parameters, with
    /// bookmarks always asked for (they are its progress), and no timeout of its own.
    pub(crate) fn upstream_path(&self, rv: u64) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for (k, v) in &self.query {
            q.append_pair(k, v);
        }
        q.append_pair("watch", "true");
        q.append_pair("allowWatchBookmarks", "true");
        q.append_pair("resourceVersion", &rv.to_string());
        format!("{}?{}", self.path, q.finish())
    }
}

impl Key {
    /// The distinct watch in words, as `/debug/shares` and `explain` name it: its backend, path
    /// and selectors, and its encoding.
    pub(crate) fn describe(&self) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for (k, v) in &self.query {
            q.append_pair(k, v);
        }
        let query = q.finish();
        let sep = if query.is_empty() { "" } else { "?" };
        let accept = if self.accept.is_empty() {
            "*/*"
        } else {
            &self.accept
        };
        format!("{} {}{sep}{query} ({accept})", self.backend, self.path)
    }
}

/// What one client asks of a shared watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ask {
    /// Its resourceVersion: it gets the events after it.
    pub start: u64,
    /// Its `timeoutSeconds`, if it gave one.
    pub timeout: Option<Duration>,
    pub bookmarks: bool,
}

/// Why a watch is served by its own upstream watch instead: for the metrics and the access log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Own {
    /// No resourceVersion, `0`, or a watch list (`sendInitialEvents`): it begins with the state
    /// at its start, which only the apiserver has.
    InitialState,
    /// A parameter the apiserver would refuse or read otherwise than skewgate could repeat.
    Parameters,
    /// Credentials other than the client's verified certificate (a bearer token, impersonation):
    /// the apiserver authenticates them, and skewgate cannot ask for them.
    Credentials,
}

impl Own {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Own::InitialState => "initial_state",
            Own::Parameters => "parameters",
            Own::Credentials => "credentials",
        }
    }
}

/// The key and the client's ask of a watch of `path?query` to `backend`, or why it watches on its
/// own.
pub(crate) fn key(
    backend: &str,
    path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Result<(Key, Ask), Own> {
    let credentials = headers.contains_key(header::AUTHORIZATION)
        || headers
            .keys()
            .any(|k| k.as_str().starts_with("impersonate-"));
    if credentials {
        return Err(Own::Credentials);
    }
    let mut ask = Ask {
        start: 0,
        timeout: None,
        bookmarks: false,
    };
    let mut rest = Vec::new();
    let mut seen = Vec::new();
    for (k, v) in skewgate_shared::go_query::pairs(query.unwrap_or("")) {
        // The apiserver reads a parameter's first value; a second one is not for skewgate to guess.
        if seen.contains(&k) {
            return Err(Own::Parameters);
        }
        seen.push(k.clone());
        match &*k {
            "resourceVersion" => ask.start = v.parse().map_err(|_| Own::InitialState)?,
            "timeoutSeconds" => {
                let secs: u64 = v.parse().map_err(|_| Own::Parameters)?;
                ask.timeout = Some(Duration::from_secs(secs));
            }
            "allowWatchBookmarks" => ask.bookmarks = parse_bool(&v).ok_or(Own::Parameters)?,
            "watch" => {}
            "sendInitialEvents" | "resourceVersionMatch" => return Err(Own::InitialState),
            "continue" => return Err(Own::Parameters),
            _ => rest.push((k.into_owned(), v.into_owned())),
        }
    }
    if ask.start == 0 {
        return Err(Own::InitialState);
    }
    debug_assert!(rest.iter().all(|(k, _)| !OWN.contains(&k.as_str())));
    rest.sort();
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let key = Key {
        backend: backend.to_owned(),
        path: path.to_owned(),
        query: rest,
        accept,
    };
    Ok((key, ask))
}

/// A boolean as Go's `strconv.ParseBool` reads it, which the apiserver's query decoding uses.
fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(query: &str) -> Result<(Key, Ask), Own> {
        let mut h = HeaderMap::new();
        h.insert(
            header::ACCEPT,
            "application/vnd.kubernetes.protobuf".parse().unwrap(),
        );
        key("v1-36", "/api/v1/namespaces/a/secrets", Some(query), &h)
    }

    #[test]
    fn clients_that_start_and_end_apart_share_one_key() {
        let (a, ask_a) = of("fieldSelector=metadata.name%3Ds&watch=true&resourceVersion=10&timeoutSeconds=300&allowWatchBookmarks=true").unwrap();
        let (b, ask_b) = of("resourceVersion=99&watch=1&fieldSelector=metadata.name%3Ds").unwrap();
        assert_eq!(a, b);
        assert_eq!((ask_a.start, ask_a.bookmarks), (10, true));
        assert_eq!(ask_a.timeout, Some(Duration::from_secs(300)));
        assert_eq!(
            (ask_b.start, ask_b.bookmarks, ask_b.timeout),
            (99, false, None)
        );
        assert_eq!(
            a.upstream_path(7),
            "/api/v1/namespaces/a/secrets?fieldSelector=metadata.name%3Ds&watch=true&allowWatchBookmarks=true&resourceVersion=7"
        );
    }

    #[test]
    fn selectors_and_encoding_part_keys() {
        let (a, _) = of("fieldSelector=metadata.name%3Ds&resourceVersion=1&watch=1").unwrap();
        let (b, _) = of("fieldSelector=metadata.name%3Dt&resourceVersion=1&watch=1").unwrap();
        assert_ne!(a, b);
        let (c, _) = key(
            "v1-36",
            "/api/v1/namespaces/a/secrets",
            Some("fieldSelector=metadata.name%3Ds&resourceVersion=1&watch=1"),
            &HeaderMap::new(),
        )
        .unwrap();
        assert_ne!(a, c, "JSON and protobuf clients never share");
    }

    #[test]
    fn what_needs_the_apiserver_watches_on_its_own() {
        assert_eq!(of("watch=1").unwrap_err(), Own::InitialState);
        assert_eq!(
            of("watch=1&resourceVersion=0").unwrap_err(),
            Own::InitialState
        );
        assert_eq!(
            of(
                "watch=1&resourceVersion=5&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
            )
            .unwrap_err(),
            Own::InitialState
        );
        assert_eq!(
            of("watch=1&resourceVersion=5&timeoutSeconds=x").unwrap_err(),
            Own::Parameters
        );
        assert_eq!(
            of("watch=1&resourceVersion=5&resourceVersion=6").unwrap_err(),
            Own::Parameters
        );
        let mut h = HeaderMap::new();
        h.insert("impersonate-user", "bob".parse().unwrap());
        assert_eq!(
            key(
                "b",
                "/api/v1/secrets",
                Some("watch=1&resourceVersion=5"),
                &h
            )
            .unwrap_err(),
            Own::Credentials
        );
    }
}
