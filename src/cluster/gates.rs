//! The pin moves of the fleet, as this replica knows them. A move is a pin with `flipAt` moving to
//! a backend (`MoveKey`). Each replica publishes, per move it runs, when it first ran it
//! (`readySince`) and, once known, when the fleet makes it (`flipsAt`); both on the apiservers'
//! clock (its own less its measured offset).
//!
//! - When every live replica runs the move and none has said when, this replica says
//!   `max(flipAt, latest readySince + settle, now + settle)`: late enough for every replica to have
//!   read it before it comes.
//! - The earliest time any replica says is the one: a replica that saw another set of replicas
//!   (a Lease lapsing) still moves with the others.
//! - Until it knows the time, a replica keeps the move's writes where they were as long as no
//!   other replica can have moved it (`settle` after its last read, less a publish and a read),
//!   and refuses them after (`PinGate::NotYet`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use serde_json::Value;

use super::said::{Said, Timeline};
use crate::steer::PinGate;

/// A pin's move: its name, the backend it moves to and its `flipAt` (whole seconds, as the route
/// file writes it).
pub(crate) fn move_key(pin: &str, backend: &str, flip_at: &str) -> String {
    format!("{pin}|{backend}|{flip_at}")
}

/// What is known of the moves, replaced whole at each read of the Leases.
#[derive(Default)]
struct Known {
    /// Per move: when the fleet makes it, by this replica's clock.
    flips: HashMap<String, SystemTime>,
    /// When the Leases were last read, by this replica's clock.
    read_at: Option<SystemTime>,
    /// Per pin of this replica's table with `flipAt`: its moves with their times said.
    lines: HashMap<String, Timeline>,
}

/// The moves this replica knows the fleet's times of.
#[derive(Default)]
pub(crate) struct FleetGates {
    /// The round (Lease renewal and read), set when this replica publishes itself. Read on the
    /// request path (pinned requests of pins with `flipAt`): no lock.
    round: std::sync::OnceLock<Duration>,
    known: ArcSwap<Known>,
    /// When this replica first ran each move, by its clock.
    ready_since: Mutex<HashMap<String, SystemTime>>,
    /// Until when this replica's Lease surely holds in the others' eyes (milliseconds since the
    /// epoch, by its clock; 0 before its first renewal).
    lease_holds_until: AtomicU64,
    /// A live replica has made a move that this replica's table does not make.
    behind: AtomicBool,
    /// Woken when this replica has news for the others (a rollout it aborted).
    news: tokio::sync::Notify,
    /// The moves whose flip this replica has logged and counted (once each, across reloads).
    announced: Mutex<std::collections::HashSet<String>>,
}

/// Why a replica in the fleet takes no writes now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OutOfStep {
    /// Its Lease may have lapsed: the others may have moved pins without waiting for it.
    Lease,
    /// Another live replica has made a move its table does not make.
    Behind,
}

/// One move of this replica's table, with what the replicas say of it.
pub(crate) struct MoveView<'a> {
    pub(crate) key: &'a str,
    /// The pin's name.
    pub(crate) pin: &'a str,
    /// The backend it moves to (by name).
    pub(crate) to: &'a str,
    pub(crate) flip_at: SystemTime,
    /// The table's `writes.fence`.
    pub(crate) fence: Duration,
    /// Per live replica: its entry for the move (`readySince`, `flipsAt`, on the apiservers'
    /// clock), or `None` when it does not run it.
    pub(crate) entries: Vec<Option<&'a Value>>,
    /// The entries of the replicas whose Lease has lapsed: a time they said still stands.
    pub(crate) lapsed: Vec<&'a Value>,
    /// Whether this replica ran a table with the pin before this one: it knows where the pin's
    /// writes are, and a move no replica ran in time is not made at `flipAt` on its word.
    pub(crate) remembered: bool,
}

impl FleetGates {
    /// Fleet mode: this replica renews and reads the Leases every `round`.
    pub(crate) fn enable(&self, round: Duration) {
        let _ = self.round.set(round);
    }

    /// Whether this replica publishes itself (and its pins move with the fleet).
    pub(crate) fn enabled(&self) -> bool {
        self.round().is_some()
    }

    /// How long after its last replica runs a move the fleet makes it, at the soonest (fleet mode).
    pub(crate) fn settle_time(&self) -> Option<Duration> {
        self.round().map(Self::settle)
    }

    fn round(&self) -> Option<Duration> {
        self.round.get().copied()
    }

    /// How long after all replicas run a move the fleet makes it, at the soonest: a publish, a
    /// read, and as much again (`config::fleet_settle`, which `check` warns by).
    fn settle(round: Duration) -> Duration {
        crate::config::fleet_settle(round)
    }

