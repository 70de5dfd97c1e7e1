//! skewgate's presence in the cluster: the `default/kubernetes` Service's endpoints name the live
//! skewgate replicas, so that in-cluster clients (controllers, operators: `KUBERNETES_SERVICE_HOST`)
//! reach the apiservers through skewgate too.
//!
//! It does what kube-apiserver's lease endpoint reconciler does, for the apiservers run with
//! `--endpoint-reconciler-type=none`: each replica renews a Lease of its own (`kube-system`,
//! `skewgate-<address>`) every `interval`; the replicas whose Lease is current are the live ones,
//! and the Endpoints and EndpointSlice `default/kubernetes` are rewritten when they differ. A
//! replica that dies stops renewing and drops out when its Lease expires; one that shuts down
//! removes itself first. Writing goes through the apiservers as skewgate's own user (least
//! privilege: deploy/kubeadm/rbac.yaml), and a failure is logged and counted, never in the way of
//! serving.

mod fleet;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod fuzzing;
mod gates;
mod objects;
mod offset;
mod said;

pub(crate) use fleet::{FleetView, Hooks, Member, OnView, Report};
pub(crate) use gates::{FleetGates, MoveView, OutOfStep, move_key};
pub(crate) use said::{Said, heard};

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use http::{Method, StatusCode};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::steer::Clock;
use crate::upstream::{BackendPool, EndpointPool, own_request};
use objects::{Desired, endpoint_slice, endpoints, lease};

/// How this replica publishes itself.
#[derive(Clone, Debug)]
pub struct PublishSettings {
    /// The address in-cluster clients reach this replica at (its node's address) and its port.
    pub address: SocketAddr,
    /// How often the Lease is renewed and the endpoints checked.
    pub interval: Duration,
    /// How long a Lease holds without renewal.
    pub lease_duration: Duration,
}

impl PublishSettings {
    /// Renewing every 10 s, a Lease holding 15 s: kube-apiserver's own master lease settings.
    pub fn new(address: SocketAddr) -> PublishSettings {
        PublishSettings {
            address,
            interval: Duration::from_secs(10),
            lease_duration: Duration::from_secs(15),
        }
    }
}

/// Why the apiservers refuse `ip` as an address of Endpoints and EndpointSlices, if they do: the
/// checks of kube-apiserver's `ValidateNonSpecialIP`, with its words.
pub fn unusable_endpoint_ip(ip: IpAddr) -> Option<&'static str> {
    let (link_local, link_local_multicast) = match ip {
        IpAddr::V4(v4) => (v4.is_link_local(), v4.octets()[..3] == [224, 0, 0]),
        // fe80::/10; multicast of link-local scope (Go's IsLinkLocalMulticast: ffX2::/16).
        IpAddr::V6(v6) => {
            let o = v6.octets();
            (
                o[0] == 0xfe && o[1] & 0xc0 == 0x80,
                o[0] == 0xff && o[1] & 0x0f == 0x02,
            )
        }
    };
    if ip.is_unspecified() {
        Some("may not be unspecified")
    } else if ip.is_loopback() {
        Some("may not be in the loopback range (127.0.0.0/8, ::1/128)")
    } else if link_local {
        Some("may not be in the link-local range (169.254.0.0/16, fe80::/10)")
    } else if link_local_multicast {
        Some("may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)")
    } else {
        None
    }
}

/// Where skewgate's own writes go: an endpoint that is up, of the backends in order.
pub(crate) type Target = Box<dyn Fn() -> Option<Arc<EndpointPool>> + Send + Sync>;

/// A replica's presence: its Lease and its place in the `kubernetes` endpoints.
pub(crate) struct Presence {
    settings: PublishSettings,
    target: Target,
    /// What this replica runs, published in its Lease, and what it does with the others'.
    hooks: Hooks,
    metrics: Arc<Metrics>,
    last_error: Mutex<Option<String>>,
    /// The replicas as last read.
    fleet: Mutex<FleetView>,
    /// The proxy's clock (what `flipAt` is judged by), and its offset from the apiservers'.
    clock: Arc<dyn Clock>,
    offset: Mutex<offset::OffsetEstimate>,
}

