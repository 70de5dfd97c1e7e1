//! The client-side listener: HTTP/1.1 and h2c (prior knowledge) on one port, with graceful shutdown.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use futures_util::FutureExt;
use http::{Request, Response};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio_util::sync::CancellationToken;

use super::Edge;
use super::balance::{Intake, Place};
use super::detect::detect_h2;
use super::ending::{ConnClient, Served, run_to_end};
use super::handshake::{handshake_failed, reason_of};
use super::http1::FastPath;
use super::http2::ClientFaults;
use super::keepalive::{self, Exchanges};
use super::offenders::{hold_if_held_back, note_client_faults};
use super::policy::Policy;
use super::rebalance::Goaway;
use super::resets::ResetBudget;
use crate::identity::{ClientKey, VerifiedClient};
use crate::proxy::entry::{self, ClientConn, Incoming, ProxyBody};
use crate::proxy::wire::{Exchange, StreamGuard};
use crate::upstream::WheelTimer;

/// How much of a response an h2 client stream may have queued in skewgate, unsent for want of the
/// client's window: four 16 KiB frames.
const SEND_BUFFER: usize = 64 << 10;

/// Accepts clients until `stop` fires, then stops accepting, ends watches cleanly, lets in-flight
/// requests finish for the grace period, and returns whether every connection closed within it (the
/// rest are closed).
pub(crate) async fn serve(edge: Arc<Edge>, mut intake: Intake, stop: CancellationToken) -> bool {
    let graceful = GracefulShutdown::new();
    let builders = Arc::new(builders(&edge));
    super::capacity::spawn_worker_trim(&edge.connection_slots, stop.clone());
    edge.proxy.start_worker(stop.clone());
    while let Some(client) = intake.next(&edge.connection_slots, &stop).await {
        let accepted = Accepted {
            edge: edge.clone(),
            remote: client.remote,
            builders: builders.clone(),
            watcher: graceful.watcher(),
            stop: stop.clone(),
            _slot: client.slot,
            _place: client.place,
        };
        // One task type per transport, each sized for its own state only.
        match edge.settings.tls.as_ref().map(|t| t.config()) {
            None => tokio::spawn(accepted.cleartext(client.stream)),
            Some(tls) => tokio::spawn(accepted.tls(tls, client.stream)),
        };
    }
    drop(intake);
    edge.proxy.end_long_running();
    let open = graceful.count();
    tracing::debug!(
        worker = crate::runtime::worker::current(),
        open,
        "worker shutting down: no new connections; ending watches; waiting for in-flight requests"
    );
    tokio::select! {
        _ = graceful.shutdown() => true,
        _ = tokio::time::sleep(edge.settings.shutdown_grace) => false,
    }
}

/// The HTTP servers' settings, shared by every connection of a worker.
struct Builders {
    h1: http1::Builder,
    /// The longest request head HTTP/1.1 clients may send (hyper's buffer bound, 431 beyond).
    h1_head_limit: usize,
    h2: super::http2::Config,
}

/// HTTP/1.1, served in bursts by `keepalive`, upgradeable (exec, attach, port-forward); and HTTP/2.
fn builders(edge: &Edge) -> Builders {
    // Heads up to twice the bound are read whole and answered 431 with a Status (by the check
    // before sending upstream); larger ones are cut off by hyper's own 431, before they are read.
    let head_bound = edge.header_list.saturating_mul(2);
    let h1_head_limit = head_bound.max(16 << 10);
    let mut h1 = http1::Builder::new();
    // hyper's timers on the worker's wheel (upstream/deadline.rs), not tokio's.
    h1.timer(WheelTimer)
        .header_read_timeout(Duration::from_secs(30))
        .max_buf_size(h1_head_limit);
    let h2 = super::http2::limits(
        1000,
        1 << 20,
        8 << 20,
        // What a response may hold in skewgate for a client that reads it slower than the
        // apiserver sends (hyper's default was 400 KiB); with the upstream stream's window, the
        // most one slow stream costs (`cargo bench --bench large`).
        SEND_BUFFER,
        // What skewgate and the apiserver behind accept is checked per request, and answered 431
        // with a Status rather than a GOAWAY.
        u32::try_from(head_bound.max(16 << 10)).unwrap_or(u32::MAX),
    );
    let h2 = super::http2::Config {
        limits: h2,
        ping_every: edge.settings.client_ping_every,
        ping_timeout: edge.settings.client_ping_timeout,
        budget: Some(edge.budget.clone()),
    };
    Builders {
        h1,
        h1_head_limit,
        h2,
    }
}

