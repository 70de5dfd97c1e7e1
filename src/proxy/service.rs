//! One request through the rooms, in phases: decide (classify, steer), admit (the client's limit,
//! a moving pin's fence, the write ledger), forward (URI, headers, the send with its deadline) and
//! respond: the one place where the outcome is counted and an error becomes a `Status`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::{self, HeaderValue};
use http::{Method, Request, Response};

use super::Proxy;
use super::access_log::AccessRecord;
use super::admission::{admit_client, admit_write, last_look, whole_before_the_move};
use super::body::ProxyBody;
use super::discovery::{Merge, MergedAnswer, discovery_path, merged_discovery};
use super::forwarding::{credential_of, prepare_headers, strip_hop_by_hop, upstream_uri};
use super::guard;
use super::limits::{ClientKey, ClientLimit};
use super::offenders::note_client_fault;
use super::rebalance::Goaway;
use super::request_body::{ClientBody, ClientFault, Incoming};
use super::routing::{RequestTracker, Routing};
use super::status::{self, ProxyError};
use super::upgrade::{Upgrade, forward_upgrade};
use crate::classify::{Client, ClientVersion, Verb, classify};
use crate::config::BackendId;
use crate::identity::{ForwardedIdentity, Identity, VerifiedClient, forward_made, token_identity};
use crate::steer::{Class, Decision, SteerRequest, WriteTicket, object_key};
use crate::upstream::{
    BackendPool, Credential, EndpointPool, Head, UpstreamBody, UpstreamError, send,
};

/// What the requests of one client connection share.
pub(crate) struct Peer {
    pub proxy: Arc<Proxy>,
    pub remote: SocketAddr,
    /// The client, when its certificate was verified.
    pub client: Option<Arc<VerifiedClient>>,
    /// The client's address as an X-Forwarded-For value, formatted once.
    pub forwarded_for: HeaderValue,
    pub goaway: Option<Arc<Goaway>>,
    /// Where the client's requests in flight are counted (`None`: no limit).
    pub limit: Option<Arc<ClientLimit>>,
}

/// Serves one request, begun at `start`.
///
/// Not an async fn, nor are `forward` and `send`: an async fn holds its arguments twice (as passed,
/// and as its body's own variables). An async block holds what it captures once. The request's head
/// is boxed (`upstream::Head`): the future is 1,240 bytes, 2,592 before this and the first frame
/// of a body held as data (`-Zprint-type-sizes`).
pub(crate) fn handle(
    peer: Arc<Peer>,
    req: Request<Incoming>,
    start: Instant,
) -> impl Future<Output = Response<ProxyBody>> {
    let (parts, body) = req.into_parts();
    // Boxed once here, and moved on as a pointer (`upstream::Head`).
    let mut parts = Box::new(parts);
    async move {
        super::capacity::request_begun();
        let proxy = &*peer.proxy;
        let routing = proxy.routing_for_request();
        let caller = Caller {
            remote: peer.remote,
            identity: peer.client.as_deref().map(|c| &c.identity),
            forwarded: peer.client.as_deref().map(|c| &c.forwarded),
            forwarded_for: &peer.forwarded_for,
            limit: peer.limit.as_ref(),
        };
        let mut request = decide(proxy, &routing, caller, &mut parts, start);
        let mut access = AccessRecord::start(
            proxy.settings.access_log,
            peer.remote,
            peer.client.as_ref(),
            &parts,
            routing.steering.table(),
            request.decision,
            start,
        );
        let tracker = routing.track(&request.decision, request.verb, request.long_running, start);
        let outcome = forward(
            proxy,
            &routing,
            &mut request,
            caller,
            (parts, body),
            tracker,
            &mut access,
        )
        .await;
        if let Err(e) = &outcome
            && e.is_client_fault()
        {
            super::offenders::wait_out_probation(proxy, caller.identity, caller.remote).await;
        }
        let resp = respond(proxy, &routing, &request, caller, outcome, access);
        if let Some(g) = &peer.goaway
            && g.after_response(proxy.goaway_chance, request.long_running)
        {
            proxy
                .metrics
                .client_goaways
                .with_label_values(&["rebalance"])
                .inc();
        }
        resp
    }
}

/// Who sent the request.
#[derive(Clone, Copy)]
struct Caller<'a> {
    remote: SocketAddr,
    identity: Option<&'a Identity>,
    /// Its identity as header values, made at the handshake.
    forwarded: Option<&'a ForwardedIdentity>,
    /// Its address as an X-Forwarded-For value.
    forwarded_for: &'a HeaderValue,
    limit: Option<&'a Arc<ClientLimit>>,
}

