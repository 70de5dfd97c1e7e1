//! One HTTP/2 client connection's frames: read from the socket into the connection's state, and
//! written from it, with the connection's own business (SETTINGS, PING, GOAWAY) answered here.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::Stream;
use h2::frame::{Frame, Settings};
use h2::{Codec, CodecError, Reason};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::handles::Shared;
use super::state::{ConnState, Opened};
use crate::http2core::{Event, apply_codec_settings};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The payload of skewgate's keep-alive PINGs; an acknowledgement of another is not an answer.
pub(super) const PING_PAYLOAD: [u8; 8] = *b"skewgate";

/// How many frames are read in a row before what they queued is written.
const READ_BATCH: usize = 32;

/// How many rounds of reading a turn makes when reading stopped for answers unwritten.
const EXCHANGES: usize = 4;

/// How reading left off.
pub(super) enum Read {
    /// The client closed the connection.
    End,
    /// Nothing more to read now: the socket's readiness wakes the task (or the task woke itself
    /// to read on after a batch).
    Waiting,
    /// Stopped before the socket was drained: answers wait to be written (or the connection is
    /// closing), and no wake-up is registered for reading.
    Stopped,
}

/// Reads the client's preface, and queues skewgate's SETTINGS (and the connection's window beyond
/// the default) to be written with the first turn. The codec's buffers are given back while the
/// connection is idle.
pub(super) async fn handshake<I>(
    mut io: I,
    state: &mut ConnState,
) -> Result<Codec<I, Bytes>, h2::Error>
where
    I: AsyncRead + AsyncWrite + Unpin,
{
    // Read exactly: the frames after it are the codec's.
    let mut preface = [0; PREFACE.len()];
    io.read_exact(&mut preface).await?;
    if preface != PREFACE {
        let _ = io.shutdown().await;
        return Err(h2::Error::from(Reason::PROTOCOL_ERROR));
    }
    let limits = &state.limits;
    let mut settings = Settings::default();
    settings.set_max_concurrent_streams(Some(limits.max_concurrent_streams));
    settings.set_initial_window_size(Some(limits.stream_window));
    settings.set_max_header_list_size(Some(limits.max_header_list_size));
    let mut codec = Codec::new(io);
    codec.set_max_recv_header_list_size(limits.max_header_list_size as usize);
    codec.release_buffers_while_idle();
    state.conn.start(settings, ());
    Ok(codec)
}

/// The connection's socket, framed.
pub(super) struct Wire<I> {
    pub(super) codec: Codec<I, Bytes>,
    /// What the client did wrong in the last turn, for the connection's owner.
    pub(super) faults: super::ClientFaults,
    /// A header block in progress, charged against the process's bound (`blocks.rs`).
    pub(super) block: super::blocks::Charge,
    /// Holding response data its client does not take, as the response budget knows it.
    pub(super) stall: super::stall::Stalled,
    /// The socket took less than the codec had for it in the last flush.
    pub(super) unflushed: bool,
}

/// How a turn of the connection left it.
pub(super) enum Turn {
    Open,
    /// Over: the client closed it, or it finished after a GOAWAY.
    Done,
    /// Over with an error: the client broke the protocol (GOAWAY sent), or the socket failed.
    Failed(h2::Error),
}

impl<I: AsyncRead + AsyncWrite + Unpin> Wire<I> {
    /// One turn of the connection, under its lock: what is queued written, what came read (each
    /// request it opened handed to `opened`, which must not take the lock), what that queued
    /// written, and the socket flushed. A connection left with no stream keeps no memory for
    /// streams.
    pub(super) fn turn(
        &mut self,
        cx: &mut Context<'_>,
        shared: &Shared,
        opened: &mut dyn FnMut(Opened),
    ) -> Turn {
        let mut state = shared.lock();
        if self.stall.is_cut() {
            tracing::debug!(
                "HTTP/2 client connection cut: the response budget is spent and it took nothing for longest"
            );
            state.fail(crate::http2core::Failure::Closed(
                io::ErrorKind::ConnectionAborted,
                "the response budget is spent and the client took nothing",
            ));
            return Turn::Failed(h2::Error::from(Reason::ENHANCE_YOUR_CALM));
        }
        state.conn.quiet = true;
        let result = self.exchange(cx, &mut state, opened);
        let head_bound = state.limits.max_header_list_size as usize;
        if !self
            .block
            .follow(self.codec.header_block_in_progress(), head_bound)
        {
            tracing::debug!("HTTP/2 client connection: header blocks in progress at their bound");
            state.go_away(Reason::ENHANCE_YOUR_CALM);
            let _ = self.write(cx, &mut state);
        }
        state.conn.quiet = false;
        self.faults = super::ClientFaults {
            resets: state.conn.faults(),
            heads_too_large: std::mem::take(&mut state.heads_too_large),
        };
        state.release_if_idle();
        let (finished, error) = (state.finished(), state.conn.error);
        let (holding, written) = (state.queued_total > 0, state.written);
        let budget = state.budget.clone();
        drop(state);
        let flushed = match self.codec.flush(cx) {
            Poll::Ready(Err(e)) => return Turn::Failed(e.into()),
            Poll::Ready(Ok(())) => true,
            Poll::Pending => false,
        };
        if let Some(budget) = budget {
            self.stall
                .follow(&budget, holding && !flushed, written, cx.waker());
        }
        // Told to the streams only when it changes (a lock more, then).
        if self.unflushed == flushed {
            self.unflushed = !flushed;
            let mut state = shared.lock();
            state.unflushed = !flushed;
            if flushed && state.queued_total == 0 {
                state.release_held_back();
            }
        }
        match result {
            Err(e) => Turn::Failed(e),
            Ok(false) => Turn::Done,
            Ok(true) => match error {
                Some(reason) => Turn::Failed(h2::Error::from(reason)),
                None if finished && flushed => Turn::Done,
                None => Turn::Open,
            },
        }
    }

