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
    pub(crate) flip_at: SystemTime,
    /// The table's `writes.fence`.
    pub(crate) fence: Duration,
    /// Per live replica: its entry for the move (`readySince`, `flipsAt`, on the apiservers'
    /// clock), or `None` when it does not run it.
    pub(crate) entries: Vec<Option<&'a Value>>,
    /// The entries of the replicas whose Lease has lapsed: a time they said still stands.
    pub(crate) lapsed: Vec<&'a Value>,
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

    fn round(&self) -> Option<Duration> {
        self.round.get().copied()
    }

    /// How long after all replicas run a move the fleet makes it, at the soonest: a publish, a
    /// read, and as much again.
    fn settle(round: Duration) -> Duration {
        round * 4
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

    /// What the Leases read at `now` say of this replica's `moves`; `to_mine` converts a time
    /// on the apiservers' clock to this replica's.
    pub(crate) fn update(
        &self,
        moves: &[MoveView<'_>],
        now: SystemTime,
        to_mine: impl Fn(SystemTime) -> SystemTime,
    ) {
        let Some(round) = self.round() else {
            return;
        };
        let before = self.known.load();
        let mut flips = HashMap::new();
        let time = |v: &Value, field: &str| {
            let t = humantime::parse_rfc3339_weak(v[field].as_str()?).ok()?;
            Some(to_mine(t))
        };
        for m in moves {
            let said = m.entries.iter().flatten().chain(&m.lapsed);
            let said = said.filter_map(|e| time(e, "flipsAt"));
            let earliest = said.chain(before.flips.get(m.key).copied()).min();
            // `flipAt` is a time on the apiservers' clock, as every time the replicas say.
            let flip_at = to_mine(m.flip_at);
            let at = earliest.or_else(|| first_time(m, flip_at, now, Self::settle(round), &time));
            if let Some(at) = at {
                flips.insert(m.key.to_owned(), at);
            }
        }
        // Moves the table no longer makes are forgotten.
        let mut since = self.ready_since.lock().unwrap_or_else(|e| e.into_inner());
        since.retain(|k, _| moves.iter().any(|m| m.key == k));
        drop(since);
        self.known.store(std::sync::Arc::new(Known {
            flips,
            read_at: Some(now),
        }));
    }
}

/// The time this replica says for move `m`, which no replica has said a time for, if it can say
/// one. If a live replica ran it in time (by `flipAt + fence`), the move waits for every live
/// replica to run it, and for every replica to read the time said (`settle`). If none did, the
/// fleet has no memory of it (all started since with the file as it is, or the file came after
/// `flipAt + fence` everywhere): it was made at `flipAt`, as the file says and as a single replica
/// takes it; waiting would send its writes back to the backend they left. `flip_at` is `flipAt` on
/// this replica's clock.
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
    if !in_time && now >= flip_at + m.fence {
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
mod tests {
    use super::*;
    use serde_json::json;

    const ROUND: Duration = Duration::from_secs(10);
    const FENCE: Duration = Duration::from_secs(10);

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
    }

    fn stamp(t: SystemTime) -> String {
        humantime::format_rfc3339_millis(t).to_string()
    }

    fn gates() -> FleetGates {
        let g = FleetGates::default();
        g.enable(ROUND);
        g
    }

    /// Move `k` at `flip` as replicas say it: each `Some(readySince)` runs it, `None` does not.
    fn update(g: &FleetGates, flip: u64, entries: &[Option<Value>], lapsed: &[Value], now: u64) {
        let moves = [MoveView {
            key: "k",
            flip_at: at(flip),
            fence: FENCE,
            entries: entries.iter().map(Option::as_ref).collect(),
            lapsed: lapsed.iter().collect(),
        }];
        g.update(&moves, at(now), |t| t);
    }

    fn ready(since: u64) -> Option<Value> {
        Some(json!({"readySince": stamp(at(since))}))
    }

    #[test]
    fn a_move_every_replica_ran_in_time_is_made_at_flip_at() {
        let g = gates();
        update(&g, 600, &[ready(0), ready(5), ready(9)], &[], 20);
        assert_eq!(g.gate("k"), PinGate::At(at(600)));
    }

    #[test]
    fn a_move_waits_for_the_late_replica_then_for_every_replica_to_read_the_time() {
        let g = gates();
        // flipAt 100; the third replica does not run it yet at 105.
        update(&g, 100, &[ready(0), ready(1), None], &[], 105);
        let PinGate::NotYet { safe_until } = g.gate("k") else {
            panic!("{:?}", g.gate("k"))
        };
        // Said after this read, a time is at least 40 s after it: 20 s are safe.
        assert_eq!(safe_until, at(105 + 20));
        // It runs it from 130, read at 135: 40 s after the latest of now and its readySince.
        update(&g, 100, &[ready(0), ready(1), ready(130)], &[], 135);
        assert_eq!(g.gate("k"), PinGate::At(at(175)));
        // Once known, kept: a replica that stops running it does not move it back.
        update(&g, 100, &[ready(0), None, ready(130)], &[], 145);
        assert_eq!(g.gate("k"), PinGate::At(at(175)));
    }

    #[test]
    fn the_earliest_time_said_is_the_one_even_by_a_replica_whose_lease_lapsed() {
        let g = gates();
        let said = |t: u64| json!({"readySince": stamp(at(0)), "flipsAt": stamp(at(t))});
        update(&g, 100, &[Some(said(190)), None], &[said(180)], 150);
        assert_eq!(g.gate("k"), PinGate::At(at(180)));
    }

    #[test]
    fn a_move_no_replica_ran_in_time_was_made_at_flip_at() {
        // The fleet started long after flipAt with the file as it is: the pin stays where it went.
        let g = gates();
        update(&g, 100, &[ready(5000), None], &[], 5010);
        assert_eq!(g.gate("k"), PinGate::At(at(100)));
    }

    #[test]
    fn without_a_read_or_the_fleet_a_move_is_not_known() {
        let g = gates();
        assert_eq!(
            g.gate("k"),
            PinGate::NotYet {
                safe_until: SystemTime::UNIX_EPOCH
            }
        );
        assert_eq!(FleetGates::default().gate("k"), PinGate::AsWritten);
    }

    #[test]
    fn a_replica_whose_clock_is_ahead_judges_flip_at_on_the_apiservers_clock() {
        // 5 s ahead: the apiservers' time t is t + 5 here.
        let ahead = |t: SystemTime| t + Duration::from_secs(5);
        let g = gates();
        fn moves(entries: &[Option<Value>]) -> [MoveView<'_>; 1] {
            [MoveView {
                key: "k",
                flip_at: at(100),
                fence: FENCE,
                entries: entries.iter().map(Option::as_ref).collect(),
                lapsed: Vec::new(),
            }]
        }
        // Ran at 107 (their clock), within flipAt + fence: in time, so the move waits for the
        // replica that does not run it, though this clock reads 117 > 110.
        g.update(&moves(&[ready(107), None]), at(117), ahead);
        assert!(
            matches!(g.gate("k"), PinGate::NotYet { .. }),
            "{:?}",
            g.gate("k")
        );
        // All ran it in time: the move comes at flipAt on their clock, 105 on this one.
        let g = gates();
        g.update(&moves(&[ready(0), ready(1)]), at(20), ahead);
        assert_eq!(g.gate("k"), PinGate::At(at(105)));
    }
}
