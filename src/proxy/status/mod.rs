//! The one place where a request the proxy cannot complete becomes a response: a Kubernetes `Status`.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use skewgate_shared::{Cause, Status};

use super::body::ProxyBody;
use crate::upstream::{BackendPool, UpstreamError};

mod refused;
mod words;

pub(crate) use refused::Refused;
pub(crate) use words::describe;
use words::{
    error_chain, guard_cannot_store_parts, guard_rejected_parts, malformed_head_parts,
    upstream_parts,
};

/// Why the proxy answered a request itself.
#[derive(Debug)]
pub(crate) enum ProxyError {
    /// The chosen backend has no endpoint that is up.
    NoEndpoint {
        /// The backend's name.
        backend: String,
        /// What each endpoint last answered, or why it could not be reached.
        why: String,
    },
    /// Talking to the apiserver failed before its response started.
    Upstream {
        /// The backend's name.
        backend: String,
        /// What failed.
        error: UpstreamError,
        /// Whether the request is safe to repeat (GET, HEAD): a write that may have reached the
        /// apiserver is answered without `Retry-After`.
        safe: bool,
    },
    /// The client has as many requests in flight as it may, and as many waiting.
    ClientBusy {
        /// Who the client is (`user "alice"`, `address 10.0.0.1`).
        client: String,
        /// Its limit.
        limit: usize,
    },
    /// A write of a moving pin would outlive its own `timeout` waiting for the fence to end.
    PinFenced {
        /// The pin (rule) moving.
        rule: String,
        /// Seconds left of the fence, rounded up.
        remaining_secs: u64,
    },
    /// A write of a moving pin that this replica cannot tell the other replicas have or have not
    /// moved yet (with `--advertise-address`).
    FleetUnsure {
        /// The pin (rule) moving.
        rule: String,
    },
    /// A write to a replica out of step with the fleet (its Lease may have lapsed, or another
    /// replica has made a move its table does not make).
    OutOfStep {
        /// Why.
        why: crate::cluster::OutOfStep,
    },
    /// A write of an object whose earlier writes are still in flight on the previous backend.
    ObjectMoving {
        /// The backend the object's writes move to.
        backend: String,
    },
    /// The client's request body could not be read: malformed framing, or the client stopped.
    ClientBody,
    /// An upgrade request (exec, attach, port-forward) with a body, which a tunnel cannot carry.
    UpgradeWithBody,
    /// An HTTP/1.1 head Go's net/http refuses before kube-apiserver sees it (`framing.rs`): its
    /// code (400, or 501 for a transfer coding other than chunked) and why.
    MalformedHead { code: StatusCode, why: &'static str },
    /// A guarded update's body is larger than kube-apiserver accepts.
    BodyTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// A guard found that the update would drop fields the client's version does not know.
    GuardRejected {
        /// The guard.
        guard: String,
        /// Who the update is judged as, as said to a person (`a v1.29 client`).
        client: String,
        /// What does not know the fields (`a v1.29 client`, `a reader through v1.29`).
        knower: String,
        /// The fields, and why each would be lost.
        fields: Vec<(String, crate::skew::LossReason)>,
    },
    /// A guarded update served by a version that cannot store fields the stored object has.
    GuardCannotStore {
        /// The guard.
        guard: String,
        /// The serving backend and its version (`backend "v1-29" (v1.29)`).
        serving: String,
        /// The fields.
        fields: Vec<String>,
        /// Whether the guard's action is `preserve`, which cannot put these back.
        preserve: bool,
    },
    /// The version-skew policy refused a component's request (`steer::SkewStep`).
    SkewPolicy {
        /// What it did.
        step: crate::steer::SkewStep,
        /// Why, for a person.
        why: String,
    },
    /// The apiserver's authorizer refused a client's watch before it joined a shared one: the
    /// apiserver's own 403 (`share/authorize.rs`).
    Forbidden(Box<Refused>),
    /// A guard (reject or preserve) could not check the update: it fails closed.
    GuardCannotCheck {
        /// The guard.
        guard: String,
        /// Why.
        why: String,
    },
}

impl ProxyError {
    /// Whether the client caused it (and nothing failed on the apiserver's side).
    pub(crate) fn is_client_fault(&self) -> bool {
        match self {
            ProxyError::ClientBody
            | ProxyError::UpgradeWithBody
            | ProxyError::MalformedHead { .. }
            | ProxyError::BodyTooLarge { .. } => true,
            ProxyError::Upstream { error, .. } => error.is_client_error(),
            _ => false,
        }
    }

