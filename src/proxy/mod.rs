//! The request pipeline: one request run through classify, steer and upstream, in phases
//! (`service::decide`, `admission`, `forwarding`, the send, `service::respond`), and what they
//! share (`Proxy`: the routing in force, limits, offenders, metrics). The wire it is served on is
//! `crate::edge`'s; what the pipeline asks of it is `wire`.

pub(crate) mod access_log;
mod admission;
mod body;
mod context;
mod debug;
mod discovery;
pub(crate) mod entry;
mod exposure;
mod fence;
mod fleet;
mod forward;
mod forwarding;
mod framing;
mod guard;
mod limits;
pub(crate) mod recent;
mod reload_log;
mod request_body;
mod respond;
pub(crate) mod routing;
mod schemas;
mod service;
mod share;
mod status;
mod upgrade;
pub(crate) mod wire;

use crate::cluster::PublishSettings;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;

/// How a guarded update's body is encoded (for `skewgate explain`).
pub use guard::Encoding as GuardEncoding;
pub(crate) use routing::Routing;
pub use share::describe_watch;

/// The shared watch's fuzz driver (`share/fuzzing.rs`).
#[cfg(feature = "fuzzing")]
pub(crate) fn fuzz_shared_watch(input: &[u8]) {
    share::fuzzing::drive(input);
}

use crate::config::{ConfigErrors, RouteTable};
use crate::identity::IdentityHeaders;
use crate::metrics::Metrics;
use crate::steer::{Clock, SystemClock, WriteLedger};
use crate::upstream::{PoolSettings, Upstreams};
use discovery::OpenApiMerges;

/// The pipeline's tunables (the edge's are `edge::EdgeSettings`).
#[derive(Clone, Debug)]
pub struct ProxySettings {
    /// How long a request that is not long-running may wait for its response head.
    pub response_timeout: Duration,
    /// Upstream pool tunables.
    pub pool: PoolSettings,
    /// How often endpoints are health-checked.
    pub health_interval: Duration,
    /// The clock decisions are made by.
    pub clock: Arc<dyn Clock>,
    /// Requests in flight per client (its verified user, else its address), long-running ones not
    /// counted; past it, 429. 0: no limit.
    pub max_requests_per_client: usize,
    /// How long a client's request past its limit waits for a place before 429.
    pub client_queue_wait: Duration,
    /// The identity header names removed from clients and set upstream.
    pub identity_headers: Arc<IdentityHeaders>,
    /// Publish this replica in the `default/kubernetes` Service's endpoints (`cluster`), for
    /// apiservers run with `--endpoint-reconciler-type=none`.
    pub publish: Option<PublishSettings>,
    /// Write an access-log line (target `skewgate::access`, at info) as each request ends.
    pub access_log: bool,
}

impl Default for ProxySettings {
    fn default() -> Self {
        ProxySettings {
            response_timeout: Duration::from_secs(70),
            pool: PoolSettings::default(),
            health_interval: Duration::from_secs(5),
            clock: Arc::new(SystemClock),
            max_requests_per_client: 100,
            client_queue_wait: Duration::from_secs(15),
            identity_headers: Arc::new(IdentityHeaders::default()),
            publish: None,
            access_log: false,
        }
    }
}

/// Logs what the route file says that loads but likely is not meant.
fn log_warnings(table: &RouteTable) {
    for w in &table.warnings {
        tracing::warn!(warning = %w, "route file");
    }
}

/// What a reload did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ReloadOutcome {
    /// The new table is in force.
    Applied,
    /// The file gives the table already in force; nothing changed.
    Unchanged,
    /// The file is invalid; the running table stays.
    Rejected,
}

/// The proxy's shared state.
pub(crate) struct Proxy {
    pub(crate) routing: routing::Current,
    upstreams: Upstreams,
    /// The metrics.
    pub metrics: Arc<Metrics>,
    /// Its tunables.
    pub settings: ProxySettings,
    /// Fired at shutdown: long-running responses end cleanly.
    pub stop_long_running: CancellationToken,
    /// Which backend each object's in-flight writes are on.
    pub writes: Arc<WriteLedger>,
    /// Requests in flight per client.
    pub limits: Arc<limits::ClientLimits>,
    /// Set when shutdown begins: readiness fails from then on.
    pub draining: std::sync::atomic::AtomicBool,
    /// The backends' fields, from their OpenAPI v3.
    pub schemas: Arc<schemas::Schemas>,
    /// The OpenAPI documents merged discovery answers merged.
    pub(crate) openapi: Arc<OpenApiMerges>,
    /// The fleet's times of the pins' moves, shared by every routing.
    pub(crate) fleet_gates: Arc<crate::cluster::FleetGates>,
    /// This replica's presence in the cluster, when it publishes itself.
    pub(crate) presence: std::sync::OnceLock<Arc<crate::cluster::Presence>>,
    /// The errors skewgate answered itself and the guards' decisions, lately (`/debug/recent`).
    pub(crate) recent: recent::Recent,
    /// When the running table was loaded, and whether the file has failed to load since.
    pub(crate) reloads: reload_log::ReloadLog,
    /// The shared watches open now (`shareWatches`).
    pub(crate) shares: Arc<share::Shares>,
}

impl Proxy {
    /// Replaces every upstream connection (after the upstream TLS files changed).
    pub(crate) fn reconnect_upstreams(&self) {
        for backend in &self.routing().backends {
            for endpoint in &backend.endpoints {
                endpoint.retire_all();
            }
        }
    }

