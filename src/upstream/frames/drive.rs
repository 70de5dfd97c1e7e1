//! The task of one upstream connection: frames from the apiserver into the connection's state,
//! frames from the state out to the socket, and the connection's own business (SETTINGS, PING,
//! GOAWAY) answered here.

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::Stream;
use h2::Codec;
use h2::Reason;
use h2::frame::{Frame, Settings};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::state::LinkState;
use super::{Link, STREAM_WINDOW, Shared};
use crate::http2core::Failure;
use crate::http2core::{Event, apply_codec_settings};
use crate::upstream::ResponseBudget;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The payload of skewgate's PINGs; an acknowledgement of another is not taken for an answer.
pub(super) const PING_PAYLOAD: [u8; 8] = *b"skewgate";

/// How many frames are read in a row before what they queued is written.
const READ_BATCH: usize = 32;

/// What the connection reports to its pool as the apiserver speaks.
pub(crate) struct Hooks {
    /// Notified at the apiserver's first SETTINGS frame.
    pub settled: Arc<tokio::sync::Notify>,
    /// Called once, at GOAWAY from the apiserver: the connection takes no new streams.
    pub on_go_away: Box<dyn FnOnce() + Send>,
}

/// Opens an HTTP/2 connection on `io`: the client preface written, skewgate's SETTINGS and
/// connection window queued. Returns the pool's handle and the connection's task, which runs until
/// the connection ends (or the pool lets go of it and its last stream has ended).
pub(crate) async fn handshake<T>(
    mut io: T,
    authority: &http::uri::Authority,
    max_streams: usize,
    hooks: Hooks,
    budget: Arc<ResponseBudget>,
) -> io::Result<(Link, impl Future<Output = ()> + Send + 'static)>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    io.write_all(PREFACE).await?;
    let mut settings = Settings::default();
    settings.set_enable_push(false);
    settings.set_initial_window_size(Some(STREAM_WINDOW));
    let mut state = LinkState::new(budget);
    state.conn.start(settings, None);
    let shared = Arc::new(Shared {
        state: Mutex::new(state),
        max_streams: AtomicUsize::new(max_streams),
        header_list_limit: AtomicU32::new(u32::MAX),
        pong: tokio::sync::Notify::new(),
        heard: std::sync::atomic::AtomicU64::new(0),
    });
    // Static, as the pool's: a request's `:authority` is cloned without a write (`interned`).
    let made = crate::upstream::interned::interned(authority.as_str());
    let made = h2::BytesStr::try_from(Bytes::from_static(made.as_bytes()))
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let link = Link {
        shared: shared.clone(),
        authority: made,
    };
    let mut conn = Connection {
        wire: Wire {
            codec: Codec::new(io),
            hooks: Some(hooks),
            settled: false,
        },
        shared,
    };
    Ok((link, async move { poll_fn(|cx| conn.poll(cx)).await }))
}

struct Connection<T> {
    wire: Wire<T>,
    shared: Arc<Shared>,
}

/// The connection's socket and what it reports to the pool: apart from `Shared`, so that a turn
/// can hold the lock and write to the socket.
pub(super) struct Wire<T> {
    pub(super) codec: Codec<T, Bytes>,
    /// Taken at GOAWAY.
    pub(super) hooks: Option<Hooks>,
    /// Whether the apiserver's first SETTINGS came.
    pub(super) settled: bool,
}

