//! The command line: its arguments, and one module per command.

pub mod check;
#[cfg(feature = "demo")]
pub mod demo;
pub mod explain;
mod explain_share;
pub mod logging;
pub mod rollback_check;
pub mod serve;
#[cfg(feature = "demo")]
pub mod sim;
pub mod skew;

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// skewgate's command line.
#[derive(Parser)]
#[command(
    name = "skewgate",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("SKEWGATE_COMMIT"), ")"),
    about = "Steers Kubernetes API traffic between apiserver versions during an upgrade"
)]
pub struct Cli {
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Subcommand)]
pub enum Command {
    /// Proxy clients to apiservers by a route file, reloading it when it changes.
    Serve(Box<ServeArgs>),
    /// Validate route files: exit 0, or print every error with file:line and exit 1.
    Check {
        /// Route files, or directories of *.yaml route files.
        #[arg(required_unless_present = "routes")]
        paths: Vec<PathBuf>,
        /// A route file or directory, as `serve`, `explain` and `skew` spell it and read it (a
        /// directory holds one route file; repeatable; checked with the PATHs).
        #[arg(long)]
        routes: Vec<PathBuf>,
        /// The route table the replicas run now: warn where a checked table changes a pin whose
        /// move in it may still be pending (it would be superseded).
        #[arg(long)]
        running: Option<PathBuf>,
        /// The fleet's Lease round, as `serve` takes it: warn of a flipAt closer than four rounds.
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        lease_renew_interval: std::time::Duration,
        /// Judge the flipAts at this time (RFC 3339, UTC) instead of now, as the table will be
        /// loaded then: a runbook's file checked for the moment of its step.
        #[arg(long, value_parser = humantime::parse_rfc3339)]
        at: Option<std::time::SystemTime>,
        /// What `rollback-check --record` wrote: warn where a checked table sends the writes of an
        /// object it found at stake to the older backend. Without it, a table that moves writes
        /// back to an older backend is warned of.
        #[arg(long)]
        rollback_record: Option<PathBuf>,
    },
    /// Print the RequestInfo, the client, the class, the rule and the backend of one request, and why.
    Explain(ExplainArgs),
    /// What differs between the backends' versions (from their OpenAPI v3): fields only some know,
    /// changed defaults, resources only some serve, and the pins that follow.
    Skew(SkewArgs),
    /// What moving writes back to an older backend would strand or damage: objects of kinds it does
    /// not serve, objects holding fields it cannot store, storage versions it cannot read; read
    /// through the newer backends. Exits 1 when something would be lost.
    RollbackCheck(RollbackCheckArgs),
    #[cfg(feature = "demo")]
    /// Run simulated apiservers of two versions with skewgate in front, and print commands to try.
    Demo(DemoArgs),
    #[cfg(feature = "demo")]
    /// Run one simulated apiserver (a test fixture for benchmarks and experiments, not an apiserver).
    Sim(SimArgs),
}

/// `skewgate sim`.
#[derive(clap::Args)]
#[cfg(feature = "demo")]
pub struct SimArgs {
    /// Where it listens.
    #[arg(long, default_value = "127.0.0.1:18080")]
    pub listen: SocketAddr,
    /// The gitVersion it reports; its major.minor selects its schema.
    #[arg(long, default_value = "v1.30.0")]
    pub git_version: String,
    /// SETTINGS_MAX_CONCURRENT_STREAMS of its HTTP/2 connections.
    #[arg(long, default_value_t = 100)]
    pub max_concurrent_streams: u32,
    /// Serve TLS with this certificate (PEM), as kube-apiserver's `--tls-cert-file`. Its TLS
    /// listener asks every client for a certificate and leaves checking it to the authenticators.
    #[arg(long, requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// The key of `--tls-cert-file` (PEM).
    #[arg(long, requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,
    /// Authenticate client certificates signed by this CA (CN the user, O the groups), as
    /// kube-apiserver's `--client-ca-file`. With it, or the request-header CA, the simulator
    /// authenticates and authorizes as kube-apiserver does; without both, every request is served.
    #[arg(long, requires = "tls_cert_file")]
    pub client_ca_file: Option<PathBuf>,
    /// Trust identity headers (`X-Remote-User`, `X-Remote-Group`) from front proxies whose client
    /// certificate this CA signed, as kube-apiserver's `--requestheader-client-ca-file`.
    #[arg(long, requires = "tls_cert_file")]
    pub requestheader_client_ca_file: Option<PathBuf>,
    /// The front-proxy certificate CNs it accepts (`--requestheader-allowed-names`); empty: any.
    #[arg(long, value_delimiter = ',')]
    pub requestheader_allowed_names: Vec<String>,
}

