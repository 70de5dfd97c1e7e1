//! The admin listener: the status page (`/`), `/metrics`, `/healthz`, `/readyz` and the `/debug/`
//! JSON.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// What the admin endpoints show; the proxy implements it.
pub(crate) trait AdminSource: Send + Sync + 'static {
    /// The Prometheus text exposition.
    fn metrics_text(&self) -> String;
    /// `Ok` when ready to serve, else why not.
    fn readiness(&self) -> Result<(), String>;
    /// The live route table, rollouts and endpoints as JSON.
    fn debug_routes(&self) -> serde_json::Value;
    /// What differs between the backends' versions, with the pins that follow, as JSON.
    fn debug_skew(&self) -> serde_json::Value;
    /// `/debug/fleet`: the replicas and whether they run the same table.
    fn debug_fleet(&self) -> serde_json::Value;
    /// `/debug/recent`: the errors skewgate answered itself and the guards' decisions, lately.
    fn debug_recent(&self) -> serde_json::Value;
    /// `/debug/shares`: the shared watches open now and their clients.
    fn debug_shares(&self) -> serde_json::Value;
}

/// Serves the admin endpoints until `stop`.
pub(crate) async fn serve(
    source: Arc<dyn AdminSource>,
    listener: TcpListener,
    stop: CancellationToken,
) {
    loop {
        let Some((stream, _)) = skewgate_shared::next_connection(&listener, &stop, "admin").await
        else {
            return;
        };
        let source = source.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let source = source.clone();
                async move { Ok::<_, Infallible>(answer(&*source, &req)) }
            });
            let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            // A kept-alive connection (a status page left open) ends with the server.
            tokio::select! {
                _ = conn.as_mut() => {}
                () = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
}

/// The live status page, served as it is (no files, nothing fetched from anywhere else).
const STATUS_PAGE: &str = include_str!("status.html");

fn answer(source: &dyn AdminSource, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET only\n".to_owned(),
        );
    }
    match req.uri().path() {
        "/metrics" => text(
            StatusCode::OK,
            "text/plain; version=0.0.4",
            source.metrics_text(),
        ),
        // The status page: a fixed file that asks this listener's JSON and /metrics for the rest.
        "/" | "/status" => text(StatusCode::OK, "text/html; charset=utf-8", STATUS_PAGE.to_owned()),
        "/healthz" | "/livez" => text(StatusCode::OK, "text/plain", "ok\n".to_owned()),
        "/readyz" => match source.readiness() {
            Ok(()) => text(StatusCode::OK, "text/plain", "ok\n".to_owned()),
            Err(why) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                format!("not ready: {why}\n"),
            ),
        },
        "/debug/skew" => json(&source.debug_skew()),
        "/debug/fleet" => json(&source.debug_fleet()),
        "/debug/routes" => json(&source.debug_routes()),
        "/debug/recent" => json(&source.debug_recent()),
        "/debug/shares" => json(&source.debug_shares()),
        _ => text(
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found; try / (the status page), /metrics, /healthz, /readyz, /debug/routes, /debug/fleet, /debug/recent, /debug/shares or /debug/skew\n".to_owned(),
        ),
    }
}

fn json(value: &serde_json::Value) -> Response<Full<Bytes>> {
    let body = serde_json::to_string_pretty(value).unwrap_or_default();
    text(StatusCode::OK, "application/json", body)
}

fn text(code: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = code;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    resp
}
