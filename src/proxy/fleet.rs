//! The proxy's side of the fleet (`cluster`): what this replica publishes of itself, and what it
//! does with what the others publish: the times of the pins' moves, whether its file is behind,
//! and the rollouts they aborted.

use std::time::SystemTime;

use serde_json::{Value, json};

use super::Proxy;
use super::routing::Routing;
use crate::cluster::{Member, MoveView, move_key};
use crate::config::RouteTable;
use crate::steer::LiveState;

impl Proxy {
    /// What this replica runs at `now`, as it publishes it in its Lease for the other replicas:
    /// the route table's digest (`table_digest`), name and generation (tables loaded since start),
    /// each pin's backend, `flipAt` and move, each rollout's abort, and its clock.
    pub(crate) fn fleet_report(&self, now: SystemTime) -> Value {
        let routing = self.routing();
        let t = routing.table();
        let pins: Vec<Value> = t
            .writes
            .pins
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let moved = routing.steering.pin_move(i, now, &*routing);
                let mut pin = json!({
                    "name": p.name,
                    "backend": t.backend_name(p.backend),
                    "flipAt": p.flip_at.map(|a| humantime::format_rfc3339_seconds(a).to_string()),
                    "move": moved.stage.describe(),
                });
                // In the fleet: since when this replica runs the move, and when the fleet makes it.
                if let Some(Some(key)) = routing.pin_keys.get(i)
                    && self.fleet_gates.enabled()
                {
                    let gates = &self.fleet_gates;
                    let time = |t: SystemTime| humantime::format_rfc3339_millis(t).to_string();
                    pin["readySince"] = json!(time(gates.ready_since(key, now)));
                    if let Some(at) = gates.flips_at(key) {
                        pin["flipsAt"] = json!(time(at));
                    }
                }
                pin
            })
            .collect();
        let rollouts: Vec<Value> = t
            .reads
            .rollouts
            .iter()
            .enumerate()
            .map(|(i, r)| json!({"name": r.name, "aborted": LiveState::rollout_aborted(&*routing, i)}))
            .collect();
        let generation = self
            .metrics
            .config_reloads
            .with_label_values(&["success"])
            .get();
        // The moves of the pins timed by the fleet, this replica's clock (the presence converts).
        let said = self.fleet_gates.said_json(&|t| t);
        json!({
            "table": table_digest(t),
            "name": t.name,
            "generation": generation,
            "pins": pins,
            "said": said,
            "rollouts": rollouts,
            "clock": humantime::format_rfc3339_millis(now).to_string(),
        })
    }

    /// What the replicas say (`view`, read at `now`) of this replica's moves: the fleet's gates.
    pub(crate) fn fleet_seen(
        &self,
        view: &crate::cluster::FleetView,
        now: SystemTime,
        to_mine: &dyn Fn(SystemTime) -> SystemTime,
    ) {
        let routing = self.routing();
        let t = routing.table();
        // A replica that publishes no report (an older skewgate) takes no part.
        let live: Vec<&Member> = view.live().filter(|m| m.state.is_object()).collect();
        let moves: Vec<MoveView<'_>> = t
            .writes
            .pins
            .iter()
            .zip(&routing.pin_keys)
            .enumerate()
            .filter_map(|(i, (p, key))| {
                let key = key.as_deref()?;
                let flip_at = p.flip_at?;
                let at = humantime::format_rfc3339_seconds(flip_at).to_string();
                let backend = t.backend_name(p.backend);
                let entries = live
                    .iter()
                    .map(|m| move_entry(&m.state, &p.name, backend, &at))
                    .collect();
                let lapsed = view.members.iter().filter(|m| !m.live);
                let lapsed = lapsed
                    .filter_map(|m| move_entry(&m.state, &p.name, backend, &at))
                    .collect();
                Some(MoveView {
                    key,
                    pin: &p.name,
                    to: backend,
                    remembered: LiveState::pin_previous(&*routing, i).is_some(),
                    flip_at,
                    fence: t.writes.fence,
                    entries,
                    lapsed,
                })
            })
            .collect();
        self.fleet_gates
            .update(&moves, heard(view, t, to_mine), now, to_mine);
        self.fleet_gates.set_behind(behind(t, &live, now, to_mine));
        adopt_aborts(&routing, &live);
    }
}

