//! The decision: for a classified request, which backend serves it, by which rule, and why.
//!
//! Writes (verbs in `writes.verbs`) go to the first matching pin, else `writes.default`. Every other
//! request goes to the first matching pin whose reads follow it, else the first matching rollout, else
//! `reads.default`. Deciding is synchronous and pure: the time and the live state (aborted rollouts)
//! are arguments, so a test controls both.

mod abort;
mod clock;
mod decision;
mod index;
mod judge;
mod ledger;
mod pin_move;
mod request;
mod skew_policy;
pub(crate) mod sticky;

use std::sync::Arc;
use std::time::SystemTime;

pub(crate) use abort::{AbortWindow, WindowCounts};
pub(crate) use clock::{Clock, SystemClock};
#[cfg(any(test, feature = "test-util"))]
pub use clock::{ManualClock, OffsetClock};
pub(crate) use decision::Class;
pub use decision::{Decision, Reason, Rule, SkewStep, Skewed};
pub use judge::Judged;
pub(crate) use ledger::{WriteLedger, WriteTicket, object_key};
pub use pin_move::{FleetPin, PinGate};
pub(crate) use pin_move::{PinMove, Refused, Stage, WriteAdmission, previous_backends};
pub use request::{SteerRequest, mismatch};

use crate::config::{BackendId, PinReads, RouteTable};
use index::{Keys, RuleIndex};
use request::selectors_match;

/// The state that decisions depend on besides the file and the clock.
pub trait LiveState {
    /// Whether the rollout at this index has aborted and holds at 0 %.
    fn rollout_aborted(&self, rollout: usize) -> bool;

    /// The backend pin `pin` had in the table this replica ran before, when it differs from the
    /// pin's backend now: where its writes go until the pin's `flipAt`.
    fn pin_previous(&self, _pin: usize) -> Option<BackendId> {
        None
    }

    /// What the fleet says of pin `pin`'s move at `now` (with `--advertise-address`).
    fn pin_gate(&self, _pin: usize, _now: SystemTime) -> PinGate {
        PinGate::AsWritten
    }

    /// Where the fleet's moves of pin `pin` have put its writes at `now`, whatever this table says
    /// (with `--advertise-address`).
    fn pin_fleet(&self, _pin: usize, _now: SystemTime) -> FleetPin {
        FleetPin::default()
    }

    /// Whether `backend` serves `resource` in `group`/`version`; `None` while not known.
    fn serves(
        &self,
        _backend: BackendId,
        _group: &str,
        _version: &str,
        _resource: &str,
    ) -> Option<bool> {
        None
    }
}

/// No live state: nothing has aborted. For `explain` and for callers without a running proxy.
#[derive(Clone, Copy, Debug, Default)]
pub struct Quiet;

impl LiveState for Quiet {
    fn rollout_aborted(&self, _rollout: usize) -> bool {
        false
    }
}

/// The abort windows of a table's rollouts: the live state its read decisions depend on. Lives as
/// long as the table, so an abort holds until the route file changes.
pub(crate) struct RolloutState {
    windows: Vec<Option<AbortWindow>>,
}

impl RolloutState {
    /// Empty windows for every rollout of `table` that has `abort`.
    pub(crate) fn new(table: &RouteTable) -> RolloutState {
        RolloutState {
            windows: table
                .reads
                .rollouts
                .iter()
                .map(|r| r.abort.clone().map(AbortWindow::new))
                .collect(),
        }
    }

    /// The window of rollout `i`, if it has `abort`.
    pub(crate) fn window(&self, i: usize) -> Option<&AbortWindow> {
        self.windows.get(i).and_then(Option::as_ref)
    }

    /// Records the outcome of a request that `decision` sent to a rollout's `to`; returns the
    /// window's counts when this outcome aborts the rollout.
    pub(crate) fn record(
        &self,
        decision: &Decision,
        now: SystemTime,
        failed: bool,
    ) -> Option<(usize, WindowCounts)> {
        match (decision.rule, decision.reason) {
            (Rule::Rollout(i), Reason::Rollout { selected: true, .. }) => self
                .window(i)
                .and_then(|w| w.record(now, failed))
                .map(|c| (i, c)),
            _ => None,
        }
    }
}

impl LiveState for RolloutState {
    fn rollout_aborted(&self, rollout: usize) -> bool {
        self.window(rollout).is_some_and(AbortWindow::is_aborted)
    }
}

/// A route table made ready for deciding: the table plus its indexes and rollout salts.
#[derive(Debug)]
pub struct Steering {
    table: Arc<RouteTable>,
    write_pins: RuleIndex,
    read_pins: RuleIndex,
    rollouts: RuleIndex,
    salts: Vec<u64>,
    /// Whether some rule looks at the user or groups (`users`, `groups`, `stickyBy: user`): only
    /// then is a bearer token read for its routing identity.
    uses_identity: bool,
    /// The backends' versions, for the version-skew policy.
    skew: skew_policy::SkewIndex,
}

