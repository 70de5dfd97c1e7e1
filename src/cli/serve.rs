//! `skewgate serve`: run the proxy until SIGTERM or Ctrl-C, then shut down gracefully.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Result, bail};

use skewgate::app::{ServeOptions, Server};
use skewgate::cluster::PublishSettings;
use skewgate::edge::EdgeSettings;
use skewgate::identity::{IdentityHeaders, ServingTls, TlsFiles, UpstreamTls, UpstreamTlsFiles};
use skewgate::proxy::ProxySettings;
use skewgate::upstream::{PoolSettings, ResponseBudget};

use super::{ServeArgs, UpstreamArgs};

/// A multi-threaded runtime for the proxy.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// Runs `serve`.
pub fn run(args: ServeArgs) -> Result<ExitCode> {
    let _log = super::logging::init(&args.log);
    let (dry, delay) = (args.dry_run, args.shutdown_delay);
    let opts = options(args)?;
    if dry {
        return dry_run(&opts);
    }
    runtime()?.block_on(async move {
        let signals = Signals::listen();
        let cleartext = opts.edge.tls.is_none();
        let server = Server::start(opts).await?;
        if cleartext {
            tracing::warn!("clients connect in cleartext: give --tls-cert-file and --tls-private-key-file, or put a TLS-terminating sidecar in front");
        }
        signals.wait().await;
        server.drain(delay).await;
        server.shutdown().await;
        Ok(ExitCode::SUCCESS)
    })
}

/// The flags as the server's options, with every certificate and key loaded (and checked).
fn options(args: ServeArgs) -> Result<ServeOptions> {
    let publish = publish(&args)?;
    let tls = match (&args.tls_cert_file, &args.tls_private_key_file) {
        (Some(cert), Some(key)) => Some(ServingTls::load(TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: args.client_ca_file.clone(),
        })?),
        _ => {
            if args.client_ca_file.is_some() {
                bail!(
                    "--client-ca-file needs --tls-cert-file and --tls-private-key-file: client certificates come with TLS"
                );
            }
            None
        }
    };
    let upstream_tls = upstream_tls(&args.upstream)?;
    let identity_headers = IdentityHeaders::new(
        &args.requestheader_username_headers,
        &args.requestheader_group_headers,
        &args.requestheader_extra_headers_prefix,
        &args.requestheader_uid_headers,
    )
    .map_err(|e| anyhow::anyhow!("--requestheader-*: {e}"))?;
    let own_user = match (
        args.upstream.proxy_user.as_str(),
        identity_headers.user.first(),
    ) {
        ("", _) | (_, None) => None,
        (user, Some(header)) => Some((
            header.clone(),
            http::HeaderValue::from_str(user)
                .map_err(|e| anyhow::anyhow!("--proxy-user {user:?}: {e}"))?,
        )),
    };
    Ok(ServeOptions {
        routes: args.routes,
        listen: args.listen,
        admin_listen: args.admin_listen,
        reload_poll: args.reload_poll,
        settings: ProxySettings {
            max_requests_per_client: args.max_requests_per_client,
            client_queue_wait: args.client_queue_wait,
            access_log: args.log.access_log(),
            publish,
            identity_headers: std::sync::Arc::new(identity_headers),
            pool: PoolSettings {
                ping_interval: args.upstream_ping_interval,
                tls: upstream_tls,
                own_user,
                max_header_list_size: args.max_request_header_bytes,
                response_buffer: Arc::new(ResponseBudget::new(args.max_buffered_response_bytes)),
                ..PoolSettings::default()
            },
            ..ProxySettings::default()
        },
        edge: EdgeSettings {
            tls,
            shutdown_grace: args.shutdown_grace,
            workers: args.workers.unwrap_or(EdgeSettings::default().workers),
            max_client_connections: args.max_client_connections,
            hold_back_offenders: args.hold_back_offenders,
            goaway_chance: args.goaway_chance,
            ..EdgeSettings::default()
        },
    })
}

