//! Series that follow the route table: at each load, the series of backends, endpoints and rules
//! the table no longer has are removed (an alert on a removed endpoint's `skewgate_endpoint_ready 0`
//! would fire forever), and the counters of the ones it has start at 0 (so a rate or a ratio over
//! them exists before the first event).

use std::collections::{HashMap, HashSet};

use prometheus::core::{Collector, MetricVec, MetricVecBuilder};

use super::{Metrics, PerWorker};
use crate::config::RouteTable;

/// The reasons of `skewgate_upstream_errors_total`.
pub(crate) const UPSTREAM_REASONS: [&str; 6] = [
    "connect",
    "reset",
    "timeout",
    "headers_too_large",
    "unavailable",
    "health",
];

/// The reasons of `skewgate_shared_watch_own_total`.
pub(crate) const SHARE_OWN_REASONS: [&str; 6] = [
    "initial_state",
    "behind",
    "parameters",
    "credentials",
    "unauthorized",
    "upstream",
];

/// The label values a route table gives series to.
pub(crate) struct TableLabels {
    backends: HashSet<String>,
    endpoints: HashSet<(String, String)>,
    /// Pins, and `writes.default`, `reads.default`.
    pins: HashSet<String>,
    rollouts: HashSet<String>,
    guards: HashSet<String>,
    shares: HashSet<String>,
}

impl TableLabels {
    /// The label values of `table`.
    pub(crate) fn of(table: &RouteTable) -> TableLabels {
        let names = |it: &mut dyn Iterator<Item = &String>| it.cloned().collect::<HashSet<_>>();
        let mut pins = names(&mut table.writes.pins.iter().map(|p| &p.name));
        pins.extend(["writes.default".to_owned(), "reads.default".to_owned()]);
        TableLabels {
            backends: names(&mut table.backends.iter().map(|b| &b.name)),
            endpoints: table
                .backends
                .iter()
                .flat_map(|b| b.endpoints.iter().map(|e| (b.name.clone(), e.url.clone())))
                .collect(),
            pins,
            rollouts: names(&mut table.reads.rollouts.iter().map(|r| &r.name)),
            guards: names(&mut table.guards.iter().map(|g| &g.name)),
            shares: names(&mut table.shares.iter().map(|s| &s.name)),
        }
    }

    fn backend(&self, labels: &Labels<'_>, name: &str) -> bool {
        labels.get(name).is_none_or(|b| self.backends.contains(*b))
    }

    fn rule(&self, labels: &Labels<'_>, name: &str) -> bool {
        labels
            .get(name)
            .is_none_or(|r| self.pins.contains(*r) || self.rollouts.contains(*r))
    }
}

type Labels<'a> = HashMap<&'a str, &'a str>;

