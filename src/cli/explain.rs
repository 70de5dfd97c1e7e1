//! `skewgate explain`: the decision for one request, for a person or a script.

use std::sync::Arc;
use std::time::SystemTime;

use anyhow::{Context, Result, bail};
use serde_json::json;

use skewgate::classify::{Client, RequestInfo, classify};
use skewgate::config::{self, Guard, Percent, PinReads, RouteTable, StickyBy, UnknownVersion};
use skewgate::proxy::GuardEncoding;
use skewgate::steer::{Decision, Judged, Quiet, Reason, Rule, SteerRequest, Steering, mismatch};

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
    if !METHODS.contains(&method.as_str()) {
        bail!(
            "{:?} is not a method the apiserver serves; give one of {}",
            args.method,
            METHODS.join(", ")
        );
    }
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
    let guard = steering.judge_guard(&req, &decision, now);
    let table = steering.table();
    let rules = considered(table, &req, &decision);
    let backend = table.backend_name(decision.backend);
    let sharing =
        super::explain_share::sharing(&steering, &req, (&info, backend, query), path, args);
    match args.output {
        Output::Text => {
            print_text(&info, &client, &decision, table, &req);
            print_steps(&rules);
            print_rollout(&decision, table, &req, now);
            print_guard(&guard, &args.content_type);
            super::explain_share::print(&sharing);
        }
        Output::Json | Output::Yaml => {
            let mut value = explain_json(&info, &client, &decision, table, &args.user, &groups);
            value["rules"] = rules
                .iter()
                .map(
                    |r| json!({"kind": r.kind, "name": r.name, "matched": r.matched, "why": r.why}),
                )
                .collect();
            if let Rule::Rollout(i) = decision.rule {
                let r = &table.reads.rollouts[i];
                value["rollout"]["stickyBy"] = json!(sticky_name(r.sticky_by));
                value["rollout"]["key"] = json!(sticky_key(r.sticky_by, &req));
                value["rollout"]["step"] = json!(r.schedule.at(now).step);
            }
            value["share"] = super::explain_share::to_json(&sharing);
            value["guard"] = guard.as_ref().map_or(serde_json::Value::Null, |(g, j)| {
                json!({
                    "name": g.name,
                    "action": g.action.as_str(),
                    "unknownVersion": match g.unknown_version { UnknownVersion::Guard => "guard", UnknownVersion::Pass => "pass" },
                    "down": j.down,
                    "up": j.up,
                    "body": body_json(&args.content_type),
                })
            });
            match args.output {
                Output::Yaml => print!("{}", serde_saphyr::to_string(&value)?),
                _ => println!("{}", serde_json::to_string_pretty(&value)?),
            }
        }
    }
    Ok(())
}

/// The methods kube-apiserver serves.
const METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

/// A rule as the decision went past it.
struct Considered<'t> {
    kind: &'static str,
    name: &'t str,
    matched: bool,
    why: String,
}

/// Every rule in the order the decision considers them: the pins (for a write, every pin; for a
/// read, the pins its reads follow), then for a read the rollouts; the first that matches decides.
fn considered<'t>(t: &'t RouteTable, req: &SteerRequest<'_>, d: &Decision) -> Vec<Considered<'t>> {
    let write = d.class.as_str() == "write";
    let mut out = Vec::new();
    let mut decided = false;
    let mut consider = |kind: &'static str, name: &'t str, selectors, skip: Option<&str>| {
        let (matched, why) = if let Some(skip) = skip {
            (false, skip.to_owned())
        } else if decided {
            (false, "not considered: an earlier rule decided".to_owned())
        } else {
            match mismatch(selectors, req) {
                None => {
                    decided = true;
                    (true, "matches: decides".to_owned())
                }
                Some(field) => (false, format!("{field} does not match")),
            }
        };
        out.push(Considered {
            kind,
            name,
            matched,
            why,
        });
    };
    for p in &t.writes.pins {
        let skip = (!write && p.reads == PinReads::Rollout)
            .then_some("reads: rollout, so the rollouts decide its reads");
        consider("pin", &p.name, &p.selectors, skip);
    }
    for r in &t.reads.rollouts {
        let skip = write.then_some("a write: rollouts decide reads only");
        consider("rollout", &r.name, &r.selectors, skip);
    }
    out
}

fn print_steps(rules: &[Considered<'_>]) {
    if rules.is_empty() {
        return;
    }
    println!("rules considered:");
    for r in rules {
        println!("  {:<8}{:<24}{}", r.kind, r.name, r.why);
    }
}

fn sticky_name(by: StickyBy) -> &'static str {
    match by {
        StickyBy::Namespace => "namespace",
        StickyBy::User => "user",
        StickyBy::Object => "object",
        StickyBy::Client => "client",
    }
}

