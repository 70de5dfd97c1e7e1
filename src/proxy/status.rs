//! The one place where a request the proxy cannot complete becomes a response: a Kubernetes `Status`.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use serde_json::json;

use super::body::ProxyBody;
use crate::upstream::UpstreamError;

/// Why the proxy answered a request itself.
#[derive(Debug)]
pub enum ProxyError {
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
}

impl ProxyError {
    fn parts(&self) -> (StatusCode, &'static str, String, bool) {
        match self {
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
            } if !safe && error.may_have_reached_apiserver() => {
                let (code, reason) = match error {
                    UpstreamError::Timeout => (StatusCode::GATEWAY_TIMEOUT, "Timeout"),
                    _ => (StatusCode::BAD_GATEWAY, "InternalError"),
                };
                (
                    code,
                    reason,
                    format!(
                        "skewgate: backend {backend:?} failed after the request was sent ({error}); the write may have been applied: read the object before you retry"
                    ),
                    false,
                )
            }
            ProxyError::Upstream { backend, error, .. } => match error {
                UpstreamError::Unavailable(_) | UpstreamError::Connect(_) => (
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
            },
        }
    }

    /// The response a client sees.
    pub fn into_response(self) -> Response<ProxyBody> {
        let (code, reason, message, retry) = self.parts();
        status_response(code, reason, &message, retry)
    }
}

/// A Kubernetes `Status` failure response, with `Retry-After: 1` when trying again may work.
pub fn status_response(
    code: StatusCode,
    reason: &str,
    message: &str,
    retry: bool,
) -> Response<ProxyBody> {
    let body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    });
    let bytes = serde_json::to_vec(&body).unwrap_or_default();
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