    /// Writes what is queued, reads what came, and writes what that queued; whether the
    /// connection is still open for reading (false at the client's end of it). Reading that stopped
    /// with answers unwritten goes on once writing made room, for a few rounds; without room, the
    /// socket's readiness to take more wakes the task.
    fn exchange(
        &mut self,
        cx: &mut Context<'_>,
        state: &mut ConnState,
        opened: &mut dyn FnMut(Opened),
    ) -> Result<bool, h2::Error> {
        for _ in 0..EXCHANGES {
            self.write(cx, state)?;
            let read = self.read(cx, state, opened)?;
            self.write(cx, state)?;
            match read {
                Read::End => return Ok(false),
                Read::Waiting => return Ok(true),
                Read::Stopped if state.reading() => {}
                Read::Stopped => return Ok(true),
            }
        }
        // Room was made each round, and more may have come: the task comes back for it, after
        // its streams.
        cx.waker().wake_by_ref();
        Ok(true)
    }

    /// Reads up to `READ_BATCH` frames into the state, the requests they open handed to `opened`.
    pub(super) fn read(
        &mut self,
        cx: &mut Context<'_>,
        state: &mut ConnState,
        opened: &mut dyn FnMut(Opened),
    ) -> Result<Read, h2::Error> {
        for _ in 0..READ_BATCH {
            if !state.reading() {
                return Ok(Read::Stopped);
            }
            match Pin::new(&mut self.codec).poll_next(cx) {
                Poll::Ready(Some(Ok(frame))) => self.on_frame(frame, state, opened),
                Poll::Ready(Some(Err(e))) => on_codec_error(e, state)?,
                Poll::Ready(None) => return Ok(Read::End),
                Poll::Pending => return Ok(Read::Waiting),
            }
        }
        // More may be there: the task is to come back for it after writing.
        cx.waker().wake_by_ref();
        Ok(Read::Waiting)
    }

    /// Hands the queued frames to the codec as far as its buffer takes them, then the streams'
    /// data in turn (the codec writes to the socket when its buffer is full; the rest is flushed at
    /// the end of the turn).
    pub(super) fn write(
        &mut self,
        cx: &mut Context<'_>,
        state: &mut ConnState,
    ) -> Result<(), h2::Error> {
        loop {
            match self.codec.poll_ready(cx) {
                Poll::Ready(r) => r?,
                Poll::Pending => return Ok(()),
            }
            let Some(frame) = state.conn.out.pop_front().or_else(|| state.next_data()) else {
                return Ok(());
            };
            if let Err(e) = self.codec.buffer(frame) {
                tracing::debug!(error = %e, "HTTP/2 client connection: a frame could not be written");
                return Err(h2::Error::from(Reason::INTERNAL_ERROR));
            }
        }
    }

    /// One frame from the client, through the connection's core (`http2core::Conn`).
    fn on_frame(&mut self, frame: Frame, state: &mut ConnState, opened: &mut dyn FnMut(Opened)) {
        match state.conn.recv(frame) {
            Event::Done | Event::ConnectionWindow => {}
            Event::Open(headers) => {
                if let Some(o) = state.on_open(headers) {
                    opened(o);
                }
            }
            Event::Headers(headers) => state.on_headers(headers),
            Event::Data(data) => state.on_data(data),
            Event::Reset(id, reason) => state.on_reset(id, reason),
            Event::StreamWindow(id, increment) => state.on_window_update(id, increment),
            Event::Settings(settings, delta) => {
                apply_codec_settings(&mut self.codec, &settings);
                if let Some(delta) = delta {
                    state.on_initial_window(delta);
                }
            }
            Event::SettingsAcked(()) => {}
            Event::Pong(payload) => {
                if payload == PING_PAYLOAD {
                    state.ponged = true;
                    if let Some(w) = state.pong_waker.take() {
                        w.wake();
                    }
                }
            }
            Event::GoAway(_, reason) => {
                if reason != Reason::NO_ERROR {
                    tracing::debug!(?reason, "an HTTP/2 client sent GOAWAY");
                }
                // The client opens no more streams; those open finish.
                state.graceful_go_away();
            }
        }
    }
}

/// An error the codec found in what the client sent: a stream's (that stream reset, as h2 does) or
/// the connection's (GOAWAY, and the connection ends).
fn on_codec_error(e: CodecError, state: &mut ConnState) -> Result<(), h2::Error> {
    match e {
        CodecError::Reset(id, reason, _) => {
            state.refuse_stream(id, reason);
            Ok(())
        }
        CodecError::GoAway(_, reason, _) => {
            tracing::debug!(?reason, "an HTTP/2 client broke the protocol; GOAWAY");
            state.go_away(reason);
            Ok(())
        }
        CodecError::Io(kind, _) => Err(h2::Error::from(io::Error::from(kind))),
    }
}
