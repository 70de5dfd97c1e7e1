//! `skewgate check`: validate route files, print every error, exit 1 if any.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use skewgate::config::{self, RouteTable};

pub fn check(paths: &[PathBuf]) -> Result<ExitCode> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            match config::route_files_in(path) {
                Ok(found) if found.is_empty() => {
                    eprintln!("{}: no *.yaml or *.yml route file here", path.display());
                    return Ok(ExitCode::FAILURE);
                }
                Ok(found) => files.extend(found),
                Err(errors) => {
                    eprintln!("{errors}");
                    return Ok(ExitCode::FAILURE);
                }
            }
        } else {
            files.push(path.clone());
        }
    }
    let mut failed = false;
    for file in &files {
        match config::load_file(file) {
            Ok(table) => println!("{}: ok ({})", file.display(), summary(&table)),
            Err(errors) => {
                failed = true;
                eprintln!("{errors}");
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn summary(t: &RouteTable) -> String {
    let guards = match t.guards.len() {
        0 => String::new(),
        n => format!(", {n} guards"),
    };
    format!(
        "{} backends, {} pins, {} rollouts{guards}",
        t.backends.len(),
        t.writes.pins.len(),
        t.reads.rollouts.len()
    )
}