    /// The backend and reason label of a failure on the apiserver's side (for
    /// `skewgate_upstream_errors_total`), if it is one.
    pub(crate) fn upstream_failure(&self) -> Option<(&str, &'static str)> {
        match self {
            ProxyError::NoEndpoint { backend, .. } => Some((backend, "unavailable")),
            ProxyError::Upstream { backend, error, .. } if !error.is_client_error() => {
                Some((backend, error.reason()))
            }
            _ => None,
        }
    }

    /// What the access log says of it: a short reason, and the upstream error's own words.
    pub(crate) fn log_reason(&self) -> String {
        let reason = match self {
            ProxyError::NoEndpoint { why, .. } => return format!("unavailable: {why}"),
            ProxyError::Upstream { error, .. } => {
                return format!("{}: {}", error.reason(), error_chain(error));
            }
            ProxyError::ClientBusy { .. } => "client_busy",
            ProxyError::PinFenced { .. } => "pin_fenced",
            ProxyError::FleetUnsure { .. } => "fleet_unsure",
            ProxyError::OutOfStep { .. } => "out_of_step",
            ProxyError::ObjectMoving { .. } => "object_moving",
            ProxyError::ClientBody => "client_body",
            ProxyError::UpgradeWithBody => "upgrade_with_body",
            ProxyError::MalformedHead { .. } => "malformed_head",
            ProxyError::BodyTooLarge { .. } => "body_too_large",
            ProxyError::GuardRejected { .. } | ProxyError::GuardCannotStore { .. } => {
                "guard_rejected"
            }
            ProxyError::GuardCannotCheck { why, .. } => {
                return format!("guard_cannot_check: {why}");
            }
            ProxyError::SkewPolicy { step, .. } => return format!("skew_policy_{}", step.as_str()),
            ProxyError::Forbidden(_) => "forbidden",
        };
        reason.to_owned()
    }

    fn parts(&self) -> (StatusCode, &'static str, String, bool) {
        match self {
            ProxyError::ClientBusy { client, limit } => (
                StatusCode::TOO_MANY_REQUESTS,
                "TooManyRequests",
                format!(
                    "skewgate: {client} has {limit} requests in flight, the most one client may \
                     have, and as many waiting; retry"
                ),
                true,
            ),
            ProxyError::PinFenced { .. }
            | ProxyError::FleetUnsure { .. }
            | ProxyError::OutOfStep { .. }
            | ProxyError::ObjectMoving { .. } => (
                StatusCode::TOO_MANY_REQUESTS,
                "TooManyRequests",
                self.held_back_message(),
                true,
            ),
            ProxyError::ClientBody | ProxyError::UpgradeWithBody => self.bad_body_parts(),
            ProxyError::BodyTooLarge { limit } => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "RequestEntityTooLarge",
                format!(
                    "skewgate: the request body is larger than {limit} bytes, the most the apiserver accepts"
                ),
                false,
            ),
            ProxyError::GuardRejected {
                guard,
                client,
                fields,
                ..
            } => guard_rejected_parts(guard, client, fields),
            ProxyError::GuardCannotStore {
                guard,
                serving,
                fields,
                preserve,
            } => guard_cannot_store_parts(guard, serving, fields, *preserve),
            ProxyError::MalformedHead { code, why } => malformed_head_parts(*code, why),
            ProxyError::GuardCannotCheck { guard, why } => (
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                format!(
                    "skewgate guard {guard:?} cannot check this update ({why}); nothing was sent"
                ),
                true,
            ),
            ProxyError::SkewPolicy { step, why } => {
                let (code, reason) = if *step == crate::steer::SkewStep::NoBackend {
                    (StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable")
                } else {
                    (StatusCode::TOO_MANY_REQUESTS, "TooManyRequests")
                };
                (code, reason, format!("skewgate: {why}"), true)
            }
            ProxyError::Forbidden(r) => {
                (StatusCode::FORBIDDEN, "Forbidden", r.message.clone(), false)
            }
            ProxyError::NoEndpoint { backend, why } => (
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                format!("skewgate: backend {backend:?} has no endpoint ready to serve: {why}"),
                true,
            ),
            ProxyError::Upstream {
                backend,
                error,
                safe,
            } => upstream_parts(backend, error, *safe),
        }
    }

