//! What an HTTP/2 client connection watches beside its frames: the server's shutdown (a graceful
//! GOAWAY, then its streams finish) and its keep-alive PINGs, each answered in time or the
//! connection closed.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use h2::frame::Ping;
use tokio::time::{Instant, Sleep};

use super::handles::Shared;
use super::{Config, conn};

/// What a connection watches beside its frames: the server's shutdown (GOAWAY, then its streams
/// finish) and its keep-alive PINGs.
pub(super) struct Control<'a> {
    pub(super) shutdown: Pin<&'a mut (dyn Future<Output = ()> + Send)>,
    pub(super) shutting_down: bool,
    pub(super) keep_alive: KeepAlive,
}

impl Control<'_> {
    /// Polled when the control was woken; ready when the connection is to close now.
    pub(super) fn poll(&mut self, waker: &Waker, shared: &Shared) -> Poll<()> {
        let mut cx = Context::from_waker(waker);
        if !self.shutting_down && self.shutdown.as_mut().poll(&mut cx).is_ready() {
            self.shutting_down = true;
            shared.lock().graceful_go_away();
        }
        if self.keep_alive.poll_timed_out(&mut cx, shared).is_ready() {
            tracing::debug!("an HTTP/2 client did not answer PING in time; closing");
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

/// The connection's keep-alive PINGs: one every `ping_every`, each answered within `ping_timeout`.
///
/// hyper PINGed only a connection that had read nothing for the interval, at the cost of a lock
/// taken on every frame received; a PING of 17 bytes every 30 seconds on a busy connection costs
/// less than that lock on one request.
pub(super) struct KeepAlive {
    every: Duration,
    timeout: Duration,
    /// When the next PING is due, or when the one sent has timed out.
    sleep: Pin<Box<Sleep>>,
    /// When the PING waiting for its answer was sent.
    sent: Option<Instant>,
}

impl KeepAlive {
    pub(super) fn new(config: &Config) -> KeepAlive {
        KeepAlive {
            every: config.ping_every,
            timeout: config.ping_timeout,
            sleep: Box::pin(tokio::time::sleep(config.ping_every)),
            sent: None,
        }
    }

    /// Sends the PING when it is due; ready when the one sent has not been answered in time.
    fn poll_timed_out(&mut self, cx: &mut Context<'_>, shared: &Shared) -> Poll<()> {
        loop {
            if let Some(at) = self.sent
                && shared.lock().ponged
            {
                self.sent = None;
                self.sleep.as_mut().reset(at + self.every);
            }
            if self.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            if self.sent.is_some() {
                return Poll::Ready(());
            }
            let now = Instant::now();
            let mut state = shared.lock();
            state.ponged = false;
            // The answer wakes this task's control, which comes back here.
            state.pong_waker = Some(cx.waker().clone());
            state.push(Ping::new(conn::PING_PAYLOAD).into());
            self.sent = Some(now);
            self.sleep.as_mut().reset(now + self.timeout);
        }
    }
}
