//! `skewgate sim`: one simulated apiserver in its own process, for benchmarks and experiments.

use std::process::ExitCode;

use anyhow::{Context, Result};

use std::path::Path;
use std::sync::Arc;

use rustls::ServerConfig;
use skewgate_sim::{self as sim, SimAuth, SimConfig, Store};

use super::SimArgs;
use super::serve::{Signals, runtime};

/// Runs the simulator until SIGTERM or Ctrl-C.
pub fn run(args: SimArgs) -> Result<ExitCode> {
    let _log = super::logging::init(&super::logging::LogArgs::default());
    runtime()?.block_on(async move {
        let signals = Signals::listen();
        let (tls, auth) = tls_and_auth(&args)?;
        let config = SimConfig {
            max_concurrent_streams: args.max_concurrent_streams,
            tls,
            auth,
            ..SimConfig::new(&args.git_version)
        };
        let handle = sim::start(config, Store::new(), args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        tracing::info!(addr = %handle.addr, version = %args.git_version, "simulated apiserver (a test fixture) is serving");
        signals.wait().await;
        Ok(ExitCode::SUCCESS)
    })
}

/// What the TLS flags ask for: a serving configuration, and the authenticators.
type TlsAndAuth = (Option<Arc<ServerConfig>>, Option<Arc<SimAuth>>);

/// The TLS configuration and authenticators the flags ask for.
fn tls_and_auth(args: &SimArgs) -> Result<TlsAndAuth> {
    let read = |p: &Path| {
        std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))
    };
    let (Some(cert), Some(key)) = (&args.tls_cert_file, &args.tls_private_key_file) else {
        return Ok((None, None));
    };
    let tls = SimAuth::tls_config(&read(cert)?, &read(key)?).map_err(anyhow::Error::msg)?;
    let mut auth = SimAuth::new();
    let mut authenticates = false;
    if let Some(ca) = &args.client_ca_file {
        auth = auth.client_ca(&read(ca)?).map_err(anyhow::Error::msg)?;
        authenticates = true;
    }
    if let Some(ca) = &args.requestheader_client_ca_file {
        let names: Vec<&str> = args
            .requestheader_allowed_names
            .iter()
            .map(String::as_str)
            .collect();
        auth = auth
            .requestheader(&read(ca)?, &names)
            .map_err(anyhow::Error::msg)?;
        authenticates = true;
    }
    Ok((Some(tls), authenticates.then(|| Arc::new(auth))))
}
