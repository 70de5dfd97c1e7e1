//! One request through the rooms: classify, steer, pick an endpoint, forward, stream the answer.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::{PathAndQuery, Scheme};
use http::{Method, Request, Response, StatusCode, Uri};
use hyper::body::Incoming;

use super::Proxy;
use super::body::ProxyBody;
use super::discovery::{DiscoveryPath, discovery_path};
use super::limits::{ClientKey, ClientPermit};
use super::listener::note_client_fault;
use super::request_body::ClientBody;
use super::routing::Routing;
use super::status::{ProxyError, status_response};
use super::upgrade;
use crate::classify::{Client, classify};
use crate::config::BackendId;
use crate::identity::{Identity, forward_identity};
use crate::steer::{Class, Decision, Reason, SteerRequest, WriteTicket, backend_key, object_key};
use crate::upstream::{BackendPool, Credential, EndpointPool, UpstreamError, send};

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// Headers that describe one connection, not the request: never forwarded (RFC 9110 7.6.1).
const HOP_BY_HOP: [HeaderName; 6] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
];

/// Serves one request.
pub async fn handle(
    proxy: Arc<Proxy>,
    remote: SocketAddr,
    identity: Option<Arc<Identity>>,
    req: Request<Incoming>,
) -> Response<ProxyBody> {
    let start = Instant::now();
    let routing = proxy.routing();
    let (mut parts, body) = req.into_parts();
    let safe = parts.method == Method::GET || parts.method == Method::HEAD;
    // Exec, attach and port-forward ask HTTP/1.1 to switch protocols.
    let upgrade = parts.headers.get(header::UPGRADE).cloned();
    let groups = identity
        .as_ref()
        .map(|i| i.group_refs())
        .unwrap_or_default();
    let (mut decision, verb, long_running, object, merge) = {
        let info = classify(parts.method.as_str(), parts.uri.path(), parts.uri.query());
        let ua = parts
            .headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok());
        let req = SteerRequest {
            info: &info,
            user: identity.as_ref().map_or("", |i| i.user.as_str()),
            groups: &groups,
            client: Client::from_user_agent(ua),
        };
        let decision = routing
            .steering
            .decide(&req, proxy.settings.clock.now(), &*routing);
        let object = (decision.class == Class::Write).then(|| object_key(&info));
        let merge = (!info.is_resource && parts.method == Method::GET)
            .then(|| discovery_path(parts.uri.path()))
            .flatten()
            .and_then(|path| merged_discovery(&routing, path));
        (decision, info.verb, info.is_long_running(), object, merge)
    };
    // A group/version's discovery and OpenAPI documents come from the backend merged discovery
    // took them from, so that what kubectl reads about a kind matches where its requests go.
    if let Some(Merge::Source(b)) = merge {
        decision.backend = b;
    }
    routing.count_decision(&decision);
    if let Some(from) = decision.fallback_from {
        let t = routing.table();
        proxy
            .metrics
            .fallbacks
            .with_label_values(&[t.backend_name(from), t.backend_name(decision.backend)])
            .inc();
    }
    let mut tracker = routing.track(&decision, verb, long_running, start);
    let backend = &routing.backends[decision.backend];
    let answer = |resp: Response<ProxyBody>| {
        routing.count_response(&decision, verb, resp.status().as_u16());
        resp
    };
    if !long_running {
        match admit_client(&proxy, identity.as_deref(), remote).await {
            Ok(permit) => tracker.hold(permit),
            Err(why) => {
                let code = StatusCode::TOO_MANY_REQUESTS;
                return answer(status_response(code, "TooManyRequests", &why, true));
            }
        }
    }
    let Some(endpoint) = backend.pick() else {
        proxy
            .metrics
            .upstream_errors
            .with_label_values(&[backend.name.as_str(), "unavailable"])
            .inc();
        return answer(
            ProxyError::NoEndpoint {
                backend: backend.name.clone(),
                why: backend.unavailable_reason(),
            }
            .into_response(),
        );
    };

    // A write of a pin inside its fence waits for the fence to end.
    if let Reason::Fenced { until } = decision.reason
        && let Err(resp) = hold_until(&proxy, &routing, &decision, until, parts.uri.query()).await
    {
        return answer(resp);
    }
    // A pinned write waits while the same object has writes in flight on another backend.
    let _ticket = match object {
        Some(key) => match admit_write(&proxy, &routing, &decision, key, parts.uri.query()).await {
            Ok(ticket) => Some(ticket),
            Err(resp) => return answer(resp),
        },
        None => None,
    };
    let merged_answer = merge.and_then(|m| MergedAnswer::take(m, &mut parts.headers));
    prepare_headers(&mut parts.headers, remote);
    forward_identity(
        &proxy.settings.identity_headers,
        &mut parts.headers,
        identity.as_deref(),
    );
    let credential = credential_of(identity.as_deref(), &parts.headers);
    if let Some(protocol) = upgrade {
        let upgrade = Upgrade {
            credential,
            protocol,
            safe,
        };
        let resp = forward_upgrade(&proxy, backend, endpoint, upgrade, parts, body).await;
        return answer(resp);
    }
    parts.uri = match upstream_uri(&parts.uri, endpoint) {
        Ok(u) => u,
        Err(error) => return answer(upstream_failed(&backend.name, error, safe)),
    };
    let head = Request::from_parts(parts, ());
    let (mut body, client_fault) = ClientBody::new(body, proxy.settings.identity_headers.clone());
    if let Err(e) = body.check_arrived().await {
        note_client_fault(
            &proxy,
            ClientKey::of(identity.as_deref(), remote).hash(),
            remote,
        );
        return answer(body_failed(&e, remote));
    }

    let sent = if long_running {
        send(endpoint, credential, head, body).await
    } else {
        // Every pinned write gets at most fence - 2s upstream, so that when a fence ends no replica
        // is still waiting on a write to the old backend.
        let limit = match decision.class {
            Class::Write => proxy.settings.response_timeout.min(
                routing
                    .table()
                    .writes
                    .fence
                    .saturating_sub(Duration::from_secs(2)),
            ),
            Class::Read => proxy.settings.response_timeout,
        };
        match tokio::time::timeout(limit, send(endpoint, credential, head, body)).await {
            Ok(r) => r,
            Err(_) => Err(UpstreamError::Timeout),
        }
    };
    // A request whose own body failed (bad chunked framing, the client reset or gone) failed by the
    // client's doing: it counts against no backend and no rollout.
    let client_failed = match &sent {
        Err(e) => e.is_client_error() || client_fault.happened(),
        Ok(_) => false,
    };
    if !client_failed {
        routing.record_outcome(
            &decision,
            sent.as_ref().map_or(true, |r| r.status().is_server_error()),
        );
    }
    match sent {
        Err(error) if client_failed => {
            note_client_fault(
                &proxy,
                ClientKey::of(identity.as_deref(), remote).hash(),
                remote,
            );
            answer(client_failed_response(error, remote, safe))
        }
        Ok(resp) => {
            if let Some(m) = &merged_answer
                && resp.status() == StatusCode::OK
                && let Some(merged) = routing
                    .discovery()
                    .and_then(|d| d.respond(m.path, m.accept.as_ref(), m.if_none_match.as_ref()))
            {
                return answer(merged);
            }
            let (mut head, body) = resp.into_parts();
            strip_hop_by_hop(&mut head.headers);
            let stop = long_running.then(|| routing.long_running_stop(&decision));
            let body = ProxyBody::upstream(body, long_running, stop).with_tracker(tracker);
            answer(Response::from_parts(head, body))
        }
        Err(error) => {
            proxy
                .metrics
                .upstream_errors
                .with_label_values(&[backend.name.as_str(), error.reason()])
                .inc();
            tracing::debug!(backend = %backend.name, %error, "upstream request failed");
            answer(upstream_failed(&backend.name, error, safe))
        }
    }
}

