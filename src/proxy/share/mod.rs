//! Shared watches (`shareWatches` in the route file): clients whose watches are the same (backend,
//! path, selectors, encoding: `key.rs`) are served from one upstream watch (`hub.rs`, `run.rs`),
//! each from its own resourceVersion, with its own bookmarks and timeout (`stream.rs`), once the
//! apiserver's authorizer has said it may watch that (`authorize.rs`). What a hub cannot serve
//! exactly as the apiserver would (a start it does not reach back to, initial state, other
//! credentials) goes to the apiserver on its own, as every watch did before.

mod authorize;
pub(crate) mod events;
#[cfg(feature = "fuzzing")]
pub(crate) mod fuzzing;
mod hub;
mod key;
mod run;
mod stream;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, Response, StatusCode};
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::body::ProxyBody;
use crate::classify::classify;
use crate::identity::Identity;
use crate::metrics::Metrics;
use crate::upstream::{EndpointPool, ResponseBudget};
use hub::{Hub, Start};
pub(crate) use key::Own;

/// The distinct watch a watch of `path?query` by a client with `headers` to `backend` is, as
/// `/debug/shares` names it; or why it would go to the apiserver on its own.
pub fn describe_watch(
    backend: &str,
    path: &str,
    query: Option<&str>,
    headers: &http::HeaderMap,
) -> Result<String, &'static str> {
    key::key(backend, path, query, headers)
        .map(|(k, _)| k.describe())
        .map_err(Own::as_str)
}
use key::{Ask, Key};
pub(crate) use stream::SharedStream;

/// How long a client waits for a new hub's upstream watch to begin before it watches on its own.
const START_WAIT: Duration = Duration::from_secs(6);

/// How long after a shared watch could not begin (skewgate's user may not watch it, say) its
/// clients watch on their own without trying again.
const FAILED_FOR: Duration = Duration::from_secs(30);

/// The hubs open now, by key.
pub(crate) struct Shares {
    hubs: std::sync::Mutex<HashMap<Key, Arc<Hub>>>,
    /// The distinct watches whose upstream watch could not begin lately, and when.
    failed: std::sync::Mutex<HashMap<Key, std::time::Instant>>,
    budget: Arc<ResponseBudget>,
    metrics: Arc<Metrics>,
}

/// What became of a watch a rule matched.
pub(crate) enum Served {
    /// Joined to a shared watch: the client's response.
    Joined(Box<Response<ProxyBody>>),
    /// To the apiserver on its own, and why.
    Own(&'static str),
    /// The apiserver's authorizer refused the client: its 403.
    Denied(Box<super::status::Refused>),
}

/// One watch a rule matched, as the share phase reads it.
pub(crate) struct Watch<'a> {
    pub rule: &'a str,
    pub backend: &'a str,
    pub endpoint: &'a Arc<EndpointPool>,
    pub who: Option<&'a Identity>,
    pub head: &'a http::request::Parts,
    pub stop: Option<WaitForCancellationFutureOwned>,
}

impl Shares {
    pub(crate) fn new(budget: Arc<ResponseBudget>, metrics: Arc<Metrics>) -> Shares {
        Shares {
            hubs: std::sync::Mutex::new(HashMap::new()),
            failed: std::sync::Mutex::new(HashMap::new()),
            budget,
            metrics,
        }
    }