impl Presence {
    /// Publishes this replica until `stop`.
    pub(crate) fn spawn(
        settings: PublishSettings,
        target: Target,
        hooks: Hooks,
        (metrics, clock): (Arc<Metrics>, Arc<dyn Clock>),
        stop: CancellationToken,
    ) -> Arc<Presence> {
        let presence = Arc::new(Presence {
            settings,
            target,
            hooks,
            metrics,
            last_error: Mutex::new(None),
            fleet: Mutex::new(FleetView::default()),
            clock,
            offset: Mutex::new(offset::OffsetEstimate::default()),
        });
        let me = presence.clone();
        tokio::spawn(async move {
            loop {
                me.reconcile(true).await;
                if !me.between_renewals(&stop).await {
                    return;
                }
            }
        });
        presence
    }

    /// Until the next renewal is due (a round, or news of this replica's own), reading the others'
    /// Leases every quarter round (not more often than every 250 ms): an abort or a move's time
    /// another replica publishes is seen within a quarter round. False at `stop`.
    async fn between_renewals(&self, stop: &CancellationToken) -> bool {
        let renew_at = tokio::time::Instant::now() + self.settings.interval;
        let peek = (self.settings.interval / 4).max(Duration::from_millis(250));
        loop {
            let next = (tokio::time::Instant::now() + peek).min(renew_at);
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {}
                _ = self.hooks.gates.news() => return true,
                _ = stop.cancelled() => return false,
            }
            if tokio::time::Instant::now() >= renew_at {
                return true;
            }
            self.peek().await;
        }
    }

    /// The others' Leases read between renewals (a failure waits for the round, which logs it).
    async fn peek(&self) {
        let Some(ep) = (self.target)() else {
            return;
        };
        let now = SystemTime::now();
        if let Ok(leases) = self.read_leases(&ep).await {
            self.saw(fleet::members(&leases, now), now);
        }
    }

    /// Takes this replica out: deletes its Lease and rewrites the endpoints without it (within
    /// `within`), so clients stop coming before the listener closes.
    pub(crate) async fn withdraw(&self, within: Duration) {
        let _ = tokio::time::timeout(within, self.reconcile(false)).await;
    }

    /// One round: renew (or, when `present` is false, delete) this replica's Lease, then make the
    /// endpoints name the live replicas.
    async fn reconcile(&self, present: bool) {
        let Some(ep) = (self.target)() else {
            self.failed("no apiserver endpoint is up".to_owned());
            return;
        };
        let result = async {
            let now = SystemTime::now();
            // The others' Leases are read even when this one's renewal failed: a move its file
            // does not make yet is seen all the same.
            let renewal = if present {
                let begun = self.clock.now();
                let renewed = self.renew_lease(&ep, now).await;
                if renewed.is_ok() {
                    self.hooks.gates.renewed(begun, self.settings.lease_duration);
                }
                renewed
            } else {
                self.delete_lease(&ep).await
            };
            let leases = self.read_leases(&ep).await?;
            let members = fleet::members(&leases, now);
            let mut live: Vec<SocketAddr> =
                members.iter().filter(|m| m.live).map(|m| m.address).collect();
            self.saw(members, now);
            renewal?;
            live.retain(|a| present || *a != self.settings.address);
            if live.is_empty() {
                // The last replica going away leaves the endpoints as they are: an empty Service
                // would serve no one, a stale address at least is retried.
                if !present {
                    tracing::info!("the last replica withdraws: the kubernetes Service's endpoints are left as they are");
                }
                return Ok(());
            }
            let desired = Desired::new(live, self.settings.address.port());
            write_if_changed(
                &ep,
                "/api/v1/namespaces/default/endpoints",
                &endpoints(&desired),
            )
            .await?;
            write_if_changed(
                &ep,
                "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices",
                &endpoint_slice(&desired),
            )
            .await
        }
        .await;
        match result {
            // A withdrawal keeps nothing: it is no recovery to report.
            Ok(()) if !present => self.count("success"),
            Ok(()) => self.succeeded(),
            Err(e) => self.failed(e),
        }
    }

    async fn renew_lease(&self, ep: &Arc<EndpointPool>, now: SystemTime) -> Result<(), String> {
        let name = lease_name(self.settings.address);
        let path = format!("{}/{name}", lease_collection());
        let current = read_optional(ep, &path).await?;
        let body = lease(
            &name,
            self.settings.address,
            self.settings.lease_duration,
            now,
            current.as_ref(),
            &self.report(now),
        );
        match current {
            Some(_) => send_json(ep, Method::PUT, &path, &body).await,
            None => send_json(ep, Method::POST, &lease_collection(), &body).await,
        }
    }

    async fn delete_lease(&self, ep: &Arc<EndpointPool>) -> Result<(), String> {
        let path = format!(
            "{}/{}",
            lease_collection(),
            lease_name(self.settings.address)
        );
        match own_request(ep, Method::DELETE, &path, None).await? {
            (code, _) if code.is_success() || code == StatusCode::NOT_FOUND => Ok(()),
            (code, body) => Err(answered(&path, code, &body)),
        }
    }

    fn succeeded(&self) {
        self.count("success");
        let mut last = self.last_error.lock().unwrap_or_else(|e| e.into_inner());
        if last.take().is_some() {
            tracing::info!("the kubernetes Service's endpoints are kept again");
        }
    }

    fn failed(&self, error: String) {
        self.count("failure");
        let mut last = self.last_error.lock().unwrap_or_else(|e| e.into_inner());
        if last.as_deref() != Some(error.as_str()) {
            tracing::warn!(%error, "cannot keep the kubernetes Service's endpoints; serving on, retrying");
            *last = Some(error);
        }
    }

    fn count(&self, result: &str) {
        self.metrics
            .endpoint_reconciles
            .with_label_values(&[result])
            .inc();
    }
}