    /// The gate of the move `key`.
    pub(crate) fn gate(&self, key: &str) -> PinGate {
        let Some(round) = self.round() else {
            return PinGate::AsWritten;
        };
        let known = self.known.load();
        if let Some(at) = known.flips.get(key) {
            return PinGate::At(*at);
        }
        // No replica can have said a time before this one's last read, less a publish: it would
        // have been read. Said after that, it is at least `settle` after. A round is kept for
        // the clocks.
        let safe_until = known.read_at.map_or(SystemTime::UNIX_EPOCH, |r| {
            r + Self::settle(round) - round * 2
        });
        PinGate::NotYet { safe_until }
    }

    /// A renewal of this replica's Lease, begun at `at`, succeeded: the Lease holds for
    /// `duration`, and the others see that at their next read. Past half the slack between
    /// `duration` and a round, it may have lapsed in their eyes.
    pub(crate) fn renewed(&self, at: SystemTime, duration: Duration) {
        let Some(round) = self.round() else {
            return;
        };
        let until = at + round + duration.saturating_sub(round) / 2;
        let ms = until
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        self.lease_holds_until.store(ms, Ordering::Relaxed);
    }

    /// Why this replica takes no writes at `now`, if it takes none (on every write: two loads).
    pub(crate) fn out_of_step(&self, now: SystemTime) -> Option<OutOfStep> {
        self.round()?;
        let until = self.lease_holds_until.load(Ordering::Relaxed);
        let now_ms = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        // Never renewed (a replica starting, or one without the RBAC to write its Lease, which
        // logs it every round): never counted by the others, so not fenced on that account.
        if until != 0 && now_ms > until {
            return Some(OutOfStep::Lease);
        }
        self.behind
            .load(Ordering::Relaxed)
            .then_some(OutOfStep::Behind)
    }

    /// Whether move `key`'s flip is to be logged and counted here: true the first time asked.
    pub(crate) fn first_flip(&self, key: &str) -> bool {
        let mut announced = self.announced.lock().unwrap_or_else(|e| e.into_inner());
        announced.insert(key.to_owned())
    }

    /// This replica has news for the others: renew its Lease (with its report) now.
    pub(crate) fn publish_now(&self) {
        self.news.notify_one();
    }

    /// Until this replica has news for the others.
    pub(crate) async fn news(&self) {
        self.news.notified().await;
    }

    /// Whether a live replica has made a move this replica's table does not make.
    pub(crate) fn set_behind(&self, behind: bool) {
        self.behind.store(behind, Ordering::Relaxed);
    }

    /// When this replica first ran move `key` (now, the first time asked).
    pub(crate) fn ready_since(&self, key: &str, now: SystemTime) -> SystemTime {
        let mut since = self.ready_since.lock().unwrap_or_else(|e| e.into_inner());
        *since.entry(key.to_owned()).or_insert(now)
    }

    /// When the fleet makes move `key`, if known (this replica's clock).
    pub(crate) fn flips_at(&self, key: &str) -> Option<SystemTime> {
        self.known.load().flips.get(key).copied()
    }

