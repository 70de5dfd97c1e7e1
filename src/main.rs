//! The command line: `check` validates route files, `explain` shows the decision for one request.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::SystemTime;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand, ValueEnum};
use serde_json::json;

use skewgate::classify::{Client, RequestInfo, classify};
use skewgate::config::{self, Percent, RouteTable};
use skewgate::steer::{Decision, Quiet, Reason, Rule, SteerRequest, Steering};

#[derive(Parser)]
#[command(
    name = "skewgate",
    version,
    about = "Steers Kubernetes API traffic between apiserver versions during an upgrade"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Validate route files: exit 0, or print every error with file:line and exit 1.
    Check {
        /// Route files, or directories of *.yaml route files.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Print the RequestInfo, the client, the class, the rule and the backend of one request, and why.
    Explain(ExplainArgs),
}

#[derive(clap::Args)]
struct ExplainArgs {
    /// The route file (or a directory holding one).
    #[arg(long)]
    routes: PathBuf,
    /// The authenticated user name.
    #[arg(long, default_value = "")]
    user: String,
    /// A group of the user; repeat for several.
    #[arg(long = "group")]
    groups: Vec<String>,
    /// The request's User-Agent.
    #[arg(long)]
    user_agent: Option<String>,
    /// The moment to decide at (RFC 3339, UTC), for schedules; default now.
    #[arg(long)]
    at: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    output: Output,
    /// The HTTP method: GET, POST, PUT, PATCH, DELETE.
    method: String,
    /// The request URL or path, with its query: /api/v1/namespaces/a/pods?watch=1
    url: String,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Text,
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check { paths } => check(&paths),
        Command::Explain(args) => explain(&args).map(|()| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn check(paths: &[PathBuf]) -> Result<ExitCode> {
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
    format!(
        "{} backends, {} pins, {} rollouts",
        t.backends.len(),
        t.writes.pins.len(),
        t.reads.rollouts.len()
    )
}

fn explain(args: &ExplainArgs) -> Result<()> {
    let table = config::load_path(&args.routes).map_err(|e| anyhow::anyhow!("{e}"))?;
    let now = match &args.at {
        Some(at) => humantime::parse_rfc3339(at).with_context(|| {
            format!("--at {at:?}: write an RFC 3339 time in UTC, e.g. 2026-11-22T10:00:00Z")
        })?,
        None => SystemTime::now(),
    };
    let method = args.method.to_ascii_uppercase();
    let (path, query) = split_url(&args.url)?;
    let info = classify(&method, path, query);
    let groups: Vec<&str> = args.groups.iter().map(String::as_str).collect();
    let client = Client::from_user_agent(args.user_agent.as_deref());
    let req = SteerRequest {
        info: &info,
        user: &args.user,
        groups: &groups,
        client,
    };
    let steering = Steering::new(Arc::new(table));
    let decision = steering.decide(&req, now, &Quiet);
    let table = steering.table();
    match args.output {
        Output::Text => print_text(&info, &client, &decision, table),
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&explain_json(
                &info, &client, &decision, table, &args.user, &groups
            ))?
        ),
    }
    Ok(())
}

/// Accepts a path (`/api/v1/pods?watch=1`) or a whole URL (`https://host:6443/api/v1/pods`).
fn split_url(url: &str) -> Result<(&str, Option<&str>)> {
    let rest = match url.find("://") {
        Some(i) => {
            let after = &url[i + 3..];
            match after.find('/') {
                Some(j) => &after[j..],
                None => "/",
            }
        }
        None => url,
    };
    if !rest.starts_with('/') {
        bail!("URL {url:?} must be a path starting with / or a full http(s) URL");
    }
    Ok(match rest.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (rest, None),
    })
}

fn or_none(s: &str) -> &str {
    if s.is_empty() { "-" } else { s }
}

fn print_text(info: &RequestInfo<'_>, client: &Client<'_>, d: &Decision, t: &RouteTable) {
    println!("request:");
    if info.is_resource {
        println!("  verb:         {}", info.verb);
        println!(
            "  group:        {}",
            if info.api_group.is_empty() {
                "(core)"
            } else {
                &info.api_group
            }
        );
        println!("  version:      {}", info.api_version);
        println!("  resource:     {}", info.resource);
        println!("  subresource:  {}", or_none(&info.subresource));
        println!("  namespace:    {}", or_none(&info.namespace));
        println!("  name:         {}", or_none(&info.name));
    } else {
        println!("  non-resource request, verb {}", info.verb);
    }
    println!(
        "  long-running: {}",
        if info.is_long_running() { "yes" } else { "no" }
    );
    println!("  client:       {client}");
    println!("decision:");
    println!("  class:        {}", d.class.as_str());
    println!("  rule:         {}", d.rule_name(t));
    println!("  backend:      {}", t.backend_name(d.backend));
    println!("  why:          {}", d.explain(t));
}

fn explain_json(
    info: &RequestInfo<'_>,
    client: &Client<'_>,
    d: &Decision,
    t: &RouteTable,
    user: &str,
    groups: &[&str],
) -> serde_json::Value {
    let rule_kind = match d.rule {
        Rule::Pin(_) => "pin",
        Rule::Rollout(_) => "rollout",
        Rule::WriteDefault | Rule::ReadDefault => "default",
    };
    let rollout = match d.reason {
        Reason::Rollout {
            bucket,
            percent,
            selected,
            aborted,
        } => json!({
            "bucket": Percent(bucket).as_f64(),
            "percent": Percent(percent).as_f64(),
            "selected": selected,
            "aborted": aborted,
        }),
        _ => serde_json::Value::Null,
    };
    json!({
        "requestInfo": {
            "isResourceRequest": info.is_resource,
            "verb": info.verb.as_str(),
            "apiPrefix": info.api_prefix,
            "apiGroup": info.api_group,
            "apiVersion": info.api_version,
            "namespace": info.namespace,
            "resource": info.resource,
            "subresource": info.subresource,
            "name": info.name,
            "longRunning": info.is_long_running(),
        },
        "user": user,
        "groups": groups,
        "client": {
            "name": client.name,
            "version": client.version.map(|v| v.to_string()),
        },
        "class": d.class.as_str(),
        "rule": { "kind": rule_kind, "name": d.rule_name(t) },
        "backend": t.backend_name(d.backend),
        "rollout": rollout,
        "reason": d.explain(t).to_string(),
    })
}
