//! Logging: the level and format flags, the access log's switch, and the writer that keeps a slow
//! terminal or log collector from holding up requests.

use std::io::IsTerminal;

use clap::ValueEnum;
use tracing_subscriber::EnvFilter;

/// Logging flags of `serve` and `demo`.
#[derive(clap::Args, Clone)]
pub struct LogArgs {
    /// The level of skewgate's own messages: error, warn, info, debug, trace. The libraries'
    /// internals (h2, hyper, rustls frames) stay at warn unless RUST_LOG asks for them: RUST_LOG,
    /// when set, replaces this (e.g. RUST_LOG=info,h2=debug).
    #[arg(long, value_enum, default_value_t = Level::Info)]
    pub log_level: Level,
    /// More detail: -v is --log-level=debug, -vv trace.
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// How each line is written: text for a person, json (one object per line) for a collector.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub log_format: Format,
    /// Leave out the access log (one line per finished request, target skewgate::access, at info).
    #[arg(long)]
    pub no_access_log: bool,
}

impl Default for LogArgs {
    fn default() -> Self {
        LogArgs {
            log_level: Level::Info,
            verbose: 0,
            log_format: Format::Text,
            no_access_log: false,
        }
    }
}

/// Levels of `--log-level`.
#[derive(Clone, Copy, ValueEnum, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Failures only.
    Error,
    /// And what an operator should look at.
    Warn,
    /// And what skewgate does: start, reloads, pin moves, aborts, shutdown.
    Info,
    /// And why, request by request.
    Debug,
    /// Everything skewgate says.
    Trace,
}

impl Level {
    fn as_str(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
            Level::Trace => "trace",
        }
    }
}

/// Formats of `--log-format`.
#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Format {
    /// `time LEVEL target: message key=value ...`.
    Text,
    /// One JSON object per line, the fields at the top level.
    Json,
}

impl LogArgs {
    /// The level in force, `-v` counted.
    fn level(&self) -> Level {
        match self.verbose {
            0 => self.log_level,
            1 => self.log_level.max(Level::Debug),
            _ => Level::Trace,
        }
    }

    /// The filter: skewgate's crates at the level, everything else at warn, the access log on or
    /// off; `RUST_LOG` in place of the levels when set.
    fn filter(&self) -> String {
        let access = if self.no_access_log { "off" } else { "info" };
        let levels = match std::env::var("RUST_LOG") {
            Ok(v) if !v.trim().is_empty() => v,
            _ => {
                let l = self.level().as_str();
                format!("warn,skewgate={l},skewgate_sim={l},skewgate_shared={l}")
            }
        };
        if levels.contains("skewgate::access") {
            levels
        } else {
            format!("{levels},skewgate::access={access}")
        }
    }

    /// Whether the proxy should make access-log records at all.
    pub fn access_log(&self) -> bool {
        !self.no_access_log
    }
}

/// Keeps the log writer's thread running; lines still queued are written when it is dropped.
pub type LogGuard = Option<tracing_appender::non_blocking::WorkerGuard>;

/// Starts logging to stderr. Lines go through a queue to a thread of their own, so a slow reader
/// of stderr never holds up a request; past 128k queued lines, new ones are dropped (counted by
/// tracing-appender), never waited for.
pub fn init(args: &LogArgs) -> LogGuard {
    let filter = match EnvFilter::try_new(args.filter()) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("warning: RUST_LOG: {e}; logging at info");
            EnvFilter::new("warn,skewgate=info,skewgate_sim=info,skewgate_shared=info")
        }
    };
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(true)
        .thread_name("skewgate-log")
        .finish(std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    let installed = match args.log_format {
        Format::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        Format::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
    };
    installed.ok().map(|()| guard)
}