/// The first endpoint that is up, of `backends` in order.
pub(crate) fn first_ready(backends: &[Arc<BackendPool>]) -> Option<Arc<EndpointPool>> {
    backends.iter().find_map(|b| b.pick().cloned())
}

fn lease_collection() -> String {
    "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases".to_owned()
}

/// `skewgate-10-0-0-11-6443`: a replica's Lease, by its address.
fn lease_name(address: SocketAddr) -> String {
    let ip: String = address
        .ip()
        .to_string()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("skewgate-{ip}-{}", address.port())
}

/// The object at `path`, or `None` when it does not exist.
async fn read_optional(ep: &Arc<EndpointPool>, path: &str) -> Result<Option<Value>, String> {
    match own_request(ep, Method::GET, path, None).await? {
        (StatusCode::NOT_FOUND, _) => Ok(None),
        (code, body) if code.is_success() => serde_json::from_slice(&body)
            .map(Some)
            .map_err(|e| format!("{path}: {e}")),
        (code, body) => Err(answered(path, code, &body)),
    }
}

async fn send_json(
    ep: &Arc<EndpointPool>,
    method: Method,
    path: &str,
    body: &Value,
) -> Result<(), String> {
    let bytes = serde_json::to_vec(body).map_err(|e| e.to_string())?;
    match own_request(ep, method, path, Some(bytes)).await? {
        (code, _) if code.is_success() => Ok(()),
        (code, body) => Err(answered(path, code, &body)),
    }
}

/// Creates or replaces the object `desired` (named `kubernetes`) in `collection` unless it already
/// holds what `desired` holds.
async fn write_if_changed(
    ep: &Arc<EndpointPool>,
    collection: &str,
    desired: &Value,
) -> Result<(), String> {
    let path = format!("{collection}/kubernetes");
    match read_optional(ep, &path).await? {
        None => send_json(ep, Method::POST, collection, desired).await,
        Some(current) if objects::same_content(&current, desired) => Ok(()),
        Some(current) => {
            let mut replacement = desired.clone();
            replacement["metadata"]["resourceVersion"] =
                current["metadata"]["resourceVersion"].clone();
            send_json(ep, Method::PUT, &path, &replacement).await
        }
    }
}

fn answered(path: &str, code: StatusCode, body: &[u8]) -> String {
    let message = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_owned))
        .unwrap_or_default();
    format!("{path} answered {code} {message}")
}

#[cfg(test)]
mod tests {
    use super::unusable_endpoint_ip;

    /// kube-apiserver's ValidateNonSpecialIP, case by case.
    #[test]
    fn the_addresses_the_apiservers_refuse_in_endpoints() {
        let refused = [
            "0.0.0.0",
            "::",
            "127.0.0.1",
            "127.8.0.2",
            "::1",
            "169.254.169.254",
            "fe80::1",
            "224.0.0.251",
            "ff02::1",
            "ff12::1",
        ];
        for ip in refused {
            let ip = ip.parse().expect("ip");
            assert!(unusable_endpoint_ip(ip).is_some(), "{ip}");
        }
        for ip in [
            "10.0.0.11",
            "192.0.2.10",
            "fd00::11",
            "2001:db8::1",
            "224.0.1.1",
            "ff05::2",
        ] {
            let ip = ip.parse().expect("ip");
            assert_eq!(unusable_endpoint_ip(ip), None, "{ip}");
        }
    }
}
