//! Every Prometheus metric skewgate exports, declared in one place with its help text.
//!
//! Label values are bounded: backends, rules and endpoints come from the route file (and their
//! series are removed when a reload drops them, `prune`), verbs and classes are enums, codes are
//! HTTP status codes, groups and resources those discovery found (others are `other`). The request
//! path never takes the registry's lock after the first request of a label set: `Slots` caches each
//! child handle in a `OnceLock`.

mod per_worker;
mod prune;
mod resources;

pub(crate) use per_worker::PerWorker;
pub(crate) use prune::TableLabels;
pub(crate) use resources::ResourceIndex;

use std::sync::OnceLock;

use prometheus::{
    Encoder, Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

/// The registry and every metric family.
pub(crate) struct Metrics {
    registry: Registry,
    /// `skewgate_requests_total{backend,class,verb,group,resource,code}`.
    pub requests: PerWorker<IntCounterVec>,
    /// `skewgate_request_duration_seconds{backend,class,verb}`, not for long-running requests.
    pub request_duration: PerWorker<HistogramVec>,
    /// `skewgate_inflight_requests{backend,class}`.
    pub inflight: PerWorker<IntGaugeVec>,
    /// `skewgate_watches{backend}`.
    pub watches: IntGaugeVec,
    /// `skewgate_decisions_total{class,rule}`.
    pub decisions: PerWorker<IntCounterVec>,
    /// `skewgate_client_connections{protocol}`.
    pub client_connections: IntGaugeVec,
    /// `skewgate_worker_connections{worker}`.
    pub worker_connections: IntGaugeVec,
    /// `skewgate_upstream_connections{backend,endpoint}`.
    pub upstream_connections: IntGaugeVec,
    /// `skewgate_upstream_streams{backend,endpoint}`.
    pub upstream_streams: IntGaugeVec,
    /// `skewgate_upstream_errors_total{backend,reason}`.
    pub upstream_errors: IntCounterVec,
    /// `skewgate_endpoint_ready{backend,endpoint}`.
    pub endpoint_ready: IntGaugeVec,
    /// `skewgate_backend_in_use{backend}`.
    pub backend_in_use: IntGaugeVec,
    /// `skewgate_tls_handshake_errors_total{reason}`.
    pub tls_handshake_errors: IntCounterVec,
    /// `skewgate_client_connections_closed_total{reason}`: connections skewgate closed for abuse.
    pub client_connections_closed: IntCounterVec,
    /// `skewgate_clients_held_back_total{reason}`: holds put on a misbehaving client's next
    /// connections.
    pub clients_held_back: IntCounterVec,
    /// `skewgate_client_connections_delayed_total`: client connections that waited out their
    /// client's hold before they were served.
    pub client_connections_delayed: prometheus::IntCounter,
    /// `skewgate_client_goaways_total{reason}`: client connections sent GOAWAY so that they spread
    /// again (reason `rebalance`).
    pub client_goaways: IntCounterVec,
    /// `skewgate_endpoint_reconciles_total{result}`: rounds of keeping the `kubernetes` Service's
    /// endpoints (success, failure).
    pub endpoint_reconciles: IntCounterVec,
    /// `skewgate_fleet_replica_table{replica,table}`: 1 for each live replica and the digest of
    /// the route table it runs, as its Lease says.
    pub fleet_replica_table: IntGaugeVec,
    /// `skewgate_fleet_disagreement_seconds`: how long the live replicas have run different route
    /// tables (0 when they agree).
    pub fleet_disagreement: prometheus::Gauge,
    /// `skewgate_clock_offset_seconds`: this replica's clock minus the apiservers', from their
    /// answers' `Date` (with --advertise-address).
    pub clock_offset: prometheus::Gauge,
    /// `skewgate_guarded_updates_total{guard,action,resource,encoding}`: updates a guard found
    /// would drop fields, by what it did and the encoding of the body it judged.
    pub guarded_updates: IntCounterVec,
    /// `skewgate_guard_checks_total{guard,encoding,outcome}`: updates a guard judged, by their
    /// body's encoding (json, yaml, protobuf, unknown) and how they came out (nothing_lost, lost,
    /// cannot_check, malformed).
    pub guard_checks: IntCounterVec,
    /// `skewgate_fallbacks_total{from,to}`.
    pub fallbacks: IntCounterVec,
    /// `skewgate_skew_policy_total{component,outcome}`.
    pub skew_policy: IntCounterVec,
    /// `skewgate_rollback_exposure_total{older,resource,stake}`: writes a backend newer than
    /// `older` answered 2xx whose stored object holds a field `older` cannot store (stake
    /// `field`), and objects created of a kind it does not serve (`kind`).
    pub rollback_exposure: IntCounterVec,
    /// `skewgate_rollback_exposure_since_timestamp_seconds`: when this replica first sent a write
    /// to a backend newer than another (0: never).
    pub rollback_exposure_since: Gauge,
    /// `skewgate_shared_watches`: upstream watches shared now (`proxy/share`).
    pub shared_watches: prometheus::IntGauge,
    /// `skewgate_shared_watch_clients`: client watches served from them now.
    pub shared_watch_clients: prometheus::IntGauge,
    /// `skewgate_shared_watch_joins_total{rule,from}`: client watches joined to a shared one.
    pub shared_watch_joins: IntCounterVec,
    /// `skewgate_shared_watch_own_total{rule,reason}`: watches a rule matched that went to the
    /// apiserver on their own.
    pub shared_watch_own: IntCounterVec,
    /// `skewgate_shared_watch_replayed_events_total`.
    pub shared_watch_replayed: prometheus::IntCounter,
    /// `skewgate_shared_watch_cut_total`: clients cut off for not keeping up.
    pub shared_watch_cut: prometheus::IntCounter,
    /// `skewgate_shared_watch_denied_total{rule}`: client watches the apiserver's authorizer refused.
    pub shared_watch_denied: IntCounterVec,
    /// `skewgate_shared_watch_upstream_starts_total{result}`.
    pub shared_watch_starts: IntCounterVec,
    /// `skewgate_pin_moves_total{pin}`.
    pub pin_moves: IntCounterVec,
    /// `skewgate_pin_fence_ends_total{pin}`.
    pub pin_fence_ends: IntCounterVec,
    /// `skewgate_pin_moves_superseded_total{pin,outcome}`.
    pub pin_moves_superseded: IntCounterVec,
    /// `skewgate_pin_move_wait_seconds`.
    pub pin_move_wait: prometheus::Histogram,
    /// `skewgate_writes_held{pin}`.
    pub writes_held: IntGaugeVec,
    /// `skewgate_rollout_percent{rollout}`.
    pub rollout_percent: GaugeVec,
    /// `skewgate_rollout_aborted{rollout}`.
    pub rollout_aborted: IntGaugeVec,
    /// `skewgate_config_reloads_total{result}`.
    pub config_reloads: IntCounterVec,
    /// `skewgate_config_last_reload_success_timestamp_seconds`.
    pub config_last_success: Gauge,
    /// `skewgate_config_last_reload_successful`.
    pub config_last_successful: prometheus::IntGauge,
    /// `skewgate_pin_backend{pin,backend}`.
    pub pin_backend: IntGaugeVec,
    /// `skewgate_rollout_error_ratio{rollout}`.
    pub rollout_error_ratio: GaugeVec,
}

fn register<C: prometheus::core::Collector + Clone + 'static>(registry: &Registry, c: C) -> C {
    // Names are constants declared once below, so registration cannot collide.
    let _ = registry.register(Box::new(c.clone()));
    c
}

