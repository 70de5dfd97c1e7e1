//! What a reload does to the pins' pending moves. A table that changes a pin whose move has not
//! been made supersedes that move: it is abandoned (never made), or, when the fleet had already
//! said its time, made then, before the new table's move (`cluster/said.rs`). Either way the new
//! table's move starts from where the pin's writes are, not from its `from` when that differs.
//! Each is logged, counted (`skewgate_pin_moves_superseded_total`) and kept per pin for
//! `/debug/routes` and the status page; the flip of a new move said too close is warned of.

use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use super::Routing;
use crate::config::{BackendId, RouteTable};
use crate::steer::{PinGate, Stage};

/// A pin's superseded moves, as `/debug/routes` shows them.
#[derive(Clone, Debug, Default)]
pub(crate) struct Superseded {
    /// How many of its pending moves reloads superseded since this replica started.
    pub(crate) count: u64,
    /// The last one.
    pub(crate) last: Option<Value>,
    /// The `from` of this table's move, when it is not where the pin's writes were.
    pub(crate) from_not_followed: Option<Value>,
}

impl Superseded {
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "count": self.count,
            "last": self.last,
            "fromNotFollowed": self.from_not_followed,
        })
    }
}

fn time(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// For each pin of `new` (its move keys `keys`, its pins' writes by `old` as `previous`), what the
/// reload from `old` did to its pending move at `now`: logged and counted here.
pub(super) fn superseded(
    old: Option<&Routing>,
    new: &RouteTable,
    (keys, previous): (&[Option<String>], &[Option<BackendId>]),
    metrics: &crate::metrics::Metrics,
    now: SystemTime,
) -> Vec<Superseded> {
    new.writes
        .pins
        .iter()
        .enumerate()
        .map(|(j, pin)| {
            let mut mine = Superseded::default();
            let writes_at = previous.get(j).copied().flatten();
            if let (Some(file), Some(at), Some(_)) = (pin.flip_from, writes_at, pin.flip_at)
                && file != at
            {
                let (file, at) = (new.backend_name(file), new.backend_name(at));
                tracing::warn!(pin = %pin.name, from = file, writes_at = at, "the pin's from is not where its writes are: it moves from where they are");
                mine.from_not_followed = Some(json!({"from": file, "writesAt": at}));
            }
            let Some(old) = old else { return mine };
            let Some(i) = old.table().writes.pins.iter().position(|p| p.name == pin.name) else {
                return mine;
            };
            if let Some(before) = old.superseded.get(i) {
                mine.count = before.count;
                mine.last.clone_from(&before.last);
            }
            if let Some(last) = pending_move(old, i, keys.get(j).and_then(Option::as_deref), now) {
                let outcome = last["outcome"].as_str().unwrap_or("abandoned");
                let label = [pin.name.as_str(), outcome];
                metrics.pin_moves_superseded.with_label_values(&label).inc();
                mine.count += 1;
                mine.last = Some(last);
            }
            mine
        })
        .collect()
}

/// Old pin `i`'s move, when it was pending at `now` and the new table's move of the pin (`key`)
/// is another: what became of it, logged.
fn pending_move(old: &Routing, i: usize, key: Option<&str>, now: SystemTime) -> Option<Value> {
    let t = old.table();
    let pin = &t.writes.pins[i];
    let flip_at = pin.flip_at?;
    let old_key = old.pin_keys.get(i).and_then(Option::as_deref);
    if old_key == key {
        return None;
    }
    // The table's own move, whatever fence of the fleet's holds the pin meanwhile.
    let moving = old.steering.own_move(i, now, old);
    let pending = matches!(
        moving.stage,
        Stage::BeforeFlip { .. } | Stage::Waiting { .. } | Stage::Unsure
    );
    if !pending || moving.backend == pin.backend {
        return None;
    }
    let to = t.backend_name(pin.backend);
    let writes_at = t.backend_name(moving.backend);
    let timed = match crate::steer::LiveState::pin_gate(old, i, now) {
        PinGate::At(at) if at > now => Some(at),
        _ => None,
    };
    match timed {
        Some(at) => {
            tracing::warn!(pin = %pin.name, to, flip_at = %time(flip_at), made_at = %time(at), "a reload changed the pin before its pending move, but the fleet had timed it: every replica makes it then, and the new table's move comes after")
        }
        None => {
            tracing::warn!(pin = %pin.name, to, flip_at = %time(flip_at), writes_at, "a reload abandoned the pin's pending move before it was made: its writes stay where they are, and the new table's move starts there")
        }
    }
    Some(json!({
        "to": to,
        "flipAt": time(flip_at),
        "outcome": if timed.is_some() { "timed" } else { "abandoned" },
        "madeAt": timed.map(time),
        "writesAt": writes_at,
        "at": time(now),
    }))
}

/// Whether `new` has moves this replica did not run before (`old`); each whose `flipAt` is closer
/// than the fleet can make it (`settle` after the last replica runs it) is warned of.
pub(super) fn new_moves(
    new: &RouteTable,
    (keys, old): (&[Option<String>], Option<&Routing>),
    settle: Option<Duration>,
    now: SystemTime,
) -> bool {
    let old_keys = old.map_or(&[][..], |p| p.pin_keys.as_slice());
    let any = keys
        .iter()
        .flatten()
        .any(|k| !old_keys.iter().flatten().any(|o| o == k));
    if let Some(settle) = settle {
        for w in crate::config::close_flips(new, old.map(Routing::table), now, settle) {
            tracing::warn!("{w}");
        }
    }
    any
}