impl Steering {
    /// Prepares a table for deciding. Done once per load, off the request path.
    pub fn new(table: Arc<RouteTable>) -> Steering {
        let pins = &table.writes.pins;
        let rollouts = &table.reads.rollouts;
        Steering {
            write_pins: RuleIndex::build(0..pins.len(), |i| &pins[i].selectors),
            read_pins: RuleIndex::build(
                (0..pins.len()).filter(|&i| pins[i].reads == PinReads::Follow),
                |i| &pins[i].selectors,
            ),
            rollouts: RuleIndex::build(0..rollouts.len(), |i| &rollouts[i].selectors),
            salts: rollouts.iter().map(|r| sticky::salt(&r.name)).collect(),
            uses_identity: uses_identity(&table),
            skew: skew_policy::SkewIndex::new(&table),
            table,
        }
    }

    /// Whether some rule looks at who the client is.
    pub fn uses_identity(&self) -> bool {
        self.uses_identity
    }

    /// The table being steered by.
    pub fn table(&self) -> &Arc<RouteTable> {
        &self.table
    }

    /// Decides the backend of one request at time `now`: by the rules, then falling back to another
    /// backend when the chosen one does not serve the request's group/version/resource and another
    /// does (known from discovery).
    pub fn decide(
        &self,
        req: &SteerRequest<'_>,
        now: SystemTime,
        live: &impl LiveState,
    ) -> Decision {
        self.decide_reading(req, || now, live)
    }

    /// `decide`, reading the time from `now` only when a rule that depends on it applies (a pin
    /// that moves, a rollout's schedule): most requests match neither.
    pub fn decide_reading(
        &self,
        req: &SteerRequest<'_>,
        now: impl Fn() -> SystemTime,
        live: &impl LiveState,
    ) -> Decision {
        let d = self.decide_by_rules(req, &now, live);
        let d = self.fall_back(req, d, live);
        self.keep_skew_policy(req, d, &now, live)
    }

    /// `d`, or another backend when `d`'s does not serve the request's group/version/resource and
    /// another does (known from discovery).
    fn fall_back(&self, req: &SteerRequest<'_>, d: Decision, live: &impl LiveState) -> Decision {
        let info = req.info;
        if !info.is_resource || info.resource.is_empty() {
            return d;
        }
        let (g, v, r) = (&*info.api_group, &*info.api_version, &*info.resource);
        if live.serves(d.backend, g, v, r) != Some(false) {
            return d;
        }
        match BackendId::all(self.table.backends.len())
            .find(|&b| b != d.backend && live.serves(b, g, v, r) == Some(true))
        {
            Some(b) => Decision {
                backend: b,
                fallback_from: Some(d.backend),
                ..d
            },
            None => d,
        }
    }

    fn decide_by_rules(
        &self,
        req: &SteerRequest<'_>,
        now: &impl Fn() -> SystemTime,
        live: &impl LiveState,
    ) -> Decision {
        let table = &*self.table;
        let keys = Keys {
            namespace: &req.info.namespace,
            resource: if req.info.is_resource {
                &req.info.resource
            } else {
                ""
            },
            client: req.client.name,
        };
        let pins = &table.writes.pins;
        let first_pin = |index: &RuleIndex| {
            index
                .candidates(&keys)
                .find(|&i| selectors_match(&pins[i].selectors, req))
        };
        if table.writes.verbs.contains(req.verb()) {
            let Some(i) = first_pin(&self.write_pins) else {
                return Decision::new(
                    Class::Write,
                    table.writes.default,
                    Rule::WriteDefault,
                    Reason::NoPin,
                );
            };
            let moved = self.pin_move(i, now(), live);
            let reason = match moved.stage {
                Stage::Settled => Reason::PinnedWrite,
                Stage::BeforeFlip { .. } => Reason::BeforeFlip,
                Stage::Fenced { until } | Stage::Waiting { until } => Reason::Fenced { until },
                Stage::Unsure => Reason::FleetUnsure,
            };
            return Decision::new(Class::Write, moved.backend, Rule::Pin(i), reason);
        }
        if let Some(i) = first_pin(&self.read_pins) {
            let backend = self.pin_move(i, now(), live).backend;
            return Decision::new(Class::Read, backend, Rule::Pin(i), Reason::ReadFollowsPin);
        }
        let rollouts = &table.reads.rollouts;
        let Some(i) = self
            .rollouts
            .candidates(&keys)
            .find(|&i| selectors_match(&rollouts[i].selectors, req))
        else {
            return Decision::new(
                Class::Read,
                table.reads.default,
                Rule::ReadDefault,
                Reason::NoRollout,
            );
        };
        self.rollout_decision(i, req, now(), live)
    }

