//! HTTP/2 clients (h2c and h2 over TLS), served at the frame level: h2's codec (framing, HPACK,
//! the CONTINUATION and header-list bounds) and skewgate's own streams, windows and limits.
//!
//! Why not h2's server (nor hyper's over it, before that): measured with callgrind
//! (`bench/instructions.sh`), h2's server-side stream machinery (its stream store of linked queues,
//! reference-counted stream handles, a lock and a queue per stream operation, a prioritizer, frames
//! moved through per-stream slabs) cost about as much per proxied GET as all the rest of skewgate's
//! work, and held skewgate at HAProxy's CPU per request over h2c. A client connection of
//! skewgate's needs much less: a slab of streams keyed by id, one queue of control frames, the
//! streams with data to write in turn, and flow control by two numbers per stream. The limits a
//! client is held to are kept, each where h2 kept it: the stream limit (REFUSED_STREAM), the bound
//! on streams reset for the client's fault (GOAWAY ENHANCE_YOUR_CALM), the header list and
//! CONTINUATION bounds (the codec's), flow control both ways, no reading past answers the client
//! does not read (PING and SETTINGS floods), and a 431 for a head over the header-list bound. The
//! rapid-reset budget and the first-request timeout are skewgate's, around this (`resets`,
//! `listener`).
//!
//! - `conn`: frames in to the state, frames out to the socket, SETTINGS, PING and GOAWAY;
//!   `state`: the streams and windows under the connection's one lock, `recv` frames into it and `send`
//!   responses out of it; `request`: a request made
//!   from its header block and checked; `handles`: what a request holds of its stream;
//!   `stream`: a stream's response, awaited and piped; `streams`: the connection's streams, polled
//!   when woken.
//! - here: the connection's task: its woken streams polled by it, the connection driven only when
//!   it was woken for it; `control`: what it watches beside its frames, the server's shutdown (a
//!   graceful GOAWAY) and keep-alive PINGs.

mod blocks;
mod conn;
mod control;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod fuzzing;
mod handles;
mod recv;
mod request;
mod send;
mod send_window;
mod stall;
mod state;
mod stream;
mod streams;
#[cfg(test)]
mod tests;

use control::{Control, KeepAlive};
use handles::{Responder, Shared};
use state::ConnState;
use stream::StreamTask;
pub(super) use stream::date;
use streams::Streams;

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use http::{Request, Response};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::http2core::Failure;
use crate::proxy::entry::Incoming;
use crate::proxy::entry::ProxyBody;
use crate::upstream::ResponseBudget;

/// The settings skewgate announces to HTTP/2 clients and the limits it holds them to.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    pub max_concurrent_streams: u32,
    /// The window each stream grants the client (SETTINGS_INITIAL_WINDOW_SIZE).
    pub stream_window: u32,
    /// The connection's window granted the client.
    pub connection_window: u32,
    /// What a stream's response may hold in skewgate, unwritten, before the pipe takes no more.
    pub send_buffer: usize,
    /// SETTINGS_MAX_HEADER_LIST_SIZE; a larger head is answered 431 by the connection.
    pub max_header_list_size: u32,
    /// Streams reset for the client's fault before the connection is closed with
    /// ENHANCE_YOUR_CALM.
    pub max_local_error_resets: usize,
}

/// How an HTTP/2 client connection is served.
pub(super) struct Config {
    pub limits: Limits,
    /// PING after this long, and close the connection when its answer has not come within
    /// `ping_timeout`: a client gone without a FIN (a node powered off) holds nothing for long.
    pub ping_every: Duration,
    pub ping_timeout: Duration,
    /// The process's bound on response data held, which counts what clients' streams hold
    /// unwritten too.
    pub budget: Option<Arc<ResponseBudget>>,
}

/// The settings skewgate announces to HTTP/2 clients and the limits it holds them to, as hyper's
/// and h2's servers set them for skewgate before (listener.rs has the why of each value).
pub(super) fn limits(
    max_concurrent_streams: u32,
    stream_window: u32,
    connection_window: u32,
    send_buffer: usize,
    max_header_list_size: u32,
) -> Limits {
    Limits {
        max_concurrent_streams,
        stream_window,
        connection_window,
        send_buffer,
        max_header_list_size,
        // Streams the client made skewgate reset (malformed, over a limit) before the connection
        // is closed with ENHANCE_YOUR_CALM; h2's and hyper's default.
        max_local_error_resets: 1024,
    }
}

/// What a client did wrong in a turn of its connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ClientFaults {
    /// Streams reset for its fault (a malformed request, one over a limit).
    pub resets: usize,
    /// Of those, heads over the header-list bound, answered 431 before they were read whole.
    pub heads_too_large: usize,
}