/// The client's place among its requests in flight (after waiting its turn when it has too many),
/// or why there is none.
async fn admit_client(
    proxy: &Proxy,
    identity: Option<&Identity>,
    remote: SocketAddr,
) -> Result<Option<ClientPermit>, String> {
    let client = ClientKey::of(identity, remote);
    proxy.limits.acquire(client).await.map_err(|_| {
        format!(
            "skewgate: {client} has {} requests in flight, the most one client may have, and as \
             many waiting; retry",
            proxy.limits.limit()
        )
    })
}

/// A client with neither a verified certificate nor a token reaches the apiserver with no
/// credentials at all, so that the apiserver's own anonymous policy decides about it.
fn credential_of(identity: Option<&Identity>, headers: &HeaderMap) -> Credential {
    if identity.is_some() || headers.contains_key(header::AUTHORIZATION) {
        Credential::FrontProxy
    } else {
        Credential::Anonymous
    }
}

/// How an upgrade request goes upstream.
struct Upgrade {
    credential: Credential,
    protocol: HeaderValue,
    safe: bool,
}

/// Exec, attach and port-forward: tunnelled on a connection of their own.
async fn forward_upgrade(
    proxy: &Proxy,
    backend: &BackendPool,
    endpoint: &EndpointPool,
    upgrade: Upgrade,
    parts: http::request::Parts,
    body: Incoming,
) -> Response<ProxyBody> {
    // The tunnel carries no request body: one announced would leave the apiserver waiting.
    if !http_body::Body::is_end_stream(&body) {
        return status_response(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "skewgate: an upgrade request (exec, attach, port-forward) carries no body",
            false,
        );
    }
    let tls = endpoint.tls(upgrade.credential);
    let head_timeout = proxy.settings.response_timeout;
    match upgrade::tunnel(endpoint, tls, parts, upgrade.protocol, head_timeout).await {
        Ok(resp) => resp,
        Err(error) => upstream_failed(&backend.name, error, upgrade.safe),
    }
}