/// What the request is and where it goes.
struct Decided {
    /// When it began.
    start: Instant,
    decision: Decision,
    verb: Verb,
    long_running: bool,
    /// Whether it is safe to repeat (GET, HEAD).
    safe: bool,
    /// The object a write changes (its ledger key).
    object: Option<u64>,
    merge: Option<Merge>,
    /// Exec, attach and port-forward: the protocol they switch to.
    upgrade: Option<HeaderValue>,
    /// The update guard that applies (`guards[i]`), for a full-object update.
    guard: Option<usize>,
    /// Where the same client's reads of the object go, for a guarded update.
    reader: Option<BackendId>,
    /// The client's version, from its User-Agent.
    client: Option<ClientVersion>,
    /// Its resource's slot in the request metrics.
    resource: usize,
}

/// Classifies the request and steers it to a backend.
fn decide(
    proxy: &Proxy,
    routing: &Routing,
    caller: Caller<'_>,
    parts: &mut http::request::Parts,
    start: Instant,
) -> Decided {
    let from_token = token_caller(routing, caller.identity, &parts.headers);
    let identity = caller.identity.or(from_token.as_deref());
    let groups = identity.map(|i| i.group_refs()).unwrap_or_default();
    let info = classify(parts.method.as_str(), parts.uri.path(), parts.uri.query());
    let ua = parts
        .headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok());
    let req = SteerRequest {
        info: &info,
        user: identity.map_or("", |i| i.user.as_str()),
        groups: &groups,
        client: Client::from_user_agent(ua),
    };
    let clock = &*proxy.settings.clock;
    let mut decision = routing
        .steering
        .decide_reading(&req, || clock.now(), routing);
    let guard = routing.steering.guard(&req);
    let reader = guard.map(|_| routing.steering.reader(&req, || clock.now(), routing));
    let client = req.client.version;
    let object = (decision.class == Class::Write).then(|| object_key(&info));
    let merge = (!info.is_resource && parts.method == Method::GET)
        .then(|| discovery_path(parts.uri.path()))
        .flatten()
        .and_then(|path| merged_discovery(routing.discovery().as_deref(), path));
    // A group/version's discovery and OpenAPI documents come from the backend merged discovery
    // took them from, so that what kubectl reads about a kind matches where its requests go.
    if let Some(Merge::Source(b) | Merge::SourceAnswer(b, _)) = &merge {
        decision.backend = *b;
    }
    count(proxy, routing, &decision);
    Decided {
        start,
        decision,
        verb: info.verb,
        long_running: info.is_long_running(),
        safe: parts.method == Method::GET || parts.method == Method::HEAD,
        object,
        merge,
        upgrade: parts.headers.get(header::UPGRADE).cloned(),
        guard,
        reader,
        client,
        resource: routing.resource_slot(&info),
    }
}

/// A bearer-token client's routing identity: the user its token names, when skewgate can read it
/// and some rule looks (identity/token.rs). It is never forwarded as X-Remote-User: the apiserver
/// authenticates the token itself.
fn token_caller(
    routing: &Routing,
    verified: Option<&Identity>,
    headers: &http::HeaderMap,
) -> Option<Arc<Identity>> {
    match verified {
        None if routing.steering.uses_identity() => headers
            .get(header::AUTHORIZATION)
            .and_then(|v| token_identity(v.as_bytes())),
        _ => None,
    }
}

/// Counts a decision, and a fallback with the backend pair it went between.
fn count(proxy: &Proxy, routing: &Routing, decision: &Decision) {
    routing.count_decision(decision);
    if let Some(from) = decision.fallback_from {
        routing.note_fallback(decision.backend);
        let t = routing.table();
        proxy
            .metrics
            .fallbacks
            .with_label_values(&[t.backend_name(from), t.backend_name(decision.backend)])
            .inc();
    }
}

