//! A pin's move from one backend to another, in one place: where a pin stands at a moment (settled,
//! before its `flipAt`, in its fence), where its writes and reads go then, which backend it moves
//! from after a reload, and the admission of its writes (held while the fence lasts, then admitted
//! to the write ledger once the object has no writes in flight on another backend).
//!
//! Steering, `/debug/routes` and `explain` all read a pin's state from `PinMove::at`, so they cannot
//! disagree about it.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::clock::Clock;
use super::ledger::{WriteLedger, WriteTicket, backend_key};
use crate::config::{BackendId, Pin, RouteTable};

/// Where a pin stands at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// No move in progress: writes and reads go to the pin's backend.
    Settled,
    /// Before `flipAt`, with the backend it moves from known: writes and reads still go there.
    BeforeFlip {
        /// The backend it moves from.
        from: BackendId,
        /// When it moves.
        at: SystemTime,
    },
    /// Between `flipAt` and the end of the fence: writes are held until `until`, reads go to the
    /// pin's backend.
    Fenced {
        /// When the fence ends.
        until: SystemTime,
    },
    /// Before `flipAt`, with the backend it moves from unknown (a replica started after the file
    /// changed): holding until the end of the fence is the only choice that cannot overlap another
    /// replica's writes.
    Waiting {
        /// When the fence ends.
        until: SystemTime,
    },
    /// The fleet's move of the pin is not known to this replica, and it can no longer rule out that
    /// other replicas have made it: its writes are refused (429) rather than sent either way.
    Unsure,
}

/// What the fleet says of a pin's move: where skewgate runs as several replicas publishing
/// themselves (`--advertise-address`), a pin moves when every live replica runs its move, not at
/// `flipAt` alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PinGate {
    /// The pin moves at its own `flipAt` (one replica, or a pin without `flipAt`).
    AsWritten,
    /// The fleet moves it at this time, on this replica's clock (its `flipAt` on the apiservers'
    /// clock, or later).
    At(SystemTime),
    /// Not every live replica runs the move: its writes stay where they were until `safe_until`,
    /// the earliest the others could have moved it, and are refused after.
    NotYet {
        /// Until when no other replica can have moved it.
        safe_until: SystemTime,
    },
}

impl Stage {
    /// A phrase for a person (`/debug/routes`).
    pub fn describe(self) -> &'static str {
        match self {
            Stage::Settled => "settled",
            Stage::BeforeFlip { .. } => "before flipAt",
            Stage::Fenced { .. } => "in fence: writes held",
            Stage::Waiting { .. } => "waiting for flipAt + fence: previous backend unknown",
            Stage::Unsure => "waiting for the other replicas: writes refused",
        }
    }
}

/// Where the fleet's own moves of a pin have put its writes, whatever this replica's table says
/// (with `--advertise-address`): a move any replica said a time for is made by every replica that
/// knows of it, whatever table it runs by then, so a table that supersedes a move the fleet has
/// timed moves the pin from where that move put it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FleetPin {
    /// Where the latest move that has come put the pin's writes.
    pub at: Option<BackendId>,
    /// Where they were before it.
    pub from: Option<BackendId>,
    /// The end of that move's fence, while it lasts: writes are held until then.
    pub held_until: Option<SystemTime>,
    /// The time of the next move to come, when it is not this table's own move: the writes stay
    /// where they are until then.
    pub next: Option<SystemTime>,
    /// The fleet moved the pin to a backend this table does not name: its writes are refused.
    pub elsewhere: bool,
    /// The latest move that came is another table's, after this table's own: the pin stays
    /// where it put it.
    pub after_own: bool,
}

/// A pin's move as seen at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PinMove {
    /// Where it stands.
    pub stage: Stage,
    /// The backend it moves from (its `from`, else the one it had in the table this replica ran
    /// before), when that differs from its backend.
    pub from: Option<BackendId>,
    /// When the fence after `flipAt` ends.
    pub fence_ends: Option<SystemTime>,
    /// Where its writes and reads go now.
    pub backend: BackendId,
}

impl PinMove {
    /// Pin `pin` at `now`, with `fence` the table's `writes.fence` and `previous` the backend the pin
    /// had in the table this replica ran before (when known and different).
    pub fn at(pin: &Pin, previous: Option<BackendId>, fence: Duration, now: SystemTime) -> PinMove {
        PinMove::gated(pin, PinGate::AsWritten, previous, fence, now)
    }

