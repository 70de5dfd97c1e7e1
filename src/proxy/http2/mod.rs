//! HTTP/2 clients (h2c and h2 over TLS), served with h2's server directly: no hyper layer between
//! the connection and skewgate's requests.
//!
//! Why not hyper's HTTP/2 server, as before: per request it turned h2's request into its own body
//! type, spawned a task for the stream, took a lock per received frame for its keep-alive PINGs,
//! checked the response for connection-specific headers and piped the body through its own buffer
//! type, about 2,800 instructions per proxied GET (`bench/instructions.sh`, `bare` − `bare-h2`) of
//! which skewgate needs none: the protocol's limits are h2's (the stream limit, the rapid-reset
//! budget, CONTINUATION and header-list floods, flow control), and the rest is here, each in a few
//! lines: the streams of a connection polled by the connection's own task (`FuturesUnordered`), a
//! client's reset dropping its request (`stream`), keep-alive PINGs (`KeepAlive`), and a graceful
//! GOAWAY.

mod stream;

use stream::Stream;

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use futures_util::task::AtomicWaker;
use h2::server::Builder;
use h2::{Ping, PingPong, Reason};
use http::{Request, Response};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::{Instant, Sleep};

use super::body::ProxyBody;
use super::request_body::Incoming;

/// How an HTTP/2 client connection is served.
pub(super) struct Config {
    /// The settings skewgate announces, and h2's limits.
    pub builder: Builder,
    /// PING after this long, and close the connection when its answer has not come within
    /// `ping_timeout`: a client gone without a FIN (a node powered off) holds nothing for long.
    pub ping_every: Duration,
    pub ping_timeout: Duration,
}

/// The settings skewgate announces to HTTP/2 clients and the limits it holds them to, as hyper's
/// server set them for skewgate before (listener.rs has the why of each value).
pub(super) fn builder(
    max_concurrent_streams: u32,
    stream_window: u32,
    connection_window: u32,
    send_buffer: usize,
    max_header_list_size: u32,
) -> Builder {
    let mut b = Builder::new();
    b.max_concurrent_streams(max_concurrent_streams)
        .initial_window_size(stream_window)
        .initial_connection_window_size(connection_window)
        .max_send_buffer_size(send_buffer)
        .max_header_list_size(max_header_list_size)
        // Streams the client made skewgate reset (malformed, over a limit) before the connection is
        // closed with ENHANCE_YOUR_CALM; h2's and hyper's default.
        .max_local_error_reset_streams(Some(1024));
    b
}

/// Serves one HTTP/2 connection until it closes: each request handed to `handle`, its response
/// sent back. When `shutdown` fires, the connection is sent GOAWAY and its open streams finish.
///
/// Returns h2's error when the connection failed (the client broke the protocol, or went away).
pub(super) async fn serve<I, H, F>(
    io: I,
    config: &Config,
    mut handle: H,
    mut shutdown: Pin<&mut (dyn Future<Output = ()> + Send)>,
) -> Result<(), h2::Error>
where
    I: AsyncRead + AsyncWrite + Unpin,
    H: FnMut(Request<Incoming>) -> Pin<Box<F>>,
    F: Future<Output = Response<ProxyBody>>,
{
    let mut conn = config.builder.handshake::<_, Bytes>(io).await?;
    let mut keep_alive = KeepAlive::new(conn.ping_pong(), config);
    let mut streams = FuturesUnordered::new();
    let wakes = Wakes::new();
    let mut shutting_down = false;
    let ended = poll_fn(|cx| {
        wakes.conn.task.register(cx.waker());
        if wakes.control.woken.swap(false, Ordering::Acquire) {
            let mut control = Context::from_waker(&wakes.control_waker);
            if !shutting_down && shutdown.as_mut().poll(&mut control).is_ready() {
                shutting_down = true;
                conn.graceful_shutdown();
                wakes.conn.woken.store(true, Ordering::Release);
            }
            if keep_alive.poll_timed_out(&mut control).is_ready() {
                tracing::debug!("an HTTP/2 client did not answer PING in time; closing");
                conn.abrupt_shutdown(Reason::NO_ERROR);
                wakes.conn.woken.store(true, Ordering::Release);
            }
        }
        let mut conn_cx = Context::from_waker(&wakes.conn_waker);
        loop {
            // The streams first: what they queue on the connection is written below, in this
            // turn, not in one more turn of the task that their wake-up would cost.
            // Relaxed: a waker that does not see it yet wakes the task once more, no harm; one
            // that sees it stored its `woken` before it looked, and that is seen by the swap
            // below, which follows the sequentially consistent store of `false` (which a waker
            // seeing `true` precedes).
            wakes.conn.streams_polled.store(true, Ordering::Relaxed);
            while let Poll::Ready(Some(())) = streams.poll_next_unpin(cx) {}
            wakes.conn.streams_polled.store(false, Ordering::SeqCst);
            // The connection only when it has something to do: bytes came, or a stream queued a
            // frame. A request's upstream answer wakes its stream alone.
            if !wakes.conn.woken.swap(false, Ordering::SeqCst) {
                return Poll::Pending;
            }
            match conn.poll_accept(&mut conn_cx) {
                Poll::Ready(Some(Ok((req, respond)))) => {
                    streams.push(Stream::new(handle(req.map(Incoming::Http2)), respond));
                    // What else came with it: the connection has read all there was, and waits
                    // for more.
                    while let Some((req, respond)) = conn.next_received() {
                        streams.push(Stream::new(handle(req.map(Incoming::Http2)), respond));
                    }
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e)),
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => {}
            }
        }
    })
    .await;
    // The connection's end errs every stream still open (h2 does so when it is dropped): their
    // requests end as a client's reset ends them.
    drop(conn);
    while streams.next().await.is_some() {}
    ended
}

