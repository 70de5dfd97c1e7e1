//! A pinned write's fence, the one place the pipeline keeps a write of a moving pin from overlapping
//! its move. When a pin's `flipAt` comes, its writes are held for the table's `writes.fence`, so
//! that every write sent to the old backend is answered before one goes to the new:
//!
//! - **decided** by `steer::pin_move` (`Stage::Fenced`: held until the fence ends; the fleet's
//!   time of the move from `cluster::gates`, which a replica out of step with the fleet refuses);
//! - **held** here (`admit_write`): until the fence ends (429 at once when the request's own
//!   `timeout` would pass first), then by the write ledger until the object has no write in flight
//!   on another backend (`steer::WriteAdmission`);
//! - **sent whole** before the move, in a fleet (`whole_before_the_move`), and **looked at last**
//!   as it is sent (`last_look`: whether the pin moved since it was decided,
//!   `routing::Routing::moved_since_decided`);
//! - **answered within the fence** (`write_deadline`): its response head due `writes.fence - 2 s`
//!   after it is sent, so that no replica still waits on the old backend when a fence ends.
//!
//! Each refusal is a `ProxyError` (429, unsent).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Proxy;
use super::routing::Routing;
use super::status::ProxyError;
use crate::cluster::FleetGates;
use crate::metrics::Metrics;
use crate::steer::{Clock, Decision, Reason, Refused, WriteAdmission, WriteLedger, WriteTicket};

/// What of the process a write's fence reads, and no more (linkerd2-proxy's `Param`: the phase
/// asks for this, not for the whole pipeline): the fleet's gates of the pins' moves, the write
/// ledger, the clock a `flipAt` is judged by, and the metrics of writes held.
#[derive(Clone, Copy)]
pub(super) struct Fence<'a> {
    gates: &'a FleetGates,
    ledger: &'a Arc<WriteLedger>,
    clock: &'a dyn Clock,
    metrics: &'a Metrics,
}

impl Proxy {
    /// What a write's fence reads of the pipeline.
    pub(super) fn fence(&self) -> Fence<'_> {
        Fence {
            gates: &self.fleet_gates,
            ledger: &self.writes,
            clock: &*self.settings.clock,
            metrics: &self.metrics,
        }
    }
}

/// Admits a pinned write (`object` is its ledger key): held while its pin's fence lasts (429 at
/// once when the request's own `timeout` would pass first), then admitted to the ledger, waiting up
/// to that `timeout` (or `writes.fence`, if shorter) for the object's writes on another backend;
/// past that, 429 and nothing is sent.
pub(crate) async fn admit_write(
    fence: Fence<'_>,
    routing: &Routing,
    decision: &Decision,
    object: u64,
    query: Option<&str>,
) -> Result<WriteTicket, ProxyError> {
    // Out of step with the fleet, a replica takes no writes: the others may have moved a pin it
    // does not know of.
    if let Some(why) = fence.gates.out_of_step(fence.clock.now()) {
        return Err(ProxyError::OutOfStep { why });
    }
    let table = routing.table();
    let backend = table.backend_name(decision.backend);
    let rule = decision.rule_name(table);
    let admission = WriteAdmission {
        ledger: fence.ledger,
        clock: fence.clock,
        fence: table.writes.fence,
        timeout: request_timeout(query),
    };
    let held_until = match decision.reason {
        Reason::Fenced { until } => Some(until),
        Reason::FleetUnsure => {
            return Err(ProxyError::FleetUnsure {
                rule: rule.to_owned(),
            });
        }
        _ => None,
    };
    let on_hold = || Held::new(fence.metrics.writes_held.with_label_values(&[rule]));
    match admission.admit(held_until, object, backend, on_hold).await {
        Ok(admitted) => {
            if let Some(waited) = admitted.waited {
                fence.metrics.pin_move_wait.observe(waited.as_secs_f64());
            }
            Ok(admitted.ticket)
        }
        Err(Refused::Fenced { remaining }) => Err(ProxyError::PinFenced {
            rule: rule.to_owned(),
            remaining_secs: remaining.as_secs() + 1,
        }),
        Err(Refused::ObjectMoving) => Err(ProxyError::ObjectMoving {
            backend: backend.to_owned(),
        }),
    }
}

/// Counts a write in `skewgate_writes_held` while it lives (also when the client gives up).
struct Held(prometheus::IntGauge);

impl Held {
    fn new(gauge: prometheus::IntGauge) -> Held {
        gauge.inc();
        Held(gauge)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The request's `timeout` query parameter (a Go duration such as `30s`), if any.
fn request_timeout(query: Option<&str>) -> Option<std::time::Duration> {
    let value = skewgate_shared::go_query::first(query?, "timeout")?;
    humantime::parse_duration(&value).ok()
}

/// A pinned write checked again as it is sent, after its body, the update guard, or a freeze of
/// the whole process: whether this replica is still in step with the fleet, and whether its pin's
/// move came since it was decided. Either refuses it (429), unsent.
pub(super) fn last_look(
    fence: Fence<'_>,
    routing: &Routing,
    (decision, object): (&Decision, Option<u64>),
) -> Result<(), ProxyError> {
    if object.is_none() {
        return Ok(());
    }
    let now = fence.clock.now();
    if let Some(why) = fence.gates.out_of_step(now) {
        return Err(ProxyError::OutOfStep { why });
    }
    match routing.moved_since_decided(decision, now) {
        Some(left) => Err(ProxyError::PinFenced {
            rule: decision.rule_name(routing.table()).to_owned(),
            remaining_secs: left.as_secs() + 1,
        }),
        None => Ok(()),
    }
}

/// In a fleet, a write decided before its pin's move is sent whole (at most the apiserver's 3 MiB):
/// its last look is then the last moment before the apiserver has all of it, so a freeze of this
/// replica (SIGSTOP, a paused VM) cannot hold the rest of it past the move while the apiserver
/// waits and another replica writes through the new version. A replica alone needs none of it:
/// its ledger holds the object's writes on the new backend until that one is answered, and the
/// wait for the body would only widen the moment in which a write decided before `flipAt` meets
/// its last look after it (and is refused).
pub(super) async fn whole_before_the_move(
    fence: Fence<'_>,
    (decision, object): (&Decision, Option<u64>),
    body: &mut super::request_body::ClientBody,
) -> Result<(), ProxyError> {
    let fleet = fence.gates.enabled();
    if !fleet || object.is_none() || decision.reason != Reason::BeforeFlip {
        return Ok(());
    }
    let limit = super::guard::MAX_BODY;
    let whole = body.read_whole(limit).await.map_err(|e| match e {
        super::request_body::WholeBody::TooLarge => ProxyError::BodyTooLarge { limit },
        super::request_body::WholeBody::Failed => ProxyError::ClientBody,
    })?;
    body.replace(whole);
    Ok(())
}

/// When a write's response head is due: within `writes.fence - 2 s` (`fence`) of its send, or at
/// `overall` (the response timeout from when it began), whichever comes first. Not from when the
/// write began: one held through a fence would be sent with its time already spent, and cut off
/// after the apiserver took it.
pub(super) fn write_deadline(fence: Duration, overall: Option<Instant>) -> Option<Instant> {
    let sent = Instant::now().checked_add(fence.saturating_sub(Duration::from_secs(2)));
    match (overall, sent) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
