//! Start-up: the process built from its options, apart from the wire and the pipeline. Everything
//! `skewgate serve` runs (the route table and its watcher, `reload`; the worker threads and their
//! runtimes, `workers`; the admin listener; the health checks; this replica's presence in the
//! cluster, `presence`) is started here together and stopped together.

mod presence;
mod reload;
mod workers;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::cluster::Presence;
use crate::config::{self, ConfigErrors};
use crate::edge::{Edge, EdgeSettings};
use crate::metrics::Metrics;
use crate::proxy::{Proxy, ProxySettings};

/// What to serve, and where.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The route file, or a directory holding one.
    pub routes: PathBuf,
    /// The client listener's address.
    pub listen: SocketAddr,
    /// The admin listener's address.
    pub admin_listen: SocketAddr,
    /// How often the routes path is polled besides watching it.
    pub reload_poll: Duration,
    /// The pipeline's tunables.
    pub settings: ProxySettings,
    /// The edge's: what client connections are held to.
    pub edge: EdgeSettings,
}

/// A running server.
pub struct Server {
    /// Where clients connect.
    pub addr: SocketAddr,
    /// Where the admin endpoints are.
    pub admin_addr: SocketAddr,
    stop: CancellationToken,
    workers: Vec<std::thread::JoinHandle<bool>>,
    /// This replica in the `kubernetes` Service's endpoints, when it publishes itself.
    presence: Option<Arc<Presence>>,
    edge: Arc<Edge>,
}

/// Why the server did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The route file is invalid.
    #[error("{0}")]
    Routes(ConfigErrors),
    /// A listener could not bind.
    #[error("cannot listen on {addr}: {error}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        error: std::io::Error,
    },
}

/// The client listener and the admin listener, each with the address it got. The client socket is
/// one, cloned into every worker's runtime: the kernel hands each connection to one, which hands it
/// on to the worker serving the fewest (`edge::Balance`). Its backlog is the kernel's limit, so a
/// reconnect storm waits there instead of being dropped.
fn bind_both(
    opts: &ServeOptions,
) -> Result<(std::net::TcpListener, SocketAddr, TcpListener, SocketAddr), StartError> {
    let listener = skewgate_shared::listen(opts.listen).map_err(|error| StartError::Bind {
        addr: opts.listen,
        error,
    })?;
    let admin = bind(opts.admin_listen)?;
    let addr = listener.local_addr().map_err(|error| StartError::Bind {
        addr: opts.listen,
        error,
    })?;
    let admin_addr = admin.local_addr().map_err(|error| StartError::Bind {
        addr: opts.admin_listen,
        error,
    })?;
    Ok((listener, addr, admin, admin_addr))
}

/// The admin listener, bound with the kernel's largest backlog (`skewgate_shared::listen`).
fn bind(addr: SocketAddr) -> Result<TcpListener, StartError> {
    skewgate_shared::listen(addr)
        .and_then(TcpListener::from_std)
        .map_err(|error| StartError::Bind { addr, error })
}

impl Server {
    /// Loads the routes, binds both listeners and starts serving.
    pub async fn start(opts: ServeOptions) -> Result<Server, StartError> {
        let loaded = config::fingerprint(&opts.routes);
        let table = config::load_path(&opts.routes).map_err(StartError::Routes)?;
        let (listener, addr, admin, admin_addr) = bind_both(&opts)?;
        let workers = opts.edge.workers.max(1);
        crate::runtime::worker::set_count(workers);
        let metrics = Arc::new(Metrics::new());
        let proxy = Proxy::new(table, opts.settings.clone(), metrics.clone());
        let pool = &opts.settings.pool;
        let bounds = (pool.max_header_list_size, pool.response_buffer.clone());
        let edge = Edge::new(opts.edge.clone(), proxy.clone(), metrics, bounds);
        let stop = CancellationToken::new();
        let background = stop.child_token();
        proxy.spawn_health_checks(background.clone());
        crate::edge::capacity::spawn_memory_trim(
            edge.connection_slots.clone(),
            crate::edge::capacity::TRIM_EVERY,
            background.clone(),
        );
        reload::watch_for_changes(&proxy, &opts, loaded, background.clone());
        let presence = presence::publish(&proxy, opts.settings.publish.clone(), addr, &background);
        tokio::spawn(crate::admin::serve(
            proxy.clone(),
            admin,
            background.clone(),
        ));
        let handles = workers::spawn(&edge, workers, (listener, addr), &stop)?;
        startup_summary(&edge, &opts, addr, admin_addr, workers);
        Ok(Server {
            presence,
            edge,
            addr,
            admin_addr,
            stop,
            workers: handles,
        })
    }

