//! The metric handles of one routing: decisions, answers by code and resource, requests in flight
//! and their durations, and the gauges of the state at a moment (rollouts, where pins point).

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use prometheus::{Histogram, IntGauge};

use super::{CLASSES, Routing, VERBS, class_index};
use crate::classify::Verb;
use crate::config::BackendId;
use crate::metrics::{COMMON_CODES, ResourceIndex, Slots, code_slot};
use crate::proxy::limits::ClientPermit;
use crate::steer::{Class, Decision, Rule};

/// The `class` label: `write` for requests that change objects, whatever rule steered them (a
/// create is steered as a read unless `writes.verbs` names it).
fn metric_class(d: &Decision, verb: Verb) -> Class {
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
                .mine()
                .with_label_values(&[d.class.as_str(), d.rule_name(t)])
        }) {
            c.inc();
        }
    }

    /// Counts an answered request under its resource (`resource_slot`) and status code.
    pub(crate) fn count_response(&self, d: &Decision, verb: Verb, resource: usize, code: u16) {
        let class = metric_class(d, verb);
        let row = ((d.backend.index() * CLASSES + class_index(class)) * VERBS + verb as usize)
            * ResourceIndex::SLOTS
            + resource.min(ResourceIndex::SLOTS - 1);
        let labels = |code: &str| {
            let resources = self.resources.load();
            let (group, resource) = resources.labels(resource);
            self.metrics.requests.mine().with_label_values(&[
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
                .get(row, || Box::new(Slots::per_worker(COMMON_CODES.len())))?
                .get(c, || labels(&code.to_string()))
        });
        match counter {
            Some(counter) => counter.inc(),
            None => labels(&code.to_string()).inc(),
        }
    }

    /// Sets the gauges of the state at `now` (before /metrics is rendered): each rollout's percent,
    /// abort and error ratio, whether each backend is in use, the backend each pin sends its writes
    /// to, and each endpoint's streams.
    pub(crate) fn refresh_gauges(&self, now: SystemTime) {
        for endpoint in self.backends.iter().flat_map(|b| &b.endpoints) {
            endpoint.refresh_gauges();
        }
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
        for (b, users) in self.rules_using_backends(now).iter().enumerate() {
            let name = [t.backends.get(b).map_or("", |b| b.name.as_str())];
            let in_use = i64::from(!users.is_empty());
            m.backend_in_use.with_label_values(&name).set(in_use);
        }
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
        let class_name = metric_class(d, verb);
        let class = class_index(class_name);
        let slot = (d.backend.index() * CLASSES + class) * VERBS + verb as usize;
        let tracked = self
            .tracked
            .get(slot, || {
                let m = &self.metrics;
                Arc::new(Tracked {
                    inflight: m
                        .inflight
                        .mine()
                        .with_label_values(&[backend, class_name.as_str()]),
                    // Watches are never timed; other verbs may be long-running one request in
                    // another (a log followed), whose durations are not observed either.
                    duration: (verb != Verb::Watch).then(|| {
                        m.request_duration.mine().with_label_values(&[
                            backend,
                            class_name.as_str(),
                            verb_label(verb),
                        ])
                    }),
                })
            })
            .cloned();
        let watches = if verb == Verb::Watch {
            self.watches
                .get(d.backend.index(), || {
                    self.metrics.watches.with_label_values(&[backend])
                })
                .cloned()
        } else {
            None
        };
        if let Some(t) = &tracked {
            t.inflight.inc();
        }
        if let Some(g) = &watches {
            g.inc();
        }
        RequestTracker {
            tracked,
            timed: !long_running,
            watches,
            start,
            permit: None,
        }
    }
}

/// The series one kind of request (backend, class, verb) is counted in while it runs, in one
/// allocation: a request holds one reference, not one per series (each a count written twice).
pub(crate) struct Tracked {
    inflight: IntGauge,
    duration: Option<Histogram>,
}

/// Ends a request's accounting when dropped (with its response body, or at an early error).
pub(crate) struct RequestTracker {
    tracked: Option<Arc<Tracked>>,
    /// Whether its duration is observed (not for long-running requests).
    timed: bool,
    watches: Option<IntGauge>,
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
        if let Some(g) = &self.watches {
            g.dec();
        }
        if let Some(t) = &self.tracked {
            t.inflight.dec();
            if let Some(h) = t.duration.as_ref().filter(|_| self.timed) {
                let took = crate::runtime::turn::now().saturating_duration_since(self.start);
                h.observe(took.as_secs_f64());
            }
        }
    }
}