/// The request's URI as the endpoint is asked for it.
fn upstream_uri(uri: &Uri, endpoint: &EndpointPool) -> Result<Uri, UpstreamError> {
    let path = uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    let mut parts = http::uri::Parts::default();
    parts.scheme = Some(if endpoint.endpoint.tls {
        Scheme::HTTPS
    } else {
        Scheme::HTTP
    });
    parts.authority = Some(endpoint.authority.clone());
    parts.path_and_query = Some(path);
    Uri::from_parts(parts)
        .map_err(|e| UpstreamError::Protocol(format!("cannot build the upstream URI: {e}")))
}

fn upstream_failed(backend: &str, error: UpstreamError, safe: bool) -> Response<ProxyBody> {
    ProxyError::Upstream {
        backend: backend.to_owned(),
        error,
        safe,
    }
    .into_response()
}

/// A failure the client caused: headers too large (431), or its own body that failed (400).
fn client_failed_response(
    error: UpstreamError,
    remote: SocketAddr,
    safe: bool,
) -> Response<ProxyBody> {
    if error.is_client_error() {
        return upstream_failed("", error, safe);
    }
    body_failed(&error, remote)
}

/// 400 for a request whose body could not be read.
fn body_failed(error: &dyn std::fmt::Display, remote: SocketAddr) -> Response<ProxyBody> {
    tracing::debug!(%remote, %error, "the client's request body failed");
    status_response(
        StatusCode::BAD_REQUEST,
        "BadRequest",
        "skewgate: the request body could not be read (malformed framing, or the client stopped sending it)",
        false,
    )
}

/// A discovery document answered merged once the apiserver has let the client read it: the
/// client's `Accept` and `If-None-Match`, the latter kept from the apiserver (its copy, or a 304 for
/// it, is not what the client gets).
struct MergedAnswer {
    path: DiscoveryPath<'static>,
    accept: Option<HeaderValue>,
    if_none_match: Option<HeaderValue>,
}

impl MergedAnswer {
    fn take(merge: Merge, headers: &mut HeaderMap) -> Option<MergedAnswer> {
        let Merge::Answer(path) = merge else {
            return None;
        };
        Some(MergedAnswer {
            path,
            accept: headers.get(header::ACCEPT).cloned(),
            if_none_match: headers.remove(header::IF_NONE_MATCH),
        })
    }
}

