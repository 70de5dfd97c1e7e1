//! Turns a parsed route file into a `RouteTable`, collecting every problem with its place in the file.

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, SystemTime};

use serde_saphyr::{Location, Spanned};

use super::error::{ConfigError, ConfigErrors};
use super::raw::{
    FileAbort, FileBackend, FileMatch, FilePin, FileRollout, FileRouteTable, FileStep, Text,
    TextList,
};
use super::selector::{ClientPattern, NamePattern, ResourcePattern, Selector, VerbSet};
use super::table::{
    Abort, Backend, BackendId, Endpoint, Percent, Pin, PinReads, Reads, Rollout, RouteTable,
    Schedule, Selectors, Step, StickyBy, Writes,
};
use crate::classify::Verb;

const API_VERSION: &str = "skewgate.io/v1alpha1";
const DEFAULT_FENCE: Duration = Duration::from_secs(10);
/// Pinned writes get `fence - 2s` upstream, so a fence must leave them some time.
const MIN_FENCE: Duration = Duration::from_secs(3);

/// Validates a parsed file. Returns the table, or every problem found.
pub fn validate(file: &Path, raw: FileRouteTable) -> Result<RouteTable, ConfigErrors> {
    let mut v = Validator {
        file,
        errors: Vec::new(),
        backend_names: Vec::new(),
    };
    let table = v.table(raw);
    if v.errors.is_empty() {
        Ok(table)
    } else {
        Err(ConfigErrors(v.errors))
    }
}

struct Validator<'f> {
    file: &'f Path,
    errors: Vec<ConfigError>,
    backend_names: Vec<String>,
}