/// `--advertise-address`: how this replica publishes itself, if it does. An address the apiservers
/// refuse in Endpoints is refused here, before serving.
fn publish(args: &ServeArgs) -> Result<Option<PublishSettings>> {
    let Some(ip) = args.advertise_address else {
        return Ok(None);
    };
    if let Some(why) = skewgate::cluster::unusable_endpoint_ip(ip) {
        bail!(
            "--advertise-address {ip}: {why}, so the apiservers refuse it in the kubernetes Service's endpoints; give the address in-cluster clients reach this node at"
        );
    }
    let (interval, lease_duration) = (args.lease_renew_interval, args.lease_duration);
    if interval.is_zero() || interval >= lease_duration {
        bail!(
            "--lease-renew-interval {} must be more than 0 and less than --lease-duration {}, or the Lease lapses between renewals",
            humantime::format_duration(interval),
            humantime::format_duration(lease_duration)
        );
    }
    let address = std::net::SocketAddr::new(ip, args.listen.port());
    Ok(Some(PublishSettings {
        interval,
        lease_duration,
        ..PublishSettings::new(address)
    }))
}

/// `--dry-run`: the flags and files were loaded above; the route table is loaded here.
fn dry_run(opts: &ServeOptions) -> Result<ExitCode> {
    let table = skewgate::config::load_path(&opts.routes).map_err(|e| anyhow::anyhow!("{e}"))?;
    // What `serve` would report as never ready: an https endpoint with no upstream TLS to dial it.
    if opts.settings.pool.tls.is_none() {
        let https: Vec<String> = table
            .backends
            .iter()
            .flat_map(|b| {
                b.endpoints
                    .iter()
                    .filter(|e| e.tls)
                    .map(move |e| format!("{} ({})", e.url, b.name))
            })
            .collect();
        if !https.is_empty() {
            bail!(
                "https endpoints need --upstream-ca-file (and --proxy-client-cert-file and --proxy-client-key-file, the front-proxy client certificate the apiservers trust): {}",
                https.join(", ")
            );
        }
    }
    println!(
        "ok: would serve {} on {} (admin {}), {} with {} backends; TLS {}; upstream TLS {}",
        opts.routes.display(),
        opts.listen,
        opts.admin_listen,
        table.name.as_deref().unwrap_or("an unnamed route table"),
        table.backends.len(),
        if opts.edge.tls.is_some() {
            "on"
        } else {
            "off (cleartext)"
        },
        if opts.settings.pool.tls.is_some() {
            "on"
        } else {
            "off"
        },
    );
    Ok(ExitCode::SUCCESS)
}

/// The upstream TLS of the flags: the apiservers' CA and the front-proxy client certificate.
pub fn upstream_tls(args: &UpstreamArgs) -> Result<Option<Arc<UpstreamTls>>> {
    let client_cert = match (&args.proxy_client_cert_file, &args.proxy_client_key_file) {
        (Some(c), Some(k)) => Some((c.clone(), k.clone())),
        (None, None) => None,
        _ => bail!("give both --proxy-client-cert-file and --proxy-client-key-file, or neither"),
    };
    Ok(match (&args.upstream_ca_file, &client_cert) {
        (None, None) => None,
        _ => Some(UpstreamTls::load(UpstreamTlsFiles {
            ca: args.upstream_ca_file.clone(),
            client_cert,
        })?),
    })
}

/// SIGTERM and SIGINT, listened for from the moment this is made: a signal that comes while the
/// server starts (or prints its guide) is not lost, nor does it kill the process unhandled.
pub struct Signals {
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Starts listening (within a runtime).
    pub fn listen() -> Signals {
        use tokio::signal::unix::{SignalKind, signal};
        Signals {
            term: signal(SignalKind::terminate()).ok(),
            int: signal(SignalKind::interrupt()).ok(),
        }
    }

    /// Waits for SIGTERM or SIGINT.
    pub async fn wait(mut self) {
        let term = async {
            match &mut self.term {
                Some(s) => s.recv().await,
                None => std::future::pending().await,
            }
        };
        let int = async {
            match &mut self.int {
                Some(s) => s.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = term => tracing::info!("SIGTERM received"),
            _ = int => tracing::info!("interrupt received"),
        }
    }
}