    /// [`PinMove::at`], with what the fleet says of the move.
    pub fn gated(
        pin: &Pin,
        gate: PinGate,
        previous: Option<BackendId>,
        fence: Duration,
        now: SystemTime,
    ) -> PinMove {
        // Where the writes go now (the previous table's, as the fleet moved it) beats the file's
        // `from`, which is where the operator believed them to be.
        let named = previous.or(pin.flip_from);
        let from = named.filter(|b| *b != pin.backend);
        let flip_at = match gate {
            PinGate::AsWritten => pin.flip_at,
            // The fleet's time, on this replica's clock: never before `flipAt` on the
            // apiservers' clock, which a clock behind theirs reads later than `flipAt` itself.
            PinGate::At(at) => pin.flip_at.map(|_| at),
            PinGate::NotYet { safe_until } if named != Some(pin.backend) => {
                return PinMove::not_yet(pin, from, safe_until, now);
            }
            PinGate::NotYet { .. } => pin.flip_at,
        };
        let fence_ends = flip_at.map(|at| at + fence);
        let stage = match (flip_at, fence_ends) {
            // A pin whose `from` (or previous backend) is its own backend has no move to make.
            _ if named == Some(pin.backend) => Stage::Settled,
            (Some(at), Some(end)) if now < end => match from {
                Some(from) if now < at => Stage::BeforeFlip { from, at },
                None if now < at => Stage::Waiting { until: end },
                _ => Stage::Fenced { until: end },
            },
            _ => Stage::Settled,
        };
        let backend = match stage {
            Stage::BeforeFlip { from, .. } => from,
            _ => pin.backend,
        };
        PinMove {
            stage,
            from,
            fence_ends,
            backend,
        }
    }

    /// What the fleet's own moves of the pin decide at `now`, before this table's move has its
    /// say: refused when the fleet put the pin on a backend this table lacks; held in the fence of
    /// the latest move that came; kept where they are before a move to come that this table does
    /// not make (`previous` where they are when the fleet has made no move).
    pub fn fleet_first(
        pin: &Pin,
        fleet: &FleetPin,
        previous: Option<BackendId>,
        now: SystemTime,
    ) -> Option<PinMove> {
        let unsure = |from: Option<BackendId>| PinMove {
            stage: Stage::Unsure,
            from,
            fence_ends: None,
            backend: from.unwrap_or(pin.backend),
        };
        if fleet.elsewhere {
            return Some(unsure(None));
        }
        if let Some(until) = fleet.held_until.filter(|u| now < *u) {
            return Some(PinMove {
                stage: Stage::Fenced { until },
                from: fleet.from,
                fence_ends: Some(until),
                backend: fleet.at.unwrap_or(pin.backend),
            });
        }
        if fleet.after_own && fleet.next.is_none() {
            return Some(PinMove {
                stage: Stage::Settled,
                from: None,
                fence_ends: None,
                backend: fleet.at.unwrap_or(pin.backend),
            });
        }
        let next = fleet.next?;
        Some(match fleet.at.or(previous).or(pin.flip_from) {
            Some(from) => PinMove {
                stage: Stage::BeforeFlip { from, at: next },
                from: Some(from),
                fence_ends: None,
                backend: from,
            },
            None => unsure(None),
        })
    }

    /// Where the pin's writes are known to go: not while held for want of knowing where they
    /// were (`Waiting`), nor while refused with no backend to keep them on.
    pub fn writes_at(&self) -> Option<BackendId> {
        match self.stage {
            Stage::Waiting { .. } => None,
            Stage::Unsure => self.from,
            _ => Some(self.backend),
        }
    }

    /// A move the fleet has not made: its writes stay on `from` while that is safe; without a
    /// `from`, or after `safe_until`, they are refused. Reads stay on `from` if known.
    fn not_yet(
        pin: &Pin,
        from: Option<BackendId>,
        safe_until: SystemTime,
        now: SystemTime,
    ) -> Self {
        let stage = match (from, pin.flip_at) {
            (Some(from), Some(at)) if now < safe_until => Stage::BeforeFlip { from, at },
            _ => Stage::Unsure,
        };
        PinMove {
            stage,
            from,
            fence_ends: None,
            backend: from.unwrap_or(pin.backend),
        }
    }
}

