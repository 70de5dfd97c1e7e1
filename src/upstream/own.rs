//! skewgate's own requests to an apiserver (health checks, discovery, its Lease and the
//! `kubernetes` Service's endpoints): on a front-proxy connection, naming skewgate's own user and
//! itself (`User-Agent: skewgate/<version>`), each bounded by a 5 s timeout.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{Method, Request, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full};

use super::{Credential, EndpointPool, send};

/// The `User-Agent` of skewgate's own requests.
const USER_AGENT: &str = concat!("skewgate/", env!("CARGO_PKG_VERSION"));

/// The error of a request of skewgate's own that had no answer in time.
pub(crate) const TIMED_OUT: &str = "timed out";

/// GETs `path` from the endpoint: its status and body.
pub(crate) async fn get(ep: &Arc<EndpointPool>, path: &str) -> Result<(StatusCode, Bytes), String> {
    request(ep, Method::GET, path, None).await
}

/// Sends `method` to `path` with a JSON `body`, if any: the apiserver's status and body.
pub(crate) async fn request(
    ep: &Arc<EndpointPool>,
    method: Method,
    path: &str,
    body: Option<Vec<u8>>,
) -> Result<(StatusCode, Bytes), String> {
    dated(ep, method, path, body)
        .await
        .map(|(code, body, _)| (code, body))
}

/// [`request`], with the apiserver's clock as its answer's `Date` says (to the second), if it
/// gave one.
pub(crate) async fn dated(
    ep: &Arc<EndpointPool>,
    method: Method,
    path: &str,
    body: Option<Vec<u8>>,
) -> Result<(StatusCode, Bytes, Option<SystemTime>), String> {
    exchange(ep, (method, path, body), &[], Duration::from_secs(5)).await
}

/// GETs `path` as skewgate's own user with `groups` (`X-Remote-Group`, as the front-proxy header
/// the apiserver reads by default), within `timeout`: for reads a user's role must allow, such as
/// `rollback-check`'s lists.
pub(crate) async fn get_with_groups(
    ep: &Arc<EndpointPool>,
    path: &str,
    groups: &[header::HeaderValue],
    timeout: Duration,
) -> Result<(StatusCode, Bytes), String> {
    send_with_groups(ep, (Method::GET, path, None), groups, timeout).await
}

/// [`get_with_groups`] for any method, with a JSON body if any.
pub(crate) async fn send_with_groups(
    ep: &Arc<EndpointPool>,
    request: (Method, &str, Option<Vec<u8>>),
    groups: &[header::HeaderValue],
    timeout: Duration,
) -> Result<(StatusCode, Bytes), String> {
    exchange(ep, request, groups, timeout)
        .await
        .map(|(code, body, _)| (code, body))
}

async fn exchange(
    ep: &Arc<EndpointPool>,
    (method, path, body): (Method, &str, Option<Vec<u8>>),
    groups: &[header::HeaderValue],
    timeout: Duration,
) -> Result<(StatusCode, Bytes, Option<SystemTime>), String> {
    let mut req = own_request(ep, method, path, groups)?;
    if body.is_some() {
        req.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        );
    }
    let body = Full::new(Bytes::from(body.unwrap_or_default()));
    let exchange = async {
        let resp = send(ep, Credential::FrontProxy, (super::head(req), body), None)
            .await
            .map_err(|e| e.to_string())?;
        let code = resp.status();
        let date = resp
            .headers()
            .get(header::DATE)
            .and_then(|d| d.to_str().ok())
            .and_then(|d| httpdate::parse_http_date(d).ok());
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((code, body, date))
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| TIMED_OUT.to_owned())?
}

/// A request of skewgate's own to `path` on the endpoint: its user (`--proxy-user`), `groups`,
/// and its `User-Agent`.
fn own_request(
    ep: &Arc<EndpointPool>,
    method: Method,
    path: &str,
    groups: &[header::HeaderValue],
) -> Result<Request<()>, String> {
    let uri: Uri = format!(
        "{}://{}{path}",
        if ep.endpoint.tls { "https" } else { "http" },
        ep.endpoint.authority()
    )
    .parse()
    .map_err(|e| format!("{e}"))?;
    let mut req = Request::builder()
        .method(method)
        .uri(uri)
        .body(())
        .map_err(|e| e.to_string())?;
    // As kube-apiserver's own clients name themselves (client-go's default agent): audit logs and
    // the apiserver's metrics show who asked.
    req.headers_mut().insert(
        header::USER_AGENT,
        header::HeaderValue::from_static(USER_AGENT),
    );
    if let Some((name, value)) = &ep.settings().own_user {
        req.headers_mut().insert(name.clone(), value.clone());
    }
    for group in groups {
        req.headers_mut().append(
            header::HeaderName::from_static("x-remote-group"),
            group.clone(),
        );
    }
    Ok(req)
}

/// Opens a watch of skewgate's own (`path` with its query), in the encoding `accept` asks for:
/// the apiserver's answer, its body streaming, once its head came within 5 s.
pub(crate) async fn watch(
    ep: &Arc<EndpointPool>,
    path: &str,
    accept: &str,
) -> Result<http::Response<super::UpstreamBody>, String> {
    let mut req = own_request(ep, Method::GET, path, &[])?;
    if !accept.is_empty() {
        let accept = header::HeaderValue::from_str(accept).map_err(|e| e.to_string())?;
        req.headers_mut().insert(header::ACCEPT, accept);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let body = Full::new(Bytes::new());
    send(
        ep,
        Credential::FrontProxy,
        (super::head(req), body),
        Some(deadline),
    )
    .await
    .map_err(|e| e.to_string())
}

/// What an apiserver's answer to one of skewgate's own requests means, in words an operator can act
/// on.
pub(crate) fn answered(ep: &EndpointPool, path: &str, code: StatusCode, body: &[u8]) -> String {
    let user = ep.own_user().map_or("(none)".to_owned(), |u| {
        format!("{:?}", String::from_utf8_lossy(u.as_bytes()))
    });
    let message = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("message")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| {
            String::from_utf8_lossy(&body[..body.len().min(200)])
                .trim()
                .to_owned()
        });
    let hint = match code {
        StatusCode::UNAUTHORIZED => format!(
            "; the apiserver did not authenticate skewgate's own user {user}: it must trust the front-proxy certificate (--proxy-client-cert-file) through its --requestheader-client-ca-file and --requestheader-allowed-names, and read the user from one of its --requestheader-username-headers"
        ),
        StatusCode::FORBIDDEN => format!(
            "; the apiserver does not let skewgate's own user {user} read it: it needs the system:public-info-viewer and system:discovery roles (bound to every authenticated user by default)"
        ),
        _ => String::new(),
    };
    if message.is_empty() {
        format!("{path} answered {code}{hint}")
    } else {
        format!("{path} answered {code} ({message}){hint}")
    }
}
