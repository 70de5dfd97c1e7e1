//! The access log: one line per finished request, at info under the target `skewgate::access`, so
//! that `--log-format` makes it text or JSON and `--no-access-log` turns it off.
//!
//! A record is made only when the log is on: the request head's pieces it needs are cheap to keep
//! (the URI shares its bytes, the client and the table are `Arc`s), and it is written when the
//! response ends — a watch, a log stream or an exec session when it closes, with its duration.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use http::{Method, Uri};

use crate::classify::classify;
use crate::config::RouteTable;
use crate::identity::VerifiedClient;
use crate::steer::Decision;

/// The target access-log lines are written under.
pub(crate) const TARGET: &str = "skewgate::access";

/// What one request's access-log line says, filled in as the request goes.
pub(crate) struct AccessRecord {
    remote: SocketAddr,
    client: Option<Arc<VerifiedClient>>,
    method: Method,
    uri: Uri,
    table: Arc<RouteTable>,
    decision: Decision,
    start: Instant,
    code: u16,
    bytes: u64,
    error: Option<String>,
    /// How long a write waited to be admitted (a moving pin's fence, the object's writes on
    /// another backend, its client's turn).
    held: Option<std::time::Duration>,
    /// For a watch a `shareWatches` rule matched: the rule, and whether it joined a shared watch
    /// or went on its own (and why).
    shared: Option<String>,
}

impl AccessRecord {
    /// A record of a request, when the access log is on.
    pub(crate) fn start(
        on: bool,
        remote: SocketAddr,
        client: Option<&Arc<VerifiedClient>>,
        parts: &http::request::Parts,
        table: &Arc<RouteTable>,
        decision: Decision,
        start: Instant,
    ) -> Option<Box<AccessRecord>> {
        on.then(|| {
            Box::new(AccessRecord {
                remote,
                client: client.cloned(),
                method: parts.method.clone(),
                uri: parts.uri.clone(),
                table: table.clone(),
                decision,
                start,
                code: 0,
                bytes: 0,
                error: None,
                held: None,
                shared: None,
            })
        })
    }

    /// The status code answered.
    pub(crate) fn set_code(&mut self, code: u16) {
        self.code = code;
    }

    /// Bytes of response body sent.
    pub(crate) fn add_bytes(&mut self, n: u64) {
        self.bytes += n;
    }

    /// How long the write waited to be admitted.
    pub(crate) fn set_held(&mut self, held: std::time::Duration) {
        self.held = Some(held);
    }

    /// What became of a watch a `shareWatches` rule matched.
    pub(crate) fn set_shared(&mut self, shared: String) {
        self.shared = Some(shared);
    }

    /// Why the proxy answered the request itself, or the upstream failure that ended it.
    pub(crate) fn set_error(&mut self, error: String) {
        self.error = Some(error);
    }
}

impl Drop for AccessRecord {
    fn drop(&mut self) {
        let info = classify(self.method.as_str(), self.uri.path(), self.uri.query());
        let t = &*self.table;
        let d = &self.decision;
        let user = self
            .client
            .as_deref()
            .map_or("-", |c| c.identity.user.as_str());
        let resource = match (&*info.api_group, &*info.resource, &*info.subresource) {
            (_, "", _) => String::new(),
            ("", r, "") => r.to_owned(),
            ("", r, s) => format!("{r}/{s}"),
            (g, r, "") => format!("{r}.{g}"),
            (g, r, s) => format!("{r}.{g}/{s}"),
        };
        let fallback_from = d.fallback_from.map_or("", |b| t.backend_name(b));
        tracing::info!(
            target: TARGET,
            remote = %self.remote,
            user,
            verb = info.verb.as_str(),
            resource,
            namespace = &*info.namespace,
            name = &*info.name,
            path = self.uri.path(),
            rule = d.rule_name(t),
            backend = t.backend_name(d.backend),
            fallback_from,
            code = self.code,
            bytes = self.bytes,
            duration_ms = (self.start.elapsed().as_secs_f64() * 1e6).round() / 1e3,
            held_ms = self.held.map_or(0.0, |h| (h.as_secs_f64() * 1e6).round() / 1e3),
            error = self.error.as_deref().unwrap_or(""),
            shared = self.shared.as_deref().unwrap_or(""),
            "request"
        );
    }
}