/// An accepted TCP connection, before protocol detection or TLS.
struct Accepted {
    edge: Arc<Edge>,
    remote: SocketAddr,
    builders: Arc<Builders>,
    watcher: Watcher,
    /// Fired when the server shuts down.
    stop: CancellationToken,
    /// Its place under the connection bound, given back when the connection ends.
    _slot: tokio::sync::OwnedSemaphorePermit,
    /// Its place among its worker's connections.
    _place: Place,
}

impl Accepted {
    /// Cleartext: HTTP/1.1, or h2c when the client starts with the HTTP/2 preface.
    async fn cleartext(self, stream: tokio::net::TcpStream) {
        // The first request's deadline covers protocol detection too.
        let detected =
            tokio::time::timeout(self.edge.settings.first_request_timeout, detect_h2(stream));
        let Ok(Ok((is_h2, stream))) = detected.await else {
            return;
        };
        self.serve(stream, None, is_h2).await;
    }

    /// TLS: the protocol by ALPN, the client's identity from its certificate.
    async fn tls(self, tls: Arc<rustls::ServerConfig>, stream: tokio::net::TcpStream) {
        let (edge, remote) = (&self.edge, self.remote);
        let accepted = tokio::time::timeout(
            edge.settings.handshake_timeout,
            tokio_rustls::TlsAcceptor::from(tls).accept(stream),
        )
        .await;
        let stream = match accepted {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                return handshake_failed(edge, remote, reason_of(&e), &e.to_string());
            }
            Err(_) => {
                return handshake_failed(
                    edge,
                    remote,
                    "timeout",
                    "no TLS handshake within the handshake timeout",
                );
            }
        };
        let (_, session) = stream.get_ref();
        let is_h2 = session.alpn_protocol() == Some(b"h2");
        let identity = session
            .peer_certificates()
            .and_then(|c| c.first())
            .and_then(VerifiedClient::from_certificate);
        self.serve(stream, identity, is_h2).await;
    }

    /// Serves the connection, once its protocol and client are known.
    async fn serve<I>(self, stream: I, identity: Option<Arc<VerifiedClient>>, is_h2: bool)
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let conn = Connection {
            edge: self.edge,
            remote: self.remote,
            identity,
            is_h2,
        };
        conn.serve(stream, &self.builders, self.watcher, self.stop)
            .await;
    }
}

/// One accepted client connection, after TLS (if any).
struct Connection {
    edge: Arc<Edge>,
    remote: SocketAddr,
    identity: Option<Arc<VerifiedClient>>,
    is_h2: bool,
}

impl Connection {
    async fn serve<I>(self, io: I, builders: &Builders, watcher: Watcher, stop: CancellationToken)
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let Connection {
            edge,
            remote,
            identity,
            is_h2,
        } = self;
        let client = ClientKey::of(identity.as_deref().map(|c| &c.identity), remote).hash();
        // A client known only by its address is served at once, on probation, whatever its
        // protocol: the address may be many clients (SNAT, a node's host network), and holding its
        // HTTP/2 connections held every neighbour's for one offender's faults.
        let by_address = identity.is_none();
        let verified = identity.clone();
        let probation = hold_if_held_back(&edge, client, remote, by_address).await;
        let protocol = if is_h2 { "http2" } else { "http1" };
        let gauge = edge
            .metrics
            .client_connections
            .with_label_values(&[protocol]);
        gauge.inc();
        let first_request = Arc::new(AtomicBool::new(false));
        let seen = first_request.clone();
        let resets = ResetBudget::new();
        let streams = resets.clone();
        let goaway = (is_h2 && edge.goaway_chance > 0).then(|| Arc::new(Goaway::default()));
        let drawn = goaway.clone();
        let policy = Policy {
            edge: edge.clone(),
            key: client,
            remote,
            by_address,
            goaway,
        };
        let peer = client_conn(&edge, remote, identity, policy);
        let handle = move |req, exchange: Option<Exchange>| {
            let peer = peer.clone();
            super::capacity::request_begun();
            seen.store(true, std::sync::atomic::Ordering::Relaxed);
            // Dropped with this future if the client resets the stream before the response.
            let stream = streams.open();
            let start = stream.started();
            // The request's own future, mapped: an async block around it would hold the request
            // a second time beside it.
            entry::handle(peer, req, start).map(move |resp| finish(resp, stream, exchange))
        };
        // Each branch boxed, so that a connection holds only its own protocol's state. The request's
        // future (about 1.2 KiB) is boxed per request in both: an HTTP/2 stream frees it when the
        // response's head is sent, not when its body ends (a watch: hours later); hyper's HTTP/1.1
        // server would keep a slot of that size for as long as it serves.
        let served: Served<'_> = if is_h2 {
            let faults = (edge.clone(), client, remote, verified.clone());
            http2_served(io, builders, handle, faults, watcher, (stop, drawn))
        } else {
            http1_served(
                io,
                builders,
                handle,
                (edge.settings.idle_timeout, probation),
                watcher,
                stop,
            )
        };
        let who = ConnClient {
            key: client,
            remote,
            verified: verified.as_deref(),
        };
        let ends = (&*first_request, &*resets);
        run_to_end(&edge, who, served, ends, builders.h1_head_limit).await;
        gauge.dec();
    }
}

