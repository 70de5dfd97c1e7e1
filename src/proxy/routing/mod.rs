//! The live routing state that one route table load produces: the steering, the backend pools, and
//! the metric handles the request path uses. Swapped whole on reload.

mod accounting;
mod current;
mod moves;
mod resources;
mod superseded;

use std::sync::Arc;
use std::time::SystemTime;

use prometheus::{IntCounter, IntGauge};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::discovery::{MergedDiscovery, OpenApiMerges};
use crate::classify::{Client, Verb, classify};
use crate::cluster::FleetGates;
use crate::config::{BackendId, RouteTable};
use crate::metrics::{Metrics, ResourceIndex, Slots, TableLabels};
use crate::steer::{
    Class, Clock, Decision, FleetPin, LiveState, PinGate, RolloutState, Rule, Stage, SteerRequest,
    Steering,
};
use crate::upstream::{BackendPool, Upstreams};

/// Number of `Verb` variants: the width of the per-verb metric tables.
const VERBS: usize = Verb::Other as usize + 1;
const CLASSES: usize = 2;

pub(crate) use accounting::RequestTracker;
pub(crate) use current::{Current, InForce};

/// One route table, ready to serve.
pub(crate) struct Routing {
    /// The decisions.
    pub steering: Steering,
    /// The backends' pools, by `BackendId`.
    pub backends: Vec<Arc<BackendPool>>,
    /// The rollouts' abort windows.
    pub rollouts: RolloutState,
    /// For each pin with `flipAt`, where its writes went by the previous table as it was replaced.
    pin_previous: Vec<Option<BackendId>>,
    /// Discovery merged across the backends, rebuilt when discovery refreshes.
    discovery: arc_swap::ArcSwapOption<MergedDiscovery>,
    /// The fleet's times of the pins' moves (with `--advertise-address`).
    pub(crate) gates: Arc<FleetGates>,
    /// Each pin's move, when it has `flipAt` (`cluster::move_key`).
    pub(crate) pin_keys: Vec<Option<String>>,
    /// Fired when the reads a rule sends somewhere move elsewhere: one per pin, then one for
    /// `reads.default`, then one for everything else (fired only at shutdown).
    moved: Vec<CancellationToken>,
    /// For each pin that was before its `flipAt` when this table loaded: fired at `flipAt`, to end
    /// the long-running reads it sent to the backend it moves from (a child of its `moved`).
    flipping: Vec<Option<moves::Flipping>>,
    /// Per pin: the pending moves reloads superseded (`/debug/routes`).
    pub(crate) superseded: Vec<superseded::Superseded>,
    /// Whether this table has moves the one before did not: the other replicas wait for this one
    /// to run them, so it publishes itself as soon as the table is in force.
    pub(crate) new_moves: bool,
    /// Whether the resources the rules name were checked against discovery (once per table).
    resources_checked: std::sync::atomic::AtomicBool,
    /// Backends a request fell back to since this table loaded (they count for readiness).
    fallen_back_to: Box<[std::sync::atomic::AtomicBool]>,
    metrics: Arc<Metrics>,
    /// The resources with label values of their own (grows as discovery finds more).
    resources: arc_swap::ArcSwap<ResourceIndex>,
    /// By backend, class, verb and resource slot: by code.
    requests: Slots<Box<Slots<IntCounter>>>,
    /// By backend, class and verb: what a request's tracker counts on.
    tracked: Slots<Arc<accounting::Tracked>>,
    watches: Slots<IntGauge>,
    decisions: Slots<IntCounter>,
}

/// The resources Kubernetes ships, with label values of their own.
fn builtin_resources() -> Arc<ResourceIndex> {
    let builtin = crate::classify::builtin_resources();
    Arc::new(
        ResourceIndex::default()
            .extended(builtin)
            .unwrap_or_default(),
    )
}

fn class_index(c: Class) -> usize {
    match c {
        Class::Write => 0,
        Class::Read => 1,
    }
}

impl Routing {
    /// Whether `backend` serves a `status` subresource of `resource` in `group`/`version`;
    /// `None` before its discovery has run.
    pub(crate) fn has_status(
        &self,
        backend: BackendId,
        (group, version, resource): (&str, &str, &str),
    ) -> Option<bool> {
        let served = self.backends.get(backend.index())?.served.load();
        served
            .as_ref()
            .map(|s| s.has_subresource(group, version, resource, "status"))
    }

