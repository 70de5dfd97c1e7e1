//! One request through the rooms, in named phases over one per-request context (`Ctx`): decide
//! (classify, steer; here), forward (admission, URI and headers, the update guard, the send with
//! its deadline: `forward.rs`) and respond (the one place where the outcome is counted and an error
//! becomes a `Status`: `respond.rs`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use http::header::{self, HeaderValue};
use http::{Method, Request, Response};

use super::Proxy;
use super::access_log::AccessRecord;
use super::body::ProxyBody;
use super::context::{Caller, Ctx, Decided};
use super::discovery::{Merge, discovery_path, merged_discovery};
use super::forward::forward;
use super::forwarding::forwarded_for;
use super::limits::ClientLimit;
use super::request_body::Incoming;
use super::respond::respond;
use super::routing::Routing;
use super::wire::ConnectionPolicy;
use crate::classify::{Client, classify};
use crate::identity::{ClientKey, Identity, VerifiedClient, token_identity};
use crate::metrics::Metrics;
use crate::steer::{Class, Clock, Decision, SteerRequest, object_key};

/// What the requests of one client connection share.
pub(crate) struct ClientConn {
    pub proxy: Arc<Proxy>,
    pub remote: SocketAddr,
    /// The client, when its certificate was verified.
    pub client: Option<Arc<VerifiedClient>>,
    /// The client's address as an X-Forwarded-For value, formatted once.
    pub forwarded_for: HeaderValue,
    /// What the edge holds the connection's client to, told of its requests.
    pub policy: Box<dyn ConnectionPolicy>,
    /// Where the client's requests in flight are counted (`None`: no limit).
    pub limit: Option<Arc<ClientLimit>>,
}

impl ClientConn {
    /// The context of a connection from `remote` (`client`: its verified identity), kept by
    /// `policy`.
    pub(crate) fn new(
        proxy: Arc<Proxy>,
        remote: SocketAddr,
        client: Option<Arc<VerifiedClient>>,
        policy: Box<dyn ConnectionPolicy>,
    ) -> ClientConn {
        let key = ClientKey::of(client.as_deref().map(|c| &c.identity), remote).hash();
        ClientConn {
            limit: proxy.limits.client(key),
            proxy,
            remote,
            client,
            forwarded_for: forwarded_for(remote),
            policy,
        }
    }
}

/// Serves one request, begun at `start`.
///
/// Not an async fn, nor are `forward` and `send`: an async fn holds its arguments twice (as passed,
/// and as its body's own variables). An async block holds what it captures once. The request's head
/// is boxed (`upstream::Head`): the future is 1,240 bytes, 2,592 before this and the first frame
/// of a body held as data (`-Zprint-type-sizes`).
pub(crate) fn handle(
    peer: Arc<ClientConn>,
    req: Request<Incoming>,
    start: Instant,
) -> impl Future<Output = Response<ProxyBody>> {
    let (parts, body) = req.into_parts();
    // Boxed once here, and moved on as a pointer (`upstream::Head`).
    let mut parts = Box::new(parts);
    async move {
        let proxy = &*peer.proxy;
        let routing = proxy.routing_for_request();
        let caller = Caller {
            remote: peer.remote,
            identity: peer.client.as_deref().map(|c| &c.identity),
            forwarded: peer.client.as_deref().map(|c| &c.forwarded),
            forwarded_for: &peer.forwarded_for,
            limit: peer.limit.as_ref(),
        };
        let mut ctx = decide(proxy.deciding(), &routing, caller, &mut parts, start);
        let request = &ctx.request;
        ctx.access = AccessRecord::start(
            proxy.settings.access_log,
            peer.remote,
            peer.client.as_ref(),
            &parts,
            routing.steering.table(),
            request.decision,
            start,
        );
        let tracker = routing.track(&request.decision, request.verb, request.long_running, start);
        let outcome = forward(proxy.forwarding(), &mut ctx, (parts, body), tracker).await;
        if let Err(e) = &outcome
            && e.is_client_fault()
            && let Some(hold) = peer.policy.probation()
        {
            tokio::time::sleep(hold).await;
        }
        let resp = respond(proxy.answering(), &mut ctx, &*peer.policy, outcome);
        peer.policy.answered(ctx.request.long_running);
        resp
    }
}

/// What of the process the decide phase reads, and no more (as `forward::Forwarding`): the clock
/// a rollout's schedule is read by, and the metrics of fallbacks. One pointer, which only these
/// open.
#[derive(Clone, Copy)]
struct Deciding<'a>(&'a Proxy);

impl Proxy {
    /// What the decide phase reads of the pipeline.
    fn deciding(&self) -> Deciding<'_> {
        Deciding(self)
    }
}

impl<'a> Deciding<'a> {
    fn clock(self) -> &'a dyn Clock {
        &*self.0.settings.clock
    }

    fn metrics(self) -> &'a Metrics {
        &self.0.metrics
    }
}

/// Classifies the request and steers it to a backend: the request's context, its access record
/// not made yet.
fn decide<'r>(
    proxy: Deciding<'_>,
    routing: &'r Routing,
    caller: Caller<'r>,
    parts: &mut http::request::Parts,
    start: Instant,
) -> Ctx<'r> {
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
    let clock = proxy.clock();
    let mut decision = routing
        .steering
        .decide_reading(&req, || clock.now(), routing);
    let guard = routing.steering.guard(&req);
    let share = routing.steering.share(&req);
    let reader = guard.map(|_| routing.steering.reader(&req, || clock.now(), routing));
    let client = req.client.version;
    let object = (decision.class == Class::Write).then(|| object_key(&info));
    let merge = (!info.is_resource && parts.method == Method::GET)
        .then(|| discovery_path(parts.uri.path()))
        .flatten()
        .and_then(|path| merged_discovery(routing.discovery().as_deref(), path));
    // A group/version's discovery and OpenAPI documents come from the backend merged discovery
    // took them from, so that what kubectl reads about a kind matches where its requests go.
    // Not for a component newer than that backend (the version-skew policy): its request goes
    // where its decision sends it.
    let mut merge = merge;
    if let Some(Merge::Source(b) | Merge::SourceAnswer(b, _)) = &merge {
        if routing.steering.serves_component(*b, &req.client) {
            decision.backend = *b;
        } else {
            merge = None;
        }
    }
    count(proxy.metrics(), routing, &decision);
    Ctx {
        routing,
        caller,
        request: Decided {
            start,
            decision,
            verb: info.verb,
            long_running: info.is_long_running(),
            safe: parts.method == Method::GET || parts.method == Method::HEAD,
            object,
            merge,
            upgrade: parts.headers.get(header::UPGRADE).cloned(),
            guard,
            share,
            reader,
            client,
            resource: routing.resource_slot(&info),
        },
        access: None,
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
fn count(metrics: &Metrics, routing: &Routing, decision: &Decision) {
    routing.count_decision(decision);
    if let Some(s) = &decision.skew {
        metrics
            .skew_policy
            .with_label_values(&[s.component.name(), s.step.as_str()])
            .inc();
    }
    if let Some(from) = decision.fallback_from {
        routing.note_fallback(decision.backend);
        let t = routing.table();
        metrics
            .fallbacks
            .with_label_values(&[t.backend_name(from), t.backend_name(decision.backend)])
            .inc();
    }
}
