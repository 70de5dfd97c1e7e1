//! Admission: whether and when a request may go upstream. A client's place among its requests in
//! flight; a pinned write held while its pin's fence lasts; a write admitted to the ledger once the
//! object has no writes in flight on another backend. Each refusal is a `ProxyError`.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use super::Proxy;
use super::limits::{ClientKey, ClientPermit};
use super::routing::Routing;
use super::status::ProxyError;
use crate::identity::Identity;
use crate::steer::{Decision, WriteTicket, backend_key};

/// The client's place among its requests in flight (after waiting its turn when it has too many),
/// or why there is none.
pub(super) async fn admit_client(
    proxy: &Proxy,
    identity: Option<&Identity>,
    remote: SocketAddr,
) -> Result<Option<ClientPermit>, ProxyError> {
    let client = ClientKey::of(identity, remote);
    proxy
        .limits
        .acquire(client)
        .await
        .map_err(|_| ProxyError::ClientBusy {
            client: client.to_string(),
            limit: proxy.limits.limit(),
        })
}

/// Admits a write to the ledger, waiting up to the request's own `timeout` (or `writes.fence`, if
/// shorter) for the object's writes on another backend; past that, 429 and nothing is sent.
pub(super) async fn admit_write(
    proxy: &Proxy,
    routing: &Routing,
    decision: &Decision,
    key: u64,
    query: Option<&str>,
) -> Result<WriteTicket, ProxyError> {
    let table = routing.table();
    let backend = table.backend_name(decision.backend);
    let mut wait = table.writes.fence;
    if let Some(t) = request_timeout(query) {
        wait = wait.min(t);
    }
    let deadline = tokio::time::Instant::now() + wait;
    let started = std::time::Instant::now();
    let rule = decision.rule_name(table);
    let ledger = proxy.writes.clone();
    let admit = ledger.admit(key, backend_key(backend), deadline);
    tokio::pin!(admit);
    // Most writes are admitted at once; only those that wait show in the gauge.
    let first = futures_util::FutureExt::now_or_never(admit.as_mut());
    let result = match first {
        Some(r) => r,
        None => {
            let _held = Held::new(proxy.metrics.writes_held.with_label_values(&[rule]));
            admit.await
        }
    };
    match result {
        Ok((ticket, waited)) => {
            if waited {
                proxy
                    .metrics
                    .pin_move_wait
                    .observe(started.elapsed().as_secs_f64());
            }
            Ok(ticket)
        }
        Err(_) => Err(ProxyError::ObjectMoving {
            backend: backend.to_owned(),
        }),
    }
}

/// Holds a write until its pin's fence ends (by the proxy's clock); 429 at once when the request's
/// own `timeout` would pass first.
pub(super) async fn hold_until(
    proxy: &Proxy,
    routing: &Routing,
    decision: &Decision,
    until: SystemTime,
    query: Option<&str>,
) -> Result<(), ProxyError> {
    let clock = &proxy.settings.clock;
    let remaining = until.duration_since(clock.now()).unwrap_or(Duration::ZERO);
    let rule = decision.rule_name(routing.table());
    if request_timeout(query).is_some_and(|t| t < remaining) {
        return Err(ProxyError::PinFenced {
            rule: rule.to_owned(),
            remaining_secs: remaining.as_secs() + 1,
        });
    }
    let _held = Held::new(proxy.metrics.writes_held.with_label_values(&[rule]));
    // Polls the clock rather than sleeping the whole hold, so a clock that jumps is followed.
    while clock.now() < until {
        let left = until.duration_since(clock.now()).unwrap_or(Duration::ZERO);
        tokio::time::sleep(left.min(Duration::from_millis(50))).await;
    }
    Ok(())
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
    let (_, value) = form_urlencoded::parse(query?.as_bytes()).find(|(k, _)| k == "timeout")?;
    humantime::parse_duration(&value).ok()
}
