//! Active health checks: each endpoint's `/readyz`, and its `/version` against the backend's version.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode, Uri};
use http_body_util::{BodyExt, Empty};
use tokio_util::sync::CancellationToken;

use super::{BackendPool, EndpointPool, EndpointState, send};
use crate::metrics::Metrics;

/// Checks every endpoint of `backends()` now and then every `interval`, until `stop`.
pub fn spawn_health_checks<F>(
    backends: F,
    interval: Duration,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) where
    F: Fn() -> Vec<Arc<BackendPool>> + Send + 'static,
{
    tokio::spawn(async move {
        let mut tick: u64 = 0;
        loop {
            for backend in backends() {
                let mut recovered = false;
                for ep in &backend.endpoints {
                    let (state, why) = check(ep, backend.version).await;
                    if state == EndpointState::Down && ep.state() != EndpointState::Down {
                        tracing::warn!(backend = %backend.name, endpoint = %ep.endpoint.url, %why, "endpoint is not ready");
                        metrics
                            .upstream_errors
                            .with_label_values(&[backend.name.as_str(), "health"])
                            .inc();
                    } else if state == EndpointState::Ready && ep.state() != EndpointState::Ready {
                        if ep.state() == EndpointState::Down {
                            tracing::info!(backend = %backend.name, endpoint = %ep.endpoint.url, "endpoint is ready again");
                        }
                        recovered = true;
                    }
                    ep.set_state(state);
                }
                // Discovery: at first, when an endpoint comes (back) up, and every DISCOVERY_EVERY ticks.
                if recovered
                    || backend.served.load().is_none()
                    || tick.is_multiple_of(DISCOVERY_EVERY)
                {
                    refresh_discovery(&backend).await;
                }
            }
            tick += 1;
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = stop.cancelled() => return,
            }
        }
    });
}

/// Health-check ticks between two discovery refreshes.
const DISCOVERY_EVERY: u64 = 6;

async fn refresh_discovery(backend: &BackendPool) {
    let Some(ep) = backend
        .endpoints
        .iter()
        .find(|e| e.state() == EndpointState::Ready)
    else {
        return;
    };
    match super::discovery::discover(ep).await {
        Ok(served) => backend.served.store(Some(Arc::new(served))),
        Err(e) => {
            tracing::warn!(backend = %backend.name, error = %e, "discovery failed; keeping what was known")
        }
    }
}

async fn check(ep: &Arc<EndpointPool>, version: Option<(u32, u32)>) -> (EndpointState, String) {
    match get(ep, "/readyz").await {
        Ok((StatusCode::OK, _)) => {}
        Ok((code, _)) => return (EndpointState::Down, format!("/readyz answered {code}")),
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
            let prefix = format!("v{major}.{minor}.");
            if git.starts_with(&prefix) || git == format!("v{major}.{minor}") {
                (EndpointState::Ready, String::new())
            } else {
                (
                    EndpointState::Down,
                    format!("/version says {git:?}, the route file expects v{major}.{minor}"),
                )
            }
        }
        Ok((code, _)) => (EndpointState::Down, format!("/version answered {code}")),
        Err(e) => (EndpointState::Down, e),
    }
}

/// GETs `path` from the endpoint: its status and body (bounded by a 5 s timeout).
pub(crate) async fn get(ep: &Arc<EndpointPool>, path: &str) -> Result<(StatusCode, Bytes), String> {
    let uri: Uri = format!(
        "{}://{}{path}",
        if ep.endpoint.tls { "https" } else { "http" },
        ep.endpoint.authority()
    )
    .parse()
    .map_err(|e| format!("{e}"))?;
    let req = Request::get(uri).body(()).map_err(|e| e.to_string())?;
    let exchange = async {
        let resp = send(ep, req, Empty::<Bytes>::new())
            .await
            .map_err(|e| e.to_string())?;
        let code = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((code, body))
    };
    tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .map_err(|_| "timed out".to_owned())?
}
