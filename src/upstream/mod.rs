//! Backends and their endpoints: pooled HTTP/2 connections, endpoint choice, and health checks.

mod budget;
mod deadline;
mod dial;
pub(crate) mod frames;
mod health;
mod interned;
mod own;
mod pool;
mod send;
mod served;
mod settings;
pub(crate) mod stalls;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

pub use budget::{DEFAULT_LIMIT as DEFAULT_RESPONSE_BUFFER, ResponseBudget};
pub(crate) use deadline::WheelTimer;
pub(crate) use dial::{DialError, Dialed};
pub(crate) use health::spawn_health_checks;
pub(crate) use own::{
    answered as own_answered, dated as own_dated, get as own_get,
    get_with_groups as own_get_with_groups, request as own_request,
    send_with_groups as own_send_with_groups, watch as own_watch,
};
pub use pool::PoolSettings;
pub(crate) use pool::{Credential, EndpointPool, EndpointState};
pub(crate) use send::{UpstreamBody, send};
pub(crate) use served::Served;

/// The upstream HTTP/2 client's core driven by `input` as an apiserver's bytes, with requests
/// open, its invariants checked after every read (`fuzz/fuzz_targets/http2_upstream.rs`).
#[cfg(feature = "fuzzing")]
pub fn fuzz_http2_upstream(input: &[u8]) {
    frames::fuzzing::answer_frames(input);
}

/// A request's head on its way upstream, boxed: 224 bytes unboxed, it was copied into each future
/// that held it on the way (the request's, `forward`'s, `send`'s) and held there once more as each
/// moved it on; boxed once, each holds and moves a pointer.
pub(crate) type Head = Box<http::request::Parts>;

/// `req`'s head, boxed.
pub(crate) fn head(req: http::Request<()>) -> Head {
    Box::new(req.into_parts().0)
}

use crate::config::RouteTable;
use crate::metrics::Metrics;

/// An error from below the request: h2's, hyper's, or http's.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a request could not be sent, or its response head not received.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UpstreamError {
    /// A connection could not be opened.
    #[error("cannot connect: {0}")]
    Connect(#[source] DialError),
    /// The request could not be handed to the apiserver (the connection was closing or broken).
    #[error("the apiserver connection failed: {0}")]
    Protocol(#[source] BoxError),
    /// The apiserver reset the stream or the connection failed after the request was sent and
    /// before the response started: the apiserver may have acted on it.
    #[error("the apiserver connection failed after the request was sent: {0}")]
    AfterSend(#[source] BoxError),
    /// No response head arrived in time.
    #[error("the apiserver did not answer in time")]
    Timeout,
    /// The request's header list is larger than the apiserver accepts; it was not sent.
    #[error("the request headers take {size} bytes, the apiserver accepts {limit}")]
    HeadersTooLarge {
        /// The header list's size, as HTTP/2 counts it.
        size: usize,
        /// The most the apiserver (or skewgate) accepts.
        limit: usize,
    },
}

impl UpstreamError {
    /// The error of a failed HTTP/2 exchange.
    pub(crate) fn from_h2(e: h2::Error) -> UpstreamError {
        UpstreamError::Protocol(Box::new(e))
    }

    /// Whether the client caused the failure (and no backend is to blame).
    pub(crate) fn is_client_error(&self) -> bool {
        matches!(self, UpstreamError::HeadersTooLarge { .. })
    }

    /// Whether the request may have reached the apiserver (and been acted on) before this failure.
    pub(crate) fn may_have_reached_apiserver(&self) -> bool {
        matches!(self, UpstreamError::AfterSend(_) | UpstreamError::Timeout)
    }

    /// A bounded label for metrics.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            UpstreamError::Connect(_) => "connect",
            UpstreamError::Protocol(_) | UpstreamError::AfterSend(_) => "reset",
            UpstreamError::Timeout => "timeout",
            UpstreamError::HeadersTooLarge { .. } => "headers_too_large",
        }
    }
}