    /// What the Leases read at `now` say of this replica's `moves`, `heard` the moves any replica
    /// said a time for (by pin); `to_mine` converts a time on the apiservers' clock to this
    /// replica's.
    pub(crate) fn update(
        &self,
        moves: &[MoveView<'_>],
        heard: Vec<(String, Said)>,
        now: SystemTime,
        to_mine: impl Fn(SystemTime) -> SystemTime,
    ) {
        let Some(round) = self.round() else {
            return;
        };
        let before = self.known.load();
        let mut lines = timelines(&before, moves, heard);
        let mut flips = HashMap::new();
        let time = |v: &Value, field: &str| {
            let t = humantime::parse_rfc3339_weak(v[field].as_str()?).ok()?;
            crate::config::within_horizon(t).then(|| to_mine(t))
        };
        for m in moves {
            let said = m.entries.iter().flatten().chain(&m.lapsed);
            let said = said.filter_map(|e| time(e, "flipsAt"));
            let line = lines.entry(m.pin.to_owned()).or_default();
            let earliest = said
                .chain(before.flips.get(m.key).copied())
                .chain(line.time_of(m.key))
                .min();
            // `flipAt` is a time on the apiservers' clock, as every time the replicas say.
            let flip_at = to_mine(m.flip_at);
            // A move comes after the fence of every other move of its pin said before it.
            let not_before = line.not_before(m.key);
            let at = earliest.or_else(|| {
                let first = first_time(m, flip_at, now, Self::settle(round), &time)?;
                Some(not_before.map_or(first, |n| first.max(n)))
            });
            if let Some(at) = at {
                flips.insert(m.key.to_owned(), at);
                line.add(Said {
                    key: m.key.to_owned(),
                    to: m.to.to_owned(),
                    at,
                    fence: m.fence,
                });
            }
        }
        for line in lines.values_mut() {
            line.trim(now);
        }
        // Moves the table no longer makes are forgotten.
        let mut since = self.ready_since.lock().unwrap_or_else(|e| e.into_inner());
        since.retain(|k, _| moves.iter().any(|m| m.key == k));
        drop(since);
        self.known.store(std::sync::Arc::new(Known {
            flips,
            read_at: Some(now),
            lines,
        }));
    }

    /// Where the fleet's moves of pin `pin` have put its writes at `now`, `own` this table's move
    /// of it and `backend` a backend's place in this table by name.
    pub(crate) fn pin_fleet(
        &self,
        pin: &str,
        own: Option<&str>,
        now: SystemTime,
        backend: impl Fn(&str) -> Option<crate::config::BackendId>,
    ) -> crate::steer::FleetPin {
        let mut fleet = crate::steer::FleetPin::default();
        if self.round().is_none() {
            return fleet;
        }
        let known = self.known.load();
        let Some(line) = known.lines.get(pin) else {
            return fleet;
        };
        let (came, before) = line.came(now);
        if let Some(came) = came {
            fleet.at = backend(&came.to);
            fleet.elsewhere = fleet.at.is_none();
            fleet.from = before.and_then(|b| backend(&b.to));
            fleet.held_until = Some(came.fence_ends()).filter(|u| now < *u);
            // A move of another table that came after this table's own: the pin stays there.
            let own_at = own.and_then(|k| line.time_of(k));
            fleet.after_own =
                Some(came.key.as_str()) != own && own_at.is_some_and(|o| o <= came.at);
        }
        fleet.next = line
            .next(now)
            .filter(|s| Some(s.key.as_str()) != own)
            .map(|s| s.at);
        fleet
    }

    /// Every pin's timeline, as this replica publishes it (`to_theirs` the apiservers' clock).
    pub(crate) fn said_json(&self, to_theirs: &dyn Fn(SystemTime) -> SystemTime) -> Vec<Value> {
        let known = self.known.load();
        let mut pins: Vec<(&String, &Timeline)> = known.lines.iter().collect();
        pins.sort_by_key(|(p, _)| p.as_str());
        pins.iter()
            .flat_map(|(pin, line)| line.to_json(pin, to_theirs))
            .collect()
    }
}

/// The timelines of the pins `moves` move: as known `before`, with the moves `heard` of them.
fn timelines(
    before: &Known,
    moves: &[MoveView<'_>],
    heard: Vec<(String, Said)>,
) -> HashMap<String, Timeline> {
    let mut lines: HashMap<String, Timeline> = moves
        .iter()
        .map(|m| {
            let line = before.lines.get(m.pin).cloned().unwrap_or_default();
            (m.pin.to_owned(), line)
        })
        .collect();
    for (pin, said) in heard {
        if let Some(line) = lines.get_mut(&pin) {
            line.add(said);
        }
    }
    lines
}

/// The time this replica says for move `m`, which no replica has said a time for, if it can say
/// one. If a live replica ran it in time (by `flipAt + fence`), the move waits for every live
/// replica to run it, and for every replica to read the time said (`settle`). If none did and this
/// replica started with the table (it remembers no table before with the pin), the fleet has no
/// memory of it (all started since with the file as it is): it was made at `flipAt`, as the file
/// says and as a single replica takes it; waiting would send its writes back to the backend they
/// left. A replica that ran a table before knows where the writes are, and waits: the replicas
/// that ran the move in time may have left it since (a newer table), and no longer say so.
/// `flip_at` is `flipAt` on this replica's clock.
fn first_time(
    m: &MoveView<'_>,
    flip_at: SystemTime,
    now: SystemTime,
    settle: Duration,
    time: &dyn Fn(&Value, &str) -> Option<SystemTime>,
) -> Option<SystemTime> {
    let since: Vec<SystemTime> = m
        .entries
        .iter()
        .flatten()
        .filter_map(|e| time(e, "readySince"))
        .collect();
    let in_time = since.iter().any(|s| *s <= flip_at + m.fence);
    if !in_time && now >= flip_at + m.fence && !m.remembered {
        return Some(flip_at);
    }
    let all_run = !m.entries.is_empty() && m.entries.iter().all(Option::is_some);
    if !all_run {
        return None;
    }
    let latest = since.iter().max().copied().unwrap_or(now);
    Some(flip_at.max(latest + settle).max(now + settle))
}

#[cfg(test)]
#[path = "gates_tests.rs"]
mod tests;
