//! HTTP/1.1 keep-alive that holds no buffer while the connection is idle.
//!
//! hyper's HTTP/1.1 server keeps a read buffer (8–16 KiB) and a write buffer (8 KiB) for the whole
//! life of a connection, idle or not, and has no setting to let them go. A node's kubelet and its
//! plugins hold several HTTP/1.1 connections each, idle most of the time: with 10,000 of them that
//! was about 300 MB doing nothing.
//!
//! So hyper serves a connection in bursts, and only the requests skewgate's own fast path leaves to
//! it (`http1`: those with a body, upgrades, and what hyper answers 400 or 431); the fast path
//! serves the others and waits for the next request holding no buffer. A burst begins with the
//! bytes the fast path read of the request it left, and the stream is lent to a hyper connection;
//! when the worker's idle sweep (`sweep.rs`) ticks and finds that every response has ended and the
//! client has sent nothing that is not yet a request, the read that would wait shows hyper an end
//! of stream instead. hyper takes that for a client closing an idle connection: it flushes what it
//! has and shuts the stream down, and the shutdown hands the stream back here (it is not closed),
//! to the fast path again.
//!
//! An idle connection is closed after 90 s, as kube-apiserver closes its own (`IdleTimeout` of its
//! secure serving); the head of a request must then come within the header timeout (30 s).
//!
//! What is not given back: a client that pipelines requests and pauses in the middle of a request
//! head that it sent while the previous response was still being written. hyper has those bytes
//! and the connection cannot tell them from a body's; the end of stream makes hyper close the
//! connection. Kubernetes clients do not pipeline.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::task::Waker;
use std::time::Duration;

use bytes::Bytes;
use futures_util::task::AtomicWaker;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::HttpService;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

mod lent;
mod sweep;

use super::http1::{FastPath, Outcome};
use super::signals::unless;
use crate::proxy::entry::Incoming as RequestBody;
use crate::proxy::entry::ProxyBody;
use crate::proxy::wire::{Exchange, ExchangeEnd};
use lent::Lent;

/// How long a closing idle connection may take to send its TLS close or FIN.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// How often a worker's quiet connections are woken to give their buffers back: within a tick of
/// its last response. Not at once: a client that sends requests whose end hyper alone finds back
/// to back keeps its hyper connection, as building one per request costs about 1 µs, and no
/// request wakes its connection an extra time. A request whose framing says where it ends (a
/// length, or a chunked body scanned as it passes) is hyper's alone, and the stream comes back as
/// its response ends (`Lent::read_within`).
const SWEEP: Duration = Duration::from_secs(1);