/// For each pin of `table` with `flipAt`, where its writes go by the table this replica ran
/// before: `old` is that table, with where each of its pins' writes go now (as its routing decides
/// them: before a pending move, where they were). Matched by pin and backend name, so a reordered
/// file carries over. A pin's own backend counts: it has no move to make.
pub(crate) fn previous_backends(
    table: &RouteTable,
    old: Option<(&RouteTable, &[Option<BackendId>])>,
) -> Vec<Option<BackendId>> {
    table
        .writes
        .pins
        .iter()
        .map(|pin| {
            let (old_table, old_writes) = old?;
            pin.flip_at?;
            let i = old_table
                .writes
                .pins
                .iter()
                .position(|p| p.name == pin.name)?;
            let name = old_table.backend_name((*old_writes.get(i)?)?);
            Some(BackendId::new(
                table.backends.iter().position(|b| b.name == name)?,
            ))
        })
        .collect()
}

/// Why a write was not admitted: nothing was sent upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The pin's fence outlasts the request's own `timeout`.
    Fenced {
        /// How long the fence still lasts.
        remaining: Duration,
    },
    /// The object's writes on another backend did not finish within the wait.
    ObjectMoving,
}

/// A write admitted upstream.
pub(crate) struct Admitted {
    /// The write's place in the ledger, held until the apiserver has answered.
    pub ticket: WriteTicket,
    /// How long it waited for the object's writes on another backend, when it had to.
    pub waited: Option<Duration>,
}

/// One write to admit.
pub(crate) struct WriteAdmission<'a> {
    /// The ledger of writes in flight.
    pub ledger: &'a Arc<WriteLedger>,
    /// The proxy's clock, for the fence.
    pub clock: &'a dyn Clock,
    /// The table's `writes.fence`: the longest a write waits for the object's writes elsewhere.
    pub fence: Duration,
    /// The request's own `timeout`, if it gave one.
    pub timeout: Option<Duration>,
}

impl WriteAdmission<'_> {
    /// Admits a write of `object` to `backend` (named): first held until the fence ends when
    /// `held_until` says so, then admitted to the ledger, waiting while the object has writes in
    /// flight on another backend. `on_hold` is called once, when the write starts to wait, and its
    /// result is kept while it waits (a gauge's guard).
    pub(crate) async fn admit<G>(
        &self,
        held_until: Option<SystemTime>,
        object: u64,
        backend: &str,
        mut on_hold: impl FnMut() -> G,
    ) -> Result<Admitted, Refused> {
        if let Some(until) = held_until {
            let remaining = until
                .duration_since(self.clock.now())
                .unwrap_or(Duration::ZERO);
            if self.timeout.is_some_and(|t| t < remaining) {
                return Err(Refused::Fenced { remaining });
            }
            let _held = on_hold();
            self.hold(until).await;
        }
        let wait = self.timeout.map_or(self.fence, |t| t.min(self.fence));
        let deadline = tokio::time::Instant::now() + wait;
        let started = std::time::Instant::now();
        let admit = self.ledger.admit(object, backend_key(backend), deadline);
        tokio::pin!(admit);
        // Most writes are admitted at once; only those that wait are counted as held.
        let result = match futures_util::FutureExt::now_or_never(admit.as_mut()) {
            Some(r) => r,
            None => {
                let _held = on_hold();
                admit.await
            }
        };
        let (ticket, waited) = result.map_err(|_| Refused::ObjectMoving)?;
        Ok(Admitted {
            ticket,
            waited: waited.then(|| started.elapsed()),
        })
    }

    /// Waits until `until` by the proxy's clock. Polls the clock rather than sleeping the whole
    /// hold, so a clock that jumps is followed.
    async fn hold(&self, until: SystemTime) {
        while let Ok(left) = until.duration_since(self.clock.now()) {
            if left.is_zero() {
                break;
            }
            tokio::time::sleep(left.min(Duration::from_millis(50))).await;
        }
    }
}

#[cfg(test)]
#[path = "pin_move_tests.rs"]
mod tests;
