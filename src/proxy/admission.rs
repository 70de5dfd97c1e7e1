//! Admission: whether and when a request may go upstream. A client's place among its requests in
//! flight; a pinned write held while its pin's fence lasts; a write admitted to the ledger once the
//! object has no writes in flight on another backend. Each refusal is a `ProxyError`.

use std::net::SocketAddr;
use std::sync::Arc;

use super::Proxy;
use super::limits::{ClientKey, ClientLimit, ClientPermit};
use super::routing::Routing;
use super::status::ProxyError;
use crate::identity::Identity;
use crate::steer::{Decision, Reason, Refused, WriteAdmission, WriteTicket};

/// The client's place among its requests in flight (after waiting its turn when it has too many),
/// or why there is none; `None` when there is no limit.
pub(crate) async fn admit_client(
    proxy: &Proxy,
    limit: Option<&Arc<ClientLimit>>,
    identity: Option<&Identity>,
    remote: SocketAddr,
) -> Result<Option<ClientPermit>, ProxyError> {
    let Some(client) = limit else {
        return Ok(None);
    };
    client
        .acquire()
        .await
        .map(Some)
        .map_err(|_| ProxyError::ClientBusy {
            client: ClientKey::of(identity, remote).to_string(),
            limit: proxy.limits.limit(),
        })
}

/// Admits a pinned write (`object` is its ledger key): held while its pin's fence lasts (429 at
/// once when the request's own `timeout` would pass first), then admitted to the ledger, waiting up
/// to that `timeout` (or `writes.fence`, if shorter) for the object's writes on another backend;
/// past that, 429 and nothing is sent.
pub(crate) async fn admit_write(
    proxy: &Proxy,
    routing: &Routing,
    decision: &Decision,
    object: u64,
    query: Option<&str>,
) -> Result<WriteTicket, ProxyError> {
    // Out of step with the fleet, a replica takes no writes: the others may have moved a pin it
    // does not know of.
    if let Some(why) = proxy.fleet_gates.out_of_step(proxy.settings.clock.now()) {
        return Err(ProxyError::OutOfStep { why });
    }
    let table = routing.table();
    let backend = table.backend_name(decision.backend);
    let rule = decision.rule_name(table);
    let admission = WriteAdmission {
        ledger: &proxy.writes,
        clock: &*proxy.settings.clock,
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
    let on_hold = || Held::new(proxy.metrics.writes_held.with_label_values(&[rule]));
    match admission.admit(held_until, object, backend, on_hold).await {
        Ok(admitted) => {
            if let Some(waited) = admitted.waited {
                proxy.metrics.pin_move_wait.observe(waited.as_secs_f64());
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
    proxy: &Proxy,
    routing: &Routing,
    (decision, object): (&Decision, Option<u64>),
) -> Result<(), ProxyError> {
    if object.is_none() {
        return Ok(());
    }
    let now = proxy.settings.clock.now();
    if let Some(why) = proxy.fleet_gates.out_of_step(now) {
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
    proxy: &Proxy,
    (decision, object): (&Decision, Option<u64>),
    body: &mut super::request_body::ClientBody,
) -> Result<(), ProxyError> {
    let fleet = proxy.fleet_gates.enabled();
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