impl<T: AsyncRead + AsyncWrite + Unpin> Connection<T> {
    /// Reads what has come, queues it to be written with what the requests queued, and flushes;
    /// `Ready` when the connection is over. One turn takes the connection's lock once.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let mut went_away = false;
        let turn = {
            let mut state = self.shared.lock();
            // Frames queued in the turn (SETTINGS acknowledged, windows given back) do not wake
            // the task itself: `write` takes them, and sets the waker for everyone else's.
            state.conn.quiet = true;
            let turn = loop {
                let read = match self.wire.read(cx, &self.shared, &mut state, &mut went_away) {
                    Ok(read) => read,
                    Err(why) => break Err(why),
                };
                if let Err(why) = self.wire.write(cx, &mut state) {
                    break Err(why);
                }
                if read == 0 {
                    break Ok(state.released_by_pool
                        && state.streams.is_empty()
                        && state.conn.out.is_empty());
                }
            };
            state.conn.quiet = false;
            turn
        };
        if went_away {
            self.wire.went_away();
        }
        let done = match turn {
            Ok(done) => done,
            Err(why) => return self.end(cx, why),
        };
        if let Poll::Ready(Err(_)) = self.wire.codec.flush(cx) {
            return self.end(cx, broken());
        }
        if done { Poll::Ready(()) } else { Poll::Pending }
    }

    /// The connection is over: every stream left fails with `why`.
    fn end(&mut self, cx: &mut Context<'_>, why: Failure) -> Poll<()> {
        // What is queued (a GOAWAY, resets) goes out if the socket still takes it.
        let mut state = self.shared.lock();
        let _ = self.wire.write(cx, &mut state);
        state.fail(why);
        drop(state);
        let _ = self.wire.codec.flush(cx);
        Poll::Ready(())
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> Wire<T> {
    /// Reads up to `READ_BATCH` frames and hands each to the state; how many were read.
    pub(super) fn read(
        &mut self,
        cx: &mut Context<'_>,
        shared: &Shared,
        state: &mut LinkState,
        went_away: &mut bool,
    ) -> Result<usize, Failure> {
        for read in 0..READ_BATCH {
            match Pin::new(&mut self.codec).poll_next(cx) {
                Poll::Ready(Some(Ok(frame))) => self.on_frame(frame, shared, state, went_away)?,
                Poll::Ready(Some(Err(e))) => {
                    tracing::debug!(error = %e, "upstream connection: protocol error");
                    return Err(Failure::Closed(
                        io::ErrorKind::InvalidData,
                        "the apiserver broke the HTTP/2 protocol",
                    ));
                }
                Poll::Ready(None) => {
                    return Err(Failure::Closed(
                        io::ErrorKind::UnexpectedEof,
                        "the apiserver closed the connection",
                    ));
                }
                Poll::Pending => return Ok(read),
            }
        }
        Ok(READ_BATCH)
    }

    /// Hands the queued frames to the codec as far as the socket takes them (the codec writes when
    /// its buffer is full; the rest is flushed at the end of the turn).
    pub(super) fn write(
        &mut self,
        cx: &mut Context<'_>,
        state: &mut LinkState,
    ) -> Result<(), Failure> {
        state.conn.set_waker(cx.waker());
        while !state.conn.out.is_empty() {
            match self.codec.poll_ready(cx) {
                Poll::Ready(r) => r.map_err(|_| broken())?,
                Poll::Pending => break,
            }
            if let Some(frame) = state.conn.out.pop_front() {
                self.codec.buffer(frame).map_err(|e| {
                    tracing::debug!(error = %e, "upstream connection: a frame could not be written");
                    Failure::Closed(io::ErrorKind::InvalidInput, "a frame could not be written")
                })?;
            }
        }
        Ok(())
    }

    /// One frame from the apiserver, through the connection's core (`http2core::Conn`); `Err`
    /// once the apiserver broke the protocol (GOAWAY queued).
    fn on_frame(
        &mut self,
        frame: Frame,
        shared: &Shared,
        state: &mut LinkState,
        went_away: &mut bool,
    ) -> Result<(), Failure> {
        shared
            .heard
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match state.conn.recv(frame) {
            // `Open` is the server's: a client's HEADERS is on a stream it opened.
            Event::Done | Event::Open(_) => {}
            Event::Headers(headers) => state.on_headers(headers),
            Event::Data(data) => state.on_data(data),
            Event::Reset(id, reason) => state.on_reset(id, reason),
            Event::StreamWindow(id, increment) => state.on_window_update(id, increment),
            Event::ConnectionWindow => state.on_connection_window(),
            Event::Settings(settings, delta) => self.on_settings(&settings, delta, shared, state),
            Event::SettingsAcked(shrink) => state.on_settings_ack(shrink),
            Event::Pong(payload) => {
                if payload == PING_PAYLOAD {
                    shared.pong.notify_one();
                }
            }
            Event::GoAway(last, reason) => {
                if reason != Reason::NO_ERROR {
                    tracing::debug!(?reason, "upstream connection: GOAWAY");
                }
                state.on_go_away(last);
                *went_away = true;
            }
        }
        match state.conn.error {
            Some(reason) => Err(protocol_broken(reason)),
            None => Ok(()),
        }
    }

    /// The apiserver's SETTINGS (acknowledged by `Conn::recv`): applied to the codec, the open
    /// streams' windows and the pool's limits.
    fn on_settings(
        &mut self,
        settings: &Settings,
        delta: Option<i64>,
        shared: &Shared,
        state: &mut LinkState,
    ) {
        apply_codec_settings(&mut self.codec, settings);
        if let Some(delta) = delta
            && let Err(reason) = state.on_initial_window(delta)
        {
            return state.conn.go_away(reason);
        }
        if let Some(max) = settings.max_concurrent_streams() {
            shared.max_streams.store(max as usize, Ordering::Relaxed);
        }
        if let Some(limit) = settings.max_header_list_size() {
            shared.header_list_limit.store(limit, Ordering::Relaxed);
        }
        if !std::mem::replace(&mut self.settled, true)
            && let Some(hooks) = &self.hooks
        {
            hooks.settled.notify_one();
        }
    }

    /// After a GOAWAY, outside the connection's lock: the pool is told (which may drop the pool's
    /// handle, and that takes the lock).
    fn went_away(&mut self) {
        if let Some(hooks) = self.hooks.take() {
            (hooks.on_go_away)();
            // A GOAWAY before SETTINGS ends the connect too.
            if !self.settled {
                hooks.settled.notify_one();
            }
        }
    }
}

fn broken() -> Failure {
    Failure::Closed(io::ErrorKind::BrokenPipe, "writing to the apiserver failed")
}

impl<T> Drop for Connection<T> {
    fn drop(&mut self) {
        // Dropped before it ended (the pool closed an idle connection, the runtime stopped): no
        // stream waits for it any more.
        self.shared.lock().fail(Failure::Closed(
            io::ErrorKind::ConnectionAborted,
            "the upstream connection was closed",
        ));
    }
}

/// The apiserver broke HTTP/2 (an idle stream's frame, a window past 2^31-1, a push, too many
/// resets for its fault): GOAWAY is queued, and the connection fails.
fn protocol_broken(reason: Reason) -> Failure {
    tracing::warn!(
        ?reason,
        "upstream connection: the apiserver broke the HTTP/2 protocol; GOAWAY"
    );
    Failure::Closed(
        io::ErrorKind::InvalidData,
        "the apiserver broke the HTTP/2 protocol",
    )
}
