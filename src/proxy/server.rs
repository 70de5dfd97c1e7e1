//! Everything `skewgate serve` runs: the route table and its watcher, the client listener, the admin
//! listener and the health checks, started together and stopped together.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{Proxy, ProxySettings};
use crate::config::{self, ConfigErrors};
use crate::metrics::Metrics;

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
    /// The proxy's shared state.
    pub proxy: Arc<Proxy>,
    /// Where clients connect.
    pub addr: SocketAddr,
    /// Where the admin endpoints are.
    pub admin_addr: SocketAddr,
    stop: CancellationToken,
    serving: JoinHandle<()>,
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

async fn bind(addr: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|error| StartError::Bind { addr, error })
}

impl Server {
    /// Loads the routes, binds both listeners and starts serving.
    pub async fn start(opts: ServeOptions) -> Result<Server, StartError> {
        let loaded = config::fingerprint(&opts.routes);
        let table = config::load_path(&opts.routes).map_err(StartError::Routes)?;
        let listener = bind(opts.listen).await?;
        let admin = bind(opts.admin_listen).await?;
        let addr = listener.local_addr().map_err(|error| StartError::Bind {
            addr: opts.listen,
            error,
        })?;
        let admin_addr = admin.local_addr().map_err(|error| StartError::Bind {
            addr: opts.admin_listen,
            error,
        })?;
        let proxy = Proxy::new(table, opts.settings.clone(), Arc::new(Metrics::new()));
        let stop = CancellationToken::new();
        let background = stop.child_token();
        proxy.spawn_health_checks(background.clone());
        let reloading = Arc::downgrade(&proxy);
        config::spawn_watcher(
            opts.routes.clone(),
            loaded,
            opts.reload_poll,
            background.clone(),
            move |loaded| {
                if let Some(p) = reloading.upgrade() {
                    p.reload(loaded);
                }
            },
        );
        tokio::spawn(crate::admin::serve(
            proxy.clone(),
            admin,
            background.clone(),
        ));
        let serving = tokio::spawn(super::serve(proxy.clone(), listener, stop.clone()));
        tracing::info!(%addr, %admin_addr, routes = %opts.routes.display(), "serving in cleartext (HTTP/1.1 and h2c); put TLS in front or use the TLS flags of a later skewgate");
        Ok(Server {
            proxy,
            addr,
            admin_addr,
            stop,
            serving,
        })
    }

    /// Stops accepting, ends watches cleanly, waits for in-flight requests (up to the grace period).
    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.serving.await;
    }
}