/// Whether a live replica has made a move (its time said and come) that table `t` does not make.
fn behind(
    t: &RouteTable,
    live: &[&Member],
    now: SystemTime,
    to_mine: &dyn Fn(SystemTime) -> SystemTime,
) -> bool {
    live.iter().any(|m| {
        let made = m.state["pins"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| {
                let at = e["flipsAt"]
                    .as_str()
                    .and_then(|a| humantime::parse_rfc3339_weak(a).ok());
                at.is_some_and(|a| to_mine(a) <= now)
            });
        made.into_iter().any(|e| !moves_alike(t, e))
    })
}

/// The moves of pins any replica (live or lapsed) has said a time for: its timelines, and its own
/// table's moves with their times (`flipsAt`, with this table's fence: all a replica of a build
/// before the timelines publishes).
fn heard(
    view: &crate::cluster::FleetView,
    t: &RouteTable,
    to_mine: &dyn Fn(SystemTime) -> SystemTime,
) -> Vec<(String, crate::cluster::Said)> {
    let reports = view.members.iter().filter(|m| m.state.is_object());
    let mut heard = Vec::new();
    for m in reports {
        heard.extend(crate::cluster::heard(&m.state, to_mine));
        for e in m.state["pins"].as_array().into_iter().flatten() {
            let time = |f: &str| {
                let t = humantime::parse_rfc3339_weak(e[f].as_str()?).ok()?;
                crate::config::within_horizon(t).then_some(t)
            };
            let (Some(name), Some(to), Some(flip), Some(at)) = (
                e["name"].as_str(),
                e["backend"].as_str(),
                e["flipAt"].as_str(),
                time("flipsAt"),
            ) else {
                continue;
            };
            let said = crate::cluster::Said {
                key: move_key(name, to, flip),
                to: to.to_owned(),
                at: to_mine(at),
                fence: t.writes.fence,
            };
            heard.push((name.to_owned(), said));
        }
    }
    heard
}

/// A rollout that another replica running this same table aborted is aborted here too.
fn adopt_aborts(routing: &Routing, live: &[&Member]) {
    let t = routing.table();
    let digest = table_digest(t);
    for m in live.iter().filter(|m| m.table() == digest) {
        let aborted = m.state["rollouts"].as_array().into_iter().flatten();
        for r in aborted.filter(|r| r["aborted"] == true) {
            let mine = t
                .reads
                .rollouts
                .iter()
                .position(|x| r["name"] == x.name.as_str());
            if let Some(i) = mine {
                routing.adopt_abort(i, &m.address.to_string());
            }
        }
    }
}

/// Whether this table sends the writes of the pin another replica has moved (its entry `e`) where
/// that replica does: a pin of that name to the same backend, or, without one, `writes.default`.
fn moves_alike(t: &RouteTable, e: &Value) -> bool {
    let to = e["backend"].as_str().unwrap_or_default();
    match t.writes.pins.iter().find(|p| e["name"] == p.name.as_str()) {
        // A pin with `flipAt` follows the moves the fleet timed, whatever table made them.
        Some(p) if p.flip_at.is_some() => true,
        Some(p) => t.backend_name(p.backend) == to,
        None => t.backend_name(t.writes.default) == to,
    }
}

/// A replica's published entry for the move of pin `name` to `backend` at `flip_at`, if it runs
/// that move.
fn move_entry<'a>(state: &'a Value, name: &str, backend: &str, flip_at: &str) -> Option<&'a Value> {
    state["pins"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name && e["backend"] == backend && e["flipAt"] == flip_at)
}

/// The digest of what a route table says (its backends, writes, reads and guards, not the file it
/// came from): replicas that loaded the same table show the same digest. Made from this build's
/// reading of the table, so replicas of different skewgate builds may show different digests for
/// one file.
pub(crate) fn table_digest(t: &RouteTable) -> String {
    let text = format!(
        "{:?}|{:?}|{:?}|{:?}|{:?}",
        t.name, t.backends, t.writes, t.reads, t.guards
    );
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(text.as_bytes()))
}