    /// A proxy serving `table`.
    pub(crate) fn new(
        table: RouteTable,
        settings: ProxySettings,
        metrics: Arc<Metrics>,
    ) -> Arc<Proxy> {
        log_warnings(&table);
        let upstreams = Upstreams::new(settings.pool.clone(), metrics.clone());
        let stop_long_running = CancellationToken::new();
        let openapi = Arc::new(OpenApiMerges::default());
        let fleet_gates = Arc::default();
        let routing = Routing::new(
            table,
            &upstreams,
            metrics.clone(),
            &stop_long_running,
            None,
            &settings.clock,
            (&openapi, &fleet_gates),
        );
        metrics.config_reloads.with_label_values(&["success"]).inc();
        metrics.config_last_success.set(unix_now());
        Arc::new(Proxy {
            routing: routing::Current::new(routing),
            upstreams,
            metrics: metrics.clone(),
            stop_long_running,
            writes: Arc::new(WriteLedger::default()),
            limits: limits::ClientLimits::new(
                settings.max_requests_per_client,
                settings.client_queue_wait,
            ),
            draining: std::sync::atomic::AtomicBool::new(false),
            schemas: Arc::default(),
            openapi,
            fleet_gates,
            presence: std::sync::OnceLock::new(),
            recent: recent::Recent::default(),
            reloads: reload_log::ReloadLog::new(settings.clock.now()),
            shares: Arc::new(share::Shares::new(
                settings.pool.response_buffer.clone(),
                metrics.clone(),
            )),
            settings,
        })
    }

    /// The routing in force now.
    pub(crate) fn routing(&self) -> Arc<Routing> {
        self.routing.load()
    }

    /// The routing in force, for one request (its worker's hold on it).
    pub(crate) fn routing_for_request(&self) -> routing::InForce {
        self.routing.for_request()
    }

    /// Applies the result of loading the route file: a valid table different from the running one
    /// replaces it atomically; an invalid one is logged, counted, and changes nothing.
    pub(crate) fn reload(&self, loaded: Result<RouteTable, ConfigErrors>) -> ReloadOutcome {
        match loaded {
            Err(errors) => {
                self.metrics
                    .config_reloads
                    .with_label_values(&["failure"])
                    .inc();
                self.metrics.config_last_successful.set(0);
                for e in &errors.0 {
                    tracing::error!(error = %e, "route file rejected; the running route table stays");
                }
                let now = self.settings.clock.now();
                self.reloads
                    .failed(now, errors.0.iter().map(ToString::to_string));
                ReloadOutcome::Rejected
            }
            Ok(table) if table == *self.routing.load().table() => {
                self.metrics
                    .config_reloads
                    .with_label_values(&["unchanged"])
                    .inc();
                self.metrics.config_last_successful.set(1);
                self.reloads.loaded(self.settings.clock.now(), false);
                ReloadOutcome::Unchanged
            }
            Ok(table) => {
                log_warnings(&table);
                let name = table.name.clone().unwrap_or_default();
                let old = self.routing.load();
                let routing = Arc::new(Routing::new(
                    table,
                    &self.upstreams,
                    self.metrics.clone(),
                    &self.stop_long_running,
                    Some(&old),
                    &self.settings.clock,
                    (&self.openapi, &self.fleet_gates),
                ));
                self.schemas.carry_over(&routing.backends);
                self.routing.store(routing.clone());
                if routing.new_moves {
                    self.fleet_gates.publish_now();
                }
                // A replica that publishes itself serves beside others.
                old.end_moved_reads(&routing, self.settings.publish.is_some());
                self.metrics
                    .config_reloads
                    .with_label_values(&["success"])
                    .inc();
                self.metrics.config_last_success.set(unix_now());
                self.metrics.config_last_successful.set(1);
                self.reloads.loaded(self.settings.clock.now(), true);
                tracing::info!(table = %name, "route table reloaded");
                ReloadOutcome::Applied
            }
        }
    }

    /// Merges discovery again from what the backends serve now, and makes the merged OpenAPI
    /// documents it names in the background (merging again once they are made).
    fn refresh_discovery(self: &Arc<Self>) {
        let routing = self.routing();
        routing.refresh_discovery(self.settings.clock.now(), &self.openapi);
        let plans = routing
            .discovery()
            .map(|d| d.openapi_plans())
            .unwrap_or_default();
        let me = Arc::downgrade(self);
        let done = move || {
            if let Some(p) = me.upgrade() {
                p.routing()
                    .refresh_discovery(p.settings.clock.now(), &p.openapi);
            }
        };
        self.openapi.refresh(plans, routing.backends.clone(), done);
    }

    /// Starts the background health checks of every endpoint, until `stop`.
    pub(crate) fn spawn_health_checks(self: &Arc<Self>, stop: CancellationToken) {
        let (me, me_too) = (Arc::downgrade(self), Arc::downgrade(self));
        crate::upstream::spawn_health_checks(
            move || {
                me.upgrade()
                    .map(|p| p.routing().backends.clone())
                    .unwrap_or_default()
            },
            move || {
                if let Some(p) = me_too.upgrade() {
                    p.refresh_discovery();
                    p.schemas.refresh(p.routing().backends.clone());
                }
            },
            self.settings.health_interval,
            self.metrics.clone(),
            stop,
        );
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
