//! The tunables every pool of upstream connections shares: timeouts, PINGs, TLS, the user
//! skewgate's own requests name, the bounds on heads, idle connections, new connections and
//! response data held.

use std::sync::Arc;
use std::time::Duration;

use crate::identity::UpstreamTls;

/// Tunables of every pool.
#[derive(Clone, Debug)]
pub struct PoolSettings {
    /// How long a TCP connect and HTTP/2 handshake may take.
    pub connect_timeout: Duration,
    /// How often an open connection is PINGed.
    pub ping_interval: Duration,
    /// How long a PING may go unanswered before the connection is dropped.
    pub ping_timeout: Duration,
    /// Streams per connection assumed until the peer's SETTINGS arrive (kube-apiserver's default).
    pub initial_max_streams: usize,
    /// TLS to `https://` endpoints: their CA and the front-proxy client certificate, reloaded when
    /// the files change. Connections for anonymous clients use it without the certificate.
    pub tls: Option<Arc<UpstreamTls>>,
    /// The user skewgate's own requests (health checks, discovery) name upstream, and the request
    /// header that carries it: on a front-proxy connection a request without a user is a 401.
    pub own_user: Option<(http::HeaderName, http::HeaderValue)>,
    /// The largest request header list sent upstream (HTTP/2 measure), besides the limit each
    /// apiserver connection advertises. kube-apiserver's own `MaxHeaderBytes` is 1 MiB; the default
    /// is 64 KiB, Envoy's (60 KiB) rounded up: far above what Kubernetes clients send (a large OIDC
    /// token is a few KiB), and a flood of huge heads costs neither skewgate nor the apiserver much.
    pub max_header_list_size: usize,
    /// A connection with no stream for this long is closed, unless it is its worker's last one to
    /// the endpoint (kept warm).
    pub idle_timeout: Duration,
    /// New connections per second per endpoint, at most: churn (an apiserver sending GOAWAY to
    /// every connection, clients resetting streams) never turns into a connection storm.
    pub max_new_connections_per_second: u32,
    /// The bound on response data held for clients across every pool (`budget.rs`): one for the
    /// process, shared by the clones of these settings.
    pub response_buffer: Arc<crate::upstream::budget::ResponseBudget>,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            connect_timeout: Duration::from_secs(5),
            ping_interval: Duration::from_secs(5),
            ping_timeout: Duration::from_secs(5),
            initial_max_streams: 100,
            tls: None,
            own_user: Some((
                http::HeaderName::from_static("x-remote-user"),
                http::HeaderValue::from_static("skewgate"),
            )),
            max_header_list_size: 64 << 10,
            idle_timeout: Duration::from_secs(90),
            max_new_connections_per_second: 20,
            response_buffer: Arc::default(),
        }
    }
}
