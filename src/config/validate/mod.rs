//! Turns a parsed route file into a `RouteTable`, collecting every problem with its place in the file.
//!
//! This file validates the structure (backends, writes); `steering` the pins and rollouts;
//! `values` checks scalar values (percents, durations, times, schedules) and `selectors` the
//! selector lists.

mod guards;
mod selectors;
mod shares;
mod skew_policy;
mod splits;
mod steering;

pub(crate) use splits::may_meet;
mod values;

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use serde_saphyr::{Location, Spanned};

use super::error::{ConfigError, ConfigErrors};
use super::raw::{FileBackend, FileRouteTable, Text, TextList};
use super::selector::VerbSet;
use super::table::{Backend, BackendId, Endpoint, Reads, RouteTable, Writes};
use crate::classify::{ClientVersion, Verb};

const API_VERSION: &str = "skewgate.io/v1alpha1";
const DEFAULT_FENCE: Duration = Duration::from_secs(10);
/// Pinned writes get `fence - 2s` upstream, so a fence must leave them some time.
const MIN_FENCE: Duration = Duration::from_secs(3);

/// Validates a parsed file. Returns the table, or every problem found.
pub(super) fn validate(file: &Path, raw: FileRouteTable) -> Result<RouteTable, ConfigErrors> {
    let mut v = Validator {
        file,
        errors: Vec::new(),
        warnings: Vec::new(),
        backend_names: Vec::new(),
        backend_spans: Vec::new(),
        spans: splits::RuleSpans::default(),
    };
    let mut table = v.table(raw);
    if v.errors.is_empty() {
        table.warnings = v.warnings;
        Ok(table)
    } else {
        Err(ConfigErrors(v.errors))
    }
}

struct Validator<'f> {
    file: &'f Path,
    errors: Vec<ConfigError>,
    warnings: Vec<ConfigError>,
    backend_names: Vec<String>,
    backend_spans: Vec<Location>,
    spans: splits::RuleSpans,
}