/// Admits the request, sends it upstream and relays the answer, or says why not.
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn would hold its arguments twice"
)]
fn forward(
    proxy: &Proxy,
    routing: &Routing,
    request: &mut Decided,
    caller: Caller<'_>,
    (mut parts, body): (Head, Incoming),
    mut tracker: RequestTracker,
    access: &mut Option<Box<AccessRecord>>,
) -> impl Future<Output = Result<Response<ProxyBody>, ProxyError>> {
    async move {
        let backend = &routing.backends[request.decision.backend.index()];
        super::framing::check(&parts)?;
        let began = (request.object.is_some() && access.is_some()).then(Instant::now);
        let admitted = admit(proxy, routing, request, caller, &parts, &mut tracker).await;
        if let (Some(began), Some(a)) = (began, access.as_mut()) {
            a.set_held(began.elapsed());
        }
        let (endpoint, _ticket) = admitted?;
        let merged_answer = request
            .merge
            .clone()
            .and_then(|m| MergedAnswer::take(m, &mut parts.headers))
            // Boxed: discovery's answers only, and held across the request's awaits.
            .map(Box::new);
        if merged_answer.as_ref().is_some_and(|m| m.is_openapi()) {
            // Its `?hash=` is the merged document's: the source apiserver would redirect it.
            if let Ok(uri) = parts.uri.path().parse() {
                parts.uri = uri;
            }
        }
        prepare_headers(&mut parts.headers, caller.remote, caller.forwarded_for);
        let names = &proxy.settings.identity_headers;
        forward_made(names, &mut parts.headers, caller.forwarded);
        let credential = credential_of(caller.identity, &parts.headers);
        let safe = request.safe;
        if let Some(protocol) = request.upgrade.take() {
            let upgrade = Upgrade {
                credential,
                protocol,
                safe,
            };
            let session = (tracker, access);
            // Boxed, as the guard's check: the rare paths stay out of every request's future.
            let upgrade = forward_upgrade(proxy, backend, endpoint, upgrade, *parts, body, session);
            return Box::pin(upgrade).await;
        }
        parts.uri =
            upstream_uri(&parts.uri, endpoint).map_err(|e| status::upstream(backend, e, safe))?;
        let mut head = parts;
        let (mut body, client_fault) = ClientBody::new(body, names.clone());
        body.check_arrived()
            .await
            .map_err(|_| ProxyError::ClientBody)?;
        whole_before_the_move(proxy, (&request.decision, request.object), &mut body).await?;
        let warning = match request.guard {
            Some(g) => {
                Box::pin(guarded(
                    proxy, routing, request, g, &mut head, &mut body, endpoint, credential,
                ))
                .await?
            }
            None => None,
        };
        last_look(proxy, routing, (&request.decision, request.object))?;
        let deadline = response_deadline(proxy, routing, request);
        let sent = send(endpoint, credential, (head, body), deadline).await;
        let resp = judge(routing, request, backend, sent, &client_fault)?;
        let mut resp = relay(routing, request, merged_answer, resp, tracker);
        if let Some(w) = warning {
            resp.headers_mut().append(header::WARNING, w);
        }
        Ok(resp)
    }
}

/// The update guard's check of a guarded update (`guard`): the `Warning` to answer with, if any.
#[allow(clippy::too_many_arguments)]
async fn guarded(
    proxy: &Proxy,
    routing: &Routing,
    request: &Decided,
    g: usize,
    head: &mut http::request::Parts,
    body: &mut ClientBody,
    endpoint: &Arc<EndpointPool>,
    credential: Credential,
) -> Result<Option<HeaderValue>, ProxyError> {
    let (path, query) = (
        head.uri.path().to_owned(),
        head.uri.query().map(str::to_owned),
    );
    let info = classify("PUT", &path, query.as_deref());
    let update = guard::Update {
        guard: g,
        info: &info,
        client: request.client,
        backend: request.decision.backend,
        reader: request.reader,
    };
    guard::check(proxy, routing, update, head, body, endpoint, credential).await
}

/// Admission, in order: the client's place among its requests in flight, an endpoint of the
/// backend, the end of a moving pin's fence, and the write ledger's ticket for the object.
async fn admit<'r>(
    proxy: &Proxy,
    routing: &'r Routing,
    request: &Decided,
    caller: Caller<'_>,
    parts: &http::request::Parts,
    tracker: &mut RequestTracker,
) -> Result<(&'r Arc<EndpointPool>, Option<WriteTicket>), ProxyError> {
    let backend = &routing.backends[request.decision.backend.index()];
    if !request.long_running {
        tracker.hold(admit_client(proxy, caller.limit, caller.identity, caller.remote).await?);
    }
    let endpoint = backend.pick().ok_or_else(|| ProxyError::NoEndpoint {
        backend: backend.name.clone(),
        why: backend.unavailable_reason(),
    })?;
    // A pinned write waits for its pin's fence to end, then while the same object has writes in
    // flight on another backend.
    let ticket = match request.object {
        Some(key) => {
            let query = parts.uri.query();
            // Boxed: the ledger's wait (624 bytes) is a write's alone, and would make every
            // request's future larger, copied with it.
            let admitted = Box::pin(admit_write(proxy, routing, &request.decision, key, query));
            Some(admitted.await?)
        }
        None => None,
    };
    Ok((endpoint, ticket))
}

/// What the send came to. A request whose own body failed (bad chunked framing, the client reset or
/// gone) failed by the client's doing: it counts against no backend and no rollout; every other
/// outcome counts for the rollout that chose the backend.
fn judge(
    routing: &Routing,
    request: &Decided,
    backend: &BackendPool,
    sent: Result<Response<UpstreamBody>, UpstreamError>,
    client_fault: &ClientFault,
) -> Result<Response<UpstreamBody>, ProxyError> {
    let client_failed = match &sent {
        Err(e) => e.is_client_error() || client_fault.happened(),
        Ok(_) => false,
    };
    if !client_failed {
        let failed = sent.as_ref().map_or(true, |r| r.status().is_server_error());
        routing.record_outcome(&request.decision, failed);
    }
    match sent {
        Ok(resp) => Ok(resp),
        Err(error) if error.is_client_error() => {
            Err(status::upstream_named("", error, request.safe))
        }
        Err(_) if client_failed => Err(ProxyError::ClientBody),
        Err(error) => Err(status::upstream(backend, error, request.safe)),
    }
}

