//! The client-side listener: HTTP/1.1 and h2c (prior knowledge) on one port, with graceful shutdown.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::{Proxy, service};

/// The HTTP/2 connection preface a prior-knowledge client sends first.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Accepts clients until `stop` fires, then stops accepting, ends watches cleanly, lets in-flight
/// requests finish for the grace period, and returns.
pub async fn serve(proxy: Arc<Proxy>, listener: TcpListener, stop: CancellationToken) {
    let graceful = GracefulShutdown::new();
    let mut h1 = http1::Builder::new();
    h1.timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30));
    let mut h2 = http2::Builder::new(TokioExecutor::new());
    h2.timer(TokioTimer::new())
        .max_concurrent_streams(1000)
        .keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(15))
        .initial_stream_window_size(1 << 20)
        .initial_connection_window_size(8 << 20);
    loop {
        let (stream, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let proxy = proxy.clone();
        let (h1, h2) = (h1.clone(), h2.clone());
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let is_h2 = match is_h2_prior_knowledge(&stream).await {
                Ok(b) => b,
                Err(_) => return,
            };
            let protocol = if is_h2 { "http2" } else { "http1" };
            let gauge = proxy
                .metrics
                .client_connections
                .with_label_values(&[protocol]);
            gauge.inc();
            let svc_proxy = proxy.clone();
            let service = service_fn(move |req| {
                let proxy = svc_proxy.clone();
                async move { Ok::<_, Infallible>(service::handle(proxy, remote, req).await) }
            });
            let io = TokioIo::new(stream);
            let result = if is_h2 {
                watcher.watch(h2.serve_connection(io, service)).await
            } else {
                watcher.watch(h1.serve_connection(io, service)).await
            };
            if let Err(e) = result {
                tracing::debug!(%remote, error = %e, "client connection ended with an error");
            }
            gauge.dec();
        });
    }
    drop(listener);
    tracing::info!(
        "shutting down: no new connections; ending watches; waiting for in-flight requests"
    );
    proxy.stop_long_running.cancel();
    tokio::select! {
        _ = graceful.shutdown() => tracing::info!("all client connections closed"),
        _ = tokio::time::sleep(proxy.settings.shutdown_grace) => tracing::warn!("grace period over; closing the remaining connections"),
    }
}

/// Peeks at the first bytes: the HTTP/2 preface means h2c with prior knowledge.
async fn is_h2_prior_knowledge(stream: &TcpStream) -> std::io::Result<bool> {
    let mut buf = [0u8; 24];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(30), stream.peek(&mut buf))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no request"))??;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if !H2_PREFACE.starts_with(&buf[..n]) {
            return Ok(false);
        }
        if n == H2_PREFACE.len() {
            return Ok(true);
        }
        // A partial preface: wait for more bytes.
        stream.readable().await?;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
