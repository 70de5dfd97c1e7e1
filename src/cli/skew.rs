//! `skewgate skew`: what differs between the versions, from the backends of a route file (read as
//! `serve` connects to them) or from saved OpenAPI v3 documents.

use std::process::ExitCode;

use anyhow::{Result, anyhow, bail};
use skewgate::config::RouteTable;
use skewgate::skew::{Report, VersionFields, compare, fetch, from_dir};
use skewgate::upstream::PoolSettings;

use super::serve::{runtime, upstream_tls};
use super::{Output, SkewArgs, UpstreamArgs};

/// Runs `skew`.
pub fn run(args: &SkewArgs) -> Result<ExitCode> {
    let (versions, writes_to, table) = match &args.routes {
        Some(routes) => live(args, routes)?,
        None => offline(args)?,
    };
    if versions.len() < 2 {
        bail!(
            "skew compares two or more versions: give a route file with two backends, or --openapi-dir twice"
        );
    }
    let report = compare(&versions);
    let placement = table.map(|t| report.placement(&t)).unwrap_or_default();
    print(&report, &writes_to, &placement, args.output);
    Ok(ExitCode::SUCCESS)
}

type Versions = Vec<(String, VersionFields)>;

/// The versions, the backend the pins go to, and the route table they go into (when there is one).
type Compared = (Versions, String, Option<RouteTable>);

/// The backends of the route file, each read from its first endpoint that answers; the pins go to
/// `writes.default`.
fn live(args: &SkewArgs, routes: &std::path::Path) -> Result<Compared> {
    let table = skewgate::config::load_path(routes).map_err(|e| anyhow!("{e}"))?;
    let writes_to = table.backend_name(table.writes.default).to_owned();
    let pool = own_pool(&args.upstream)?;
    let fetched = runtime()?.block_on(fetch(&table, pool));
    let mut versions = Vec::new();
    for (backend, result) in fetched {
        let fields = result.map_err(|e| anyhow!("backend {backend}: {e}"))?;
        versions.push((backend, fields));
    }
    Ok((versions, writes_to, Some(table)))
}

/// How skewgate's own requests reach the apiservers, as `serve` connects: its TLS, and its user.
pub(super) fn own_pool(upstream: &UpstreamArgs) -> Result<PoolSettings> {
    Ok(PoolSettings {
        tls: upstream_tls(upstream)?,
        own_user: match upstream.proxy_user.as_str() {
            "" => None,
            user => Some((
                http::HeaderName::from_static("x-remote-user"),
                http::HeaderValue::from_str(user)
                    .map_err(|e| anyhow!("--proxy-user {user:?}: {e}"))?,
            )),
        },
        ..PoolSettings::default()
    })
}

/// The saved documents of `--openapi-dir`; the pins go to the first version given.
fn offline(args: &SkewArgs) -> Result<Compared> {
    let mut versions = Vec::new();
    for (version, dir) in &args.openapi_dir {
        versions.push((version.clone(), from_dir(dir).map_err(|e| anyhow!(e))?));
    }
    let first = versions.first().map(|(v, _)| v.clone()).unwrap_or_default();
    Ok((versions, first, None))
}

fn print(report: &Report, writes_to: &str, placement: &str, output: Output) {
    match output {
        Output::Text => {
            println!("{report}");
            print!("{}", report.suggested_pins(writes_to));
            print!("{placement}");
        }
        Output::Json | Output::Yaml => {
            let value = serde_json::json!({
                "report": report,
                "suggestedPins": report.suggested_pins(writes_to),
                "placement": placement,
            });
            if matches!(output, Output::Yaml) {
                print!("{}", serde_saphyr::to_string(&value).unwrap_or_default());
            } else {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&value).unwrap_or_default()
                );
            }
        }
    }
}
