//! What `explain` says of a watch and `shareWatches`: the rule that shares it and the distinct
//! watch it joins, or why it goes to the apiserver on its own; with a running skewgate's admin
//! address (`--admin`), how many clients share that watch there now.

use std::io::{Read, Write};
use std::time::Duration;

use serde_json::{Value, json};

use skewgate::classify::RequestInfo;
use skewgate::steer::{SteerRequest, Steering};

use super::ExplainArgs;

/// What explain found.
pub(super) struct Sharing {
    /// The rule that matches, if one does.
    rule: Option<String>,
    /// The distinct watch it joins, or why it goes on its own.
    watch: Result<String, String>,
    /// Clients sharing it now, from `--admin`.
    now: Option<Result<usize, String>>,
}

/// For a watch; `None` for any other request.
pub(super) fn sharing(
    steering: &Steering,
    req: &SteerRequest<'_>,
    (info, backend, query): (&RequestInfo<'_>, &str, Option<&str>),
    path: &str,
    args: &ExplainArgs,
) -> Option<Sharing> {
    if info.verb.as_str() != "watch" {
        return None;
    }
    let rule = steering
        .share(req)
        .map(|i| steering.table().shares[i].name.clone());
    let mut headers = http::HeaderMap::new();
    if let Ok(v) = http::HeaderValue::from_str(&args.accept)
        && !args.accept.is_empty()
    {
        headers.insert(http::header::ACCEPT, v);
    }
    let watch = match &rule {
        None if steering.table().shares.is_empty() => Err("the table has no shareWatches".to_owned()),
        None => Err("no shareWatches rule matches (a byName rule takes only watches with a metadata.name field selector)".to_owned()),
        Some(_) => skewgate::proxy::describe_watch(backend, path, query, &headers)
            .map_err(|why| format!("watches on its own: {}", own_words(why))),
    };
    let now = match (&watch, &args.admin) {
        (Ok(w), Some(admin)) => Some(clients_now(admin, w)),
        _ => None,
    };
    Some(Sharing { rule, watch, now })
}

fn own_words(reason: &str) -> &'static str {
    match reason {
        "initial_state" => {
            "it begins with the state at its start (no resourceVersion, 0, or a watch list), which only the apiserver has"
        }
        "credentials" => {
            "its credentials are a bearer token or impersonation, which the apiserver judges"
        }
        _ => "a parameter skewgate would not repeat as the apiserver reads it",
    }
}

pub(super) fn print(s: &Option<Sharing>) {
    let Some(s) = s else { return };
    println!("share:");
    match (&s.rule, &s.watch) {
        (Some(rule), Ok(watch)) => {
            println!("  rule:         {rule}");
            println!("  watch:        {watch}");
            println!(
                "  who:          a client with a verified certificate, once the apiserver's authorizer allows it (a SubjectAccessReview)"
            );
        }
        (rule, Err(why)) => {
            if let Some(rule) = rule {
                println!("  rule:         {rule}");
            }
            println!("  not shared:   {why}");
        }
        (None, Ok(_)) => {}
    }
    match &s.now {
        Some(Ok(0)) => {
            println!("  now:          no shared watch open for it; the first client begins one")
        }
        Some(Ok(n)) => println!("  now:          {n} clients share it"),
        Some(Err(e)) => println!("  now:          unknown ({e})"),
        None => {}
    }
}

pub(super) fn to_json(s: &Option<Sharing>) -> Value {
    let Some(s) = s else { return Value::Null };
    json!({
        "rule": s.rule,
        "watch": s.watch.as_ref().ok(),
        "notShared": s.watch.as_ref().err(),
        "clientsNow": s.now.as_ref().and_then(|n| n.as_ref().ok()),
    })
}

/// The clients of `watch` at the running skewgate whose admin listens at `admin`.
fn clients_now(admin: &str, watch: &str) -> Result<usize, String> {
    let addr = admin
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let body = get(&addr, "/debug/shares").map_err(|e| format!("{addr}: {e}"))?;
    let v: Value = serde_json::from_str(&body).map_err(|e| format!("{addr}/debug/shares: {e}"))?;
    Ok(v["watches"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|w| w["watch"] == watch)
        .filter_map(|w| w["clients"].as_u64())
        .sum::<u64>() as usize)
}

/// A plain HTTP/1.1 GET of the admin listener: the body.
fn get(addr: &str, path: &str) -> Result<String, String> {
    let mut stream = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
    let timeout = Some(Duration::from_secs(5));
    stream
        .set_read_timeout(timeout)
        .map_err(|e| e.to_string())?;
    stream
        .set_write_timeout(timeout)
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut text = String::new();
    stream
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    let (head, body) = text.split_once("\r\n\r\n").ok_or("no HTTP answer")?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(head.lines().next().unwrap_or_default().to_owned());
    }
    Ok(body.to_owned())
}
