//! The forward phase: admission (the client's limit, an endpoint, a pinned write's fence and
//! ledger), the request made ready for the apiserver (URI, headers, the update guard), the send with
//! its deadline, and the answer judged and relayed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Response;
use http::header::{self, HeaderValue};

use super::Proxy;
use super::admission::admit_client;
use super::body::ProxyBody;
use super::context::{Caller, Ctx, Decided};
use super::discovery::MergedAnswer;
use super::exposure;
use super::fence::{Fence, admit_write, last_look, whole_before_the_move};
use super::forwarding::{credential_of, prepare_headers, strip_hop_by_hop, upstream_uri};
use super::guard::{self, Guarding, InTransit};
use super::limits::ClientLimits;
use super::request_body::{ClientBody, ClientFault, Incoming};
use super::routing::{RequestTracker, Routing};
use super::status::{self, ProxyError};
use super::upgrade::{Upgrade, forward_upgrade};
use crate::classify::classify;
use crate::identity::{IdentityHeaders, forward_made};
use crate::steer::{Class, WriteTicket};
use crate::upstream::{BackendPool, EndpointPool, Head, UpstreamBody, UpstreamError, send};

/// What of the process the forward phase reads, and no more: the fence's view and the guard's,
/// the clients' limits, the identity headers it forwards, and the response timeout. One pointer
/// to the pipeline, which only these open: the request's future holds it across its awaits, and
/// the fence's and the guard's views are made only for the writes and updates that take them.
#[derive(Clone, Copy)]
pub(super) struct Forwarding<'a>(&'a Proxy);

impl Proxy {
    /// What the forward phase reads of the pipeline.
    pub(super) fn forwarding(&self) -> Forwarding<'_> {
        Forwarding(self)
    }
}

impl<'a> Forwarding<'a> {
    fn fence(self) -> Fence<'a> {
        self.0.fence()
    }

    fn guarding(self) -> Guarding<'a> {
        self.0.guarding()
    }

    fn limits(self) -> &'a ClientLimits {
        &self.0.limits
    }

    fn identity_headers(self) -> &'a Arc<IdentityHeaders> {
        &self.0.settings.identity_headers
    }

    fn response_timeout(self) -> Duration {
        self.0.settings.response_timeout
    }

    fn shares(self) -> &'a Arc<super::share::Shares> {
        &self.0.shares
    }

    /// What a write to a newer backend is looked at for (`exposure.rs`).
    fn exposing(self) -> (&'a super::schemas::Schemas, &'a crate::metrics::Metrics) {
        (&self.0.schemas, &self.0.metrics)
    }
}

/// Admits the request, sends it upstream and relays the answer, or says why not.
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn would hold its arguments twice"
)]
pub(super) fn forward<'c>(
    proxy: Forwarding<'c>,
    ctx: &'c mut Ctx<'_>,
    (mut parts, body): (Head, Incoming),
    mut tracker: RequestTracker,
) -> impl Future<Output = Result<Response<ProxyBody>, ProxyError>> + 'c {
    async move {
        let (routing, caller, request, access) = ctx.split();
        let backend = &routing.backends[request.decision.backend.index()];
        super::framing::check(&parts)?;
        let began = (request.object.is_some() && access.is_some()).then(Instant::now);
        let admitted = admit(proxy, (routing, request, caller), &parts, &mut tracker).await;
        if let (Some(began), Some(a)) = (began, access.as_mut()) {
            a.set_held(began.elapsed());
        }
        let (endpoint, _ticket) = admitted?;
        if request.share.is_some() {
            // Boxed, as the guard's check: a shared watch's path stays out of every request's
            // future.
            let shared = Box::pin(shared(proxy, (routing, request, caller), endpoint, &parts));
            let (resp, note) = shared.await;
            if let Some(a) = access.as_mut() {
                a.set_shared(note);
            }
            if let Some(resp) = resp? {
                return Ok(resp.map(|b| b.with_tracker(tracker)));
            }
        }
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
        let names = proxy.identity_headers();
        forward_made(names, &mut parts.headers, caller.forwarded);
        let credential = credential_of(caller.identity, &parts.headers);
        let safe = request.safe;
        if let Some(protocol) = request.upgrade.take() {
            let upgrade = Upgrade {
                credential,
                protocol,
                safe,
                head_timeout: proxy.response_timeout(),
            };
            let session = (tracker, access);
            // Boxed, as the guard's check: the rare paths stay out of every request's future.
            let upgrade = forward_upgrade(backend, endpoint, upgrade, *parts, body, session);
            return Box::pin(upgrade).await;
        }
        parts.uri =
            upstream_uri(&parts.uri, endpoint).map_err(|e| status::upstream(backend, e, safe))?;
        let mut head = parts;
        let (mut body, client_fault) = ClientBody::new(body, names.clone());
        body.check_arrived()
            .await
            .map_err(|_| ProxyError::ClientBody)?;
        // A pinned write's fence; a read has none, and reads nothing of it.
        let write = (&request.decision, request.object);
        if request.object.is_some() {
            whole_before_the_move(proxy.fence(), write, &mut body).await?;
        }
        let warning = match request.guard {
            Some(g) => {
                let transit = InTransit {
                    head: &mut head,
                    body: &mut body,
                    endpoint,
                    credential,
                };
                Box::pin(guarded(proxy.guarding(), (routing, request), g, transit)).await?
            }
            None => None,
        };
        if request.object.is_some() {
            last_look(proxy.fence(), routing, write)?;
        }
        let deadline = response_deadline(proxy.response_timeout(), routing, request);
        // Boxed: a write's alone, as the guard's.
        let watch = exposure::watch(proxy.exposing(), routing, request, &head).map(Box::new);
        let sent = send(endpoint, credential, (head, body), deadline).await;
        let resp = judge(routing, request, backend, sent, &client_fault)?;
        let copy =
            watch.and_then(|w| w.answered(resp.status(), resp.headers().get(header::CONTENT_TYPE)));
        let mut resp = relay(routing, request, merged_answer, resp, tracker);
        if let Some(copy) = copy {
            resp.body_mut().copy_into(Box::new(copy));
        }
        if let Some(w) = warning {
            resp.headers_mut().append(header::WARNING, w);
        }
        Ok(resp)
    }
}

