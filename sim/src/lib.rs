//! A simulated kube-apiserver of a chosen version, for the demo, the tests and the benchmarks.
//!
//! It is a test fixture with honest behaviour, not a stand-in for a real apiserver: HTTP/1.1 and h2c
//! on one port, `/version`, `/readyz`, discovery, and namespaces, configmaps, pods, deployments.apps
//! and leases.coordination.k8s.io with create, get, list, watch, update, patch and delete. Several
//! simulators share one `Store` as real apiservers share etcd, and each applies its own schema (see
//! `schema`), so writes through two versions do the damage that pinning prevents. The store records
//! which version served each write.

pub mod api;
pub mod auth;
mod handler;
mod list;
mod openapi;
pub mod schema;
pub mod store;
mod streams;
mod watch;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use auth::{SimAuth, UserInfo};
pub use schema::Minor;
pub use store::{ObjectKey, Store, WriteRecord};

/// How to run one simulated apiserver.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The gitVersion it reports, e.g. `v1.29.4`; its major.minor selects its schema.
    pub git_version: String,
    /// SETTINGS_MAX_CONCURRENT_STREAMS on its HTTP/2 connections (kube-apiserver's default is 100).
    pub max_concurrent_streams: u32,
    /// Serve TLS with this configuration (for example one that requires the front-proxy client
    /// certificate, as `--requestheader-client-ca-file` makes an apiserver do).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Authenticate and authorize as kube-apiserver does (see `auth`); without it every request is
    /// served as `system:unsecured` in `system:masters`, as the apiserver's old insecure port did.
    /// Certificate authenticators need `tls` from `SimAuth::tls_config`, which takes any client
    /// certificate and leaves its verification to them.
    pub auth: Option<Arc<SimAuth>>,
    /// SETTINGS_MAX_HEADER_LIST_SIZE on its HTTP/2 connections, if not hyper's default.
    pub max_header_list_size: Option<u32>,
}

impl SimConfig {
    /// A simulator reporting `git_version`, with the apiserver's default of 100 streams per connection.
    pub fn new(git_version: &str) -> SimConfig {
        SimConfig {
            git_version: git_version.to_owned(),
            max_concurrent_streams: 100,
            tls: None,
            auth: None,
            max_header_list_size: None,
        }
    }
}

/// Knobs a test turns while the simulator runs.
#[derive(Debug, Default)]
pub struct SimControls {
    /// Milliseconds every write waits before it is applied (0: none).
    pub write_delay: AtomicU64,
    /// Reads that fail with 500, per thousand (0: none), spread evenly.
    pub fail_reads_per_mille: AtomicU32,
    /// Writes (not GET) whose path contains this fail with 500: one client's own objects (a
    /// skewgate replica's Lease), as an apiserver that cannot be written.
    pub fail_writes_containing: std::sync::Mutex<Option<String>>,
    /// Requests received so far.
    pub requests: AtomicU64,
    /// Requests to `/debug/` paths (the probes of tests) received so far: unlike `requests`, no
    /// health check or discovery of the proxy's counts here.
    pub debug_requests: AtomicU64,
    /// The `User-Agent` each path was last asked with (`-` for none), for the first
    /// `MAX_AGENTS_SEEN` paths: what an apiserver's audit log would name.
    pub user_agents: std::sync::Mutex<std::collections::BTreeMap<String, String>>,
    /// Users whose watches a SubjectAccessReview refuses (every other review is allowed), with
    /// the authorizer's reason.
    pub watch_denied: std::sync::Mutex<Vec<String>>,
    /// SubjectAccessReviews answered so far.
    pub reviews: AtomicU64,
    /// Watches begun so far, and open now.
    pub watches: AtomicU64,
    pub watches_open: AtomicU64,
    reads: AtomicU64,
}

/// How many paths `SimControls::user_agents` keeps.
const MAX_AGENTS_SEEN: usize = 256;

impl SimControls {
    /// The `User-Agent` a request to `path` last came with (`-` for none), if one came.
    pub fn user_agent_of(&self, path: &str) -> Option<String> {
        let seen = self.user_agents.lock().unwrap_or_else(|e| e.into_inner());
        seen.get(path).cloned()
    }