    /// A read that rollout `i` decides: its key's bucket against the percent in force at `now`.
    fn rollout_decision(
        &self,
        i: usize,
        req: &SteerRequest<'_>,
        now: SystemTime,
        live: &impl LiveState,
    ) -> Decision {
        let table = &*self.table;
        let rollout = &table.reads.rollouts[i];
        let point = rollout.schedule.at(now);
        let aborted = rollout.abort.is_some() && live.rollout_aborted(i);
        let percent = if aborted { 0 } else { point.percent.0 };
        let bucket = sticky::bucket(self.salts[i], rollout.sticky_by, req);
        let selected = bucket < percent;
        let reason = Reason::Rollout {
            bucket,
            percent,
            selected,
            aborted,
        };
        let backend = if selected {
            rollout.to
        } else {
            table.reads.default
        };
        Decision::new(Class::Read, backend, Rule::Rollout(i), reason)
    }
}

impl Steering {
    /// The first guard that matches an update (`guards[i]`), if any. Only full-object updates are
    /// guarded: patches and applies send only what they change.
    pub fn guard(&self, req: &SteerRequest<'_>) -> Option<usize> {
        let guards = &self.table.guards;
        if guards.is_empty() || req.verb() != crate::classify::Verb::Update {
            return None;
        }
        // A client of unknown version (no User-Agent, or one without a version) is judged as the
        // oldest under `unknownVersion: guard`, so a version bound in the guard's `clients` (`<1.36`)
        // takes it too; otherwise no bound would ever match it, and the setting would never apply.
        let oldest = req.client.version.is_none().then(|| {
            let mut r = req.clone();
            r.client.version = Some(crate::classify::ClientVersion::OLDEST);
            r
        });
        guards.iter().position(|g| {
            selectors_match(&g.selectors, req)
                || (g.unknown_version == crate::config::UnknownVersion::Guard
                    && oldest
                        .as_ref()
                        .is_some_and(|r| selectors_match(&g.selectors, r)))
        })
    }

    /// The first `shareWatches` rule that matches a watch (`shares[i]`), if any. A `byName` rule
    /// takes only watches of one object (a `metadata.name` field selector).
    pub fn share(&self, req: &SteerRequest<'_>) -> Option<usize> {
        let shares = &self.table.shares;
        if shares.is_empty() || req.verb() != crate::classify::Verb::Watch {
            return None;
        }
        shares.iter().position(|s| {
            (!s.by_name || !req.info.name.is_empty()) && selectors_match(&s.selectors, req)
        })
    }

    /// Where pin `i` stands at `now`: settled, before its `flipAt`, or in its fence. With the
    /// fleet, the moves it has timed come first, then this table's move, from where they put the
    /// pin.
    pub fn pin_move(&self, i: usize, now: SystemTime, live: &impl LiveState) -> PinMove {
        self.moves(i, now, live, true)
    }

    /// This table's own move of pin `i` at `now`, from where the fleet's moves put the pin, without
    /// their fences and the moves of other tables to come: when it flips (`routing/moves.rs`).
    pub fn own_move(&self, i: usize, now: SystemTime, live: &impl LiveState) -> PinMove {
        self.moves(i, now, live, false)
    }

    /// Pin `i`'s move at `now`, the fleet's own moves first when `fleet_first`.
    fn moves(
        &self,
        i: usize,
        now: SystemTime,
        live: &impl LiveState,
        fleet_first: bool,
    ) -> PinMove {
        let pin = &self.table.writes.pins[i];
        let previous = live.pin_previous(i);
        let fence = self.table.writes.fence;
        if pin.flip_at.is_none() {
            return PinMove::gated(pin, PinGate::AsWritten, previous, fence, now);
        }
        let fleet = live.pin_fleet(i, now);
        if fleet_first && let Some(first) = PinMove::fleet_first(pin, &fleet, previous, now) {
            return first;
        }
        let gate = live.pin_gate(i, now);
        PinMove::gated(pin, gate, fleet.at.or(previous), fence, now)
    }
}

/// Whether some pin, rollout or guard selects by user or group, or a rollout is sticky by user.
fn uses_identity(t: &RouteTable) -> bool {
    let names = |s: &crate::config::Selectors| s.users.is_some() || s.groups.is_some();
    t.writes.pins.iter().any(|p| names(&p.selectors))
        || t.guards.iter().any(|g| names(&g.selectors))
        || t.reads
            .rollouts
            .iter()
            .any(|r| names(&r.selectors) || r.sticky_by == crate::config::StickyBy::User)
}

#[cfg(test)]
mod skew_policy_tests;
#[cfg(test)]
mod tests;