/// What merged discovery does with a discovery request.
enum Merge {
    /// Sent to this backend (a group/version's documents).
    Source(BackendId),
    /// Answered with the merged document once the apiserver has answered 200.
    Answer(DiscoveryPath<'static>),
}

fn merged_discovery(routing: &Routing, path: DiscoveryPath<'_>) -> Option<Merge> {
    match path {
        DiscoveryPath::GroupVersion { group, version } => routing
            .discovery()?
            .source(group, version)
            .map(Merge::Source),
        DiscoveryPath::Root { core } => Some(Merge::Answer(DiscoveryPath::Root { core })),
        DiscoveryPath::OpenApiIndex => Some(Merge::Answer(DiscoveryPath::OpenApiIndex)),
    }
}

/// Admits a write to the ledger, waiting up to the request's own `timeout` (or `writes.fence`, if
/// shorter) for the object's writes on another backend; past that, 429 and nothing is sent.
async fn admit_write(
    proxy: &Proxy,
    routing: &Routing,
    decision: &Decision,
    key: u64,
    query: Option<&str>,
) -> Result<WriteTicket, Response<ProxyBody>> {
    let table = routing.table();
    let backend = table.backend_name(decision.backend);
    let mut wait = table.writes.fence;
    if let Some(t) = request_timeout(query) {
        wait = wait.min(t);
    }
    let deadline = tokio::time::Instant::now() + wait;
    let started = std::time::Instant::now();
    let rule = decision.rule_name(table);
    let ledger = proxy.writes.clone();
    let admit = ledger.admit(key, backend_key(backend), deadline);
    tokio::pin!(admit);
    // Most writes are admitted at once; only those that wait show in the gauge.
    let first = futures_util::FutureExt::now_or_never(admit.as_mut());
    let result = match first {
        Some(r) => r,
        None => {
            let _held = Held::new(proxy.metrics.writes_held.with_label_values(&[rule]));
            admit.await
        }
    };
    match result {
        Ok((ticket, waited)) => {
            if waited {
                proxy
                    .metrics
                    .pin_move_wait
                    .observe(started.elapsed().as_secs_f64());
            }
            Ok(ticket)
        }
        Err(_) => Err(status_response(
            StatusCode::TOO_MANY_REQUESTS,
            "TooManyRequests",
            &format!(
                "skewgate: writes of this object are moving to backend {backend:?}; earlier writes on the previous backend are still in flight, retry"
            ),
            true,
        )),
    }
}

/// Holds a write until its pin's fence ends (by the proxy's clock); 429 at once when the request's
/// own `timeout` would pass first.
async fn hold_until(
    proxy: &Proxy,
    routing: &Routing,
    decision: &Decision,
    until: SystemTime,
    query: Option<&str>,
) -> Result<(), Response<ProxyBody>> {
    let clock = &proxy.settings.clock;
    let remaining = until.duration_since(clock.now()).unwrap_or(Duration::ZERO);
    let rule = decision.rule_name(routing.table());
    if request_timeout(query).is_some_and(|t| t < remaining) {
        return Err(status_response(
            StatusCode::TOO_MANY_REQUESTS,
            "TooManyRequests",
            &format!(
                "skewgate: pin {rule:?} is moving; its writes are held for {}s more",
                remaining.as_secs() + 1
            ),
            true,
        ));
    }
    let _held = Held::new(proxy.metrics.writes_held.with_label_values(&[rule]));
    // Polls the clock rather than sleeping the whole hold, so a clock that jumps is followed.
    while clock.now() < until {
        let left = until.duration_since(clock.now()).unwrap_or(Duration::ZERO);
        tokio::time::sleep(left.min(Duration::from_millis(50))).await;
    }
    Ok(())
}

/// Counts a write in `skewgate_writes_held` while it lives (also when the client gives up).
struct Held(prometheus::IntGauge);

impl Held {
    fn new(gauge: prometheus::IntGauge) -> Held {
        gauge.inc();
        Held(gauge)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The request's `timeout` query parameter (a Go duration such as `30s`), if any.
fn request_timeout(query: Option<&str>) -> Option<std::time::Duration> {
    let (_, value) = form_urlencoded::parse(query?.as_bytes()).find(|(k, _)| k == "timeout")?;
    humantime::parse_duration(&value).ok()
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Headers named in Connection are hop-by-hop too.
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
    // `te: trailers` is the one TE value HTTP/2 allows; anything else goes.
    if headers.get(header::TE).is_some_and(|v| v != "trailers") {
        headers.remove(header::TE);
    }
}

fn prepare_headers(headers: &mut HeaderMap, remote: SocketAddr) {
    strip_hop_by_hop(headers);
    // The upstream request carries its authority in the URI.
    headers.remove(header::HOST);
    // X-Forwarded-For: the existing list, then this client; formatted on the stack.
    let existing_len = headers.get(&X_FORWARDED_FOR).map_or(0, |v| v.len());
    if existing_len > 400 {
        let value = format!(
            "{}, {}",
            String::from_utf8_lossy(
                headers
                    .get(&X_FORWARDED_FOR)
                    .map_or(&[][..], |v| v.as_bytes())
            ),
            remote.ip()
        );
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert(X_FORWARDED_FOR.clone(), v);
        }
        return;
    }
    let mut buf = [0u8; 512];
    let mut w = std::io::Cursor::new(&mut buf[..]);
    if let Some(existing) = headers.get(&X_FORWARDED_FOR) {
        let _ = std::io::Write::write_all(&mut w, existing.as_bytes());
        let _ = std::io::Write::write_all(&mut w, b", ");
    }
    if std::io::Write::write_fmt(&mut w, format_args!("{}", remote.ip())).is_ok() {
        let n = w.position() as usize;
        if let Ok(v) = HeaderValue::from_bytes(&buf[..n]) {
            headers.insert(X_FORWARDED_FOR.clone(), v);
        }
    }
}