/// A watch a `shareWatches` rule matched, served from its shared watch (`share`): its response,
/// its 403 when the apiserver's authorizer refuses the client, or `None` when it goes to the
/// apiserver on its own; and what became of it, for the access log (`rule: joined`,
/// `rule: own (reason)`, `rule: refused`).
async fn shared(
    proxy: Forwarding<'_>,
    (routing, request, caller): (&Routing, &Decided, Caller<'_>),
    endpoint: &Arc<EndpointPool>,
    head: &http::request::Parts,
) -> (Result<Option<Response<ProxyBody>>, ProxyError>, String) {
    let Some(rule) = request.share.and_then(|i| routing.table().shares.get(i)) else {
        return (Ok(None), String::new());
    };
    let backend = &routing.backends[request.decision.backend.index()];
    let watch = super::share::Watch {
        rule: &rule.name,
        backend: &backend.name,
        endpoint,
        who: caller.identity,
        head,
        stop: Some(routing.long_running_stop(&request.decision)),
    };
    match proxy.shares().serve(watch).await {
        super::share::Served::Joined(resp) => (Ok(Some(*resp)), format!("{}: joined", rule.name)),
        super::share::Served::Own(why) => (Ok(None), format!("{}: own ({why})", rule.name)),
        super::share::Served::Denied(refused) => {
            let refused = ProxyError::Forbidden(refused);
            (Err(refused), format!("{}: refused", rule.name))
        }
    }
}

/// The update guard's check of a guarded update (`guard`): the `Warning` to answer with, if any.
async fn guarded(
    reads: Guarding<'_>,
    (routing, request): (&Routing, &Decided),
    g: usize,
    transit: InTransit<'_>,
) -> Result<Option<HeaderValue>, ProxyError> {
    let (path, query) = (
        transit.head.uri.path().to_owned(),
        transit.head.uri.query().map(str::to_owned),
    );
    let info = classify("PUT", &path, query.as_deref());
    let update = guard::Update {
        guard: g,
        info: &info,
        client: request.client,
        backend: request.decision.backend,
        reader: request.reader,
    };
    guard::check(reads, routing, update, transit).await
}

/// Admission, in order: the client's place among its requests in flight, an endpoint of the
/// backend, the end of a moving pin's fence, and the write ledger's ticket for the object.
async fn admit<'r>(
    proxy: Forwarding<'_>,
    (routing, request, caller): (&'r Routing, &Decided, Caller<'_>),
    parts: &http::request::Parts,
    tracker: &mut RequestTracker,
) -> Result<(&'r Arc<EndpointPool>, Option<WriteTicket>), ProxyError> {
    let backend = &routing.backends[request.decision.backend.index()];
    if let Some(skewed) = request.decision.skew.filter(|s| s.step.refuses()) {
        return Err(ProxyError::SkewPolicy {
            step: skewed.step,
            why: skewed.explain(routing.table(), request.decision.backend),
        });
    }
    if !request.long_running {
        tracker.hold(
            admit_client(proxy.limits(), caller.limit, caller.identity, caller.remote).await?,
        );
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
            let admitted = Box::pin(admit_write(
                proxy.fence(),
                routing,
                &request.decision,
                key,
                query,
            ));
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
fn response_deadline(
    response_timeout: Duration,
    routing: &Routing,
    request: &Decided,
) -> Option<Instant> {
    if request.long_running {
        return None;
    }
    let overall = request.start.checked_add(response_timeout);
    match request.decision.class {
        Class::Write => super::fence::write_deadline(routing.table().writes.fence, overall),
        Class::Read => overall,
    }
}
