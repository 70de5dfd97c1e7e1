//! When a pin's move comes, as this routing sees it: each pin's move key, and the tokens that end
//! the reads a pin sent to the old backend when its move comes (at `flipAt`, or when the fleet
//! makes it).

use std::sync::Arc;
use std::time::SystemTime;

use tokio_util::sync::CancellationToken;

use crate::cluster::{FleetGates, move_key};
use crate::config::{BackendId, RouteTable};
use crate::metrics::Metrics;
use crate::steer::{Clock, PinGate, Stage, previous_backends};

/// What a table's pins take over from the routing they replace.
pub(super) struct PinsCarried {
    /// Each pin's move key (`pin_keys`).
    pub(super) keys: Vec<Option<String>>,
    /// For each pin with `flipAt`, where its writes went by the routing replaced.
    pub(super) previous: Vec<Option<BackendId>>,
    /// Each pin's superseded moves.
    pub(super) superseded: Vec<super::superseded::Superseded>,
    /// Whether the table has moves the one before did not.
    pub(super) new_moves: bool,
}

impl PinsCarried {
    /// `table`'s pins over `previous` at `now`: where their writes go, what the reload superseded
    /// (logged and counted), and this replica's readiness for each move stamped.
    pub(super) fn over(
        table: &RouteTable,
        previous: Option<&super::Routing>,
        (gates, metrics): (&Arc<FleetGates>, &Arc<Metrics>),
        now: SystemTime,
    ) -> PinsCarried {
        // Where the pins' writes go now, by the table replaced (the fleet's moves included).
        let old_writes: Option<Vec<Option<BackendId>>> = previous.map(|p| {
            (0..p.table().writes.pins.len())
                .map(|i| p.steering.pin_move(i, now, p).writes_at())
                .collect()
        });
        let old = previous.zip(old_writes.as_deref());
        let previous_writes = previous_backends(table, old.map(|(p, w)| (p.table(), w)));
        let keys = pin_keys(table);
        let superseded =
            super::superseded::superseded(previous, table, (&keys, &previous_writes), metrics, now);
        let settle = gates.settle_time();
        let new_moves = super::superseded::new_moves(table, (&keys, previous), settle, now);
        // This replica runs each move from now, whenever it next publishes.
        for key in keys.iter().flatten() {
            gates.ready_since(key, now);
        }
        PinsCarried {
            keys,
            previous: previous_writes,
            superseded,
            new_moves,
        }
    }
}

/// Each pin's move (`cluster::move_key`), when it has `flipAt`.
fn pin_keys(table: &RouteTable) -> Vec<Option<String>> {
    table
        .writes
        .pins
        .iter()
        .map(|p| {
            let at = humantime::format_rfc3339_seconds(p.flip_at?).to_string();
            Some(move_key(&p.name, table.backend_name(p.backend), &at))
        })
        .collect()
}

/// A pin's move to come: the token fired when it comes, and where its reads go until then.
pub(super) struct Flipping {
    pub(super) token: CancellationToken,
    pub(super) from: crate::config::BackendId,
}

/// For each pin of `routing` before its move, a token fired when the move comes (at `flipAt`, or
/// when the fleet makes it): a child of the pin's `moved`, ending the reads it sent to the old
/// backend.
pub(super) fn flipping(
    routing: &super::Routing,
    (clock, metrics): (&Arc<dyn Clock>, &Arc<Metrics>),
    now: SystemTime,
) -> Vec<Option<Flipping>> {
    let table = routing.table();
    let gates = &routing.gates;
    table
        .writes
        .pins
        .iter()
        .enumerate()
        .map(|(i, pin)| {
            let key = routing.pin_keys.get(i).cloned().flatten();
            let at = routing.steering.own_move(i, now, routing);
            let Stage::BeforeFlip { at, from } = at.stage else {
                return None;
            };
            let flip = routing.moved.get(i)?.child_token();
            let flipped = Flipped {
                key: key.clone().unwrap_or_default(),
                pin: pin.name.clone(),
                from: table.backend_name(from).to_owned(),
                to: table.backend_name(pin.backend).to_owned(),
                fence: table.writes.fence,
                gates: gates.clone(),
                metrics: metrics.clone(),
            };
            let fleet = key.map(|k| (gates.clone(), k));
            let token = flip.clone();
            let clock = clock.clone();
            tokio::spawn(async move {
                if let Some(at) = fire_at(at, fleet, clock.clone(), token).await {
                    flipped.announce(at, &*clock).await;
                }
            });
            Some(Flipping { token: flip, from })
        })
        .collect()
}

/// Fires `token` once `clock` reads `at` or later, and the fleet (if any) has made the move
/// (polled, so that a clock that jumps is followed), and says when the move came; returns early,
/// with nothing, when the token fires otherwise (the pin moved again, shutdown).
async fn fire_at(
    at: SystemTime,
    fleet: Option<(Arc<FleetGates>, String)>,
    clock: Arc<dyn Clock>,
    token: CancellationToken,
) -> Option<SystemTime> {
    // With the fleet, at the time it makes the move (known at `flipAt` or later).
    let when = || match &fleet {
        Some((gates, key)) => match gates.gate(key) {
            PinGate::At(e) => Some(e.max(at)),
            PinGate::NotYet { .. } => None,
            PinGate::AsWritten => Some(at),
        },
        None => Some(at),
    };
    loop {
        let came = when();
        let left = came.map(|t| t.duration_since(clock.now()).unwrap_or_default());
        if left.is_some_and(|l| l.is_zero()) {
            token.cancel();
            return came;
        }
        let wait = left.map_or(std::time::Duration::from_millis(250), |l| {
            l.min(std::time::Duration::from_millis(250))
        });
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = token.cancelled() => return None,
        }
    }
}