/// The endpoints of one backend.
pub(crate) struct BackendPool {
    /// The backend's name.
    pub name: String,
    /// Its expected `major.minor`, if the route file gives one.
    pub version: Option<(u32, u32)>,
    /// Its endpoints' pools.
    pub endpoints: Vec<Arc<EndpointPool>>,
    /// What it serves, once discovery has run.
    pub served: arc_swap::ArcSwapOption<Served>,
    /// The last discovery error, so that one repeated every refresh is logged once.
    discovery_error: Mutex<Option<String>>,
}

impl BackendPool {
    /// The endpoint to use now: the one with the fewest open streams among those whose health
    /// check passed; only when none has, one not checked yet (at start); never one found down.
    /// `None` when every endpoint is down.
    pub(crate) fn pick(&self) -> Option<&Arc<EndpointPool>> {
        self.endpoints
            .iter()
            .filter(|e| e.state() != EndpointState::Down)
            .min_by_key(|e| (e.state() != EndpointState::Ready, e.active_streams()))
    }

    /// The last discovery error, if the last refresh failed.
    pub(crate) fn discovery_error(&self) -> Option<String> {
        self.discovery_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Records the last discovery error (`None` after a success); returns whether it changed.
    pub(crate) fn set_discovery_error(&self, error: Option<String>) -> bool {
        let mut last = self
            .discovery_error
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let changed = *last != error;
        *last = error;
        changed
    }

    /// Why no endpoint can serve: each endpoint's last failure, for the 503 `Status`, `/readyz` and
    /// the log.
    pub(crate) fn unavailable_reason(&self) -> String {
        let reasons: Vec<String> = self
            .endpoints
            .iter()
            .map(|e| match e.failure() {
                Some(why) => format!("{}: {why}", e.endpoint.url),
                None => format!("{}: not checked yet", e.endpoint.url),
            })
            .collect();
        reasons.join("; ")
    }

    /// Whether some endpoint is ready.
    pub(crate) fn is_reachable(&self) -> bool {
        self.endpoints
            .iter()
            .any(|e| e.state() == EndpointState::Ready)
    }
}

/// Every endpoint pool, shared across route table reloads so that an endpoint that stays keeps its
/// connections, a new one is connected, and a removed one is drained when its last stream ends.
pub(crate) struct Upstreams {
    settings: PoolSettings,
    metrics: Arc<Metrics>,
    pools: Mutex<HashMap<(String, String), Weak<EndpointPool>>>,
}

impl Upstreams {
    /// An empty registry.
    pub(crate) fn new(settings: PoolSettings, metrics: Arc<Metrics>) -> Upstreams {
        for c in settings.response_buffer.collectors() {
            metrics.adopt(c);
        }
        Upstreams {
            settings,
            metrics,
            pools: Mutex::new(HashMap::new()),
        }
    }

    /// The backend pools of a table, reusing the pools of endpoints already known.
    pub(crate) fn backends_for(&self, table: &RouteTable) -> Vec<Arc<BackendPool>> {
        let mut pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        pools.retain(|_, p| p.strong_count() > 0);
        table
            .backends
            .iter()
            .map(|b| {
                let endpoints = b
                    .endpoints
                    .iter()
                    .map(|ep| {
                        // Everything that makes a connection's identity: where, and which name.
                        let key = (b.name.clone(), format!("{} {}", ep.url, ep.server_name));
                        if let Some(existing) = pools.get(&key).and_then(Weak::upgrade) {
                            return existing;
                        }
                        let labels = [b.name.as_str(), ep.url.as_str()];
                        let pool = Arc::new(EndpointPool::new(
                            ep.clone(),
                            self.settings.clone(),
                            [
                                self.metrics.upstream_connections.with_label_values(&labels),
                                self.metrics.upstream_streams.with_label_values(&labels),
                                self.metrics.endpoint_ready.with_label_values(&labels),
                            ],
                        ));
                        pools.insert(key, Arc::downgrade(&pool));
                        pool
                    })
                    .collect();
                Arc::new(BackendPool {
                    name: b.name.clone(),
                    version: b.version,
                    endpoints,
                    served: arc_swap::ArcSwapOption::empty(),
                    discovery_error: Mutex::new(None),
                })
            })
            .collect()
    }
}
