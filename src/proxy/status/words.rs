//! The words of each answer skewgate makes itself: what a person reads in the `Status` message of
//! a failure upstream, a guard's refusal, a head refused as Go refuses it, and one lost field.

use http::StatusCode;

use crate::skew::LossReason;
use crate::upstream::UpstreamError;

/// The answer to a failure talking to the apiserver: a write that may have been applied gets no
/// `Retry-After` and says so; everything else may be retried.
pub(super) fn upstream_parts(
    backend: &str,
    error: &UpstreamError,
    safe: bool,
) -> (StatusCode, &'static str, String, bool) {
    if !safe && error.may_have_reached_apiserver() {
        let (code, reason) = match error {
            UpstreamError::Timeout => (StatusCode::GATEWAY_TIMEOUT, "Timeout"),
            _ => (StatusCode::BAD_GATEWAY, "InternalError"),
        };
        let message = format!(
            "skewgate: backend {backend:?} failed after the request was sent ({error}); the write may have been applied: read the object before you retry"
        );
        return (code, reason, message, false);
    }
    match error {
        UpstreamError::Connect(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            format!("skewgate: backend {backend:?} is unreachable: {error}"),
            true,
        ),
        UpstreamError::Timeout => (
            StatusCode::GATEWAY_TIMEOUT,
            "Timeout",
            format!("skewgate: backend {backend:?} did not answer in time"),
            true,
        ),
        UpstreamError::Protocol(_) | UpstreamError::AfterSend(_) => (
            StatusCode::BAD_GATEWAY,
            "InternalError",
            format!("skewgate: backend {backend:?} failed before answering: {error}"),
            true,
        ),
        UpstreamError::HeadersTooLarge { .. } => (
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "RequestHeaderFieldsTooLarge",
            format!("skewgate: {error}; nothing was sent"),
            false,
        ),
    }
}

/// A guarded update refused: the fields it would drop, named.
pub(super) fn guard_rejected_parts(
    guard: &str,
    client: &str,
    fields: &[(String, crate::skew::LossReason)],
) -> (StatusCode, &'static str, String, bool) {
    let names: Vec<&str> = fields.iter().map(|(p, _)| p.as_str()).collect();
    let message = format!(
        "skewgate guard {guard:?}: this update from {client} would drop {} that the stored object has; update with a client as new as the apiserver, reading the object where it is written, or patch",
        names.join(", ")
    );
    (StatusCode::UNPROCESSABLE_ENTITY, "Invalid", message, false)
}

pub(super) fn guard_cannot_store_parts(
    guard: &str,
    serving: &str,
    fields: &[String],
    preserve: bool,
) -> (StatusCode, &'static str, String, bool) {
    let why = if preserve {
        " (preserve cannot put back what the serving version does not store)"
    } else {
        ""
    };
    let message = format!(
        "skewgate guard {guard:?}: this update is served by {serving}, which cannot store {} that the stored object has; it would drop them{why}. Write this object through a version that knows them (its pin), or remove them first",
        fields.join(", ")
    );
    (StatusCode::UNPROCESSABLE_ENTITY, "Invalid", message, false)
}

/// A head Go's net/http refuses (`framing.rs`): 400, or 501 for a transfer coding.
pub(super) fn malformed_head_parts(
    code: StatusCode,
    why: &str,
) -> (StatusCode, &'static str, String, bool) {
    let reason = if code == StatusCode::BAD_REQUEST {
        "BadRequest"
    } else {
        "NotImplemented"
    };
    (
        code,
        reason,
        format!("skewgate: {why}; nothing was sent"),
        false,
    )
}

/// An error and its sources, as one line.
pub(super) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        // Many errors repeat their source's words in their own.
        let text = s.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = s.source();
    }
    line
}

/// What a person reads for one lost field.
pub(crate) fn describe(why: LossReason, client: &str) -> String {
    match why {
        LossReason::Unknown => {
            format!("{client} does not know this field; the update would drop the stored value")
        }
        LossReason::DefaultChanged => format!(
            "the default of this field changed since the version of {client}; the update would replace the stored value with the new default"
        ),
    }
}