    /// Builds the routing of a table, reusing the pools of endpoints that `upstreams` already has.
    /// `previous` is the routing this one replaces, if any: a pin that moves at `flipAt` keeps the
    /// backend it had there (as of `now`) until then.
    pub(crate) fn new(
        table: RouteTable,
        upstreams: &Upstreams,
        metrics: Arc<Metrics>,
        shutdown: &CancellationToken,
        previous: Option<&Routing>,
        clock: &Arc<dyn Clock>,
        (merges, gates): (&OpenApiMerges, &Arc<FleetGates>),
    ) -> Routing {
        let now = clock.now();
        let backends = upstreams.backends_for(&table);
        // What a backend serves carries over a reload until discovery runs again.
        for b in &backends {
            if let Some(old) = previous.and_then(|p| p.backends.iter().find(|o| o.name == b.name)) {
                b.served.store(old.served.load_full());
            }
        }
        let n = backends.len();
        let rules = table.writes.pins.len() + table.reads.rollouts.len() + 2;
        metrics.follow(&table, &TableLabels::of(&table));
        // Built-in resources have label values from the start; discovery adds the rest.
        let resources = previous.map_or_else(builtin_resources, |p| p.resources.load_full());
        let moved: Vec<CancellationToken> = (0..table.writes.pins.len() + 2)
            .map(|_| shutdown.child_token())
            .collect();
        let pins = moves::PinsCarried::over(&table, previous, (gates, &metrics), now);
        let mut routing = Routing {
            gates: gates.clone(),
            pin_keys: pins.keys,
            discovery: arc_swap::ArcSwapOption::empty(),
            pin_previous: pins.previous,
            moved,
            flipping: Vec::new(),
            superseded: pins.superseded,
            new_moves: pins.new_moves,
            resources_checked: std::sync::atomic::AtomicBool::new(false),
            fallen_back_to: (0..n)
                .map(|_| std::sync::atomic::AtomicBool::new(false))
                .collect(),
            rollouts: RolloutState::new(&table),
            steering: Steering::new(Arc::new(table)),
            backends,
            metrics,
            resources: arc_swap::ArcSwap::new(resources),
            requests: Slots::new(n * CLASSES * VERBS * ResourceIndex::SLOTS),
            tracked: Slots::per_worker(n * CLASSES * VERBS),
            watches: Slots::new(n),
            decisions: Slots::per_worker(rules * CLASSES),
        };
        routing.flipping = moves::flipping(&routing, (clock, &routing.metrics), now);
        routing.refresh_discovery(now, merges);
        routing
    }

    /// The merged discovery, once some backend has been discovered.
    pub(crate) fn discovery(&self) -> Option<Arc<MergedDiscovery>> {
        self.discovery.load_full()
    }

    /// Rebuilds the merged discovery from what the backends serve now: the backend `reads.default`
    /// names first, then the route file's order; each group/version from the backend this table
    /// sends a list of its first resource to.
    pub(crate) fn refresh_discovery(&self, now: SystemTime, merges: &OpenApiMerges) {
        let primary = self.table().reads.default;
        let order = std::iter::once(primary)
            .chain(BackendId::all(self.backends.len()).filter(|b| *b != primary));
        let served: Vec<_> = order
            .filter_map(|b| Some((b, self.backends.get(b.index())?.served.load_full()?)))
            .collect();
        self.extend_resources(served.iter().map(|(_, s)| &**s));
        let merged = MergedDiscovery::build(
            &served,
            |group, version, resource| {
                let path = if group.is_empty() {
                    format!("/api/{version}/{resource}")
                } else {
                    format!("/apis/{group}/{version}/{resource}")
                };
                let info = classify("GET", &path, None);
                let req = SteerRequest {
                    info: &info,
                    user: "",
                    groups: &[],
                    client: Client::default(),
                };
                self.steering.decide(&req, now, self).backend
            },
            merges,
        );
        self.discovery.store(merged.map(Arc::new));
    }

    /// The route table.
    pub(crate) fn table(&self) -> &RouteTable {
        self.steering.table()
    }

    fn backend_name(&self, d: &Decision) -> &str {
        self.table().backend_name(d.backend)
    }