/// Who woke a connection's task: the connection (bytes came, a stream queued a frame) or its
/// control (shutdown, keep-alive). The task polls only what woke it, and a stream that queues a
/// frame while the task polls it does not make the task run once more: the connection is driven
/// right after its streams.
struct Wakes {
    conn: Arc<ConnWake>,
    control: Arc<ControlWake>,
    conn_waker: Waker,
    control_waker: Waker,
}

struct ConnWake {
    task: AtomicWaker,
    woken: AtomicBool,
    /// The task is polling the streams: a wake-up of the connection is noted, not sent.
    streams_polled: AtomicBool,
}

struct ControlWake {
    conn: Arc<ConnWake>,
    woken: AtomicBool,
}

impl Wakes {
    fn new() -> Wakes {
        let conn = Arc::new(ConnWake {
            task: AtomicWaker::new(),
            woken: AtomicBool::new(true),
            streams_polled: AtomicBool::new(false),
        });
        let control = Arc::new(ControlWake {
            conn: conn.clone(),
            woken: AtomicBool::new(true),
        });
        Wakes {
            conn_waker: Waker::from(conn.clone()),
            control_waker: Waker::from(control.clone()),
            conn,
            control,
        }
    }
}

impl Wake for ConnWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Sequentially consistent: a wake-up from another thread as the streams' polling ends is
        // either seen by the task's check after it, or sent.
        self.woken.store(true, Ordering::SeqCst);
        if !self.streams_polled.load(Ordering::SeqCst) {
            self.task.wake();
        }
    }
}

impl Wake for ControlWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.conn.task.wake();
    }
}

/// The connection's keep-alive PINGs: one every `ping_every`, each answered within `ping_timeout`.
///
/// hyper PINGed only a connection that had read nothing for the interval, at the cost of a lock
/// taken on every frame received; a PING of 17 bytes every 30 seconds on a busy connection costs
/// less than that lock on one request.
struct KeepAlive {
    ping: Option<PingPong>,
    every: Duration,
    timeout: Duration,
    /// When the next PING is due, or when the one sent has timed out.
    sleep: Pin<Box<Sleep>>,
    sent: bool,
}

impl KeepAlive {
    fn new(ping: Option<PingPong>, config: &Config) -> KeepAlive {
        KeepAlive {
            ping,
            every: config.ping_every,
            timeout: config.ping_timeout,
            sleep: Box::pin(tokio::time::sleep(config.ping_every)),
            sent: false,
        }
    }

    /// Sends the PING when it is due; ready when the one sent has not been answered in time.
    fn poll_timed_out(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Some(ping) = &mut self.ping else {
            return Poll::Pending;
        };
        loop {
            if self.sent {
                match ping.poll_pong(cx) {
                    Poll::Ready(Ok(_)) => {
                        self.sent = false;
                        self.sleep.as_mut().reset(Instant::now() + self.every);
                    }
                    // The connection is failing: it says so itself.
                    Poll::Ready(Err(_)) => return Poll::Pending,
                    Poll::Pending => {}
                }
            }
            if self.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            if self.sent {
                return Poll::Ready(());
            }
            if ping.send_ping(Ping::opaque()).is_err() {
                self.ping = None;
                return Poll::Pending;
            }
            self.sent = true;
            self.sleep.as_mut().reset(Instant::now() + self.timeout);
        }
    }
}