fn goaway_chance(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(c) if (0.0..=0.02).contains(&c) => Ok(c),
        _ => Err(format!(
            "{s:?} is not a chance from 0 to 0.02 (at most one request in fifty, as kube-apiserver allows)"
        )),
    }
}

/// `--lease-duration`: whole seconds, at least one (a Lease's `leaseDurationSeconds`).
fn lease_duration(s: &str) -> Result<std::time::Duration, String> {
    match humantime::parse_duration(s) {
        Ok(d) if d.as_secs() >= 1 && d.subsec_nanos() == 0 => Ok(d),
        Ok(_) => Err(format!(
            "{s:?} is not whole seconds of at least 1s (a Lease holds for whole seconds)"
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// How skewgate connects to the apiservers (`serve`, `skew`).
#[derive(clap::Args)]
pub struct UpstreamArgs {
    /// CA that verifies apiserver certificates.
    #[arg(long)]
    pub upstream_ca_file: Option<PathBuf>,
    /// Front-proxy client certificate presented to apiservers.
    #[arg(long)]
    pub proxy_client_cert_file: Option<PathBuf>,
    /// Front-proxy client key.
    #[arg(long)]
    pub proxy_client_key_file: Option<PathBuf>,
    /// The user skewgate's own requests (health checks, discovery) name upstream, in the first
    /// username header, on the front-proxy connection; it needs the system:public-info-viewer and
    /// system:discovery roles, which every authenticated user has by default. Empty: none.
    #[arg(long, default_value = "skewgate")]
    pub proxy_user: String,
}

/// `skewgate skew`.
#[derive(clap::Args)]
pub struct SkewArgs {
    /// Read the backends of this route file, connecting as `serve` would.
    #[arg(long, conflicts_with = "openapi_dir")]
    pub routes: Option<PathBuf>,
    /// Or read saved OpenAPI v3 documents: VERSION=DIR, one directory of *.json group/version
    /// documents per version (repeat the flag), for offline use and for versions no longer running.
    #[arg(long = "openapi-dir", value_parser = version_dir)]
    pub openapi_dir: Vec<(String, PathBuf)>,
    /// How to connect (with --routes).
    #[command(flatten)]
    pub upstream: UpstreamArgs,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

/// `skewgate rollback-check`.
#[derive(clap::Args)]
pub struct RollbackCheckArgs {
    /// The route file the backends are read from (the running table), connecting as `serve` would.
    #[arg(long)]
    pub routes: PathBuf,
    /// The older backend writes would move back to.
    #[arg(long)]
    pub to: String,
    /// The rollback table to judge: what its pins keep on a newer backend (once its moves are
    /// done) is kept, not lost. Without it, every write moves to --to.
    #[arg(long)]
    pub plan: Option<PathBuf>,
    /// Write the whole check as JSON here, for `check --rollback-record`.
    #[arg(long)]
    pub record: Option<PathBuf>,
    /// Ask the older apiserver what it drops: one server-side dry-run update (`?dryRun=All`) per
    /// field found, of an object that holds it, read through the newer backend. It tells what a
    /// feature gate off in the older version drops though its OpenAPI describes it. Needs update
    /// on those resources (admission webhooks see a dry run).
    #[arg(long)]
    pub dry_run: bool,
    /// Names shown per resource, field and namespace.
    #[arg(long, default_value_t = 10)]
    pub max_names: usize,
    /// Objects per list page (the apiserver's `limit`).
    #[arg(long, default_value_t = 500)]
    pub page_size: usize,
    /// The groups the check's reads name besides its user (--proxy-user), as X-Remote-Group; the
    /// user needs get and list of every resource (deploy/kubeadm/rbac.yaml: skewgate-rollback-check).
    #[arg(long = "as-group")]
    pub groups: Vec<String>,
    /// How to connect.
    #[command(flatten)]
    pub upstream: UpstreamArgs,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

fn version_dir(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((v, d)) if !v.is_empty() && !d.is_empty() => Ok((v.to_owned(), PathBuf::from(d))),
        _ => Err(format!(
            "{s:?} is not VERSION=DIR (e.g. v1.29=./openapi-1.29)"
        )),
    }
}

/// `skewgate serve`.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// A route file, or a directory holding one; watched and reloaded.
    #[arg(long)]
    pub routes: PathBuf,
    /// Where clients connect. The default port is not kube-apiserver's 6443, so that skewgate
    /// started by hand on a control-plane node does not take (or fail on) the apiserver's port;
    /// the kubeadm static pod in deploy/ takes 6443 on purpose, with the apiserver moved to 6444.
    #[arg(long, default_value = "0.0.0.0:7443")]
    pub listen: SocketAddr,
    /// Where /metrics, /healthz, /readyz and /debug/routes are served.
    #[arg(long, default_value = "127.0.0.1:9443")]
    pub admin_listen: SocketAddr,
    /// How often the routes path is read again besides watching it (e.g. 5s).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub reload_poll: std::time::Duration,
    /// How long in-flight requests may finish after SIGTERM (e.g. 25s).
    #[arg(long, default_value = "25s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: std::time::Duration,
    /// After SIGTERM and before the listener closes: /readyz answers 503 and this replica leaves
    /// the kubernetes Service, so the load balancer (keepalived, kube-vip, a cloud LB) and
    /// kube-proxy stop sending new connections; requests are served meanwhile (e.g. 5s).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub shutdown_delay: std::time::Duration,
    /// Load and check everything (route file, certificates and keys, flags), say what would be
    /// served, and exit without binding: 0 when serve would start.
    #[arg(long)]
    pub dry_run: bool,
    /// Worker threads, each with its own event loop and upstream connections (default: one per core).
    #[arg(long)]
    pub workers: Option<usize>,
    /// How often upstream connections are PINGed (e.g. 5s).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub upstream_ping_interval: std::time::Duration,
    /// Serving certificate chain (PEM): serve TLS, with ALPN h2 and http/1.1.
    #[arg(long, requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// Serving key (PEM).
    #[arg(long, requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,
    /// CA that verifies client certificates.
    #[arg(long)]
    pub client_ca_file: Option<PathBuf>,
    /// How skewgate connects to the apiservers.
    #[command(flatten)]
    pub upstream: UpstreamArgs,
    /// Requests in flight per client (its verified user, else its address), watches and other
    /// long-running requests not counted; past it, 429 with Retry-After. 0: no limit.
    #[arg(long, default_value_t = 100)]
    pub max_requests_per_client: usize,
    /// How long a request past its client's limit waits for a place (the client's queue holds as
    /// many as the limit) before 429, as kube-apiserver's priority and fairness queues (e.g. 15s).
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub client_queue_wait: std::time::Duration,
    /// Hold back a client (its verified user, else its address) that was cut off for HTTP/2 rapid
    /// reset, or sent 20 malformed requests within a second: its next connections wait 1 s, doubling
    /// with each offence up to 16 s. Turn off (=false) when many clients share one address and
    /// present no certificate.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub hold_back_offenders: bool,
    /// The chance (0 to 0.02) that an HTTP/2 request that is not long-running is answered and then
    /// its connection sent GOAWAY, so that clients' long-lived connections (kubelets keep theirs
    /// for days) spread again over the replicas behind a load balancer, as kube-apiserver's
    /// --goaway-chance does. 0 turns it off.
    #[arg(long, default_value_t = 0.001, value_parser = goaway_chance)]
    pub goaway_chance: f64,
    /// This replica's address as in-cluster clients reach it (its node's address). With it,
    /// skewgate keeps the default/kubernetes Service's Endpoints and EndpointSlice naming the live
    /// replicas (each renews a Lease in kube-system), so controllers in pods go through skewgate
    /// too; run the apiservers with --endpoint-reconciler-type=none. The port is --listen's (the
    /// port bound, when --listen names port 0).
    #[arg(long)]
    pub advertise_address: Option<std::net::IpAddr>,
    /// With --advertise-address: how long this replica's Lease holds without renewal (whole
    /// seconds, as a Lease says it). The others wait for it that long; it stops taking writes
    /// before then if it cannot renew. kube-apiserver's own: 15s.
    #[arg(long, default_value = "15s", value_parser = lease_duration)]
    pub lease_duration: std::time::Duration,
    /// With --advertise-address: how often the Lease is renewed and the others' read (less than
    /// --lease-duration). A pin's move waits four of these after the last replica runs it.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub lease_renew_interval: std::time::Duration,
    /// Client connections held at once; past it, new ones wait in the listen backlog. 0: the file
    /// descriptor limit (raised to its hard limit at start) less an eighth, at least 64, kept for
    /// upstream connections and the admin listener.
    #[arg(long, default_value_t = 0)]
    pub max_client_connections: usize,
    /// The largest request head (header names and values, HTTP/2 measure) forwarded; larger ones get
    /// 431. kube-apiserver accepts up to 1 MiB (1048576); the default is Envoy's, rounded up.
    #[arg(long, default_value_t = 64 << 10)]
    pub max_request_header_bytes: usize,
    /// The most response data held for clients that have not read it yet, across all of them
    /// (bytes; 0: no bound). From half of it, apiservers are given a 16 KiB window per stream
    /// instead of 256 KiB; at it, none beyond 16 KiB at a time for a client that has read all it
    /// was sent, and a response whose client still holds 16 KiB unread when more comes is cut.
    #[arg(long, default_value_t = skewgate::upstream::DEFAULT_RESPONSE_BUFFER)]
    pub max_buffered_response_bytes: usize,
    /// Headers that carry the user upstream, and are removed from clients (default X-Remote-User).
    #[arg(long, value_delimiter = ',')]
    pub requestheader_username_headers: Vec<String>,
    /// Headers that carry the groups upstream, and are removed from clients (default X-Remote-Group).
    #[arg(long, value_delimiter = ',')]
    pub requestheader_group_headers: Vec<String>,
    /// Prefixes of extra headers removed from clients (default X-Remote-Extra-).
    #[arg(long, value_delimiter = ',')]
    pub requestheader_extra_headers_prefix: Vec<String>,
    /// Headers that carry the UID, removed from clients (default X-Remote-Uid).
    #[arg(long, value_delimiter = ',')]
    pub requestheader_uid_headers: Vec<String>,
    /// Logging.
    #[command(flatten)]
    pub log: logging::LogArgs,
}

/// `skewgate explain`.
#[derive(clap::Args)]
pub struct ExplainArgs {
    /// The route file (or a directory holding one).
    #[arg(long)]
    pub routes: PathBuf,
    /// The authenticated user name, as kubectl's `--as` names it (`--user` is kept as an alias;
    /// kubectl's `--user` names a kubeconfig entry).
    #[arg(long = "as", alias = "user", default_value = "")]
    pub user: String,
    /// A group of the user, as kubectl's `--as-group`; repeat for several (`--group` is kept as an
    /// alias).
    #[arg(long = "as-group", alias = "group")]
    pub groups: Vec<String>,
    /// The request's User-Agent.
    #[arg(long)]
    pub user_agent: Option<String>,
    /// The moment to decide at (RFC 3339, UTC), for schedules; default now.
    #[arg(long)]
    pub at: Option<String>,
    /// The body's Content-Type, for how a guard reads it (kubelets and the control plane send
    /// application/vnd.kubernetes.protobuf).
    #[arg(long, default_value = "application/json")]
    pub content_type: String,
    /// The request's Accept, for which shared watch a watch joins (kubelets ask
    /// application/vnd.kubernetes.protobuf,application/json).
    #[arg(long, default_value = "")]
    pub accept: String,
    /// The admin address of a running skewgate (host:port): say how many clients share the
    /// watch there now (its /debug/shares).
    #[arg(long)]
    pub admin: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// The HTTP method: GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS.
    pub method: String,
    /// The request URL or path, with its query: /api/v1/namespaces/a/pods?watch=1
    pub url: String,
}

/// `skewgate demo`.
#[derive(clap::Args)]
#[cfg(feature = "demo")]
pub struct DemoArgs {
    /// Where the demo's skewgate listens.
    #[arg(long, default_value = "127.0.0.1:16443")]
    pub listen: SocketAddr,
    /// Where its admin endpoints are.
    #[arg(long, default_value = "127.0.0.1:19443")]
    pub admin_listen: SocketAddr,
    /// A route file to use instead of the embedded routes/demo.yaml; a simulator is started on each
    /// of its http:// endpoints.
    #[arg(long)]
    pub routes: Option<PathBuf>,
    /// The simulators' ports, one per endpoint in the route file's order (the embedded file's:
    /// 18129 for 1.29, 18130 for 1.30), e.g. `--sim-ports 28129,28130`.
    #[arg(long, value_delimiter = ',')]
    pub sim_ports: Vec<u16>,
    /// Logging.
    #[command(flatten)]
    pub log: logging::LogArgs,
}

/// Output formats of `explain`.
#[derive(Clone, Copy, ValueEnum)]
pub enum Output {
    /// For a person.
    Text,
    /// For a script.
    Json,
    /// For a script, or a person who reads YAML.
    Yaml,
}
