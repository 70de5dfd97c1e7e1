//! The respond phase, the one place where a request's outcome is counted and an error logged,
//! counted and answered with a `Status` (`status.rs`).

use http::Response;

use super::Proxy;
use super::body::ProxyBody;
use super::context::{Caller, Ctx, Decided};
use super::recent::Recent;
use super::routing::Routing;
use super::status::ProxyError;
use super::wire::ConnectionPolicy;
use crate::identity::ClientKey;
use crate::metrics::Metrics;
use crate::steer::Clock;

/// What of the process the respond phase reads, and no more (as `forward::Forwarding`): the
/// metrics of upstream errors, and the errors lately answered, kept by the clock. One pointer,
/// which only these open: most answers read none of them.
#[derive(Clone, Copy)]
pub(super) struct Answering<'a>(&'a Proxy);

impl Proxy {
    /// What the respond phase reads of the pipeline.
    pub(super) fn answering(&self) -> Answering<'_> {
        Answering(self)
    }
}

impl<'a> Answering<'a> {
    fn metrics(self) -> &'a Metrics {
        &self.0.metrics
    }

    fn recent(self) -> &'a Recent {
        &self.0.recent
    }

    fn clock(self) -> &'a dyn Clock {
        &*self.0.settings.clock
    }
}

/// The one place an outcome is counted, and an error logged, counted and answered with a `Status`.
pub(super) fn respond(
    proxy: Answering<'_>,
    ctx: &mut Ctx<'_>,
    policy: &dyn ConnectionPolicy,
    outcome: Result<Response<ProxyBody>, ProxyError>,
) -> Response<ProxyBody> {
    let (routing, caller, request, access) = ctx.split();
    let mut access = access.take();
    let mut resp = match outcome {
        Ok(resp) => resp,
        Err(error) => {
            if let Some(a) = &mut access {
                a.set_error(error.log_reason());
            }
            if error.is_client_fault() {
                tracing::debug!(remote = %caller.remote, ?error, "the client's request failed");
                policy.client_fault();
            } else if let Some((backend, reason)) = error.upstream_failure() {
                // A backend with no endpoint ready fails the rollout that chose it, as a failed
                // send does (`judge` counts those).
                if matches!(error, ProxyError::NoEndpoint { .. }) {
                    routing.record_outcome(&request.decision, true);
                }
                tracing::debug!(%backend, ?error, "upstream request failed");
                proxy
                    .metrics()
                    .upstream_errors
                    .with_label_values(&[backend, reason])
                    .inc();
            }
            error.into_response_noting(|code, reason, message| {
                keep_recent(proxy, (routing, request, caller), (code, reason, message));
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
    proxy: Answering<'_>,
    (routing, request, caller): (&Routing, &Decided, Caller<'_>),
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
    proxy.recent().answered(proxy.clock().now(), answered);
}