    /// The first step of a shutdown: /readyz answers 503 and this replica leaves the kubernetes
    /// Service, then requests are served on for `delay` while load balancers and kube-proxy stop
    /// sending new connections here.
    pub async fn drain(&self, delay: Duration) {
        self.edge
            .proxy
            .draining
            .store(true, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(
            ?delay,
            "draining: not ready, leaving the kubernetes Service, serving on"
        );
        if let Some(p) = &self.presence {
            p.withdraw(Duration::from_secs(3)).await;
        }
        tokio::time::sleep(delay).await;
    }

    /// Stops accepting, ends watches cleanly, waits for in-flight requests (up to the grace period).
    pub async fn shutdown(mut self) {
        // Out of the kubernetes Service first (if `drain` did not already), so in-cluster clients
        // stop coming before the listener closes.
        if let Some(p) = self.presence.take()
            && !self
                .edge
                .proxy
                .draining
                .load(std::sync::atomic::Ordering::Relaxed)
        {
            p.withdraw(Duration::from_secs(3)).await;
        }
        let began = std::time::Instant::now();
        self.stop.cancel();
        let workers = std::mem::take(&mut self.workers);
        let n = workers.len();
        let cut_off = tokio::task::spawn_blocking(move || {
            workers
                .into_iter()
                .map(|w| w.join())
                .filter(|closed| !matches!(closed, Ok(true)))
                .count()
        })
        .await
        .unwrap_or(n);
        let took = began.elapsed();
        if cut_off == 0 {
            tracing::info!(
                ?took,
                workers = n,
                "stopped: every client connection closed within the grace period"
            );
        } else {
            tracing::warn!(?took, workers = n, cut_off, grace = ?self.edge.settings.shutdown_grace, "stopped: the grace period ended with connections open on some workers; they were closed");
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Dropped without `shutdown`: the workers still stop, in the background.
        self.stop.cancel();
    }
}

/// The one line that says what this replica serves: version, listeners, workers, the route table.
fn startup_summary(
    edge: &Edge,
    opts: &ServeOptions,
    addr: SocketAddr,
    admin_addr: SocketAddr,
    workers: usize,
) {
    let routing = edge.proxy.routing();
    let t = routing.table();
    let backends = t
        .backends
        .iter()
        .map(|b| {
            let urls: Vec<&str> = b.endpoints.iter().map(|e| e.url.as_str()).collect();
            format!("{}=[{}]", b.name, urls.join(" "))
        })
        .collect::<Vec<_>>()
        .join(" ");
    let tls = if opts.edge.tls.is_some() {
        "on (h2 and http/1.1 by ALPN)"
    } else {
        "off (cleartext HTTP/1.1 and h2c)"
    };
    tracing::info!(
        version = crate::VERSION,
        commit = crate::COMMIT,
        %addr,
        %admin_addr,
        tls,
        workers,
        max_client_connections = edge.connection_slots.max(),
        routes = %opts.routes.display(),
        table = t.name.as_deref().unwrap_or(""),
        backends,
        writes_default = t.backend_name(t.writes.default),
        reads_default = t.backend_name(t.reads.default),
        pins = t.writes.pins.len(),
        rollouts = t.reads.rollouts.len(),
        guards = t.guards.len(),
        access_log = opts.settings.access_log,
        "skewgate serving"
    );
}