impl Validator<'_> {
    fn error(&mut self, at: Location, field: impl Into<String>, message: impl Into<String>) {
        self.errors
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
        let rollouts = self.rollouts(raw.reads.value.rollouts);
        RouteTable {
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
        }
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
            let version = b.version.as_ref().and_then(|v| {
                let parsed = parse_minor(&v.value);
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
            Some(id) => id,
            None => {
                let known = self.backend_names.join(", ");
                self.error(
                    name.referenced,
                    field,
                    format!(
                        "unknown backend {:?}; the backends are: {known}",
                        name.value
                    ),
                );
                0
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

    fn pins(&mut self, raw: Vec<Spanned<FilePin>>) -> Vec<Pin> {
        let mut names = HashSet::new();
        let mut out = Vec::new();
        for (i, pin) in raw.into_iter().enumerate() {
            let path = format!("writes.pins[{i}]");
            let p: FilePin = pin.value;
            let name = match &p.name {
                Some(n) => {
                    self.unique_name(&mut names, n, &format!("{path}.name"), "pin");
                    n.value.clone()
                }
                None => path.clone(),
            };
            let selectors = Selectors {
                namespaces: self.namespaces(p.namespaces.as_ref(), &path),
                resources: self.resources(p.resources.as_ref(), &path),
                ..Selectors::default()
            };
            let backend = self.backend_ref(&p.backend, &format!("{path}.backend"));
            let reads = match p.reads.as_ref().map(|r| r.value.as_str()) {
                None | Some("follow") => PinReads::Follow,
                Some("rollout") => PinReads::Rollout,
                Some(other) => {
                    let at = p.reads.as_ref().map_or(pin.referenced, |r| r.referenced);
                    self.error(
                        at,
                        format!("{path}.reads"),
                        format!("{other:?} is neither follow nor rollout"),
                    );
                    PinReads::Follow
                }
            };
            let flip_at = p
                .flip_at
                .as_ref()
                .and_then(|t| self.timestamp(t, &format!("{path}.flipAt")));
            let flip_from = p
                .from
                .as_ref()
                .map(|f| self.backend_ref(f, &format!("{path}.from")));
            if let (Some(from), None) = (&p.from, &p.flip_at) {
                self.error(from.referenced, format!("{path}.from"), "from names the backend a pin moves from at flipAt: add flipAt, or leave from out");
            }
            out.push(Pin {
                name,
                selectors,
                backend,
                reads,
                flip_at,
                flip_from,
            });
        }
        out
    }

    fn rollouts(&mut self, raw: Vec<Spanned<FileRollout>>) -> Vec<Rollout> {
        let mut names = HashSet::new();
        let mut out = Vec::new();
        for (i, r) in raw.into_iter().enumerate() {
            let path = format!("reads.rollouts[{i}]");
            let at = r.referenced;
            let mut r: FileRollout = r.value;
            self.unique_name(&mut names, &r.name, &format!("{path}.name"), "rollout");
            let selectors = self.match_selectors(
                r.match_.take().unwrap_or_default(),
                &format!("{path}.match"),
            );
            let to = self.backend_ref(&r.to, &format!("{path}.to"));
            let sticky_by = match r.sticky_by.as_ref().map(|s| s.value.as_str()) {
                None | Some("namespace") => StickyBy::Namespace,
                Some("user") => StickyBy::User,
                Some("object") => StickyBy::Object,
                Some("client") => StickyBy::Client,
                Some(other) => {
                    let at = r.sticky_by.as_ref().map_or(at, |s| s.referenced);
                    self.error(
                        at,
                        format!("{path}.stickyBy"),
                        format!("{other:?} is not one of namespace, user, object, client"),
                    );
                    StickyBy::Namespace
                }
            };
            let schedule = self.schedule(&r, at, &path);
            let abort = r.abort.as_ref().and_then(|a| self.abort(&a.value, &path));
            out.push(Rollout {
                name: r.name.value,
                selectors,
                to,
                sticky_by,
                schedule,
                abort,
            });
        }
        out
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

    fn schedule(&mut self, r: &FileRollout, at: Location, path: &str) -> Schedule {
        match (&r.percent, &r.start_at, &r.steps) {
            (Some(p), None, None) => Schedule::Fixed(
                self.percent(p, &format!("{path}.percent"))
                    .unwrap_or_default(),
            ),
            (None, Some(start), Some(steps)) => {
                let start_at = self.timestamp(start, &format!("{path}.startAt"));
                let steps = self.steps(steps, path);
                Schedule::Steps {
                    start_at: start_at.unwrap_or(SystemTime::UNIX_EPOCH),
                    steps,
                }
            }
            (None, None, Some(steps)) => {
                self.error(
                    steps.referenced,
                    format!("{path}.steps"),
                    "steps need startAt: add startAt (e.g. 2026-11-22T10:00:00Z) to say when the first step begins",
                );
                Schedule::Fixed(Percent(0))
            }
            (None, Some(start), None) => {
                self.error(
                    start.referenced,
                    format!("{path}.startAt"),
                    "startAt without steps: add steps, e.g. [{percent: 1, hold: 10m}, {percent: 100}]",
                );
                Schedule::Fixed(Percent(0))
            }
            (Some(p), _, _) => {
                self.error(
                    p.referenced,
                    format!("{path}.percent"),
                    "give either percent or startAt with steps, not both",
                );
                Schedule::Fixed(Percent(0))
            }
            (None, None, None) => {
                self.error(
                    at,
                    path,
                    "a rollout needs a share: add percent (0 to 100), or startAt with steps",
                );
                Schedule::Fixed(Percent(0))
            }
        }
    }

    fn steps(&mut self, raw: &Spanned<Vec<Spanned<FileStep>>>, path: &str) -> Vec<Step> {
        if raw.value.is_empty() {
            self.error(
                raw.referenced,
                format!("{path}.steps"),
                "no steps; list at least one",
            );
        }
        let last = raw.value.len().saturating_sub(1);
        let mut out = Vec::new();
        for (i, s) in raw.value.iter().enumerate() {
            let field = format!("{path}.steps[{i}]");
            let FileStep { percent, hold } = &s.value;
            let percent = self.percent(percent, &format!("{field}.percent"));
            let hold = match hold {
                Some(h) => self.duration(h, &format!("{field}.hold")),
                None if i == last => None,
                None => {
                    self.error(
                        s.referenced,
                        format!("{field}.hold"),
                        "every step but the last needs a hold (e.g. hold: 30m); the last holds forever",
                    );
                    None
                }
            };
            out.push(Step {
                percent: percent.unwrap_or_default(),
                hold,
            });
        }
        out
    }

    fn abort(&mut self, a: &FileAbort, path: &str) -> Option<Abort> {
        let ratio = a.error_ratio.value;
        let ratio_ok = ratio > 0.0 && ratio <= 1.0;
        if !ratio_ok {
            self.error(
                a.error_ratio.referenced,
                format!("{path}.abort.errorRatio"),
                format!("{ratio} is not a ratio above 0 and at most 1 (e.g. 0.01 for 1 %)"),
            );
        }
        let window = self.duration(&a.window, &format!("{path}.abort.window"));
        if a.min_requests.value == 0 {
            self.error(
                a.min_requests.referenced,
                format!("{path}.abort.minRequests"),
                "must be at least 1, or a single failure would abort",
            );
        }
        Some(Abort {
            error_ratio: ratio,
            window: window?,
            min_requests: a.min_requests.value,
        })
        .filter(|_| ratio_ok)
    }

    fn match_selectors(&mut self, m: FileMatch, path: &str) -> Selectors {
        Selectors {
            namespaces: self.namespaces(m.namespaces.as_ref(), path),
            resources: self.resources(m.resources.as_ref(), path),
            verbs: self.verbs(m.verbs.as_ref(), path),
            users: self.names(m.users.as_ref(), path, "users"),
            groups: self.names(m.groups.as_ref(), path, "groups"),
            clients: self.list(m.clients.as_ref(), path, "clients", ClientPattern::parse),
        }
    }

    fn names(
        &mut self,
        raw: Option<&TextList>,
        path: &str,
        field: &str,
    ) -> Option<Selector<NamePattern>> {
        self.list(raw, path, field, NamePattern::parse)
    }

    fn namespaces(&mut self, raw: Option<&TextList>, path: &str) -> Option<Selector<NamePattern>> {
        self.list(raw, path, "namespaces", |item| {
            let pattern = NamePattern::parse(item)?;
            match pattern.as_exact() {
                Some(name) if !is_dns1123_label(name) => Err(format!(
                    "{name:?} is not a namespace name (a DNS-1123 label); for a pattern write /regex/"
                )),
                _ => Ok(pattern),
            }
        })
    }

    fn resources(
        &mut self,
        raw: Option<&TextList>,
        path: &str,
    ) -> Option<Selector<ResourcePattern>> {
        self.list(raw, path, "resources", ResourcePattern::parse)
    }

    fn verbs(&mut self, raw: Option<&TextList>, path: &str) -> Option<(VerbSet, VerbSet)> {
        let sel = self.list(raw, path, "verbs", |item| {
            Verb::parse_selectable(item).ok_or_else(|| {
                format!(
                    "unknown verb {item:?}; use get, list, watch, create, update, patch, delete, \
                     deletecollection or proxy"
                )
            })
        })?;
        Some((VerbSet::of(&sel.include), VerbSet::of(&sel.exclude)))
    }

    /// Parses a selector list: each item, with or without `!`, through `parse`.
    fn list<I>(
        &mut self,
        raw: Option<&TextList>,
        path: &str,
        field: &str,
        parse: impl Fn(&str) -> Result<I, String>,
    ) -> Option<Selector<I>> {
        let list = raw?;
        if list.value.is_empty() {
            self.error(
                list.referenced,
                format!("{path}.{field}"),
                "an empty list would match everything; leave the field out to mean that",
            );
        }
        let mut sel = Selector {
            include: Vec::new(),
            exclude: Vec::new(),
        };
        for (i, item) in list.value.iter().enumerate() {
            let (negated, text) = match item.value.strip_prefix('!') {
                Some(rest) => (true, rest),
                None => (false, item.value.as_str()),
            };
            match parse(text) {
                Ok(p) if negated => sel.exclude.push(p),
                Ok(p) => sel.include.push(p),
                Err(msg) => self.error(item.referenced, format!("{path}.{field}[{i}]"), msg),
            }
        }
        Some(sel)
    }

    fn percent(&mut self, raw: &Spanned<f64>, field: &str) -> Option<Percent> {
        let p = raw.value;
        let hundredths = (p * 100.0).round();
        if !(0.0..=100.0).contains(&p) || (p * 100.0 - hundredths).abs() > 1e-6 {
            self.error(
                raw.referenced,
                field,
                format!("{p} is not a percent from 0 to 100 with at most two decimals"),
            );
            return None;
        }
        Some(Percent(hundredths as u16))
    }

    fn duration(&mut self, raw: &Text, field: &str) -> Option<Duration> {
        match humantime::parse_duration(&raw.value) {
            Ok(d) if !d.is_zero() => Some(d),
            _ => {
                self.error(
                    raw.referenced,
                    field,
                    format!(
                        "{:?} is not a duration; write e.g. 10s, 5m, 1h30m",
                        raw.value
                    ),
                );
                None
            }
        }
    }

    fn timestamp(&mut self, raw: &Text, field: &str) -> Option<SystemTime> {
        match humantime::parse_rfc3339(&raw.value) {
            Ok(t) => Some(t),
            Err(_) => {
                self.error(
                    raw.referenced,
                    field,
                    format!(
                        "{:?} is not an RFC 3339 time in UTC; write e.g. 2026-11-22T10:00:00Z",
                        raw.value
                    ),
                );
                None
            }
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

/// `v1.30` or `1.30` as (1, 30).
fn parse_minor(s: &str) -> Option<(u32, u32)> {
    let s = s.strip_prefix('v').unwrap_or(s);
    let (major, minor) = s.split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
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