/// What the connection's requests share, its client held to `policy`: one reference per request,
/// counted on this worker only.
fn client_conn(
    edge: &Edge,
    remote: SocketAddr,
    identity: Option<Arc<VerifiedClient>>,
    policy: Policy,
) -> Arc<ClientConn> {
    Arc::new(ClientConn::new(
        edge.proxy.clone(),
        remote,
        identity,
        Box::new(policy),
    ))
}

/// An HTTP/2 connection being served; each stream reset for the client's fault counted against
/// the client, and each head it answered 431 unread kept for the status page (`faults`: the proxy,
/// the client's key, address and verified identity).
fn http2_served<'a, I, H, F>(
    io: I,
    builders: &'a Builders,
    handle: H,
    (edge, client, remote, verified): (Arc<Edge>, u64, SocketAddr, Option<Arc<VerifiedClient>>),
    watcher: Watcher,
    (stop, drawn): (CancellationToken, Option<Arc<Goaway>>),
) -> Served<'a>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    H: Fn(Request<Incoming>, Option<Exchange>) -> F + Send + Sync + 'a,
    F: Future<Output = Response<ProxyBody>> + Send + 'static,
{
    Box::pin(async move {
        // Kept until the connection ends: the server's shutdown waits for it.
        let _watcher = watcher;
        let shutdown = std::pin::pin!(shutdown_signal(stop, drawn));
        let limit = builders.h2.limits.max_header_list_size as usize;
        let faults = |f: ClientFaults| {
            note_client_faults(&edge, client, remote, f.resets);
            let who = ConnClient {
                key: client,
                remote,
                verified: verified.as_deref(),
            };
            who.heads_too_large(&edge, f.heads_too_large, (limit, "HTTP/2"));
        };
        super::http2::serve(
            io,
            &builders.h2,
            |req| Box::pin(handle(req, None)),
            shutdown,
            &faults,
        )
        .await
        .map_err(Into::into)
    })
}

/// An HTTP/1.1 connection being served: requests without a body by skewgate's own server
/// (`http1`), the others by hyper in bursts (`keepalive`).
fn http1_served<'a, I, H, F>(
    io: I,
    builders: &'a Builders,
    handle: H,
    (idle_timeout, probation): (Duration, Option<std::time::Instant>),
    watcher: Watcher,
    stop: CancellationToken,
) -> Served<'a>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    H: Fn(Request<Incoming>, Option<Exchange>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<ProxyBody>> + Send + 'static,
{
    let exchanges = Arc::new(Exchanges::default());
    let begun = exchanges.clone();
    let fast_handle = handle.clone();
    let boxed = service_fn(move |req: Request<hyper::body::Incoming>| {
        let req = req.map(Incoming::Http1);
        Box::pin(handle(req, Some(begun.begin())).map(Ok::<_, Infallible>))
    });
    let mut fast = FastPath::new(
        move |req| Box::pin(fast_handle(req, None)),
        builders.h1_head_limit,
        idle_timeout,
    )
    .on_probation(probation);
    Box::pin(async move {
        // Kept until the connection ends: the server's shutdown waits for it.
        let _watcher = watcher;
        keepalive::serve(io, &builders.h1, boxed, exchanges, &mut fast, &stop).await
    })
}

/// A response as its connection sends it: its body carries the client stream's guard and, over
/// HTTP/1.1, the exchange, which learns of a switch of protocols.
fn finish(
    resp: Response<ProxyBody>,
    stream: StreamGuard,
    exchange: Option<Exchange>,
) -> Response<ProxyBody> {
    if let Some(e) = &exchange
        && resp.status() == http::StatusCode::SWITCHING_PROTOCOLS
    {
        e.upgraded();
    }
    resp.map(|body| body.with_stream(stream).with_exchange(exchange))
}

/// When an HTTP/2 connection is to be sent GOAWAY: the server shuts down, or one of its requests
/// drew the rebalancing GOAWAY.
async fn shutdown_signal(stop: CancellationToken, goaway: Option<Arc<Goaway>>) {
    let drawn = async {
        match &goaway {
            Some(g) => g.drawn().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = stop.cancelled() => {}
        () = drawn => {}
    }
}
