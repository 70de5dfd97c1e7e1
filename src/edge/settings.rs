//! The edge's tunables: what it holds a client's connections to, apart from the pipeline's.

use std::sync::Arc;
use std::time::Duration;

use crate::identity::ServingTls;

/// How long an HTTP/1.1 client connection may wait for its next request (kube-apiserver's
/// `IdleTimeout`).
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// What the edge holds clients to: TLS, timeouts, connection slots, offenders, rebalancing, PINGs.
#[derive(Clone, Debug)]
pub struct EdgeSettings {
    /// How long in-flight requests may run on after shutdown begins.
    pub shutdown_grace: Duration,
    /// Worker threads, each with its own event loop and upstream connections.
    pub workers: usize,
    /// TLS on the client side; cleartext (HTTP/1.1 and h2c) without it.
    pub tls: Option<Arc<ServingTls>>,
    /// How long a client may take to complete its TLS handshake.
    pub handshake_timeout: Duration,
    /// How long a connection may stay open without sending its first request (protocol detection
    /// included).
    pub first_request_timeout: Duration,
    /// How long an HTTP/1.1 client connection may wait for its next request before it is closed
    /// (kube-apiserver's `IdleTimeout`: 90 s). It holds no buffer while it waits (`keepalive`).
    pub idle_timeout: Duration,
    /// Client connections held at once; past it, new ones wait in the listen backlog. 0: derived
    /// from the file descriptor limit (which is raised to its hard limit), keeping some back.
    pub max_client_connections: usize,
    /// Whether a client cut off for resets, or sending malformed requests 20 a second, waits before
    /// its next connections are served (`offenders`).
    pub hold_back_offenders: bool,
    /// The chance (0 to 0.02) that an HTTP/2 request that is not long-running is answered and then
    /// its connection sent GOAWAY, so that long-lived client connections spread again over the
    /// replicas behind a load balancer (`rebalance`; kube-apiserver's `--goaway-chance`).
    pub goaway_chance: f64,
    /// An HTTP/2 client connection is sent PING this often, and closed when its answer has not come
    /// within `client_ping_timeout`.
    pub client_ping_every: Duration,
    pub client_ping_timeout: Duration,
}

impl Default for EdgeSettings {
    fn default() -> Self {
        EdgeSettings {
            shutdown_grace: Duration::from_secs(25),
            workers: std::thread::available_parallelism().map_or(1, usize::from),
            tls: None,
            handshake_timeout: Duration::from_secs(10),
            first_request_timeout: Duration::from_secs(30),
            idle_timeout: IDLE_TIMEOUT,
            max_client_connections: 0,
            hold_back_offenders: true,
            goaway_chance: 0.0,
            client_ping_every: Duration::from_secs(30),
            client_ping_timeout: Duration::from_secs(15),
        }
    }
}