/// Removes the series of `vec` that `keep` does not keep.
fn prune<B: MetricVecBuilder>(vec: &MetricVec<B>, keep: impl Fn(&Labels<'_>) -> bool) {
    for family in vec.collect() {
        for metric in family.get_metric() {
            let labels: Labels<'_> = metric
                .get_label()
                .iter()
                .map(|p| (p.name(), p.value()))
                .collect();
            if !keep(&labels) {
                let _ = vec.remove(&labels);
            }
        }
    }
}

/// `prune` for each worker's copy of a family.
fn prune_each<B: MetricVecBuilder>(
    family: &PerWorker<MetricVec<B>>,
    keep: impl Fn(&Labels<'_>) -> bool,
) {
    for vec in family.all() {
        prune(vec, &keep);
    }
}

impl Metrics {
    /// Makes the series follow `table`: removes those of backends, endpoints and rules it no
    /// longer has, and starts the counters of the ones it has at 0.
    pub(crate) fn follow(&self, table: &RouteTable, keep: &TableLabels) {
        let backend = |l: &Labels<'_>| keep.backend(l, "backend");
        prune_each(&self.requests, backend);
        prune_each(&self.request_duration, backend);
        prune_each(&self.inflight, backend);
        prune(&self.watches, backend);
        prune(&self.upstream_errors, backend);
        prune(&self.backend_in_use, backend);
        let endpoint = |l: &Labels<'_>| match (l.get("backend"), l.get("endpoint")) {
            (Some(b), Some(e)) => keep.endpoints.contains(&((*b).to_owned(), (*e).to_owned())),
            _ => true,
        };
        prune(&self.upstream_connections, endpoint);
        prune(&self.upstream_streams, endpoint);
        prune(&self.endpoint_ready, endpoint);
        prune(&self.fallbacks, |l| {
            keep.backend(l, "from") && keep.backend(l, "to")
        });
        prune_each(&self.decisions, |l| keep.rule(l, "rule"));
        prune(&self.pin_moves, |l| keep.rule(l, "pin"));
        prune(&self.pin_fence_ends, |l| keep.rule(l, "pin"));
        prune(&self.pin_moves_superseded, |l| keep.rule(l, "pin"));
        prune(&self.writes_held, |l| keep.rule(l, "pin"));
        prune(&self.pin_backend, |l| {
            keep.rule(l, "pin") && keep.backend(l, "backend")
        });
        let rollout = |l: &Labels<'_>| l.get("rollout").is_none_or(|r| keep.rollouts.contains(*r));
        prune(&self.rollout_percent, rollout);
        prune(&self.rollout_aborted, rollout);
        prune(&self.rollout_error_ratio, rollout);
        prune(&self.guarded_updates, |l| {
            l.get("guard").is_none_or(|g| keep.guards.contains(*g))
        });
        prune(&self.guard_checks, |l| {
            l.get("guard").is_none_or(|g| keep.guards.contains(*g))
        });
        let share = |l: &Labels<'_>| l.get("rule").is_none_or(|r| keep.shares.contains(*r));
        prune(&self.shared_watch_joins, share);
        prune(&self.shared_watch_own, share);
        prune(&self.shared_watch_denied, share);
        self.start_at_zero(table);
    }

    /// The counters of the table's backends and rules, at 0 until their first event.
    fn start_at_zero(&self, table: &RouteTable) {
        for b in &table.backends {
            for reason in UPSTREAM_REASONS {
                self.upstream_errors
                    .with_label_values(&[b.name.as_str(), reason]);
            }
            self.watches.with_label_values(&[b.name.as_str()]);
            for to in table.backends.iter().filter(|t| t.name != b.name) {
                self.fallbacks
                    .with_label_values(&[b.name.as_str(), to.name.as_str()]);
            }
        }
        for p in &table.writes.pins {
            self.pin_moves.with_label_values(&[p.name.as_str()]);
            self.pin_fence_ends.with_label_values(&[p.name.as_str()]);
            for outcome in ["abandoned", "timed"] {
                self.pin_moves_superseded
                    .with_label_values(&[p.name.as_str(), outcome]);
            }
            self.writes_held.with_label_values(&[p.name.as_str()]);
            for class in ["write", "read"] {
                self.decisions
                    .shared()
                    .with_label_values(&[class, p.name.as_str()]);
            }
        }
        self.pin_moves.with_label_values(&["writes.default"]);
        self.decisions
            .shared()
            .with_label_values(&["write", "writes.default"]);
        self.decisions
            .shared()
            .with_label_values(&["read", "reads.default"]);
        // A guard's updates, for each resource it names.
        for g in &table.guards {
            let named = g.selectors.resources.iter().flat_map(|s| &s.include);
            for r in named {
                if let crate::config::Part::Exact(resource) = &r.resource {
                    for encoding in ["json", "yaml", "protobuf"] {
                        self.guarded_updates.with_label_values(&[
                            g.name.as_str(),
                            g.action.as_str(),
                            resource,
                            encoding,
                        ]);
                    }
                }
            }
            for encoding in ["json", "yaml", "protobuf"] {
                for outcome in ["nothing_lost", "lost", "cannot_check"] {
                    self.guard_checks
                        .with_label_values(&[g.name.as_str(), encoding, outcome]);
                }
            }
        }
        for r in &table.reads.rollouts {
            self.decisions
                .shared()
                .with_label_values(&["read", r.name.as_str()]);
        }
        self.shares_at_zero(table);
    }

    /// The counters of the table's `shareWatches` rules, and of shared watches' starts.
    fn shares_at_zero(&self, table: &RouteTable) {
        for result in ["up", "resumed", "failed"] {
            self.shared_watch_starts.with_label_values(&[result]);
        }
        for s in &table.shares {
            let rule = s.name.as_str();
            for from in ["new", "live"] {
                self.shared_watch_joins.with_label_values(&[rule, from]);
            }
            for reason in SHARE_OWN_REASONS {
                self.shared_watch_own.with_label_values(&[rule, reason]);
            }
            self.shared_watch_denied.with_label_values(&[rule]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> RouteTable {
        crate::config::parse_route_table(std::path::Path::new("t.yaml"), text).expect("valid")
    }

    const BEFORE: &str = "apiVersion: skewgate.io/v1alpha1
kind: RouteTable
backends:
  - {name: old, endpoints: [http://127.0.0.1:1, http://127.0.0.1:2]}
  - {name: new, endpoints: [http://127.0.0.1:3]}
writes:
  default: old
  pins: [{name: team-a, namespaces: [a], backend: new}]
reads:
  default: old
  rollouts: [{name: canary, to: new, percent: 10}]
";

    #[test]
    fn a_reload_removes_the_series_of_what_the_table_no_longer_has() {
        let m = Metrics::new();
        let before = table(BEFORE);
        m.follow(&before, &TableLabels::of(&before));
        m.endpoint_ready
            .with_label_values(&["old", "http://127.0.0.1:2"])
            .set(0);
        m.endpoint_ready
            .with_label_values(&["old", "http://127.0.0.1:1"])
            .set(1);
        m.rollout_percent.with_label_values(&["canary"]).set(10.0);
        m.pin_backend.with_label_values(&["team-a", "new"]).set(1);
        let text = m.render();
        assert!(
            text.contains(r#"skewgate_upstream_errors_total{backend="new",reason="connect"} 0"#)
        );
        assert!(text.contains(r#"skewgate_decisions_total{class="read",rule="canary"} 0"#));

        let after = table(
            &BEFORE
                .replace(", http://127.0.0.1:2", "")
                .replace("name: canary", "name: canary-2")
                .replace("name: team-a", "name: team-b"),
        );
        m.follow(&after, &TableLabels::of(&after));
        let text = m.render();
        assert!(!text.contains("127.0.0.1:2"), "{text}");
        assert!(text.contains(r#"endpoint="http://127.0.0.1:1""#));
        assert!(!text.contains(r#"rollout="canary""#), "{text}");
        assert!(!text.contains(r#"rule="canary""#), "{text}");
        assert!(!text.contains("team-a"), "{text}");
        assert!(text.contains(r#"skewgate_pin_moves_total{pin="team-b"} 0"#));
        assert!(text.contains(r#"skewgate_pin_fence_ends_total{pin="team-b"} 0"#));
        assert!(
            text.contains(r#"skewgate_watches{backend="new"} 0"#),
            "{text}"
        );
        assert!(
            text.contains(r#"skewgate_fallbacks_total{from="old",to="new"} 0"#),
            "{text}"
        );
    }
}
