//! The live routing state that one route table load produces: the steering, the backend pools, and
//! the metric handles the request path uses. Swapped whole on reload.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use prometheus::{Histogram, IntCounter, IntGauge};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::discovery::MergedDiscovery;
use super::limits::ClientPermit;
use crate::classify::RequestInfo;
use crate::classify::{Client, Verb, classify};
use crate::config::{BackendId, RouteTable};
use crate::metrics::{COMMON_CODES, Metrics, ResourceIndex, Slots, TableLabels, code_slot};
use crate::steer::{
    Class, Clock, Decision, LiveState, PinMove, RolloutState, Rule, Stage, SteerRequest, Steering,
    previous_backends,
};
use crate::upstream::{BackendPool, Upstreams};

/// Number of `Verb` variants: the width of the per-verb metric tables.
const VERBS: usize = Verb::Other as usize + 1;
const CLASSES: usize = 2;

/// One route table, ready to serve.
pub(crate) struct Routing {
    /// The decisions.
    pub steering: Steering,
    /// The backends' pools, by `BackendId`.
    pub backends: Vec<Arc<BackendPool>>,
    /// The rollouts' abort windows.
    pub rollouts: RolloutState,
    /// For each pin with `flipAt`, the backend it had in the previous table, when that differs.
    pin_previous: Vec<Option<BackendId>>,
    /// Discovery merged across the backends, rebuilt when discovery refreshes.
    discovery: arc_swap::ArcSwapOption<MergedDiscovery>,
    /// Fired when the reads a rule sends somewhere move elsewhere: one per pin, then one for
    /// `reads.default`, then one for everything else (fired only at shutdown).
    moved: Vec<CancellationToken>,
    /// For each pin that was before its `flipAt` when this table loaded: fired at `flipAt`, to end
    /// the long-running reads it sent to the backend it moves from (a child of its `moved`).
    flipping: Vec<Option<CancellationToken>>,
    /// Whether the resources the rules name were checked against discovery (once per table).
    resources_checked: std::sync::atomic::AtomicBool,
    /// Backends a request fell back to since this table loaded (they count for readiness).
    fallen_back_to: Box<[std::sync::atomic::AtomicBool]>,
    metrics: Arc<Metrics>,
    /// The resources with label values of their own (grows as discovery finds more).
    resources: arc_swap::ArcSwap<ResourceIndex>,
    /// By backend, class, verb and resource slot: by code.
    requests: Slots<Box<Slots<IntCounter>>>,
    durations: Slots<Histogram>,
    inflight: Slots<IntGauge>,
    watches: Slots<IntGauge>,
    decisions: Slots<IntCounter>,
}

fn class_index(c: Class) -> usize {
    match c {
        Class::Write => 0,
        Class::Read => 1,
    }
}

/// The `class` label: `write` for requests that change objects, whatever rule steered them (a
/// create is steered as a read unless `writes.verbs` names it).
fn class_label(d: &Decision, verb: Verb) -> Class {
    if d.class == Class::Write || Verb::WRITES.contains(&verb) {
        Class::Write
    } else {
        Class::Read
    }
}

fn verb_label(v: Verb) -> &'static str {
    match v.as_str() {
        "" => "unknown",
        s => s,
    }
}