/// A pin's flip as the log and the metrics tell it: once per move on this replica, however many
/// tables it ran meanwhile.
struct Flipped {
    key: String,
    pin: String,
    from: String,
    to: String,
    fence: std::time::Duration,
    gates: Arc<FleetGates>,
    metrics: Arc<Metrics>,
}

impl Flipped {
    /// The flip, which came at `at`: logged and counted (`skewgate_pin_moves_total`); then the
    /// end of its fence, when writes go to the new backend (`skewgate_pin_fence_ends_total`).
    async fn announce(self, at: SystemTime, clock: &dyn Clock) {
        if !self.gates.first_flip(&self.key) {
            return;
        }
        let fence = humantime::format_duration(self.fence).to_string();
        tracing::info!(pin = %self.pin, from = %self.from, to = %self.to, %fence, "pin flipped: its reads go to the new backend, its writes are held until the fence ends");
        let label = [self.pin.as_str()];
        self.metrics.pin_moves.with_label_values(&label).inc();
        let end = at + self.fence;
        loop {
            let left = end.duration_since(clock.now()).unwrap_or_default();
            if left.is_zero() {
                break;
            }
            tokio::time::sleep(left.min(std::time::Duration::from_millis(250))).await;
        }
        tracing::info!(pin = %self.pin, to = %self.to, "pin's fence ended: its writes go to the new backend");
        self.metrics.pin_fence_ends.with_label_values(&label).inc();
    }
}

impl super::Routing {
    /// A write decided as `d` before its pin's move, checked again at `now` as it is sent: if the
    /// move came while it waited (for its body, the update guard, or a process frozen and
    /// resumed), how long the pin's fence still holds (at least a second). Nothing for every other
    /// decision.
    pub(crate) fn moved_since_decided(
        &self,
        d: &crate::steer::Decision,
        now: SystemTime,
    ) -> Option<std::time::Duration> {
        let (crate::steer::Rule::Pin(i), crate::steer::Reason::BeforeFlip) = (d.rule, d.reason)
        else {
            return None;
        };
        self.table().writes.pins.get(i)?;
        let now_moving = self.steering.pin_move(i, now, self);
        if now_moving.backend == d.backend && matches!(now_moving.stage, Stage::BeforeFlip { .. }) {
            return None;
        }
        let left = now_moving
            .fence_ends
            .and_then(|end| end.duration_since(now).ok())
            .unwrap_or_default();
        Some(left.max(std::time::Duration::from_secs(1)))
    }
}

impl super::Routing {
    /// After `next` replaced this routing: ends the long-running reads whose pin or default moved,
    /// and counts the pins that moved.
    ///
    /// With several replicas, a pin moved without `flipAt` moves on each replica when that replica
    /// reads the file: for a moment two replicas send its writes to two versions (the fence holds
    /// them per replica only), which is warned of.
    pub(crate) fn end_moved_reads(&self, next: &super::Routing, several_replicas: bool) {
        let (old, new) = (self.table(), next.table());
        for (i, pin) in old.writes.pins.iter().enumerate() {
            let before = old.backend_name(pin.backend);
            let moved_to = new.writes.pins.iter().find(|p| p.name == pin.name);
            let after = moved_to.map(|p| new.backend_name(p.backend));
            if after != Some(before) {
                if several_replicas && moved_to.is_some_and(|p| p.flip_at.is_none()) {
                    tracing::warn!(pin = %pin.name, "pin moved without flipAt while several replicas serve: each moves when it reads the file; give flipAt (a moment all replicas will have read the file by) so they move together");
                }
                // A pin with a flip to come is counted when it flips (routing/moves.rs).
                let j = new.writes.pins.iter().position(|p| p.name == pin.name);
                let flip = j
                    .and_then(|j| next.flipping.get(j))
                    .and_then(Option::as_ref);
                if flip.is_none() {
                    self.metrics
                        .pin_moves
                        .with_label_values(&[pin.name.as_str()])
                        .inc();
                }
                match flip {
                    // Its reads stay where they were until the move: the watches they hold end
                    // when it comes, not at the reload.
                    Some(f) if new.backend_name(f.from) == before => {
                        tracing::info!(pin = %pin.name, from = before, to = after.unwrap_or("(removed)"), "pin moves at its flipAt; the watches it sent to the old backend end then");
                        let (came, moved) = (f.token.clone(), self.moved[i].clone());
                        tokio::spawn(async move {
                            tokio::select! {
                                () = came.cancelled() => moved.cancel(),
                                () = moved.cancelled() => {}
                            }
                        });
                    }
                    _ => {
                        tracing::info!(pin = %pin.name, from = before, to = after.unwrap_or("(removed)"), "pin moved; ending the watches it sent to the old backend");
                        self.moved[i].cancel();
                    }
                }
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
}
