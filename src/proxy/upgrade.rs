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
use tokio::net::TcpStream;

use super::body::ProxyBody;
use crate::upstream::{EndpointPool, UpstreamError};

/// Largest body of an upstream answer that refuses the upgrade.
const MAX_REFUSAL: usize = 1 << 20;

/// Sends an upgrade request (headers already prepared for upstream) and, when the apiserver
/// switches protocols, tunnels the client's connection to it. Connecting (TCP and TLS) may take the
/// pool's connect timeout, the apiserver's answer `head_timeout`: an apiserver that accepts
/// connections but does not answer (a frozen process) never holds a client forever.
pub(super) async fn tunnel(
    endpoint: &EndpointPool,
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    mut parts: Parts,
    upgrade: HeaderValue,
    head_timeout: Duration,
) -> Result<Response<ProxyBody>, UpstreamError> {
    let ep = &endpoint.endpoint;
    let connect_timeout = endpoint.settings().connect_timeout;
    let timed_out = || UpstreamError::Connect(format!("{}: connect timed out", ep.url));
    let client_side = parts.extensions.remove::<OnUpgrade>();
    let tcp = tokio::time::timeout(
        connect_timeout,
        TcpStream::connect((ep.host.as_str(), ep.port)),
    )
    .await
    .map_err(|_| timed_out())?
    .map_err(|e| UpstreamError::Connect(format!("{}: {e}", ep.url)))?;
    let _ = tcp.set_nodelay(true);
    parts
        .headers
        .insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    parts.headers.insert(header::UPGRADE, upgrade);
    parts.headers.insert(
        header::HOST,
        HeaderValue::from_str(endpoint.authority.as_ref())
            .map_err(|e| UpstreamError::Protocol(e.to_string()))?,
    );
    // HTTP/1.1 sends the path alone.
    parts.uri = parts.uri.path_and_query().map_or_else(
        || http::Uri::from_static("/"),
        |p| p.as_str().parse().unwrap_or_default(),
    );
    parts.version = http::Version::HTTP_11;
    let req = Request::from_parts(parts, Empty::<Bytes>::new());
    let mut resp = if ep.tls {
        let Some(config) = tls else {
            return Err(UpstreamError::Connect(format!(
                "{}: https endpoints need --upstream-ca-file",
                ep.url
            )));
        };
        // The same identity and trust as the pool's connections, offering HTTP/1.1.
        let mut config = (*config).clone();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let name = rustls_pki_types::ServerName::try_from(ep.server_name.clone())
            .map_err(|e| UpstreamError::Connect(format!("{}: server name: {e}", ep.url)))?;
        let connect =
            tokio_rustls::TlsConnector::from(std::sync::Arc::new(config)).connect(name, tcp);
        let stream = tokio::time::timeout(connect_timeout, connect)
            .await
            .map_err(|_| timed_out())?
            .map_err(|e| UpstreamError::Connect(format!("{}: TLS: {e}", ep.url)))?;
        within(head_timeout, exchange(TokioIo::new(stream), req)).await?
    } else {
        within(head_timeout, exchange(TokioIo::new(tcp), req)).await?
    };

    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        // Refused (403, 404, 400...): pass the answer on as it is.
        let (head, body) = resp.into_parts();
        let body = http_body_util::Limited::new(body, MAX_REFUSAL)
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        return Ok(Response::from_parts(head, ProxyBody::full(body)));
    }
    let upstream_side = hyper::upgrade::on(&mut resp);
    let (head, _) = resp.into_parts();
    let url = ep.url.clone();
    tokio::spawn(async move {
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
        if let Err(e) = tokio::io::copy_bidirectional(&mut a, &mut b).await {
            tracing::debug!(endpoint = %url, error = %e, "upgraded connection ended");
        }
    });
    Ok(Response::from_parts(head, ProxyBody::full(Bytes::new())))
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
    io: TokioIo<I>,
    req: Request<Empty<Bytes>>,
) -> Result<Response<hyper::body::Incoming>, UpstreamError>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut send, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| UpstreamError::Connect(e.to_string()))?;
    tokio::spawn(conn.with_upgrades());
    send.send_request(req)
        .await
        .map_err(|e| UpstreamError::Protocol(e.to_string()))
}