    fn note_user_agent(&self, path: &str, agent: Option<&http::HeaderValue>) {
        let agent = agent.and_then(|v| v.to_str().ok()).unwrap_or("-");
        let mut seen = self.user_agents.lock().unwrap_or_else(|e| e.into_inner());
        if seen.len() < MAX_AGENTS_SEEN || seen.contains_key(path) {
            seen.insert(path.to_owned(), agent.to_owned());
        }
    }

    /// Whether a write of `path` is set to fail.
    pub fn fails_write(&self, path: &str) -> bool {
        let fail = self
            .fail_writes_containing
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        fail.as_deref().is_some_and(|f| path.contains(f))
    }

    fn should_fail_read(&self) -> bool {
        let per_mille = u64::from(self.fail_reads_per_mille.load(Ordering::Relaxed));
        if per_mille == 0 {
            return false;
        }
        let n = self.reads.fetch_add(1, Ordering::Relaxed);
        // Read n fails when the running count of failures owed steps up: evenly spread, deterministic.
        (n + 1) * per_mille / 1000 > n * per_mille / 1000
    }
}

/// The response header naming the simulator version that answered.
pub const VERSION_HEADER: &str = "x-simulator-version";

/// What every request of one simulator sees.
pub struct SimState {
    version_header: http::HeaderValue,
    version: Minor,
    git_version: String,
    store: Store,
    controls: Arc<SimControls>,
}

impl SimState {
    fn version_json(&self) -> Value {
        json!({
            "major": self.version.0.to_string(),
            "minor": self.version.1.to_string(),
            "gitVersion": self.git_version,
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "go1.22.0",
            "compiler": "gc",
            "platform": "linux/amd64",
        })
    }

    /// An object as this version returns it: decoded into its schema.
    fn read_view(&self, res: &api::ApiResource, stored: &Value) -> Value {
        let mut obj = stored.clone();
        schema::apply(self.version, res.resource, &mut obj);
        obj
    }
}

/// A running simulator.
pub struct SimHandle {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its knobs.
    pub controls: Arc<SimControls>,
    /// The store it serves.
    pub store: Store,
    accepted: Arc<AtomicUsize>,
    shutdown: CancellationToken,
    tls: bool,
}