/// The key a rollout hashes, as a person reads it.
fn sticky_key(by: StickyBy, req: &SteerRequest<'_>) -> String {
    let i = req.info;
    match by {
        StickyBy::Namespace => i.namespace.to_string(),
        StickyBy::User => req.user.to_owned(),
        StickyBy::Object => format!("{}/{}/{}/{}", i.namespace, i.api_group, i.resource, i.name),
        StickyBy::Client => req.client.to_string(),
    }
}

/// A rollout's sticky key, its bucket, and the step in force.
fn print_rollout(d: &Decision, t: &RouteTable, req: &SteerRequest<'_>, now: SystemTime) {
    let (
        Rule::Rollout(i),
        Reason::Rollout {
            bucket, percent, ..
        },
    ) = (d.rule, d.reason)
    else {
        return;
    };
    let r = &t.reads.rollouts[i];
    let point = r.schedule.at(now);
    println!("rollout:");
    println!(
        "  sticky by:    {} {:?}",
        sticky_name(r.sticky_by),
        sticky_key(r.sticky_by, req)
    );
    println!(
        "  bucket:       {} (goes to {} when under the percent)",
        Percent(bucket).as_f64(),
        t.backend_name(r.to)
    );
    let step = point
        .step
        .map_or("fixed percent (no steps)".to_owned(), |s| {
            format!("step {} of the schedule", s + 1)
        });
    println!("  in force:     {} %, {step}", Percent(percent).as_f64());
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

fn print_text(
    info: &RequestInfo<'_>,
    client: &Client<'_>,
    d: &Decision,
    t: &RouteTable,
    req: &SteerRequest<'_>,
) {
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
    println!("  user:         {}", or_none(req.user));
    println!(
        "  groups:       {}",
        if req.groups.is_empty() {
            "-".to_owned()
        } else {
            req.groups.join(", ")
        }
    );
    println!("decision:");
    let steered_as_read = d.class.as_str() == "read" && !info.verb.is_read();
    if steered_as_read {
        println!(
            "  class:        read ({} is not in writes.verbs, so it is steered as a read)",
            info.verb
        );
    } else {
        println!("  class:        {}", d.class.as_str());
    }
    println!("  rule:         {}", d.rule_name(t));
    match d.skew.filter(|s| s.step.refuses()) {
        Some(s) => println!(
            "  backend:      none: refused by the version-skew policy ({})",
            s.step.as_str()
        ),
        None => println!("  backend:      {}", t.backend_name(d.backend)),
    }
    println!("  why:          {}", d.explain(t));
}

/// The update guard that applies, and how it judges this update.
fn print_guard(guard: &Option<(&Guard, Judged)>, content_type: &str) {
    let Some((g, j)) = guard else {
        return;
    };
    println!("guard:");
    println!("  name:         {}", g.name);
    println!("  action:       {}", g.action.as_str());
    println!("  down:         {}", j.down);
    println!("  up:           {}", j.up);
    println!("  body:         {}", body_read(content_type));
}

/// How the guard reads a body of `content_type`, as said to a person.
fn body_read(content_type: &str) -> String {
    match GuardEncoding::of_media(content_type) {
        GuardEncoding::Json => "judged as JSON".to_owned(),
        GuardEncoding::Yaml => {
            "judged as YAML, as the JSON it stands for (preserve sends that JSON)".to_owned()
        }
        GuardEncoding::Protobuf => format!(
            "judged as protobuf, read with skewgate's Kubernetes {} schema (preserve writes it back in protobuf)",
            skewgate::protobuf::KUBERNETES
        ),
        GuardEncoding::Unknown => format!(
            "{content_type:?} is not read: the guard's failure rule decides (reject and preserve answer 503, warn sends it)"
        ),
    }
}

fn body_json(content_type: &str) -> serde_json::Value {
    let encoding = GuardEncoding::of_media(content_type);
    json!({
        "contentType": content_type,
        "encoding": encoding.as_str(),
        "judged": encoding != GuardEncoding::Unknown,
        "why": body_read(content_type),
    })
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
        "skewPolicy": d.skew.map_or(serde_json::Value::Null, |s| json!({
            "component": s.component.name(),
            "version": s.version.to_string(),
            "chosen": t.backend_name(s.chosen),
            "outcome": s.step.as_str(),
            "refused": s.step.refuses(),
        })),
        "reason": d.explain(t).to_string(),
    })
}
