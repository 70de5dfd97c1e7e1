//! `skewgate sim`: one simulated apiserver in its own process, for benchmarks and experiments.

use std::process::ExitCode;

use anyhow::{Context, Result};

use skewgate_sim::{self as sim, SimConfig, Store};

use super::SimArgs;
use super::serve::{Signals, runtime};

/// Runs the simulator until SIGTERM or Ctrl-C.
pub fn run(args: SimArgs) -> Result<ExitCode> {
    let _log = super::logging::init(&super::logging::LogArgs::default());
    runtime()?.block_on(async move {
        let signals = Signals::listen();
        let config = SimConfig {
            max_concurrent_streams: args.max_concurrent_streams,
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