    fn hubs(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Arc<Hub>>> {
        self.hubs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Shared watches open now (`Key::describe`), and their clients.
    pub(crate) fn open(&self) -> Vec<(String, usize)> {
        let mut out: Vec<(String, usize)> = self
            .hubs()
            .values()
            .map(|h| (h.key.describe(), h.members()))
            .collect();
        out.sort();
        out
    }

    fn remove(&self, hub: &Arc<Hub>) {
        let mut hubs = self.hubs();
        if hubs.get(&hub.key).is_some_and(|h| Arc::ptr_eq(h, hub)) {
            hubs.remove(&hub.key);
            self.metrics.shared_watches.dec();
        }
    }

    /// Serves a watch a rule matched: joined to its shared watch, refused as the apiserver would
    /// refuse it, or left to go on its own.
    pub(crate) async fn serve(self: &Arc<Self>, mut w: Watch<'_>) -> Served {
        let served = self.try_serve(w.rule, &mut w).await;
        let served = match served {
            Ok(joined) => return joined,
            Err(reason) => reason,
        };
        if let Served::Own(reason) = served {
            self.metrics
                .shared_watch_own
                .with_label_values(&[w.rule, reason])
                .inc();
        }
        served
    }

    async fn try_serve(self: &Arc<Self>, rule: &str, w: &mut Watch<'_>) -> Result<Served, Served> {
        let head = w.head;
        let (key, ask) = key::key(w.backend, head.uri.path(), head.uri.query(), &head.headers)
            .map_err(|own| Served::Own(own.as_str()))?;
        let who = w.who.ok_or(Served::Own(Own::Credentials.as_str()))?;
        if self.failed_lately(&key) {
            return Err(Served::Own("upstream"));
        }
        self.authorized(rule, who, head, w.endpoint).await?;
        let (hub, new) = self.hub(key, ask, w.endpoint);
        let Some(headers) = started(&hub).await else {
            self.note_failed(&hub.key);
            return Err(Served::Own("upstream"));
        };
        let joined = hub.join(ask).ok_or(Served::Own("behind"))?;
        let from = if new { "new" } else { "live" };
        self.metrics
            .shared_watch_joins
            .with_label_values(&[rule, from])
            .inc();
        self.metrics
            .shared_watch_replayed
            .inc_by(joined.replayed as u64);
        let stream = SharedStream::new(
            hub,
            joined,
            (self.budget.clone(), self.metrics.clone()),
            (ask.timeout, ask.bookmarks),
            w.stop.take(),
        );
        Ok(Served::Joined(Box::new(response(&headers, stream))))
    }

    /// Whether the apiserver's authorizer lets `who` watch what `head` asks: `Ok`, the 403 it
    /// would answer, or `Own` when it could not be asked.
    async fn authorized(
        &self,
        rule: &str,
        who: &Identity,
        head: &http::request::Parts,
        ep: &Arc<EndpointPool>,
    ) -> Result<(), Served> {
        let info = classify("GET", head.uri.path(), head.uri.query());
        let review = authorize::review(who, &info, head.uri.query());
        match authorize::ask(ep, review).await {
            Ok(authorize::Verdict::Allowed) => Ok(()),
            Ok(authorize::Verdict::Denied(reason)) => {
                self.metrics
                    .shared_watch_denied
                    .with_label_values(&[rule])
                    .inc();
                Err(Served::Denied(Box::new(super::status::Refused {
                    message: authorize::forbidden_message(&who.user, &info, &reason),
                    group: info.api_group.to_string(),
                    resource: info.resource.to_string(),
                    name: info.name.to_string(),
                    protobuf: prefers_protobuf(&head.headers),
                })))
            }
            Err(why) => {
                tracing::warn!(%why, "skewgate could not ask the apiserver's authorizer; the watch goes on its own");
                Err(Served::Own("unauthorized"))
            }
        }
    }

    /// Whether the upstream watch of `key` could not begin within `FAILED_FOR`.
    fn failed_lately(&self, key: &Key) -> bool {
        let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        failed.retain(|_, at| at.elapsed() < FAILED_FOR);
        failed.contains_key(key)
    }

    pub(super) fn note_failed(&self, key: &Key) {
        let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        failed.insert(key.clone(), std::time::Instant::now());
    }

    /// The open hub of `key`, or a new one begun at the client's start.
    fn hub(self: &Arc<Self>, key: Key, ask: Ask, ep: &Arc<EndpointPool>) -> (Arc<Hub>, bool) {
        let mut hubs = self.hubs();
        if let Some(h) = hubs.get(&key)
            && !h.lock().ended
        {
            return (h.clone(), false);
        }
        let hub = Arc::new(Hub::new(key.clone(), ask.start, self.budget.clone()));
        if hubs.insert(key, hub.clone()).is_none() {
            self.metrics.shared_watches.inc();
        }
        tokio::spawn(run::run(self.clone(), hub.clone(), ep.clone()));
        (hub, true)
    }
}

/// Whether the client's `Accept` puts Kubernetes' protobuf before JSON (as a kubelet's does), so
/// that the apiserver would answer it in protobuf. A first choice without `q` weights, as
/// client-go sends it.
fn prefers_protobuf(headers: &http::HeaderMap) -> bool {
    headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .and_then(|a| a.split(',').next())
        .map(|first| first.split(';').next().unwrap_or_default().trim())
        == Some("application/vnd.kubernetes.protobuf")
}

/// The head the hub's watch began with, once it has; `None` if it could not begin in time.
async fn started(hub: &Hub) -> Option<Arc<http::HeaderMap>> {
    let mut rx = hub.start.subscribe();
    let wait = rx.wait_for(|s| !matches!(s, Start::Pending));
    match tokio::time::timeout(START_WAIT, wait).await {
        Ok(Ok(s)) => match &*s {
            Start::Up(headers) => Some(headers.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// The client's response: the apiserver's head as the hub's watch got it, with an `Audit-Id` of
/// the client's own, and its events.
fn response(headers: &http::HeaderMap, stream: SharedStream) -> Response<ProxyBody> {
    let mut resp = Response::new(ProxyBody::fed(Box::new(stream)));
    *resp.status_mut() = StatusCode::OK;
    *resp.headers_mut() = headers.clone();
    if let Ok(id) = HeaderValue::from_str(&audit_id()) {
        resp.headers_mut().insert("audit-id", id);
    }
    let date = httpdate::fmt_http_date(std::time::SystemTime::now());
    if let Ok(date) = HeaderValue::from_str(&date) {
        resp.headers_mut().insert(http::header::DATE, date);
    }
    resp
}

/// A random UUID (version 4), as the apiserver makes its `Audit-Id`.
fn audit_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let seed = [n.to_le_bytes().as_slice(), &now.to_le_bytes()].concat();
    let v = xxhash_rust::xxh3::xxh3_128(&seed);
    let v = (v & !(0xf << 76) | (0x4 << 76)) & !(0x3 << 62) | (0x2 << 62);
    let h = format!("{v:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}