/// Serves an HTTP/1.1 connection until it closes (or `stop` fires): its requests go to the fast
/// path (`http1`), which waits for them holding no buffer; a request the fast path leaves to hyper
/// starts a burst, the stream lent to a new hyper connection with the bytes read so far, until
/// hyper gives the stream back.
pub(super) async fn serve<I, S, H, F>(
    mut io: I,
    h1: &http1::Builder,
    service: S,
    exchanges: Arc<Exchanges>,
    fast: &mut FastPath<H>,
    stop: &CancellationToken,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: HttpService<Incoming, ResBody = ProxyBody> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    H: FnMut(http::Request<RequestBody>) -> F,
    F: Future<Output = http::Response<ProxyBody>>,
{
    let mut leftover = Bytes::new();
    loop {
        let (prefix, len) = match fast.serve(&mut io, leftover, stop).await {
            Outcome::Closed => {
                let _ = tokio::time::timeout(CLOSE_TIMEOUT, io.shutdown()).await;
                return Ok(());
            }
            Outcome::ToHyper(prefix, len) => (prefix, len),
        };
        exchanges.bursts.fetch_add(1, Ordering::Relaxed);
        let (back, mut returned) = oneshot::channel();
        let lent = TokioIo::new(Lent::new(io, exchanges.clone(), back, prefix, len));
        // Boxed: the connection's task holds hyper's state only while a burst is served.
        let mut conn = Box::pin(h1.serve_connection(lent, service.clone()).with_upgrades());
        until_closed(conn.as_mut(), stop.clone()).await?;
        // hyper's state (its buffers) goes now, not when the next request comes.
        drop(conn);
        // Not handed back: the client closed, hyper closed, or the stream was upgraded.
        let Ok((back, rest)) = returned.try_recv() else {
            return Ok(());
        };
        io = back;
        leftover = rest;
    }
}

/// What the requests of one HTTP/1.1 connection tell its stream: whether one is under way.
pub(super) struct Exchanges {
    /// Requests handed to the service whose responses have not ended.
    open: AtomicU32,
    /// Requests handed to the service, ever (wrapping).
    begun: AtomicU32,
    /// The connection switched protocols: its stream is a tunnel now, never idle.
    upgraded: AtomicBool,
    /// hyper connections the stream was lent to.
    bursts: AtomicU32,
    /// The connection's task, while a read waits for a response to end: the last one to end asks
    /// the sweep to wake it.
    waiting: AtomicWaker,
    /// The sweep tick at which the connection last asked to be woken (`NEVER` before it did).
    registered: AtomicU64,
    /// hyper has had the whole of the one request it was lent the stream for: the stream goes
    /// back as soon as its response ends, not at the sweep's next tick.
    prompt: AtomicBool,
}

const NEVER: u64 = u64::MAX;

impl Default for Exchanges {
    fn default() -> Exchanges {
        Exchanges {
            open: AtomicU32::new(0),
            begun: AtomicU32::new(0),
            upgraded: AtomicBool::new(false),
            bursts: AtomicU32::new(0),
            prompt: AtomicBool::new(false),
            waiting: AtomicWaker::new(),
            registered: AtomicU64::new(NEVER),
        }
    }
}

impl Exchanges {
    /// A request was read: the connection is busy until the returned exchange is dropped (with its
    /// response's body).
    pub(super) fn begin(self: &Arc<Self>) -> Exchange {
        self.open.fetch_add(1, Ordering::Relaxed);
        self.begun.fetch_add(1, Ordering::Relaxed);
        Exchange::new(self.clone())
    }

    fn begun(&self) -> u32 {
        self.begun.load(Ordering::Relaxed)
    }

    /// Whether nothing is under way: every response ended, and no upgrade.
    fn quiet(&self) -> bool {
        self.open.load(Ordering::Relaxed) == 0 && !self.upgraded.load(Ordering::Relaxed)
    }

    /// Has `waker` (when there is one) woken at the sweep's next tick, once per tick.
    fn wake_at_next_tick(&self, waker: impl FnOnce() -> Option<Waker>) {
        let now = sweep::tick();
        if self.registered.load(Ordering::Relaxed) != now
            && let Some(w) = waker()
        {
            self.registered.store(now, Ordering::Relaxed);
            sweep::wake_next_tick(w);
        }
    }

    /// Whether the sweep has ticked since the connection last asked to be woken.
    fn swept(&self) -> bool {
        self.registered.load(Ordering::Relaxed) < sweep::tick()
    }
}

impl ExchangeEnd for Exchanges {
    fn exchange_ended(&self) {
        if self.open.fetch_sub(1, Ordering::Relaxed) == 1 {
            if self.prompt.load(Ordering::Relaxed) {
                if let Some(waker) = self.waiting.take() {
                    waker.wake();
                }
                return;
            }
            self.wake_at_next_tick(|| self.waiting.take());
        }
    }

    fn upgraded(&self) {
        self.upgraded.store(true, Ordering::Relaxed);
    }
}

/// Serves an HTTP/1.1 connection until it closes; when the server shuts down, the request under
/// way finishes and the connection is closed after it. (An HTTP/2 connection's GOAWAY is
/// `http2::serve`'s.)
///
/// The connection is borrowed pinned, not moved in: moved, it would be held twice in this future's
/// state (as the argument and as the pinned local).
async fn until_closed<C, E>(mut conn: Pin<&mut C>, stop: CancellationToken) -> Result<(), E>
where
    C: Future<Output = Result<(), E>> + GracefulShutdownable + ?Sized,
{
    let signal = std::pin::pin!(stop.cancelled());
    match unless(conn.as_mut(), signal).await {
        Ok(r) => r,
        Err(()) => {
            conn.as_mut().shut_down_gracefully();
            conn.await
        }
    }
}

/// A connection that can be closed gracefully (GOAWAY, its open streams finish).
trait GracefulShutdownable {
    fn shut_down_gracefully(self: Pin<&mut Self>);
}

impl<I, S> GracefulShutdownable for http1::UpgradeableConnection<I, S>
where
    S: hyper::service::HttpService<hyper::body::Incoming>,
    S::ResBody: http_body::Body + 'static,
    <S::ResBody as http_body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    fn shut_down_gracefully(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

#[cfg(test)]
mod tests;
