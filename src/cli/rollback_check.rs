//! `skewgate rollback-check`: what moving writes back to an older backend would strand or damage,
//! read from the live cluster through the newer backends; exit 1 when something would be lost.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use skewgate::skew::rollback::{self, Progress, RollbackCheck, ScanOptions, suggested_pins};

use super::serve::runtime;
use super::skew::own_pool;
use super::{Output, RollbackCheckArgs};

/// Runs `rollback-check`.
pub fn run(args: &RollbackCheckArgs) -> Result<ExitCode> {
    let load = |p: &std::path::Path| {
        skewgate::config::load_path(p).map_err(|e| anyhow!("{}: {e}", p.display()))
    };
    let routes = load(&args.routes)?;
    let plan = match &args.plan {
        Some(p) => Some((p.display().to_string(), load(p)?)),
        None => None,
    };
    let groups = (args.groups.iter())
        .map(|g| http::HeaderValue::from_str(g).map_err(|e| anyhow!("--as-group {g:?}: {e}")))
        .collect::<Result<Vec<_>>>()?;
    if args.page_size == 0 {
        anyhow::bail!("--page-size 0: give at least 1 object per page");
    }
    let request = rollback::Request {
        routes: (args.routes.display().to_string(), routes),
        to: args.to.clone(),
        plan,
        pool: own_pool(&args.upstream)?,
        options: ScanOptions {
            page: args.page_size,
            max_names: args.max_names,
            groups,
            page_timeout: Duration::from_secs(60),
        },
        dry_run: args.dry_run,
    };
    let mut progress = Stderr::default();
    let check = runtime()?
        .block_on(rollback::run(request, &mut progress))
        .map_err(|e| anyhow!(e))?;
    let keep_on = check
        .from
        .last()
        .map(|b| b.name.clone())
        .unwrap_or_default();
    let pins = suggested_pins(&check.findings, &keep_on);
    if let Some(path) = &args.record {
        let text = serde_json::to_string_pretty(&check)?;
        std::fs::write(path, text + "\n")
            .with_context(|| format!("--record {}", path.display()))?;
        eprintln!("record written to {}", path.display());
    }
    print(&check, &pins, args.output)?;
    Ok(if check.loses {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn print(check: &RollbackCheck, pins: &str, output: Output) -> Result<()> {
    match output {
        Output::Text => {
            print!("{check}");
            if !pins.is_empty() {
                println!();
                print!("{pins}");
            }
        }
        Output::Json | Output::Yaml => {
            let mut value = serde_json::to_value(check)?;
            value["suggestedPins"] = serde_json::json!(pins);
            match output {
                Output::Yaml => print!("{}", serde_saphyr::to_string(&value)?),
                _ => println!("{}", serde_json::to_string_pretty(&value)?),
            }
        }
    }
    Ok(())
}

/// Progress on stderr, a line per resource and one each 20 pages.
#[derive(Default)]
struct Stderr {
    pages: u64,
}

impl Progress for Stderr {
    fn listing(&mut self, resource: &str, through: &str) {
        self.pages = 0;
        eprintln!("listing {resource} through {through}");
    }

    fn page(&mut self, resource: &str, objects: u64) {
        self.pages += 1;
        if self.pages.is_multiple_of(20) {
            eprintln!("  {resource}: {objects} objects read");
        }
    }

    fn skipped(&mut self, resource: &str, why: &str) {
        eprintln!("  {resource}: skipped, {why}");
    }
}