/// The families' constructors fail only on invalid names or labels, which are constants here.
fn valid<T, E>(made: Result<T, E>) -> T {
    made.unwrap_or_else(|_| unreachable!())
}

fn counter(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    register(r, valid(IntCounterVec::new(Opts::new(name, help), labels)))
}

fn gauge(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    register(r, valid(IntGaugeVec::new(Opts::new(name, help), labels)))
}

fn float_gauge(r: &Registry, name: &str, help: &str, labels: &[&str]) -> GaugeVec {
    register(r, valid(GaugeVec::new(Opts::new(name, help), labels)))
}

/// A request-path counter family: a copy per worker, added up when read (`PerWorker`).
fn worker_counter(
    r: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> PerWorker<IntCounterVec> {
    register(
        r,
        PerWorker::new(|| valid(IntCounterVec::new(Opts::new(name, help), labels))),
    )
}

/// `skewgate_request_duration_seconds`, a copy per worker.
fn request_duration(r: &Registry) -> PerWorker<HistogramVec> {
    let buckets = vec![
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        60.0,
    ];
    let opts = HistogramOpts::new(
        "skewgate_request_duration_seconds",
        "Time from receiving a request to the end of its response, for requests that are not long-running (watches, exec, logs and proxy are left out).",
    )
    .buckets(buckets);
    register(
        r,
        PerWorker::new(|| {
            valid(HistogramVec::new(
                opts.clone(),
                &["backend", "class", "verb"],
            ))
        }),
    )
}

/// `skewgate_inflight_requests`, a copy per worker.
fn inflight(r: &Registry) -> PerWorker<IntGaugeVec> {
    let opts = Opts::new(
        "skewgate_inflight_requests",
        "Requests being served now, long-running ones included.",
    );
    register(
        r,
        PerWorker::new(|| valid(IntGaugeVec::new(opts.clone(), &["backend", "class"]))),
    )
}

/// `skewgate_pin_move_wait_seconds`.
fn pin_move_wait(r: &Registry) -> prometheus::Histogram {
    let opts = HistogramOpts::new(
        "skewgate_pin_move_wait_seconds",
        "How long writes waited for the same object's in-flight writes on the previous backend to finish.",
    )
    .buckets(vec![0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]);
    register(r, valid(prometheus::Histogram::with_opts(opts)))
}

impl Metrics {
    /// A fresh registry with every family registered.
    pub(crate) fn new() -> Metrics {
        let r = Registry::new();
        Metrics {
            requests: worker_counter(
                &r,
                "skewgate_requests_total",
                "Requests answered, by the backend that served them, class (write for create, update, patch, delete and deletecollection, else read), Kubernetes verb, API group and resource (those discovery found; others are other, non-resource paths empty) and HTTP status code.",
                &["backend", "class", "verb", "group", "resource", "code"],
            ),
            request_duration: request_duration(&r),
            inflight: inflight(&r),
            watches: gauge(&r, "skewgate_watches", "Watches open now.", &["backend"]),
            decisions: worker_counter(
                &r,
                "skewgate_decisions_total",
                "Steering decisions, by class and the rule that decided (a pin or rollout name, writes.default or reads.default).",
                &["class", "rule"],
            ),
            client_connections: gauge(&r, "skewgate_client_connections", "Client connections open now, by protocol (http1, http2).", &["protocol"]),
            worker_connections: gauge(&r, "skewgate_worker_connections", "Client connections each worker serves now (each connection goes to the worker serving the fewest).", &["worker"]),
            upstream_connections: gauge(&r, "skewgate_upstream_connections", "HTTP/2 connections open to each apiserver endpoint.", &["backend", "endpoint"]),
            upstream_streams: gauge(&r, "skewgate_upstream_streams", "HTTP/2 streams open to each apiserver endpoint.", &["backend", "endpoint"]),
            upstream_errors: counter(
                &r,
                "skewgate_upstream_errors_total",
                "Failures talking to apiservers, by backend and reason: connect (no connection could be made), reset (the connection or stream failed), timeout (no response head in time), headers_too_large (the apiserver refused the request head), unavailable (no endpoint of the backend was ready), health (a health check failed).",
                &["backend", "reason"],
            ),
            backend_in_use: gauge(&r, "skewgate_backend_in_use", "1 when some rule sends traffic to the backend now (a pin, a default, a rollout above 0 %), else 0: a backend added ahead of its apiservers is 0.", &["backend"]),
            endpoint_ready: gauge(&r, "skewgate_endpoint_ready", "1 when the endpoint answers its health check and has a connection, else 0.", &["backend", "endpoint"]),
            tls_handshake_errors: counter(&r, "skewgate_tls_handshake_errors_total", "Client TLS handshakes that failed, by reason (timeout, not_tls, bad_certificate, eof, protocol).", &["reason"]),
            client_connections_closed: counter(&r, "skewgate_client_connections_closed_total", "Client connections skewgate closed for misbehaving, by reason (premature_resets).", &["reason"]),
            client_goaways: counter(&r, "skewgate_client_goaways_total", "Client HTTP/2 connections sent GOAWAY after a response so that clients reconnect and spread over the replicas (reason rebalance).", &["reason"]),
            guarded_updates: counter(&r, "skewgate_guarded_updates_total", "Full-object updates that would have dropped fields the stored object has, by guard, action (reject, warn, preserve), resource and the encoding of the body judged (json, yaml, protobuf).", &["guard", "action", "resource", "encoding"]),
            guard_checks: counter(&r, "skewgate_guard_checks_total", "Full-object updates a guard judged, by guard, the encoding of their body (json, yaml, protobuf, unknown) and outcome (nothing_lost, lost, cannot_check, malformed).", &["guard", "encoding", "outcome"]),
            fleet_replica_table: gauge(&r, "skewgate_fleet_replica_table", "1 for each live skewgate replica and the digest of the route table it runs, as read from its Lease (with --advertise-address).", &["replica", "table"]),
            fleet_disagreement: register(&r, valid(prometheus::Gauge::new("skewgate_fleet_disagreement_seconds", "How long the live skewgate replicas have run different route tables, as read from their Leases; 0 when they agree."))),
            clock_offset: register(&r, valid(prometheus::Gauge::new("skewgate_clock_offset_seconds", "This replica's clock minus the apiservers', estimated from their answers' Date headers (to about a round trip, once answers fall on either side of a second); measured with --advertise-address. flipAt assumes the replicas' clocks agree within a second."))),
            endpoint_reconciles: counter(&r, "skewgate_endpoint_reconciles_total", "Rounds of renewing this replica's Lease and keeping the default/kubernetes endpoints naming the live replicas, by result (success, failure).", &["result"]),
            clients_held_back: counter(&r, "skewgate_clients_held_back_total", "Holds put on a misbehaving client's next connections, by reason (premature_resets, malformed_requests).", &["reason"]),
            client_connections_delayed: register(&r, valid(prometheus::IntCounter::new("skewgate_client_connections_delayed_total", "Client connections that waited out their client's hold (skewgate_clients_held_back_total) before they were served."))),
            rollback_exposure: counter(&r, "skewgate_rollback_exposure_total", "Writes a backend newer than `older` answered whose stored object holds a field `older` cannot store (stake=field), and objects created of a kind `older` does not serve (stake=kind): what a rollback to `older` would strand, as it grows; stake=unjudged: answers not looked at (over 3 MiB, or over the 64 MiB all copies may hold).", &["older", "resource", "stake"]),
            rollback_exposure_since: register(&r, valid(Gauge::new("skewgate_rollback_exposure_since_timestamp_seconds", "When this replica first sent a write to a backend newer than another (Unix seconds; 0: never)."))),
            skew_policy: counter(&r, "skewgate_skew_policy_total", "Requests of a Kubernetes component that the rules would send to an older apiserver, by what the version-skew policy did: raised (sent to a backend not older), allowed (skewPolicy.allowOlderApiserver), write_refused, leadership_held (429), no_backend (503).", &["component", "outcome"]),
            fallbacks: counter(&r, "skewgate_fallbacks_total", "Requests sent to another backend because the one the rules chose does not serve their group/version/resource.", &["from", "to"]),
            shared_watches: register(&r, valid(prometheus::IntGauge::new("skewgate_shared_watches", "Upstream watches open now that serve clients of shareWatches rules, one per distinct watch (backend, path, selectors, encoding)."))),
            shared_watch_clients: register(&r, valid(prometheus::IntGauge::new("skewgate_shared_watch_clients", "Client watches served now from shared upstream watches (divided by skewgate_shared_watches: clients per shared watch)."))),
            shared_watch_joins: counter(&r, "skewgate_shared_watch_joins_total", "Client watches joined to a shared upstream watch, by rule and by whether one was open (live) or this one began it (new).", &["rule", "from"]),
            shared_watch_own: counter(&r, "skewgate_shared_watch_own_total", "Watches a shareWatches rule matched that were sent to the apiserver on their own, by reason: initial_state (no resourceVersion, 0, or a watch list), behind (from before what a shared watch keeps: its replay buffer or its start), parameters, credentials (a bearer token or impersonation), unauthorized (skewgate could not ask the apiserver's authorizer), upstream (the shared watch could not begin).", &["rule", "reason"]),
            shared_watch_replayed: register(&r, valid(prometheus::IntCounter::new("skewgate_shared_watch_replayed_events_total", "Events sent to clients joining a shared watch from its replay buffer."))),
            shared_watch_cut: register(&r, valid(prometheus::IntCounter::new("skewgate_shared_watch_cut_total", "Client watches cut off (ended) because they did not take their events: 100 waiting, or some waiting while the response buffer is over its bound."))),
            shared_watch_denied: counter(&r, "skewgate_shared_watch_denied_total", "Client watches answered 403 because the apiserver's authorizer (a SubjectAccessReview) refused the client.", &["rule"]),
            shared_watch_starts: counter(&r, "skewgate_shared_watch_upstream_starts_total", "Upstream watches begun for shared watches (result=up), resumed after one ended (resumed), or that could not begin (failed).", &["result"]),
            pin_moves: counter(&r, "skewgate_pin_moves_total", "Pins (or writes.default, as rule writes.default) moved to another backend: at their flip (flipAt, or when the fleet makes the move), or at the reload for one without flipAt.", &["pin"]),
            pin_fence_ends: counter(&r, "skewgate_pin_fence_ends_total", "Fences ended after a pin's flip: from then its writes go to the new backend.", &["pin"]),
            pin_moves_superseded: counter(&r, "skewgate_pin_moves_superseded_total", "Pending moves of a pin that a reload changed before they were made: abandoned (never made), or timed (the fleet had said its time: made then, before the new table's move).", &["pin", "outcome"]),
            pin_move_wait: pin_move_wait(&r),
            writes_held: gauge(&r, "skewgate_writes_held", "Writes waiting now for in-flight writes of the same object on another backend, by the rule that sends them.", &["pin"]),
            rollout_percent: float_gauge(&r, "skewgate_rollout_percent", "The share of keys each rollout sends to its `to` backend now (0 while aborted).", &["rollout"]),
            rollout_aborted: gauge(&r, "skewgate_rollout_aborted", "1 while a rollout holds at 0 % after its error ratio broke the threshold.", &["rollout"]),
            config_reloads: counter(&r, "skewgate_config_reloads_total", "Route file loads, by result (success, failure, unchanged).", &["result"]),
            config_last_success: register(&r, valid(Gauge::new("skewgate_config_last_reload_success_timestamp_seconds", "Unix time of the last successful route file load."))),
            config_last_successful: register(&r, valid(prometheus::IntGauge::new("skewgate_config_last_reload_successful", "1 when the last load of the route file succeeded (or found it unchanged), 0 when it was rejected and an older table is in force."))),
            pin_backend: gauge(&r, "skewgate_pin_backend", "1 for the backend each pin (and writes.default, reads.default) sends its writes to now: the previous backend until flipAt.", &["pin", "backend"]),
            rollout_error_ratio: float_gauge(&r, "skewgate_rollout_error_ratio", "The share of a rollout's requests to its `to` backend that failed (5xx or no answer) in its abort window now, for rollouts with abort.", &["rollout"]),
            registry: r,
        }
        .with_process_and_build_info()
    }

    /// Adds `skewgate_build_info` and the process metrics (CPU, memory, file descriptors), and
    /// starts the counters whose label values are fixed at 0.
    fn with_process_and_build_info(self) -> Metrics {
        let build = IntGaugeVec::new(
            Opts::new(
                "skewgate_build_info",
                "1, labelled with the version and commit skewgate was built from.",
            ),
            &["version", "commit"],
        )
        .unwrap_or_else(|_| unreachable!());
        build
            .with_label_values(&[crate::VERSION, crate::COMMIT])
            .set(1);
        register(&self.registry, build);
        #[cfg(target_os = "linux")]
        {
            let _ = self.registry.register(Box::new(
                prometheus::process_collector::ProcessCollector::for_self(),
            ));
        }
        let zero = |c: &IntCounterVec, values: &[&str]| {
            for v in values {
                c.with_label_values(&[v]);
            }
        };
        zero(&self.config_reloads, &["success", "failure", "unchanged"]);
        zero(
            &self.tls_handshake_errors,
            &["timeout", "not_tls", "bad_certificate", "eof", "protocol"],
        );
        zero(&self.client_connections_closed, &["premature_resets"]);
        zero(
            &self.clients_held_back,
            &["premature_resets", "malformed_requests"],
        );
        zero(&self.client_goaways, &["rebalance"]);
        zero(&self.endpoint_reconciles, &["success", "failure"]);
        self.config_last_successful.set(1);
        self
    }

    /// Registers a family kept elsewhere (the response budget's); one already registered is left.
    pub(crate) fn adopt(&self, c: Box<dyn prometheus::core::Collector>) {
        let _ = self.registry.register(c);
    }

    /// The Prometheus text exposition of every metric.
    pub(crate) fn render(&self) -> String {
        let mut out = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// A fixed-size table of lazily created metric children, so the request path reads an atomic
/// pointer instead of hashing labels under the registry's lock.
pub(crate) struct Slots<T> {
    cells: Box<[OnceLock<T>]>,
    /// Copies of each slot: one per worker (and one shared) for a `PerWorker` family's children,
    /// else one.
    copies: usize,
}

impl<T> Slots<T> {
    /// A table of `n` empty slots.
    pub(crate) fn new(n: usize) -> Slots<T> {
        Slots::with_copies(n, 1)
    }

    /// A table of `n` empty slots for the children of a `PerWorker` family: each worker makes and
    /// finds its own.
    pub(crate) fn per_worker(n: usize) -> Slots<T> {
        Slots::with_copies(n, crate::runtime::worker::count() + 1)
    }

    fn with_copies(n: usize, copies: usize) -> Slots<T> {
        Slots {
            cells: (0..n * copies).map(|_| OnceLock::new()).collect(),
            copies,
        }
    }

    /// The child in slot `i` (the current worker's, in a per-worker table), created by `make` on
    /// first use; `None` when `i` is out of range.
    pub(crate) fn get(&self, i: usize, make: impl FnOnce() -> T) -> Option<&T> {
        let copy = if self.copies == 1 {
            0
        } else {
            per_worker::own_index(self.copies)
        };
        let at = i.checked_mul(self.copies)?.checked_add(copy)?;
        self.cells.get(at).map(|c| c.get_or_init(make))
    }
}

/// The status codes that get a slot; others are counted through the slower labelled path.
pub(crate) const COMMON_CODES: [u16; 24] = [
    200, 201, 202, 204, 206, 301, 302, 304, 400, 401, 403, 404, 405, 406, 409, 410, 413, 415, 422,
    429, 500, 502, 503, 504,
];

/// The slot of a status code in `COMMON_CODES`.
pub(crate) fn code_slot(code: u16) -> Option<usize> {
    COMMON_CODES.iter().position(|c| *c == code)
}
