//! What the admin endpoints show of the proxy: readiness and the live route table.

use std::time::SystemTime;

use serde_json::{Value, json};

use super::Proxy;
use super::routing::Routing;
use crate::admin::AdminSource;
use crate::config::{Schedule, Selectors};
use crate::steer::Stage;
use crate::upstream::EndpointState;

impl AdminSource for Proxy {
    fn metrics_text(&self) -> String {
        self.routing().refresh_gauges(self.settings.clock.now());
        self.metrics.render()
    }

    /// Ready when every backend that some rule sends traffic to now has a reachable endpoint; a
    /// backend no live rule uses (added ahead of its apiservers, say) does not count.
    fn readiness(&self) -> Result<(), String> {
        if self.draining.load(std::sync::atomic::Ordering::Relaxed) {
            return Err("shutting down: draining before the listener closes".to_owned());
        }
        let routing = self.routing();
        let users = routing.rules_using_backends(self.settings.clock.now());
        let down: Vec<String> = routing
            .backends
            .iter()
            .zip(&users)
            .filter(|(b, rules)| !rules.is_empty() && !b.is_reachable())
            .map(|(b, rules)| {
                format!(
                    "backend {} (used by {}): {}",
                    b.name,
                    rules.join(", "),
                    b.unavailable_reason()
                )
            })
            .collect();
        if down.is_empty() {
            Ok(())
        } else {
            Err(down.join("\n"))
        }
    }

    fn debug_fleet(&self) -> Value {
        let now = self.settings.clock.now();
        match self.presence.get() {
            Some(p) => p.fleet_json(now),
            None => json!({
                "mode": "single",
                "note": "no --advertise-address: this replica publishes nothing and reads no other; its pins move at flipAt by its own clock",
                "state": self.fleet_report(now),
            }),
        }
    }

    fn debug_recent(&self) -> Value {
        self.recent.json(self.settings.clock.now())
    }

    fn debug_shares(&self) -> Value {
        let watches: Vec<Value> = self
            .shares
            .open()
            .into_iter()
            .map(|(watch, clients)| json!({"watch": watch, "clients": clients}))
            .collect();
        json!({ "watches": watches })
    }

    fn debug_skew(&self) -> Value {
        let report = self.schemas.report();
        let routing = self.routing();
        let t = routing.table();
        json!({
            "report": report,
            "text": report.to_string(),
            "suggestedPins": report.suggested_pins(t.backend_name(t.writes.default)),
            "placement": report.placement(t),
        })
    }

    fn debug_routes(&self) -> Value {
        let routing = self.routing();
        let t = routing.table();
        let now = self.settings.clock.now();
        json!({
            "now": rfc3339(now),
            "source": t.source.display().to_string(),
            "name": t.name,
            "reload": self.reloads.json(),
            "backends": backends(&routing, now),
            "writes": {
                "verbs": t.writes.verbs.iter().map(|v| v.as_str()).collect::<Vec<_>>(),
                "default": t.backend_name(t.writes.default),
                "fence": humantime::format_duration(t.writes.fence).to_string(),
                "inFlight": self.writes.inflight(),
                "pins": self.pins(&routing, now),
            },
            "reads": {"default": t.backend_name(t.reads.default), "rollouts": rollouts(&routing, now)},
        })
    }
}

impl Proxy {
    /// The pins, each with its move at `now`.
    fn pins(&self, routing: &Routing, now: SystemTime) -> Vec<Value> {
        let t = routing.table();
        t.writes
            .pins
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let moved = routing.steering.pin_move(i, now, routing);
                // What becomes of a write now: sent (to `goesTo`), held (in the fence, or until it
                // ends when the backend moved from is unknown), or refused (the fleet unsure).
                let writes = match moved.stage {
                    Stage::Fenced { .. } | Stage::Waiting { .. } => "held",
                    Stage::Unsure => "refused",
                    Stage::Settled | Stage::BeforeFlip { .. } => "sent",
                };
                json!({
                    "name": p.name,
                    "backend": t.backend_name(p.backend),
                    "flipAt": p.flip_at.map(rfc3339),
                    "fenceEnds": moved.fence_ends.map(rfc3339),
                    "movingFrom": moved.from.map(|b| t.backend_name(b)),
                    "goesTo": t.backend_name(moved.backend),
                    "writes": writes,
                    "move": moved.stage.describe(),
                    "reads": match p.reads { crate::config::PinReads::Follow => "follow", crate::config::PinReads::Rollout => "rollout" },
                    "selectors": selectors(&p.selectors),
                    "writesHeld": self.metrics.writes_held.with_label_values(&[p.name.as_str()]).get(),
                    "superseded": routing.superseded.get(i).map(|s| s.to_json()),
                })
            })
            .collect()
    }
}

