//! The command line: `serve`, `check`, `explain`, `demo`.

mod cli;

use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command};

// mimalloc: per-thread free lists without locks, which the request path (one worker thread per
// core, a few small allocations per request) uses on every request; glibc's malloc cost twice as
// much there (bench/README.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check { paths } => cli::check::check(&paths),
        Command::Explain(args) => cli::explain::explain(&args).map(|()| ExitCode::SUCCESS),
        Command::Serve(args) => cli::serve::run(*args),
        Command::Skew(args) => cli::skew::run(&args),
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
