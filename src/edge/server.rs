//! Everything `skewgate serve` runs: the route table and its watcher, the client listener, the admin
//! listener and the health checks, started together and stopped together.

use crate::cluster::{Hooks, OnView, Presence, Report, Target, first_ready};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::balance::{Balance, Inbox, Intake};
use crate::config::{self, ConfigErrors};
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
    /// Proxy tunables.
    pub settings: ProxySettings,
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
    proxy: Arc<Proxy>,
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

/// One watcher for everything that reloads: the route table, and every certificate and key,
/// serving and upstream.
fn watch_for_changes(
    proxy: &Arc<Proxy>,
    opts: &ServeOptions,
    loaded: config::Fingerprint,
    background: CancellationToken,
) {
    let serving_tls = opts.settings.tls.clone();
    let upstream_tls = opts.settings.pool.tls.clone();
    let files = serving_tls
        .iter()
        .flat_map(|t| t.files())
        .chain(upstream_tls.iter().flat_map(|t| t.files()))
        .map(std::path::Path::to_path_buf)
        .collect();
    let watch = config::Watch {
        routes: opts.routes.clone(),
        loaded,
        files,
        poll: opts.reload_poll,
    };
    let reloading = Arc::downgrade(proxy);
    let reconnecting = Arc::downgrade(proxy);
    config::spawn_watcher(
        watch,
        background,
        move |loaded| {
            if let Some(p) = reloading.upgrade() {
                p.reload(loaded);
            }
        },
        move || {
            if let Some(tls) = &serving_tls {
                tls.reload_if_changed();
            }
            // The apiserver checks the front-proxy certificate on every request: connections
            // made with the old one are replaced, their open streams left to finish.
            if let Some(tls) = &upstream_tls
                && tls.reload_if_changed()
                && let Some(p) = reconnecting.upgrade()
            {
                p.reconnect_upstreams();
            }
        },
    );
}

/// With `--advertise-address`, this replica's presence in the cluster: its Lease carrying what it
/// runs (`Proxy::fleet_report`), the others' read back into the proxy (`Proxy::fleet_seen`), the
/// `kubernetes` endpoints kept. Logs which mode is in force.
fn publish(
    proxy: &Arc<Proxy>,
    settings: Option<crate::cluster::PublishSettings>,
    addr: SocketAddr,
    background: &CancellationToken,
) -> Option<Arc<Presence>> {
    let Some(mut publish) = settings else {
        tracing::info!(
            "single-replica mode (no --advertise-address): nothing is published; pins move at flipAt by this replica's clock alone"
        );
        return None;
    };
    // `--listen` on port 0: the port the kernel chose is the one clients reach.
    if publish.address.port() == 0 {
        publish.address.set_port(addr.port());
    }
    let routing = Arc::downgrade(proxy);
    let target: Target = Box::new(move || first_ready(&routing.upgrade()?.routing().backends));
    let (me, me_too) = (Arc::downgrade(proxy), Arc::downgrade(proxy));
    // By the proxy's clock, the one `flipAt` is judged by.
    let report: Report = Box::new(move |_| {
        me.upgrade()
            .map(|p| p.fleet_report(p.settings.clock.now()))
            .unwrap_or_default()
    });
    let on_view: OnView = Box::new(move |view, now, to_mine| {
        if let Some(p) = me_too.upgrade() {
            p.fleet_seen(view, now, to_mine);
        }
    });
    proxy.fleet_gates.enable(publish.interval);
    let hooks = Hooks {
        report,
        on_view,
        gates: proxy.fleet_gates.clone(),
    };
    let shared = (proxy.metrics.clone(), proxy.settings.clock.clone());
    let presence = Presence::spawn(publish, target, hooks, shared, background.clone());
    let _ = proxy.presence.set(presence.clone());
    tracing::info!(
        "fleet mode: this replica publishes its route table, pin moves and rollout aborts in its Lease, and a pin with flipAt moves when every live replica runs its move; /debug/fleet shows the replicas"
    );
    Some(presence)
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
        // One socket, cloned into every worker's runtime: the kernel hands each connection to one,
        // which hands it on to the worker serving the fewest (`balance`).
        // Its backlog is the kernel's limit, so a reconnect storm waits there instead of being
        // dropped.
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
        let workers = opts.settings.workers.max(1);
        crate::upstream::worker::set_count(workers);
        let proxy = Proxy::new(table, opts.settings.clone(), Arc::new(Metrics::new()));
        let stop = CancellationToken::new();
        let background = stop.child_token();
        proxy.spawn_health_checks(background.clone());
        crate::proxy::capacity::spawn_memory_trim(
            proxy.connection_slots.clone(),
            crate::proxy::capacity::TRIM_EVERY,
            background.clone(),
        );
        watch_for_changes(&proxy, &opts, loaded, background.clone());
        let presence = publish(&proxy, opts.settings.publish.clone(), addr, &background);
        tokio::spawn(crate::admin::serve(
            proxy.clone(),
            admin,
            background.clone(),
        ));
        let (balance, inboxes) = super::balance::Balance::new(workers, &proxy.metrics);
        let mut handles = Vec::with_capacity(workers);
        for (i, inbox) in inboxes.into_iter().enumerate() {
            let listener = listener
                .try_clone()
                .map_err(|error| StartError::Bind { addr, error })?;
            let (proxy, stop) = (proxy.clone(), stop.clone());
            let balance = balance.clone();
            let handle = std::thread::Builder::new()
                .name(format!("skewgate-worker-{i}"))
                .spawn(move || run_worker(i, proxy, (listener, balance, inbox), stop))
                .map_err(|error| StartError::Bind { addr, error })?;
            handles.push(handle);
        }
        startup_summary(&proxy, &opts, addr, admin_addr, workers);
        Ok(Server {
            presence,
            proxy: proxy.clone(),
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
        self.proxy
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
            tracing::warn!(?took, workers = n, cut_off, grace = ?self.proxy.settings.shutdown_grace, "stopped: the grace period ended with connections open on some workers; they were closed");
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Dropped without `shutdown`: the workers still stop, in the background.
        self.stop.cancel();
    }
}

/// One worker thread: a single-threaded runtime accepting on a clone of the listener, so a client
/// connection, its requests and their upstream streams all run on this thread.
fn run_worker(
    i: usize,
    proxy: Arc<Proxy>,
    (listener, balance, inbox): (std::net::TcpListener, Arc<Balance>, Inbox),
    stop: CancellationToken,
) -> bool {
    crate::upstream::worker::enter(i);
    // Header blocks as literals, as HAProxy writes them, on both sides of every connection this
    // worker serves: no dynamic-table look-ups and no Huffman coding (vendor/README.md).
    h2::set_literal_header_encoding(true);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(worker = i, error = %e, "cannot start a worker runtime");
            return false;
        }
    };
    runtime.block_on(async move {
        match TcpListener::from_std(listener) {
            Ok(listener) => {
                let intake = Intake::new(i, listener, inbox, balance);
                super::serve(proxy, intake, stop).await
            }
            Err(e) => {
                tracing::error!(worker = i, error = %e, "cannot use the listener");
                false
            }
        }
    })
}

/// The one line that says what this replica serves: version, listeners, workers, the route table.
fn startup_summary(
    proxy: &Proxy,
    opts: &ServeOptions,
    addr: SocketAddr,
    admin_addr: SocketAddr,
    workers: usize,
) {
    let routing = proxy.routing();
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
    let tls = if opts.settings.tls.is_some() {
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
        max_client_connections = proxy.connection_slots.max(),
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