    /// Records that a request fell back to `backend`.
    pub(crate) fn note_fallback(&self, backend: BackendId) {
        if let Some(used) = self.fallen_back_to.get(backend.index()) {
            used.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// For each backend, the rules that send it traffic at `now`: the defaults, each pin (where its
    /// writes and reads go now, and its own backend once its `flipAt` has come), each rollout whose
    /// percent in force is above 0, and the fallbacks used. A backend no live rule uses has none.
    pub(crate) fn rules_using_backends(&self, now: SystemTime) -> Vec<Vec<&str>> {
        let t = self.table();
        let mut users: Vec<Vec<&str>> = vec![Vec::new(); self.backends.len()];
        fn use_by<'a>(users: &mut [Vec<&'a str>], b: BackendId, rule: &'a str) {
            if let Some(u) = users.get_mut(b.index()) {
                u.push(rule);
            }
        }
        use_by(&mut users, t.writes.default, "writes.default");
        use_by(&mut users, t.reads.default, "reads.default");
        for (i, pin) in t.writes.pins.iter().enumerate() {
            let moved = self.steering.pin_move(i, now, self);
            use_by(&mut users, moved.backend, &pin.name);
            if moved.backend != pin.backend && !matches!(moved.stage, Stage::BeforeFlip { .. }) {
                use_by(&mut users, pin.backend, &pin.name);
            }
        }
        for (i, r) in t.reads.rollouts.iter().enumerate() {
            let aborted = self.rollouts.window(i).is_some_and(|w| w.is_aborted());
            if !aborted && r.schedule.at(now).percent.0 > 0 {
                use_by(&mut users, r.to, &r.name);
            }
        }
        for (b, used) in self.fallen_back_to.iter().enumerate() {
            if used.load(std::sync::atomic::Ordering::Relaxed) {
                use_by(&mut users, BackendId::new(b), "fallback");
            }
        }
        users
    }

    /// Fires when the long-running reads that `d` decided should end: at shutdown, or when a reload
    /// moves the pin (with follow reads) or `reads.default` that decided them, so clients list and
    /// watch again from the new version instead of keeping a cache built from the old one.
    pub(crate) fn long_running_stop(&self, d: &Decision) -> WaitForCancellationFutureOwned {
        // A read a pin sent to the backend it moves from at `flipAt` ends then.
        if let (Rule::Pin(i), Class::Read) = (d.rule, d.class)
            && let Some(Some(flip)) = self.flipping.get(i)
            && d.backend != self.table().writes.pins[i].backend
        {
            return flip.token.clone().cancelled_owned();
        }
        let pins = self.table().writes.pins.len();
        let i = match d.rule {
            Rule::Pin(i) => i,
            Rule::ReadDefault => pins,
            Rule::Rollout(_) | Rule::WriteDefault => pins + 1,
        };
        self.moved[i.min(pins + 1)].clone().cancelled_owned()
    }

    /// Feeds the outcome of a request into its rollout's abort window; an abort is logged and shown
    /// in `skewgate_rollout_aborted`.
    pub(crate) fn record_outcome(&self, d: &Decision, failed: bool) {
        if !matches!(d.rule, Rule::Rollout(_)) {
            return;
        }
        if let Some((i, counts)) = self.rollouts.record(d, SystemTime::now(), failed) {
            let t = self.table();
            let name = &t.reads.rollouts[i].name;
            tracing::warn!(
                rollout = %name,
                requests = counts.requests,
                failures = counts.failures,
                ratio = counts.ratio(),
                "rollout aborted: its error ratio broke the threshold; it holds at 0 % until the route file changes"
            );
            self.metrics
                .rollout_aborted
                .with_label_values(&[name.as_str()])
                .set(1);
            // The other replicas learn it at their next read.
            self.gates.publish_now();
        }
    }

    /// Aborts rollout `i` because replica `by`, running this table, aborted it.
    pub(crate) fn adopt_abort(&self, i: usize, by: &str) {
        let Some(window) = self.rollouts.window(i) else {
            return;
        };
        if window.abort(by) {
            let name = &self.table().reads.rollouts[i].name;
            tracing::warn!(rollout = %name, replica = %by, "rollout aborted by another replica; it holds at 0 % until the route file changes");
            self.metrics
                .rollout_aborted
                .with_label_values(&[name.as_str()])
                .set(1);
        }
    }
}

impl LiveState for Routing {
    fn rollout_aborted(&self, rollout: usize) -> bool {
        self.rollouts.rollout_aborted(rollout)
    }

    fn pin_previous(&self, pin: usize) -> Option<BackendId> {
        self.pin_previous.get(pin).copied().flatten()
    }

    fn pin_gate(&self, pin: usize, _now: SystemTime) -> PinGate {
        match self.pin_keys.get(pin) {
            Some(Some(key)) => self.gates.gate(key),
            _ => PinGate::AsWritten,
        }
    }

    fn pin_fleet(&self, pin: usize, now: SystemTime) -> FleetPin {
        let t = self.table();
        let Some(p) = t.writes.pins.get(pin) else {
            return FleetPin::default();
        };
        let own = self.pin_keys.get(pin).and_then(Option::as_deref);
        self.gates.pin_fleet(&p.name, own, now, |name| {
            t.backends
                .iter()
                .position(|b| b.name == name)
                .map(BackendId::new)
        })
    }

    fn serves(
        &self,
        backend: BackendId,
        group: &str,
        version: &str,
        resource: &str,
    ) -> Option<bool> {
        let served = self.backends.get(backend.index())?.served.load();
        served
            .as_ref()
            .map(|s| s.contains(group, version, resource))
    }
}