/// Serves one HTTP/2 connection until it closes: each request handed to `handle`, its response
/// sent back. When `shutdown` fires, the connection is sent GOAWAY and its open streams finish.
///
/// What the client did wrong in a turn of the connection is told to `faults`.
///
/// Returns an error when the connection failed (the client broke the protocol, or went away).
pub(super) async fn serve<I, H, F>(
    io: I,
    config: &Config,
    mut handle: H,
    shutdown: Pin<&mut (dyn Future<Output = ()> + Send)>,
    faults: &(dyn Fn(ClientFaults) + Sync),
) -> Result<(), h2::Error>
where
    I: AsyncRead + AsyncWrite + Unpin,
    H: FnMut(Request<Incoming>) -> Pin<Box<F>>,
    F: Future<Output = Response<ProxyBody>>,
{
    let wakes = Wakes::new();
    let mut state = ConnState::new(config.limits, wakes.conn_waker.clone());
    state.budget = config.budget.clone();
    let codec = conn::handshake(io, &mut state).await?;
    let shared = Shared::new(state);
    let mut wire = conn::Wire {
        codec,
        faults: ClientFaults::default(),
        block: Default::default(),
        stall: Default::default(),
        unflushed: false,
    };
    let mut control = Control {
        shutdown,
        shutting_down: false,
        keep_alive: KeepAlive::new(config),
    };
    let mut streams = Streams::new(wakes.conn.clone());
    let ended = poll_fn(|cx| {
        // The requests this turn begins and ends read the clock once (`clock`).
        let _turn = crate::runtime::turn::TurnGuard::begin();
        wakes.conn.task.register(cx.waker());
        if wakes.control.woken.swap(false, Ordering::Acquire)
            && control.poll(&wakes.control_waker, &shared).is_ready()
        {
            return Poll::Ready(Ok(()));
        }
        let mut conn_cx = Context::from_waker(&wakes.conn_waker);
        let mut passes = 0;
        let mut turns = 0;
        loop {
            // The streams first: what they queue on the connection is written below, in this
            // turn, not in one more turn of the task that their wake-up would cost.
            // Relaxed: a waker that does not see it yet wakes the task once more, no harm; one
            // that sees it stored its `woken` before it looked, and that is seen by the swap
            // below, which follows the sequentially consistent store of `false` (which a waker
            // seeing `true` precedes).
            wakes.conn.streams_polled.store(true, Ordering::Relaxed);
            streams.poll();
            wakes.conn.streams_polled.store(false, Ordering::SeqCst);
            passes += 1;
            // The connection only when it has something to do: bytes came, the socket takes more,
            // or a stream queued a frame. A request's upstream answer wakes its stream alone.
            if !wakes.conn.woken.swap(false, Ordering::SeqCst) {
                // Streams woken while the streams were polled (one by another, or from another
                // thread, which did not wake the task): polled now, or, after a few passes, in
                // the task's next turn, so that a stream that wakes itself every time does not
                // hold the worker.
                if streams.any_woken() {
                    if passes < 4 {
                        continue;
                    }
                    cx.waker().wake_by_ref();
                }
                return Poll::Pending;
            }
            // A client with a backlog of frames is read a few turns at a time: in between, the
            // task yields, and what watches the connection (its reset budget) is looked at.
            turns += 1;
            if turns > MAX_TURNS {
                wakes.conn.woken.store(true, Ordering::SeqCst);
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            // A request is handed over as its HEADERS is read, under the connection's lock:
            // `handle` makes its future and does not poll it.
            let mut open = |o: state::Opened| {
                let body = handles::request_body(&shared, o.key, o.end_stream);
                let req = o.request.map(|()| Incoming::Http2(body));
                streams.push(StreamTask::new(
                    handle(req),
                    Responder::new(shared.clone(), o.key),
                ));
            };
            let turn = wire.turn(&mut conn_cx, &shared, &mut open);
            if wire.faults != ClientFaults::default() {
                faults(wire.faults);
            }
            match turn {
                conn::Turn::Open => {}
                conn::Turn::Done => return Poll::Ready(Ok(())),
                conn::Turn::Failed(e) => return Poll::Ready(Err(e)),
            }
        }
    })
    .await;
    // The connection's end fails every stream still open: their requests end as a client's reset
    // ends them.
    shared.lock().fail(Failure::Closed(
        std::io::ErrorKind::ConnectionAborted,
        "the client connection ended",
    ));
    drop(wire);
    poll_fn(|cx| {
        wakes.conn.task.register(cx.waker());
        streams.poll();
        if streams.is_empty() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    ended
}

/// Turns of the connection (up to 32 frames read each) in one poll of its task.
const MAX_TURNS: usize = 8;

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
    /// The task is polling the streams: a wake-up of the connection or of a stream is noted, not
    /// sent.
    streams_polled: AtomicBool,
}

impl ConnWake {
    /// A stream was woken (its key is in the connection's woken list): the task is woken unless it
    /// is polling the streams, in which case it looks at the list right after.
    fn wake_streams(&self) {
        // Sequentially consistent: a wake-up from another thread as the streams' polling ends is
        // either seen by the task's look at the list after it, or sent.
        if !self.streams_polled.load(Ordering::SeqCst) {
            self.task.wake();
        }
    }
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
