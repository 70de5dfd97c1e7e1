//! The command line: `serve`, `check`, `explain`, `demo`.

mod cli;

use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command};

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