/// The apiserver's answer on its way to the client: merged discovery in place of a discovery
/// document, else its head without hop-by-hop headers and its body streamed, tracked to its end.
fn relay(
    routing: &Routing,
    request: &Decided,
    merged_answer: Option<Box<MergedAnswer>>,
    resp: Response<UpstreamBody>,
    tracker: RequestTracker,
) -> Response<ProxyBody> {
    let merged = merged_answer.and_then(|m| {
        m.answer(
            routing.discovery().as_deref(),
            resp.status(),
            resp.headers(),
        )
    });
    if let Some(merged) = merged {
        return merged.map(ProxyBody::full);
    }
    let (mut head, body) = resp.into_parts();
    strip_hop_by_hop(&mut head.headers);
    let long_running = request.long_running;
    let stop = long_running.then(|| routing.long_running_stop(&request.decision));
    let body = ProxyBody::upstream(body, long_running, stop).with_tracker(tracker);
    Response::from_parts(head, body)
}

/// When the request must have its response head: a request that is not long-running gets it within
/// the response timeout from when it began, and a write within `writes.fence - 2s` from when it is
/// sent at most, so that when a fence ends no replica is still waiting on a write to the old
/// backend. Not from when the write began: one held through a fence (`admission`) would be sent
/// with its time already spent, and cut off after the apiserver took it.
fn response_deadline(proxy: &Proxy, routing: &Routing, request: &Decided) -> Option<Instant> {
    if request.long_running {
        return None;
    }
    let overall = request.start.checked_add(proxy.settings.response_timeout);
    match request.decision.class {
        Class::Write => {
            let fence = routing.table().writes.fence;
            let sent = Instant::now().checked_add(fence.saturating_sub(Duration::from_secs(2)));
            match (overall, sent) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        }
        Class::Read => overall,
    }
}

/// The one place an outcome is counted, and an error logged, counted and answered with a `Status`.
fn respond(
    proxy: &Proxy,
    routing: &Routing,
    request: &Decided,
    caller: Caller<'_>,
    outcome: Result<Response<ProxyBody>, ProxyError>,
    mut access: Option<Box<AccessRecord>>,
) -> Response<ProxyBody> {
    let mut resp = match outcome {
        Ok(resp) => resp,
        Err(error) => {
            if let Some(a) = &mut access {
                a.set_error(error.log_reason());
            }
            if error.is_client_fault() {
                tracing::debug!(remote = %caller.remote, ?error, "the client's request failed");
                let client = ClientKey::of(caller.identity, caller.remote).hash();
                note_client_fault(proxy, client, caller.remote);
            } else if let Some((backend, reason)) = error.upstream_failure() {
                // A backend with no endpoint ready fails the rollout that chose it, as a failed
                // send does (`judge` counts those).
                if matches!(error, ProxyError::NoEndpoint { .. }) {
                    routing.record_outcome(&request.decision, true);
                }
                tracing::debug!(%backend, ?error, "upstream request failed");
                proxy
                    .metrics
                    .upstream_errors
                    .with_label_values(&[backend, reason])
                    .inc();
            }
            error.into_response_noting(|code, reason, message| {
                keep_recent(proxy, routing, request, caller, (code, reason, message));
            })
        }
    };
    let code = resp.status().as_u16();
    routing.count_response(&request.decision, request.verb, request.resource, code);
    if let Some(a) = &mut access {
        a.set_code(code);
    }
    resp.body_mut().with_access(access);
    resp
}

/// Keeps an error the status page lists (`recent::kept`: 429, 431, 502, 503, 504).
fn keep_recent(
    proxy: &Proxy,
    routing: &Routing,
    request: &Decided,
    caller: Caller<'_>,
    (code, reason, message): (u16, &'static str, &str),
) {
    if !super::recent::kept(code) {
        return;
    }
    let answered = super::recent::Answered {
        code,
        reason,
        message: super::recent::cut(message, super::recent::MESSAGE),
        verb: request.verb.as_str(),
        resource: routing.resource_name(request.resource),
        backend: routing
            .table()
            .backend_name(request.decision.backend)
            .to_owned(),
        client: ClientKey::of(caller.identity, caller.remote).to_string(),
    };
    proxy.recent.answered(proxy.settings.clock.now(), answered);
}
