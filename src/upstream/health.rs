//! Active health checks: each endpoint's `/readyz`, and its `/version` against the backend's version.

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use tokio_util::sync::CancellationToken;

use super::own::get;
use super::{BackendPool, EndpointPool, EndpointState};
use crate::classify::ClientVersion;
use crate::metrics::Metrics;

/// Checks every endpoint of `backends()` now and then every `interval`, until `stop`; calls
/// `discovered()` after a check in which some backend's discovery was read anew.
pub(crate) fn spawn_health_checks<F, D>(
    backends: F,
    discovered: D,
    interval: Duration,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) where
    F: Fn() -> Vec<Arc<BackendPool>> + Send + 'static,
    D: Fn() + Send + 'static,
{
    tokio::spawn(async move {
        // Since discovery was last refreshed on schedule: the first check refreshes it.
        let mut since_discovery = interval * DISCOVERY_EVERY;
        loop {
            let (mut refreshed, mut down) = (false, false);
            let scheduled = since_discovery >= interval * DISCOVERY_EVERY;
            for backend in backends() {
                let mut recovered = false;
                for ep in &backend.endpoints {
                    recovered |= check_endpoint(&backend, ep, &metrics).await;
                    down |= ep.state() == EndpointState::Down;
                }
                // Discovery: at first, when an endpoint comes (back) up, and every DISCOVERY_EVERY
                // intervals.
                if recovered || backend.served.load().is_none() || scheduled {
                    refreshed |= refresh_discovery(&backend).await;
                }
            }
            if refreshed {
                discovered();
            }
            if scheduled {
                since_discovery = Duration::ZERO;
            }
            // An endpoint found down is checked again soon: requests to its backend get 503 until
            // a check finds it ready, so that check bounds how long an apiserver's restart lasts
            // for every client behind skewgate.
            let next = if down {
                interval.min(DOWN_RECHECK)
            } else {
                interval
            };
            since_discovery += next;
            tokio::select! {
                _ = tokio::time::sleep(next) => {}
                _ = stop.cancelled() => return,
            }
        }
    });
}

/// Checks one endpoint and records its state; a failure is logged when it first happens or changes,
/// not at every check. Returns whether the endpoint has just become ready.
async fn check_endpoint(backend: &BackendPool, ep: &Arc<EndpointPool>, metrics: &Metrics) -> bool {
    let heard = ep.heard();
    let (state, why) = check(ep, backend.version).await;
    let was = ep.state();
    if state == EndpointState::Down && why == super::own::TIMED_OUT && ep.heard() != heard {
        // No answer in time, but its connections delivered frames meanwhile: a busy apiserver,
        // not a dead one. Its clients are served as before; the next check asks again.
        tracing::debug!(backend = %backend.name, endpoint = %ep.endpoint.url, "health check timed out while the endpoint answered other requests");
        return false;
    }
    if state == EndpointState::Down {
        if was != EndpointState::Down {
            metrics
                .upstream_errors
                .with_label_values(&[backend.name.as_str(), "health"])
                .inc();
        }
        if ep.set_health_failure(Some(why.clone())) || was != EndpointState::Down {
            tracing::warn!(backend = %backend.name, endpoint = %ep.endpoint.url, %why, "endpoint is not ready");
        }
    } else {
        ep.set_health_failure(None);
        if was == EndpointState::Down {
            tracing::info!(backend = %backend.name, endpoint = %ep.endpoint.url, "endpoint is ready again");
        }
    }
    ep.set_state(state);
    state == EndpointState::Ready && was != EndpointState::Ready
}

/// Health-check intervals between two discovery refreshes.
const DISCOVERY_EVERY: u32 = 6;

/// How soon an endpoint found down is checked again.
const DOWN_RECHECK: Duration = Duration::from_secs(1);

/// Reads the backend's discovery from a ready endpoint; returns whether it was read.
async fn refresh_discovery(backend: &BackendPool) -> bool {
    let Some(ep) = backend
        .endpoints
        .iter()
        .find(|e| e.state() == EndpointState::Ready)
    else {
        return false;
    };
    match super::served::discover(ep).await {
        Ok(served) => {
            backend.served.store(Some(Arc::new(served)));
            backend.set_discovery_error(None);
            true
        }
        Err(e) => {
            if backend.set_discovery_error(Some(e.clone())) {
                tracing::warn!(backend = %backend.name, error = %e, "discovery failed; keeping what was known");
            }
            false
        }
    }
}

async fn check(ep: &Arc<EndpointPool>, version: Option<(u32, u32)>) -> (EndpointState, String) {
    match get(ep, "/readyz").await {
        Ok((StatusCode::OK, _)) => {}
        Ok((code, body)) => {
            return (
                EndpointState::Down,
                super::own::answered(ep, "/readyz", code, &body),
            );
        }
        Err(e) => return (EndpointState::Down, e),
    }
    let Some((major, minor)) = version else {
        return (EndpointState::Ready, String::new());
    };
    match get(ep, "/version").await {
        Ok((StatusCode::OK, body)) => {
            let git = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| {
                    v.get("gitVersion")
                        .and_then(|g| g.as_str())
                        .map(str::to_owned)
                })
                .unwrap_or_default();
            if ClientVersion::is_of_minor(&git, (major, minor)) {
                (EndpointState::Ready, String::new())
            } else {
                (
                    EndpointState::Down,
                    format!("/version says {git:?}, the route file expects v{major}.{minor}"),
                )
            }
        }
        Ok((code, body)) => (
            EndpointState::Down,
            super::own::answered(ep, "/version", code, &body),
        ),
        Err(e) => (EndpointState::Down, e),
    }
}
