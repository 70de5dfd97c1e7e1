//! The version-skew policy as a default: a Kubernetes component whose User-Agent names its version
//! (`kube-controller-manager/v1.36.3 ...`) is never served by a backend whose `version` is older
//! than its own minor, unless the table's `skewPolicy.allowOlderApiserver` names it.
//!
//! Applied after the rules (and discovery's fallback) decided, in this order:
//! 1. **Leadership.** A Lease write (create, update, patch of `leases.coordination.k8s.io`) by a
//!    component that elects a leader is refused (429) while some write rule of the table sends
//!    writes to a backend older than the component: `writes.default`, or a pin where its writes are
//!    now. Such a component writes everything once it leads, and it must not write through an
//!    older apiserver, nor beside a pin's version through its own: so it does not lead until the
//!    pins have moved. A leader of the old version keeps leading meanwhile.
//! 2. **Writes.** A pinned write (a verb of `writes.verbs`) that its rule sends to an older backend
//!    is refused (429): the pin keeps one writing version per object, and the component may not
//!    use that version.
//! 3. **Everything else** (reads, and the verbs the table does not pin) goes to the oldest backend
//!    not older than the component, the first in file order among equals; 503 when there is none.
//!
//! A backend without `version` is never judged older (`check` warns of it in a table of two or
//! more backends). Undo the leadership gate if kube-apiserver's coordinated leader election
//! (LeaseCandidate, which picks the oldest candidate) becomes the default: it then keeps the
//! newer component from leading by itself.

use std::time::SystemTime;

use super::decision::{Class, Decision, Rule, SkewStep, Skewed};
use super::request::SteerRequest;
use super::{LiveState, Steering};
use crate::classify::{Client, ClientVersion, Component, Verb};
use crate::config::{BackendId, RouteTable};

/// The backends' versions, made once per table.
#[derive(Debug, Default)]
pub(super) struct SkewIndex {
    versions: Vec<Option<(u32, u32)>>,
    /// Whether any backend names a version: without one the policy has nothing to judge.
    judged: bool,
}

impl SkewIndex {
    pub(super) fn new(table: &RouteTable) -> SkewIndex {
        let versions: Vec<_> = table.backends.iter().map(|b| b.version).collect();
        SkewIndex {
            judged: versions.iter().any(Option::is_some),
            versions,
        }
    }

    /// Whether backend `b` is older than minor `v`.
    fn older(&self, b: BackendId, v: (u32, u32)) -> bool {
        self.versions
            .get(b.index())
            .copied()
            .flatten()
            .is_some_and(|bv| bv < v)
    }

    /// The oldest backend whose version is `v` or newer, the first in file order among equals.
    fn oldest_not_older(&self, v: (u32, u32)) -> Option<BackendId> {
        let mut best: Option<(BackendId, (u32, u32))> = None;
        for (i, bv) in self.versions.iter().enumerate() {
            if let Some(bv) = *bv
                && bv >= v
                && best.is_none_or(|(_, b)| bv < b)
            {
                best = Some((BackendId::new(i), bv));
            }
        }
        best.map(|(b, _)| b)
    }
}

impl Steering {
    /// `d` as the version-skew policy keeps it for `req`'s client (module docs).
    pub(super) fn keep_skew_policy(
        &self,
        req: &SteerRequest<'_>,
        d: Decision,
        now: &impl Fn() -> SystemTime,
        live: &impl LiveState,
    ) -> Decision {
        let Some((component, version)) = self.bound(&req.client) else {
            return d;
        };
        let minor = (version.major, version.minor);
        let skewed = |chosen, step| Skewed {
            component,
            version,
            chosen,
            step,
        };
        // A component the table allows on older backends writes where the pins say, so its
        // lead needs no holding back.
        if component.elects_a_leader()
            && !self.allowed(component)
            && is_lease_write(req)
            && let Some((rule, backend)) = self.older_write_rule(minor, now(), live)
        {
            let step = SkewStep::LeadershipHeld { rule, backend };
            return Decision {
                skew: Some(skewed(d.backend, step)),
                ..d
            };
        }
        if !self.skew.older(d.backend, minor) {
            return d;
        }
        let (backend, step) = if self.allowed(component) {
            (d.backend, SkewStep::Allowed)
        } else if d.class == Class::Write {
            (d.backend, SkewStep::WriteRefused)
        } else {
            match self.skew.oldest_not_older(minor) {
                Some(b) => (b, SkewStep::Raised),
                None => (d.backend, SkewStep::NoBackend),
            }
        };
        Decision {
            backend,
            fallback_from: if step == SkewStep::Raised {
                None
            } else {
                d.fallback_from
            },
            skew: Some(skewed(d.backend, step)),
            ..d
        }
    }

    /// Whether a component of `version` may be served by backend `b` (for discovery's documents,
    /// which merged discovery takes from one backend).
    pub fn serves_component(&self, b: BackendId, client: &Client<'_>) -> bool {
        self.bound(client)
            .is_none_or(|(c, v)| self.allowed(c) || !self.skew.older(b, (v.major, v.minor)))
    }

    /// The component `client` is, with its version, when the policy binds it: the table declares
    /// a backend's version, and the User-Agent names a component and a version.
    fn bound(&self, client: &Client<'_>) -> Option<(Component, ClientVersion)> {
        if !self.skew.judged {
            return None;
        }
        let version = client.version?;
        Some((Component::from_name(client.name)?, version))
    }

    /// Whether the table lets `component` be served by an older backend.
    fn allowed(&self, component: Component) -> bool {
        (self.table().skew_policy.allow_older_apiserver).contains(component)
    }

    /// The first write rule, in the order writes are decided, that sends writes to a backend older
    /// than `minor` at `now`: a pin where its writes are now, then `writes.default`. A pin that
    /// matches every object hides the rules after it.
    fn older_write_rule(
        &self,
        minor: (u32, u32),
        now: SystemTime,
        live: &impl LiveState,
    ) -> Option<(Rule, BackendId)> {
        let table = self.table();
        for (i, pin) in table.writes.pins.iter().enumerate() {
            let backend = self.pin_move(i, now, live).backend;
            if self.skew.older(backend, minor) {
                return Some((Rule::Pin(i), backend));
            }
            if pin.selectors.is_match_all() {
                return None;
            }
        }
        let default = table.writes.default;
        self.skew
            .older(default, minor)
            .then_some((Rule::WriteDefault, default))
    }
}

/// A write of a Lease (`coordination.k8s.io`), as leader election makes it.
fn is_lease_write(req: &SteerRequest<'_>) -> bool {
    let info = req.info;
    info.is_resource
        && matches!(info.verb, Verb::Create | Verb::Update | Verb::Patch)
        && info.resource == "leases"
        && info.api_group == "coordination.k8s.io"
        && info.subresource.is_empty()
}
