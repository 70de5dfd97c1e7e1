//! `skewgate explain`: the decision for one request, for a person or a script.

use std::sync::Arc;
use std::time::SystemTime;

use anyhow::{Context, Result, bail};
use serde_json::json;

use skewgate::classify::{Client, RequestInfo, classify};
use skewgate::config::{self, Guard, Percent, RouteTable, UnknownVersion};
use skewgate::steer::{Decision, Quiet, Reason, Rule, SteerRequest, Steering};

use super::{ExplainArgs, Output};

pub fn explain(args: &ExplainArgs) -> Result<()> {
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
    let guard = steering.guard(&req);
    let table = steering.table();
    let guard = guard.map(|g| &table.guards[g]);
    match args.output {
        Output::Text => {
            print_text(&info, &client, &decision, table);
            print_guard(guard, &client, &decision, table);
        }
        Output::Json => {
            let mut value = explain_json(&info, &client, &decision, table, &args.user, &groups);
            value["guard"] = guard.map_or(serde_json::Value::Null, |g| {
                json!({
                    "name": g.name,
                    "action": g.action.as_str(),
                    "unknownVersion": match g.unknown_version { UnknownVersion::Guard => "guard", UnknownVersion::Pass => "pass" },
                })
            });
            println!("{}", serde_json::to_string_pretty(&value)?);
        }
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

/// The update guard that applies, and when it acts.
fn print_guard(guard: Option<&Guard>, client: &Client<'_>, d: &Decision, t: &RouteTable) {
    let Some(g) = guard else {
        return;
    };
    let serving = t
        .backends
        .iter()
        .find(|b| b.name == t.backend_name(d.backend))
        .and_then(|b| b.version)
        .map_or("its backend".to_owned(), |(a, b)| format!("v{a}.{b}"));
    let when = match (client.version, g.unknown_version) {
        (Some(v), _) => format!(
            "when this v{}.{} client is older than {serving}",
            v.major, v.minor
        ),
        (None, UnknownVersion::Guard) => "this client's version is unknown: guarded".to_owned(),
        (None, UnknownVersion::Pass) => "this client's version is unknown: passes".to_owned(),
    };
    println!("guard:");
    println!("  name:         {}", g.name);
    println!("  action:       {} ({when})", g.action.as_str());
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
