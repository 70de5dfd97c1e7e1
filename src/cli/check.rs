//! `skewgate check`: validate route files, print every error, exit 1 if any.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use skewgate::config::{self, RouteTable};
use skewgate::skew::rollback::{RollbackCheck, record_warnings};

/// Checks `paths` (route files, or directories of them, each file checked) and `routes` (read as
/// `serve --routes` reads them: a directory holds one route file). The flipAts are judged at `at`
/// (now when `None`), against the fleet's Lease `round`. `record`: what `rollback-check --record`
/// wrote, judged against each table.
pub fn check(
    paths: &[PathBuf],
    routes: &[PathBuf],
    running: Option<&std::path::Path>,
    (round, at): (std::time::Duration, Option<std::time::SystemTime>),
    record: Option<&std::path::Path>,
) -> Result<ExitCode> {
    let record = match record.map(read_record).transpose() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("--rollback-record: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let running = match running.map(config::load_path) {
        Some(Ok(t)) => Some(t),
        Some(Err(errors)) => {
            eprintln!("--running: {errors}");
            return Ok(ExitCode::FAILURE);
        }
        None => None,
    };
    let Some(files) = files_to_check(paths, routes) else {
        return Ok(ExitCode::FAILURE);
    };
    let mut failed = false;
    for file in &files {
        let source = std::fs::read_to_string(file).ok();
        let show = |level: &str, e: &config::ConfigError| {
            eprintln!("{}", e.render(level, source.as_deref()));
        };
        match config::load_file(file) {
            Ok(table) => {
                for w in &table.warnings {
                    show("warning", w);
                }
                let now = at.unwrap_or_else(std::time::SystemTime::now);
                let settle = config::fleet_settle(round);
                let moves = config::move_warnings(&table, running.as_ref(), now, settle);
                let back = record_warnings(&table, running.as_ref(), record.as_ref(), now);
                for w in moves.iter().chain(&back) {
                    eprintln!("warning: {}: {w}", file.display());
                }
                println!("{}: ok ({})", file.display(), summary(&table));
            }
            Err(errors) => {
                failed = true;
                for e in &errors.0 {
                    show("error", e);
                }
                eprintln!(
                    "{}: {} error{}",
                    file.display(),
                    errors.0.len(),
                    if errors.0.len() == 1 { "" } else { "s" }
                );
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// A record `rollback-check --record` wrote.
fn read_record(path: &std::path::Path) -> Result<RollbackCheck, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| {
        format!(
            "{}: not a record of skewgate rollback-check: {e}",
            path.display()
        )
    })
}

fn summary(t: &RouteTable) -> String {
    let guards = match t.guards.len() {
        0 => String::new(),
        n => format!(", {}", count(n, "guard")),
    };
    let warnings = match t.warnings.len() {
        0 => String::new(),
        n => format!(", {}", count(n, "warning")),
    };
    format!(
        "{}, {}, {}{guards}{warnings}",
        count(t.backends.len(), "backend"),
        count(t.writes.pins.len(), "pin"),
        count(t.reads.rollouts.len(), "rollout")
    )
}

/// `1 pin`, `2 pins`.
fn count(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// The files `paths` (files, or directories of them, each file checked) and `routes` (read as
/// `serve --routes` reads them: a directory holds one route file) name; `None` once a directory
/// was refused, its error printed.
fn files_to_check(paths: &[PathBuf], routes: &[PathBuf]) -> Option<Vec<PathBuf>> {
    let mut files = Vec::new();
    for path in routes {
        if !path.is_dir() {
            files.push(path.clone());
            continue;
        }
        match config::route_files_in(path) {
            Ok(found) if found.len() == 1 => files.extend(found),
            // What `serve --routes` says of it: none, or more than one.
            _ => {
                if let Err(errors) = config::load_path(path) {
                    eprintln!("{errors}");
                }
                return None;
            }
        }
    }
    for path in paths {
        if path.is_dir() {
            match config::route_files_in(path) {
                Ok(found) if found.is_empty() => {
                    eprintln!("{}: no *.yaml or *.yml route file here", path.display());
                    return None;
                }
                Ok(found) => files.extend(found),
                Err(errors) => {
                    eprintln!("{errors}");
                    return None;
                }
            }
        } else {
            files.push(path.clone());
        }
    }
    Some(files)
}