    /// A request whose body the client got wrong (400).
    fn bad_body_parts(&self) -> (StatusCode, &'static str, String, bool) {
        let message = match self {
            ProxyError::UpgradeWithBody => {
                "skewgate: an upgrade request (exec, attach, port-forward) carries no body"
            }
            _ => {
                "skewgate: the request body could not be read (malformed framing, or the client stopped sending it)"
            }
        };
        (
            StatusCode::BAD_REQUEST,
            "BadRequest",
            message.to_owned(),
            false,
        )
    }

    /// Why a write is held back while a pin moves (429, nothing sent).
    fn held_back_message(&self) -> String {
        match self {
            ProxyError::PinFenced {
                rule,
                remaining_secs,
            } => format!(
                "skewgate: pin {rule:?} is moving; its writes are held for {remaining_secs}s more"
            ),
            ProxyError::FleetUnsure { rule } => format!(
                "skewgate: pin {rule:?} is moving, and this replica cannot tell yet whether the other replicas have moved it; retry"
            ),
            ProxyError::OutOfStep {
                why: crate::cluster::OutOfStep::Lease,
            } => "skewgate: this replica has not renewed its Lease in time, so the other replicas may move pins without it; it takes no writes until it renews; retry".to_owned(),
            ProxyError::OutOfStep {
                why: crate::cluster::OutOfStep::Behind,
            } => "skewgate: another replica has moved a pin that this replica's route file does not move yet; it takes no writes until its file catches up; retry".to_owned(),
            ProxyError::ObjectMoving { backend } => format!(
                "skewgate: writes of this object are moving to backend {backend:?}; earlier writes on the previous backend are still in flight, retry"
            ),
            _ => String::new(),
        }
    }

    /// The response a client sees; `note` is told its code, Status reason and message first (the
    /// message is made once, for both).
    pub(crate) fn into_response_noting(
        self,
        note: impl FnOnce(u16, &'static str, &str),
    ) -> Response<ProxyBody> {
        let (code, reason, message, retry) = self.parts();
        note(code.as_u16(), reason, &message);
        let causes = match &self {
            ProxyError::GuardRejected { knower, fields, .. } => fields
                .iter()
                .map(|(path, why)| Cause {
                    reason: "FieldValueForbidden".to_owned(),
                    message: describe(*why, knower),
                    field: path.clone(),
                })
                .collect(),
            ProxyError::GuardCannotStore {
                serving, fields, ..
            } => fields
                .iter()
                .map(|path| Cause {
                    reason: "FieldValueForbidden".to_owned(),
                    message: format!(
                        "{serving} cannot store this field; the update would drop the stored value"
                    ),
                    field: path.clone(),
                })
                .collect(),
            _ => Vec::new(),
        };
        if let ProxyError::Forbidden(r) = &self {
            return r.response();
        }
        let close = matches!(self, ProxyError::MalformedHead { .. });
        let mut resp = status_response(code, reason, &message, retry, causes);
        if close {
            // As Go's server does after refusing a head: where the next request would start is
            // not agreed (a body skewgate would skip, the apiserver would not), so none is read.
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        resp
    }
}

/// A Kubernetes `Status` failure response, with `Retry-After: 1` (and `details.retryAfterSeconds`)
/// when trying again may work.
pub(crate) fn status_response(
    code: StatusCode,
    reason: &str,
    message: &str,
    retry: bool,
    causes: Vec<Cause>,
) -> Response<ProxyBody> {
    let status = Status::failure(code.as_u16(), reason, message).causes(causes);
    // As kube-apiserver does with Retry-After, so that clients reading only the body know too.
    let status = if retry { status.retry_after(1) } else { status };
    json_response(code, status.to_json(), retry)
}

/// A `Status` body's response.
fn json_response(code: StatusCode, bytes: Vec<u8>, retry: bool) -> Response<ProxyBody> {
    let mut resp = Response::new(ProxyBody::full(Bytes::from(bytes)));
    *resp.status_mut() = code;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if retry {
        h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    resp
}

/// The error of a request that failed upstream, on `backend`'s pool.
pub(crate) fn upstream(backend: &BackendPool, error: UpstreamError, safe: bool) -> ProxyError {
    upstream_named(&backend.name, error, safe)
}

pub(crate) fn upstream_named(backend: &str, error: UpstreamError, safe: bool) -> ProxyError {
    ProxyError::Upstream {
        backend: backend.to_owned(),
        error,
        safe,
    }
}
