//! One request's context, as its phases carry it: who sent it (`Caller`), what it is and where it
//! goes (`Decided`, made by the decide phase), and the whole (`Ctx`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use http::HeaderValue;

use super::access_log::AccessRecord;
use super::discovery::Merge;
use super::limits::ClientLimit;
use super::routing::Routing;
use crate::classify::{ClientVersion, Verb};
use crate::config::BackendId;
use crate::identity::{ForwardedIdentity, Identity};
use crate::steer::Decision;

/// One request as its phases carry it, as pingora carries a per-request `CTX` through its named
/// phases: the routing it was decided by, who sent it, what it is and where it goes, and its
/// access-log record. Each phase takes it and the process's shared state.
pub(super) struct Ctx<'r> {
    pub routing: &'r Routing,
    pub caller: Caller<'r>,
    pub request: Decided,
    /// Made only when the access log is on.
    pub access: Option<Box<AccessRecord>>,
}

impl<'r> Ctx<'r> {
    /// Its parts, each borrowed apart: the routing and the caller (both `Copy`), the request, and
    /// the access record.
    pub(super) fn split(
        &mut self,
    ) -> (
        &'r Routing,
        Caller<'r>,
        &mut Decided,
        &mut Option<Box<AccessRecord>>,
    ) {
        (
            self.routing,
            self.caller,
            &mut self.request,
            &mut self.access,
        )
    }
}

/// Who sent the request.
#[derive(Clone, Copy)]
pub(super) struct Caller<'a> {
    pub remote: SocketAddr,
    pub identity: Option<&'a Identity>,
    /// Its identity as header values, made at the handshake.
    pub forwarded: Option<&'a ForwardedIdentity>,
    /// Its address as an X-Forwarded-For value.
    pub forwarded_for: &'a HeaderValue,
    pub limit: Option<&'a Arc<ClientLimit>>,
}

/// What the request is and where it goes.
pub(super) struct Decided {
    /// When it began.
    pub start: Instant,
    pub decision: Decision,
    pub verb: Verb,
    pub long_running: bool,
    /// Whether it is safe to repeat (GET, HEAD).
    pub safe: bool,
    /// The object a write changes (its ledger key).
    pub object: Option<u64>,
    pub merge: Option<Merge>,
    /// Exec, attach and port-forward: the protocol they switch to.
    pub upgrade: Option<HeaderValue>,
    /// The update guard that applies (`guards[i]`), for a full-object update.
    pub guard: Option<usize>,
    /// The `shareWatches` rule that matches a watch (`shares[i]`).
    pub share: Option<usize>,
    /// Where the same client's reads of the object go, for a guarded update.
    pub reader: Option<BackendId>,
    /// The client's version, from its User-Agent.
    pub client: Option<ClientVersion>,
    /// Its resource's slot in the request metrics.
    pub resource: usize,
}