impl Validator<'_> {
    fn error(&mut self, at: Location, field: impl Into<String>, message: impl Into<String>) {
        self.errors
            .push(ConfigError::at(self.file, at, field, message));
    }

    fn warn(&mut self, at: Location, field: impl Into<String>, message: impl Into<String>) {
        self.warnings
            .push(ConfigError::at(self.file, at, field, message));
    }

    fn table(&mut self, raw: FileRouteTable) -> RouteTable {
        if raw.api_version.value != API_VERSION {
            self.error(
                raw.api_version.referenced,
                "apiVersion",
                format!(
                    "is {:?}; this skewgate reads {API_VERSION}",
                    raw.api_version.value
                ),
            );
        }
        if raw.kind.value != "RouteTable" {
            self.error(
                raw.kind.referenced,
                "kind",
                format!("is {:?}; a route file's kind is RouteTable", raw.kind.value),
            );
        }
        let backends = self.backends(raw.backends);
        let w = raw.writes.value;
        let write_verbs = self.write_verbs(w.verbs.as_ref());
        let write_default = self.backend_ref(&w.default, "writes.default");
        let fence = match &w.fence {
            None => DEFAULT_FENCE,
            Some(f) => self.fence(f),
        };
        let pins = self.pins(w.pins);
        let read_default = self.backend_ref(&raw.reads.value.default, "reads.default");
        self.spans.reads_default = Some(raw.reads.value.default.referenced);
        let rollouts = self.rollouts(raw.reads.value.rollouts, read_default);
        let guards = self.guards(raw.guards, &backends);
        let skew_policy = self.skew_policy(raw.skew_policy, &backends);
        let shares = self.shares(raw.share_watches);
        let table = RouteTable {
            source: self.file.to_owned(),
            name: raw.metadata.and_then(|m| m.name).map(|n| n.value),
            backends,
            writes: Writes {
                verbs: write_verbs,
                default: write_default,
                fence,
                pins,
            },
            reads: Reads {
                default: read_default,
                rollouts,
            },
            guards,
            skew_policy,
            shares,
            warnings: Vec::new(),
        };
        if self.errors.is_empty() {
            self.leader_leases_fenced(&table);
            let spans = std::mem::take(&mut self.spans);
            self.splits(&table, &spans);
        }
        table
    }

    fn backends(&mut self, raw: Spanned<Vec<FileBackend>>) -> Vec<Backend> {
        if raw.value.is_empty() {
            self.error(raw.referenced, "backends", "no backends; list at least one");
        }
        let mut out = Vec::new();
        for (i, b) in raw.value.into_iter().enumerate() {
            let path = format!("backends[{i}]");
            if !is_dns1123_label(&b.name.value) {
                self.error(
                    b.name.referenced,
                    format!("{path}.name"),
                    format!(
                        "{:?} is not a DNS-1123 label: use lower-case letters, digits and '-', \
                         at most 63, starting and ending with a letter or digit (e.g. v1-30)",
                        b.name.value
                    ),
                );
            }
            if self.backend_names.contains(&b.name.value) {
                self.error(
                    b.name.referenced,
                    format!("{path}.name"),
                    format!(
                        "duplicate backend name {:?}; backend names must be unique",
                        b.name.value
                    ),
                );
            }
            self.backend_names.push(b.name.value.clone());
            self.backend_spans.push(b.name.referenced);
            let version = b.version.as_ref().and_then(|v| {
                let parsed = ClientVersion::parse_minor(&v.value);
                if parsed.is_none() {
                    self.error(
                        v.referenced,
                        format!("{path}.version"),
                        format!(
                            "{:?} is not a major.minor version; write e.g. v1.30",
                            v.value
                        ),
                    );
                }
                parsed
            });
            let mut endpoints = self.endpoints(&b.endpoints, &path);
            if let Some(name) = &b.server_name {
                if rustls_pki_types::ServerName::try_from(name.value.as_str()).is_err() {
                    self.error(
                        name.referenced,
                        format!("{path}.serverName"),
                        format!("{:?} is not a DNS name or IP address; write e.g. kubernetes.default.svc", name.value),
                    );
                }
                for ep in &mut endpoints {
                    ep.server_name = name.value.clone();
                }
            }
            out.push(Backend {
                name: b.name.value,
                version,
                endpoints,
            });
        }
        out
    }

    fn endpoints(&mut self, raw: &TextList, path: &str) -> Vec<Endpoint> {
        if raw.value.is_empty() {
            self.error(
                raw.referenced,
                format!("{path}.endpoints"),
                "no endpoints; list at least one URL, e.g. https://10.0.0.11:6443",
            );
        }
        let mut out = Vec::new();
        for (j, e) in raw.value.iter().enumerate() {
            match parse_endpoint(&e.value) {
                Ok(ep) => out.push(ep),
                Err(msg) => self.error(e.referenced, format!("{path}.endpoints[{j}]"), msg),
            }
        }
        out
    }

    /// Resolves a backend name; an unknown one is an error, and 0 stands in so validation goes on.
    fn backend_ref(&mut self, name: &Text, field: &str) -> BackendId {
        match self.backend_names.iter().position(|b| *b == name.value) {
            Some(id) => BackendId::new(id),
            None => {
                let mut known: Vec<&str> = self.backend_names.iter().map(String::as_str).collect();
                known.dedup();
                let message = match crate::config::shape::did_you_mean(&name.value, &known) {
                    Some(meant) => {
                        format!("unknown backend {:?}: did you mean {meant}?", name.value)
                    }
                    None => format!(
                        "unknown backend {:?}; the backends are: {}",
                        name.value,
                        known.join(", ")
                    ),
                };
                self.error(name.referenced, field, message);
                BackendId::new(0)
            }
        }
    }

    fn write_verbs(&mut self, raw: Option<&TextList>) -> VerbSet {
        let Some(list) = raw else {
            return VerbSet::of(&[Verb::Update, Verb::Patch]);
        };
        if list.value.is_empty() {
            self.error(
                list.referenced,
                "writes.verbs",
                "an empty list pins nothing; leave it out for the default [update, patch]",
            );
        }
        let mut set = VerbSet::default();
        for (i, item) in list.value.iter().enumerate() {
            match Verb::parse_selectable(&item.value) {
                Some(v) if Verb::WRITES.contains(&v) => set.insert(v),
                _ => self.error(
                    item.referenced,
                    format!("writes.verbs[{i}]"),
                    format!(
                        "{:?} is not a write verb; use create, update, patch, delete or deletecollection",
                        item.value
                    ),
                ),
            }
        }
        set
    }

    fn fence(&mut self, raw: &Text) -> Duration {
        match self.duration(raw, "writes.fence") {
            Some(d) if d >= MIN_FENCE => d,
            Some(_) => {
                self.error(
                    raw.referenced,
                    "writes.fence",
                    "must be at least 3s: pinned writes get fence - 2s upstream during a move",
                );
                DEFAULT_FENCE
            }
            None => DEFAULT_FENCE,
        }
    }

    fn unique_name(&mut self, seen: &mut HashSet<String>, name: &Text, field: &str, what: &str) {
        if name.value.is_empty() {
            self.error(
                name.referenced,
                field,
                format!("a {what} name must not be empty"),
            );
        } else if !seen.insert(name.value.clone()) {
            self.error(
                name.referenced,
                field,
                format!(
                    "duplicate {what} name {:?}; {what} names must be unique",
                    name.value
                ),
            );
        }
    }
}

fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

fn parse_endpoint(url: &str) -> Result<Endpoint, String> {
    let hint = "write an http:// or https:// URL with a host and an optional port, e.g. https://10.0.0.11:6443";
    let uri: http::Uri = url
        .parse()
        .map_err(|e| format!("{url:?} is not a URL ({e}); {hint}"))?;
    let tls = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        Some(other) => return Err(format!("{url:?} has scheme {other:?}; {hint}")),
        None => return Err(format!("{url:?} has no scheme; {hint}")),
    };
    let Some(host) = uri.host().filter(|h| !h.is_empty()) else {
        return Err(format!("{url:?} has no host; {hint}"));
    };
    if uri.path() != "/" && !uri.path().is_empty() || uri.query().is_some() {
        return Err(format!(
            "{url:?} has a path or query; skewgate forwards the request's own path, so give only scheme, host and port"
        ));
    }
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    Ok(Endpoint {
        url: url.to_owned(),
        tls,
        server_name: host.clone(),
        host,
        port,
    })
}
