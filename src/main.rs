//! The command line: `serve`, `check`, `explain`, `demo`.

mod cli;

use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command};

// mimalloc: per-thread free lists without locks, used by every request on its worker thread. In an
// A/B under h2c load (h2load, 200,000 GETs) it took skewgate from 10.0-10.9 to 9.6 us of CPU per
// request against glibc's malloc. Freed memory is given back per worker (`edge::capacity`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check {
            paths,
            routes,
            running,
            lease_renew_interval,
            at,
            rollback_record,
        } => cli::check::check(
            &paths,
            &routes,
            running.as_deref(),
            (lease_renew_interval, at),
            rollback_record.as_deref(),
        ),
        Command::Explain(args) => cli::explain::explain(&args).map(|()| ExitCode::SUCCESS),
        Command::Serve(args) => cli::serve::run(*args),
        Command::Skew(args) => cli::skew::run(&args),
        Command::RollbackCheck(args) => cli::rollback_check::run(&args),
        #[cfg(feature = "demo")]
        Command::Demo(args) => cli::demo::run(args),
        #[cfg(feature = "demo")]
        Command::Sim(args) => cli::sim::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