/// The backends, each with its endpoints' state and the rules that use it now.
fn backends(routing: &Routing, now: SystemTime) -> Vec<Value> {
    let users = routing.rules_using_backends(now);
    routing
        .backends
        .iter()
        .zip(users)
        .map(|(b, used_by)| {
            let endpoints: Vec<Value> = b
                .endpoints
                .iter()
                .map(|e| {
                    let state = match e.state() {
                        EndpointState::Ready => "ready",
                        EndpointState::Down => "down",
                        EndpointState::Unknown => "unknown",
                    };
                    let failure = e.failure();
                    json!({
                        "url": e.endpoint.url,
                        "state": state,
                        "since": rfc3339(e.state_since()),
                        "failure": failure.as_ref().map(|f| f.why.as_str()),
                        "failureSince": failure.as_ref().map(|f| rfc3339(f.since)),
                        "connections": e.connections(),
                        "streams": e.active_streams(),
                    })
                })
                .collect();
            json!({
                "name": b.name,
                "version": b.version.map(|(a, b)| format!("v{a}.{b}")),
                "endpoints": endpoints,
                "served": b.served.load().as_ref().map(|s| s.len()),
                "discoveryError": b.discovery_error(),
                "usedBy": used_by,
            })
        })
        .collect()
}

/// The rollouts, each with its percent in force at `now` and its abort window.
fn rollouts(routing: &Routing, now: SystemTime) -> Vec<Value> {
    let t = routing.table();
    t
        .reads
        .rollouts
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let point = r.schedule.at(now);
            let window = routing.rollouts.window(i);
            let aborted = window.is_some_and(|w| w.is_aborted());
            let abort = window.map(|w| abort_window(w, now));
            let steps = match &r.schedule {
                Schedule::Fixed(_) => Value::Null,
                Schedule::Steps { steps, .. } => json!(steps.len()),
            };
            json!({
                "name": r.name,
                "to": t.backend_name(r.to),
                "stickyBy": r.sticky_by.as_str(),
                "percentInForce": if aborted { 0.0 } else { point.percent.as_f64() },
                "schedulePercent": point.percent.as_f64(),
                "step": point.step,
                "steps": steps,
                "next": r.schedule.next(now).map(|(at, percent)| json!({"at": rfc3339(at), "percent": percent.as_f64()})),
                "aborted": aborted,
                "abortWindow": abort,
                "selectors": selectors(&r.selectors),
            })
        })
        .collect()
}

/// A rollout's abort window now: its counts against its limits, and how it aborted, if it has.
fn abort_window(w: &crate::steer::AbortWindow, now: SystemTime) -> Value {
    let c = w.counts(now);
    let limits = w.limits();
    let tripped = w.tripped().map(|t| {
        json!({
            "at": rfc3339(t.at),
            "requests": t.counts.map(|c| c.requests),
            "failures": t.counts.map(|c| c.failures),
            "errorRatio": t.counts.map(|c| c.ratio()),
            "byReplica": t.by,
        })
    });
    json!({
        "aborted": w.is_aborted(),
        "requests": c.requests,
        "failures": c.failures,
        "errorRatio": c.ratio(),
        "threshold": limits.error_ratio,
        "minRequests": limits.min_requests,
        "window": humantime::format_duration(limits.window).to_string(),
        "tripped": tripped,
    })
}

/// A time as the admin JSON writes it (RFC 3339, whole seconds, UTC).
pub(super) fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

fn selectors(s: &Selectors) -> Value {
    let names = |sel: &Option<crate::config::Selector<crate::config::NamePattern>>| {
        sel.as_ref().map(|s| {
            s.include
                .iter()
                .map(|p| p.source().to_owned())
                .chain(s.exclude.iter().map(|p| format!("!{}", p.source())))
                .collect::<Vec<_>>()
        })
    };
    json!({
        "namespaces": names(&s.namespaces),
        "users": names(&s.users),
        "groups": names(&s.groups),
        "clients": s.clients.as_ref().map(|c| c.include.iter().map(|p| p.to_string()).chain(c.exclude.iter().map(|p| format!("!{p}"))).collect::<Vec<_>>()),
        "resources": s.resources.as_ref().map(|r| r.include.iter().map(|p| p.to_string()).chain(r.exclude.iter().map(|p| format!("!{p}"))).collect::<Vec<_>>()),
    })
}