impl Routing {
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
        let resources = previous.map_or_else(
            || {
                let builtin = crate::classify::builtin_resources();
                Arc::new(
                    ResourceIndex::default()
                        .extended(builtin)
                        .unwrap_or_default(),
                )
            },
            |p| p.resources.load_full(),
        );
        let pin_previous = previous_backends(
            &table,
            previous.map(|p| (p.table(), p.pin_previous.as_slice())),
            now,
        );
        let moved: Vec<CancellationToken> = (0..table.writes.pins.len() + 2)
            .map(|_| shutdown.child_token())
            .collect();
        let flipping = table
            .writes
            .pins
            .iter()
            .enumerate()
            .map(|(i, pin)| {
                let at = PinMove::at(pin, pin_previous[i], table.writes.fence, now);
                let Stage::BeforeFlip { at, .. } = at.stage else {
                    return None;
                };
                let flip = moved[i].child_token();
                tokio::spawn(fire_at(at, clock.clone(), flip.clone()));
                Some(flip)
            })
            .collect();
        let routing = Routing {
            discovery: arc_swap::ArcSwapOption::empty(),
            pin_previous,
            moved,
            flipping,
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
            durations: Slots::new(n * CLASSES * VERBS),
            inflight: Slots::new(n * CLASSES),
            watches: Slots::new(n),
            decisions: Slots::new(rules * CLASSES),
        };
        routing.refresh_discovery(now);
        routing
    }

    /// The merged discovery, once some backend has been discovered.
    pub(crate) fn discovery(&self) -> Option<Arc<MergedDiscovery>> {
        self.discovery.load_full()
    }

    /// Rebuilds the merged discovery from what the backends serve now: the backend `reads.default`
    /// names first, then the route file's order; each group/version from the backend this table
    /// sends a list of its first resource to.
    pub(crate) fn refresh_discovery(&self, now: SystemTime) {
        let primary = self.table().reads.default;
        let order = std::iter::once(primary)
            .chain(BackendId::all(self.backends.len()).filter(|b| *b != primary));
        let served: Vec<_> = order
            .filter_map(|b| Some((b, self.backends.get(b.index())?.served.load_full()?)))
            .collect();
        self.extend_resources(served.iter().map(|(_, s)| &**s));
        let merged = MergedDiscovery::build(&served, |group, version, resource| {
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
        });
        self.discovery.store(merged.map(Arc::new));
    }

    /// Gives the resources the backends serve label values of their own.
    fn extend_resources<'s>(&self, served: impl Iterator<Item = &'s crate::upstream::Served>) {
        let pairs: Vec<(&str, &str)> = served
            .flat_map(|s| s.lists.iter())
            .flat_map(|l| {
                let resources = l.list.get("resources").and_then(|r| r.as_array());
                resources
                    .into_iter()
                    .flatten()
                    .filter_map(|r| r.get("name")?.as_str())
                    .filter(|name| !name.contains('/'))
                    .map(|name| (l.group.as_str(), name))
            })
            .collect();
        let discovered = !pairs.is_empty();
        if let Some(grown) = self.resources.load().extended(pairs.into_iter()) {
            self.resources.store(Arc::new(grown));
        }
        if discovered
            && !self
                .resources_checked
                .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            self.warn_of_unserved_resources();
        }
    }

    /// Warns (once per table, after discovery) of each resource a rule names that Kubernetes does
    /// not ship and no backend serves: a custom resource misspelt, or not installed yet.
    fn warn_of_unserved_resources(&self) {
        use crate::config::Part;
        let t = self.table();
        let index = self.resources.load();
        let rules = t
            .writes
            .pins
            .iter()
            .map(|p| (p.name.as_str(), &p.selectors))
            .chain(
                t.reads
                    .rollouts
                    .iter()
                    .map(|r| (r.name.as_str(), &r.selectors)),
            )
            .chain(t.guards.iter().map(|g| (g.name.as_str(), &g.selectors)));
        for (rule, selectors) in rules {
            let Some(resources) = &selectors.resources else {
                continue;
            };
            for p in resources.include.iter().chain(&resources.exclude) {
                if let (Part::Exact(r), Part::Exact(g)) = (&p.resource, &p.group)
                    && !index.contains(g, r)
                {
                    let resource = if g.is_empty() {
                        r.clone()
                    } else {
                        format!("{r}.{g}")
                    };
                    tracing::warn!(
                        rule,
                        resource,
                        "no backend serves this resource (by discovery): is it misspelt, or its custom resource definition not installed yet?"
                    );
                }
            }
        }
    }

    /// The resource slot of a request, for `count_response`.
    pub(crate) fn resource_slot(&self, info: &RequestInfo<'_>) -> usize {
        self.resources.load().slot(info)
    }

    /// The route table.
    pub(crate) fn table(&self) -> &RouteTable {
        self.steering.table()
    }

    fn backend_name(&self, d: &Decision) -> &str {
        self.table().backend_name(d.backend)
    }

    /// Counts a decision under its rule.
    pub(crate) fn count_decision(&self, d: &Decision) {
        let t = self.table();
        let rule = match d.rule {
            Rule::Pin(i) => i,
            Rule::Rollout(i) => t.writes.pins.len() + i,
            Rule::WriteDefault => t.writes.pins.len() + t.reads.rollouts.len(),
            Rule::ReadDefault => t.writes.pins.len() + t.reads.rollouts.len() + 1,
        };
        let slot = rule * CLASSES + class_index(d.class);
        if let Some(c) = self.decisions.get(slot, || {
            self.metrics
                .decisions
                .with_label_values(&[d.class.as_str(), d.rule_name(t)])
        }) {
            c.inc();
        }
    }

    /// Counts an answered request under its resource (`resource_slot`) and status code.
    pub(crate) fn count_response(&self, d: &Decision, verb: Verb, resource: usize, code: u16) {
        let class = class_label(d, verb);
        let row = ((d.backend.index() * CLASSES + class_index(class)) * VERBS + verb as usize)
            * ResourceIndex::SLOTS
            + resource.min(ResourceIndex::SLOTS - 1);
        let labels = |code: &str| {
            let resources = self.resources.load();
            let (group, resource) = resources.labels(resource);
            self.metrics.requests.with_label_values(&[
                self.backend_name(d),
                class.as_str(),
                verb_label(verb),
                group,
                resource,
                code,
            ])
        };
        let counter = code_slot(code).and_then(|c| {
            self.requests
                .get(row, || Box::new(Slots::new(COMMON_CODES.len())))?
                .get(c, || labels(&code.to_string()))
        });
        match counter {
            Some(counter) => counter.inc(),
            None => labels(&code.to_string()).inc(),
        }
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
            return flip.clone().cancelled_owned();
        }
        let pins = self.table().writes.pins.len();
        let i = match d.rule {
            Rule::Pin(i) => i,
            Rule::ReadDefault => pins,
            Rule::Rollout(_) | Rule::WriteDefault => pins + 1,
        };
        self.moved[i.min(pins + 1)].clone().cancelled_owned()
    }

    /// After `next` replaced this routing: ends the long-running reads whose pin or default moved,
    /// and counts the pins that moved.
    pub(crate) fn end_moved_reads(&self, next: &Routing) {
        let (old, new) = (self.table(), next.table());
        for (i, pin) in old.writes.pins.iter().enumerate() {
            let before = old.backend_name(pin.backend);
            let after = new
                .writes
                .pins
                .iter()
                .find(|p| p.name == pin.name)
                .map(|p| new.backend_name(p.backend));
            if after != Some(before) {
                tracing::info!(pin = %pin.name, from = before, to = after.unwrap_or("(removed)"), "pin moved; ending the watches it sent to the old backend");
                self.metrics
                    .pin_moves
                    .with_label_values(&[pin.name.as_str()])
                    .inc();
                self.moved[i].cancel();
            }
        }
        if old.backend_name(old.reads.default) != new.backend_name(new.reads.default) {
            self.moved[old.writes.pins.len()].cancel();
        }
        if old.backend_name(old.writes.default) != new.backend_name(new.writes.default) {
            self.metrics
                .pin_moves
                .with_label_values(&["writes.default"])
                .inc();
        }
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
        }
    }

    /// Sets the gauges of the state at `now` (before /metrics is rendered): each rollout's percent,
    /// abort and error ratio, and the backend each pin sends its writes to.
    pub(crate) fn refresh_gauges(&self, now: SystemTime) {
        let m = &self.metrics;
        for (i, r) in self.table().reads.rollouts.iter().enumerate() {
            let name = [r.name.as_str()];
            let window = self.rollouts.window(i);
            let aborted = window.is_some_and(|w| w.is_aborted());
            let percent = if aborted {
                0.0
            } else {
                r.schedule.at(now).percent.as_f64()
            };
            m.rollout_percent.with_label_values(&name).set(percent);
            m.rollout_aborted
                .with_label_values(&name)
                .set(i64::from(aborted));
            if let Some(w) = window {
                m.rollout_error_ratio
                    .with_label_values(&name)
                    .set(w.counts(now).ratio());
            }
        }
        let t = self.table();
        let mut in_force: Vec<(&str, BackendId)> = t
            .writes
            .pins
            .iter()
            .enumerate()
            .map(|(i, pin)| {
                (
                    pin.name.as_str(),
                    self.steering.pin_move(i, now, self).backend,
                )
            })
            .collect();
        in_force.push(("writes.default", t.writes.default));
        in_force.push(("reads.default", t.reads.default));
        for (pin, backend) in in_force {
            for b in BackendId::all(t.backends.len()) {
                let labels = [pin, t.backend_name(b)];
                if b == backend {
                    m.pin_backend.with_label_values(&labels).set(1);
                } else {
                    let _ = m.pin_backend.remove_label_values(&labels);
                }
            }
        }
    }

    /// Starts tracking a request: in flight now, and (unless long-running) timed until it ends.
    pub(crate) fn track(
        &self,
        d: &Decision,
        verb: Verb,
        long_running: bool,
        start: Instant,
    ) -> RequestTracker {
        let backend = self.backend_name(d);
        let class_name = class_label(d, verb);
        let class = class_index(class_name);
        let inflight = self
            .inflight
            .get(d.backend.index() * CLASSES + class, || {
                self.metrics
                    .inflight
                    .with_label_values(&[backend, class_name.as_str()])
            })
            .cloned();
        let is_watch = verb == Verb::Watch;
        let watches = if is_watch {
            self.watches
                .get(d.backend.index(), || {
                    self.metrics.watches.with_label_values(&[backend])
                })
                .cloned()
        } else {
            None
        };
        let duration = if long_running {
            None
        } else {
            self.durations
                .get(
                    (d.backend.index() * CLASSES + class) * VERBS + verb as usize,
                    || {
                        self.metrics.request_duration.with_label_values(&[
                            backend,
                            class_name.as_str(),
                            verb_label(verb),
                        ])
                    },
                )
                .cloned()
        };
        if let Some(g) = &inflight {
            g.inc();
        }
        if let Some(g) = &watches {
            g.inc();
        }
        RequestTracker {
            inflight,
            watches,
            duration,
            start,
            permit: None,
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

/// Fires `token` once `clock` reads `at` or later (polled, so that a clock that jumps is followed);
/// returns early when the token fires otherwise (the pin moved again, shutdown).
async fn fire_at(at: SystemTime, clock: Arc<dyn Clock>, token: CancellationToken) {
    while let Ok(left) = at.duration_since(clock.now()) {
        if left.is_zero() {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep(left.min(std::time::Duration::from_millis(250))) => {}
            _ = token.cancelled() => return,
        }
    }
    token.cancel();
}

/// Ends a request's accounting when dropped (with its response body, or at an early error).
pub(crate) struct RequestTracker {
    inflight: Option<IntGauge>,
    watches: Option<IntGauge>,
    duration: Option<Histogram>,
    start: Instant,
    permit: Option<ClientPermit>,
}

impl RequestTracker {
    /// Keeps the client's place among its requests in flight until the response ends.
    pub(crate) fn hold(&mut self, permit: Option<ClientPermit>) {
        self.permit = permit;
    }
}

impl Drop for RequestTracker {
    fn drop(&mut self) {
        if let Some(g) = &self.inflight {
            g.dec();
        }
        if let Some(g) = &self.watches {
            g.dec();
        }
        if let Some(h) = &self.duration {
            h.observe(self.start.elapsed().as_secs_f64());
        }
    }
}