impl SimHandle {
    /// `http://127.0.0.1:port`, or `https://` when it serves TLS.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// TCP connections accepted so far.
    pub fn accepted_connections(&self) -> usize {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Stops the simulator: the listener closes and every open connection is cut, as when an
    /// apiserver process dies.
    pub fn stop(&self) {
        self.shutdown.cancel();
    }
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn parse_minor(git_version: &str) -> Minor {
    let v = git_version.trim_start_matches('v');
    let mut parts = v.split(['.', '-', '+']);
    let major = parts.next().and_then(|p| p.parse().ok()).unwrap_or(1);
    let minor = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (major, minor)
}

/// Starts a simulator on `addr` (port 0 for any) over `store`.
pub async fn start(
    config: SimConfig,
    store: Store,
    addr: SocketAddr,
) -> std::io::Result<SimHandle> {
    // As kube-apiserver (Go's net.Listen): the backlog is net.core.somaxconn.
    let listener = TcpListener::from_std(skewgate_shared::listen(addr)?)?;
    let addr = listener.local_addr()?;
    let controls = Arc::new(SimControls::default());
    let shutdown = CancellationToken::new();
    let version_header = http::HeaderValue::from_str(&config.git_version)
        .unwrap_or_else(|_| http::HeaderValue::from_static("unknown"));
    let state = Arc::new(SimState {
        version_header,
        version: parse_minor(&config.git_version),
        git_version: config.git_version.clone(),
        store: store.clone(),
        controls: controls.clone(),
    });
    let accepted = Arc::new(AtomicUsize::new(0));
    let tls = config.tls.is_some();
    tokio::spawn(serve(
        listener,
        state,
        config,
        accepted.clone(),
        shutdown.clone(),
    ));
    Ok(SimHandle {
        addr,
        controls,
        store,
        accepted,
        shutdown,
        tls,
    })
}

async fn serve(
    listener: TcpListener,
    state: Arc<SimState>,
    config: SimConfig,
    accepted: Arc<AtomicUsize>,
    shutdown: CancellationToken,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // kube-apiserver (Go's x/net/http2) does not count resets: it runs a handler per stream up to
    // its stream limit, queues the rest, and sends GOAWAY ENHANCE_YOUR_CALM ("too_many_early_resets")
    // only when more than 4x the limit wait unstarted. h2's nearest knob is the bound on streams
    // reset before they are accepted (20 by default, harsher than the apiserver); nor does Go count
    // the resets it sends itself (h2 closes the connection after 1,024).
    builder
        .http2()
        .max_concurrent_streams(config.max_concurrent_streams)
        .max_pending_accept_reset_streams(4 * config.max_concurrent_streams as usize)
        .max_local_error_reset_streams(None)
        // As kube-apiserver's secure serving: 256 KiB per stream ("99% of serialized resources
        // ... smaller than 256kb"), that times the stream limit per connection, 1 MiB of headers.
        .initial_stream_window_size(256 << 10)
        .initial_connection_window_size((256 << 10) * config.max_concurrent_streams.max(1))
        .max_header_list_size(1 << 20);
    if let Some(max) = config.max_header_list_size {
        builder.http2().max_header_list_size(max);
    }
    let mut connections = JoinSet::new();
    loop {
        let Some((stream, _)) =
            skewgate_shared::next_connection(&listener, &shutdown, "simulated apiserver").await
        else {
            break;
        };
        accepted.fetch_add(1, Ordering::Relaxed);
        let state = state.clone();
        let builder = builder.clone();
        let tls = config.tls.clone();
        let auth = config.auth.clone();
        connections.spawn(async move {
            match tls {
                None => serve_connection(stream, state, &builder, None, auth).await,
                Some(tls) => {
                    if let Ok(stream) = tokio_rustls::TlsAcceptor::from(tls).accept(stream).await {
                        let chain = stream.get_ref().1.peer_certificates().map(<[_]>::to_vec);
                        serve_connection(stream, state, &builder, chain, auth).await;
                    }
                }
            }
        });
        // Reap finished connections so the set does not grow without bound.
        while connections.try_join_next().is_some() {}
    }
    connections.abort_all();
}

/// Serves one connection; with `auth`, every request is authenticated (the certificate `chain` once
/// for the connection) and authorized before it is handled.
async fn serve_connection<I>(
    io: I,
    state: Arc<SimState>,
    builder: &auto::Builder<TokioExecutor>,
    chain: Option<Vec<rustls_pki_types::CertificateDer<'static>>>,
    auth: Option<Arc<SimAuth>>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let conn = Arc::new(auth.as_ref().map(|a| a.connection(chain.as_deref())));
    let service = service_fn(move |mut req: http::Request<hyper::body::Incoming>| {
        let (state, auth, conn) = (state.clone(), auth.clone(), conn.clone());
        async move {
            state.controls.requests.fetch_add(1, Ordering::Relaxed);
            state.controls.note_user_agent(
                req.uri().path(),
                req.headers().get(http::header::USER_AGENT),
            );
            if req.uri().path().starts_with("/debug/") {
                state
                    .controls
                    .debug_requests
                    .fetch_add(1, Ordering::Relaxed);
            }
            let version = state.version_header.clone();
            let mut resp = match auth::admit(auth.as_deref(), (*conn).as_ref(), &req) {
                Ok(user) => {
                    req.extensions_mut().insert(user);
                    handler::handle(state, req).await
                }
                Err(denied) => handler::status_error(denied.code, denied.reason, &denied.message),
            };
            // Tells tests and the demo which version answered; real apiservers send no such header.
            resp.headers_mut().insert(VERSION_HEADER, version);
            Ok::<_, std::convert::Infallible>(resp)
        }
    });
    let _ = builder
        .serve_connection_with_upgrades(TokioIo::new(io), service)
        .await;
}
