//! Protocol upgrades (exec, attach, port-forward over SPDY/3.1 or WebSocket): the request goes to
//! the chosen endpoint on a connection of its own (HTTP/1.1, the only protocol that upgrades), and
//! once both sides have switched protocols, bytes are copied both ways until either side closes.

use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::request::Parts;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

use super::access_log::AccessRecord;
use super::body::ProxyBody;
use super::request_body::Incoming;
use super::routing::RequestTracker;
use super::status::ProxyError;
use crate::identity::Alpn;
use crate::upstream::{BackendPool, Credential, DialError, Dialed, EndpointPool, UpstreamError};

/// Largest body of an upstream answer that refuses the upgrade.
const MAX_REFUSAL: usize = 1 << 20;

/// Sends an upgrade request (headers already prepared for upstream) and, when the apiserver
/// switches protocols, tunnels the client's connection to it. The connection is the endpoint's
/// dialer's (the pool's connect timeout, TLS with the client's credential, ALPN http/1.1; a failure
/// marks the endpoint down); the apiserver's answer must come within `head_timeout`: an apiserver
/// that accepts connections but does not answer (a frozen process) never holds a client forever.
/// `session`'s tracker is kept until the tunnel closes (the session counts as in flight), and its
/// access-log record is taken and written then, with the bytes sent to the client.
pub(crate) async fn tunnel(
    endpoint: &EndpointPool,
    credential: Credential,
    mut parts: Parts,
    upgrade: HeaderValue,
    head_timeout: Duration,
    session: (RequestTracker, &mut Option<Box<AccessRecord>>),
) -> Result<Response<ProxyBody>, UpstreamError> {
    let client_side = parts.extensions.remove::<OnUpgrade>();
    let dialed = endpoint.dial(credential, Alpn::Http11).await?;
    parts
        .headers
        .insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    parts.headers.insert(header::UPGRADE, upgrade);
    parts.headers.insert(
        header::HOST,
        HeaderValue::from_str(endpoint.authority.as_ref())
            .map_err(|e| UpstreamError::Protocol(Box::new(e)))?,
    );
    // HTTP/1.1 sends the path alone.
    parts.uri = parts.uri.path_and_query().map_or_else(
        || http::Uri::from_static("/"),
        |p| p.as_str().parse().unwrap_or_default(),
    );
    parts.version = http::Version::HTTP_11;
    let req = Request::from_parts(parts, Empty::<Bytes>::new());
    let mut resp = match dialed {
        Dialed::Plain(tcp) => {
            within(head_timeout, exchange(endpoint, TokioIo::new(tcp), req)).await?
        }
        Dialed::Tls(tls) => {
            within(head_timeout, exchange(endpoint, TokioIo::new(*tls), req)).await?
        }
    };

    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        return Ok(refusal(resp).await);
    }
    let upstream_side = hyper::upgrade::on(&mut resp);
    let (head, _) = resp.into_parts();
    let url = endpoint.endpoint.url.clone();
    let (tracker, access) = session;
    let mut access = access.take();
    if let Some(a) = &mut access {
        a.set_code(StatusCode::SWITCHING_PROTOCOLS.as_u16());
    }
    let session = Session {
        _tracker: tracker,
        access,
    };
    tokio::spawn(splice(client_side, upstream_side, url, session));
    Ok(Response::from_parts(head, ProxyBody::full(Bytes::new())))
}

/// A refused upgrade (403, 404, 400...), passed on as the apiserver answered it.
async fn refusal(resp: Response<hyper::body::Incoming>) -> Response<ProxyBody> {
    let (head, body) = resp.into_parts();
    let body = http_body_util::Limited::new(body, MAX_REFUSAL)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    Response::from_parts(head, ProxyBody::full(body))
}

/// Once both sides have switched protocols, copies bytes both ways until either closes; `session`
/// lives as long.
async fn splice(
    client_side: Option<OnUpgrade>,
    upstream_side: OnUpgrade,
    url: String,
    mut session: Session,
) {
    let upstream = match upstream_side.await {
        Ok(u) => u,
        Err(e) => {
            tracing::debug!(endpoint = %url, error = %e, "the apiserver side of an upgrade failed");
            return;
        }
    };
    let Some(client_side) = client_side else {
        tracing::warn!(endpoint = %url, "the client connection cannot be upgraded");
        return;
    };
    let client = match client_side.await {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!(endpoint = %url, error = %e, "the client side of an upgrade failed");
            return;
        }
    };
    let (mut a, mut b) = (TokioIo::new(client), TokioIo::new(upstream));
    match tokio::io::copy_bidirectional(&mut a, &mut b).await {
        Ok((_, to_client)) => {
            if let Some(access) = &mut session.access {
                access.add_bytes(to_client);
            }
        }
        Err(e) => tracing::debug!(endpoint = %url, error = %e, "upgraded connection ended"),
    }
}

/// What an upgraded session holds until it closes: its place in flight, and its access-log record.
struct Session {
    _tracker: RequestTracker,
    access: Option<Box<AccessRecord>>,
}

async fn within<T>(
    limit: Duration,
    f: impl std::future::Future<Output = Result<T, UpstreamError>>,
) -> Result<T, UpstreamError> {
    tokio::time::timeout(limit, f)
        .await
        .map_err(|_| UpstreamError::Timeout)?
}

async fn exchange<I>(
    endpoint: &EndpointPool,
    io: TokioIo<I>,
    req: Request<Empty<Bytes>>,
) -> Result<Response<hyper::body::Incoming>, UpstreamError>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut send, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|source| {
            endpoint.connect_failed(DialError::Http1Handshake {
                url: endpoint.url(),
                source,
            })
        })?;
    tokio::spawn(conn.with_upgrades());
    send.send_request(req)
        .await
        .map_err(|e| UpstreamError::AfterSend(Box::new(e)))
}

/// How an upgrade request goes upstream.
pub(crate) struct Upgrade {
    pub credential: Credential,
    pub protocol: HeaderValue,
    pub safe: bool,
    /// How long the apiserver has to answer the upgrade (the response timeout).
    pub head_timeout: std::time::Duration,
}

/// Exec, attach and port-forward: tunnelled on a connection of their own.
pub(crate) async fn forward_upgrade(
    backend: &BackendPool,
    endpoint: &EndpointPool,
    upgrade: Upgrade,
    parts: http::request::Parts,
    body: Incoming,
    session: (RequestTracker, &mut Option<Box<AccessRecord>>),
) -> Result<Response<ProxyBody>, ProxyError> {
    // The tunnel carries no request body: one announced would leave the apiserver waiting.
    if !body.is_end_stream() {
        return Err(ProxyError::UpgradeWithBody);
    }
    let head_timeout = upgrade.head_timeout;
    let (credential, protocol) = (upgrade.credential, upgrade.protocol);
    tunnel(endpoint, credential, parts, protocol, head_timeout, session)
        .await
        .map_err(|error| super::status::upstream(backend, error, upgrade.safe))
}
