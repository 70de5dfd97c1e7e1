//! skewgate's own HTTP/1.1 server for the requests that make up nearly all of an apiserver's
//! HTTP/1.1 traffic: a head and no body (GET, LIST, WATCH, DELETE), answered with a body of known
//! length or a chunked one. Everything else on the connection (a request with a body, an upgrade,
//! `Expect`, HTTP/1.0, `HEAD`, a head hyper would answer 400 or 431) goes to hyper's server, with
//! the bytes read so far, for the rest of that burst of requests (`keepalive`).
//!
//! Why: measured with callgrind, hyper's HTTP/1.1 server (its dispatcher, parsing into its own
//! message, encoding, buffer and timer handling, the `Date` it reads twice per request, and an 8 KiB
//! read buffer allocated per request to look for the client's end of stream while the response is
//! under way) took about 10,000 of the 26,000 instructions of a proxied GET from an HTTP/1.1
//! client, more than all of skewgate's own work on the request. Here a head is parsed by httparse
//! (as hyper does) straight into the request the service takes; the response is written with one
//! vectored write for head and body when the body is there; the read buffers are a worker's, taken
//! when bytes come and given back when the request is done, so an idle connection holds none.

mod chunked;
mod head;
mod respond;

use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::task::Poll;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{Request, Response};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;

pub(super) use chunked::{ChunkedEnd, Scan};
pub(super) use head::RequestLen;

use crate::proxy::entry::Incoming;
use crate::proxy::entry::ProxyBody;

/// How long the rest of a head may take once its first bytes came, as hyper's header timeout.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);

/// The fast path of one connection: how it hands a request to the service, and its limits.
pub(super) struct FastPath<H> {
    handle: H,
    /// The longest head read here; a longer one goes to hyper, which answers 431.
    head_limit: usize,
    /// How long the connection may wait for its next request.
    idle_timeout: Duration,
    /// The connection's idle timer, made at its first wait; it is moved on when it fires, to the
    /// end of the wait that began last (`waits_since`), rather than at every wait.
    idle: Option<Pin<Box<Sleep>>>,
    /// The idle timer was polled, and has not fired since: it wakes the connection when it does.
    idle_armed: bool,
    waits_since: Instant,
    /// Every request goes to hyper (the keep-alive tests of hyper's bursts).
    hyper_only: bool,
    /// The connection's client (its address) is held back until then: served, but a malformed
    /// head of its waits until then for its 400 (`offenders`).
    probation: Option<Instant>,
}

/// What became of the connection.
pub(super) enum Outcome {
    /// It is over (closed by the client, idle too long, the server stopping, or failed).
    Closed,
    /// It has a request for hyper: the bytes read so far, from the start of its head, and how
    /// far the request reaches when its framing says it (`head::request_len`).
    ToHyper(Bytes, Option<RequestLen>),
}

/// What waiting for the next head brought.
enum Next {
    /// A head, in the caller's slot.
    Head,
    Closed,
    ToHyper,
    /// A malformed head, for hyper to answer 400.
    Malformed,
}

impl<H, F> FastPath<H>
where
    H: FnMut(Request<Incoming>) -> F,
    F: Future<Output = Response<ProxyBody>>,
{
    pub(super) fn new(handle: H, head_limit: usize, idle_timeout: Duration) -> FastPath<H> {
        FastPath {
            handle,
            head_limit,
            idle_timeout,
            idle: None,
            idle_armed: false,
            waits_since: Instant::now(),
            hyper_only: false,
            probation: None,
        }
    }

    /// The connection's client is on probation until `until`.
    pub(super) fn on_probation(mut self, until: Option<std::time::Instant>) -> FastPath<H> {
        self.probation = until.map(Instant::from_std);
        self
    }

    /// This fast path hands every request to hyper.
    #[cfg(test)]
    pub(super) fn hyper_only(mut self) -> FastPath<H> {
        self.hyper_only = true;
        self
    }

    /// Serves requests on `io`, beginning with the bytes `read` of it already, until one is for
    /// hyper or the connection is over.
    pub(super) async fn serve<I>(
        &mut self,
        io: &mut I,
        read: Bytes,
        stop: &CancellationToken,
    ) -> Outcome
    where
        I: AsyncRead + AsyncWrite + Unpin,
    {
        let mut buf = BytesMut::from(read);
        let mut stopped = pin!(stop.cancelled());
        let mut slot = None;
        loop {
            match self
                .next_head(io, &mut buf, &mut slot, stopped.as_mut())
                .await
            {
                Next::Head => {}
                Next::Closed => return Outcome::Closed,
                Next::ToHyper => {
                    let bytes = head::escape_hash_in_request_line(buf.split().freeze());
                    let len = head::request_len(&bytes);
                    return Outcome::ToHyper(bytes, len);
                }
                Next::Malformed => {
                    if let Some(until) = self.probation.filter(|u| *u > Instant::now()) {
                        // The client keeps sending malformed heads: its answer waits out its hold
                        // (its neighbours on the address are served meanwhile).
                        tokio::time::sleep_until(until).await;
                    }
                    return Outcome::ToHyper(buf.split().freeze(), None);
                }
            }
            let Some(head) = slot.take() else {
                return Outcome::Closed;
            };
            let response = (self.handle)(head.request);
            let kept =
                respond::respond(io, &mut buf, self.head_limit, response, head.close, stop).await;
            // The request is over: its head's bytes are the worker's again.
            buffers::recycle(head.bytes);
            if !matches!(kept, Ok(true)) {
                return Outcome::Closed;
            }
        }
    }

    /// Reads until `buf` starts with a whole head (put in `slot`), holding no buffer while nothing
    /// comes.
    async fn next_head<I>(
        &mut self,
        io: &mut I,
        buf: &mut BytesMut,
        slot: &mut Option<head::Head>,
        mut stopped: Pin<&mut tokio_util::sync::WaitForCancellationFuture<'_>>,
    ) -> Next
    where
        I: AsyncRead + Unpin,
    {
        let mut head_timer: Option<Pin<Box<Sleep>>> = None;
        loop {
            if !buf.is_empty() && self.hyper_only {
                return Next::ToHyper;
            }
            if !buf.is_empty() {
                match head::parse(buf, slot) {
                    head::Parsed::Head => return Next::Head,
                    head::Parsed::Hyper => return Next::ToHyper,
                    head::Parsed::Malformed => return Next::Malformed,
                    head::Parsed::NotHttp1 => return Next::Closed,
                    // Too long a head: hyper's 431, a fault as a malformed head is.
                    head::Parsed::Partial if buf.len() >= self.head_limit => {
                        return Next::Malformed;
                    }
                    head::Parsed::Partial => {}
                }
            }
            let idle = buf.is_empty();
            if idle {
                self.waits_since = Instant::now();
            }
            let (idle_timeout, since) = (self.idle_timeout, self.waits_since);
            let timer = if idle {
                self.idle
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(since + idle_timeout)))
            } else {
                head_timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(HEAD_TIMEOUT)))
            };
            // Whether the timer's wake-up is set: the idle timer's, set at an earlier wait, holds
            // until it fires (its waker is this task's).
            let mut armed = idle && self.idle_armed;
            let read = poll_fn(|cx| {
                // The client's bytes first: a request that came is served, and the timers and the
                // stop are looked at only while the connection waits.
                if let Poll::Ready(read) = buffers::poll_fill(io, buf, cx) {
                    return Poll::Ready(read);
                }
                if stopped.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Ok(0));
                }
                if armed && !timer.is_elapsed() {
                    return Poll::Pending;
                }
                armed = true;
                while timer.as_mut().poll(cx).is_ready() {
                    let end = since + idle_timeout;
                    if !idle || Instant::now() >= end {
                        return Poll::Ready(Ok(0));
                    }
                    // Fired for an earlier wait: on to the end of this one.
                    timer.as_mut().reset(end);
                }
                Poll::Pending
            })
            .await;
            if idle {
                self.idle_armed = armed;
            }
            match read {
                Ok(n) if n > 0 => {}
                _ => return Next::Closed,
            }
        }
    }
}

/// A worker's read buffers: taken when a client's bytes come, given back when its request is done.
mod buffers {
    use std::cell::RefCell;
    use std::io;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use bytes::{Bytes, BytesMut};
    use tokio::io::AsyncRead;

    /// A buffer's size: the most read at once.
    const SIZE: usize = 8 << 10;

    /// The most buffers a worker keeps free.
    const KEPT: usize = 64;

    thread_local! {
        static FREE: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
    }

    /// A free buffer (a new one when none is free).
    pub(super) fn take() -> BytesMut {
        FREE.with_borrow_mut(Vec::pop)
            .unwrap_or_else(|| BytesMut::with_capacity(SIZE))
    }

    /// `buf` is free again (emptied).
    pub(super) fn give_back(mut buf: BytesMut) {
        buf.clear();
        if buf.capacity() >= SIZE {
            FREE.with_borrow_mut(|free| {
                if free.len() < KEPT {
                    free.push(buf);
                }
            });
        }
    }

    /// The bytes of a request that is over: free again when nothing else refers to them.
    pub(super) fn recycle(bytes: Bytes) {
        if let Ok(mut buf) = bytes.try_into_mut() {
            buf.clear();
            if buf.try_reclaim(SIZE) {
                give_back(buf);
            }
        }
    }

    /// Reads what the client sent into `buf`; into a free buffer, kept only if bytes came, when
    /// `buf` holds none.
    pub(super) fn poll_fill<I: AsyncRead + Unpin>(
        io: &mut I,
        buf: &mut BytesMut,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        if !buf.is_empty() {
            if buf.len() == buf.capacity() {
                buf.reserve(SIZE);
            }
            return tokio_util::io::poll_read_buf(Pin::new(io), cx, buf);
        }
        let mut free = take();
        let read = tokio_util::io::poll_read_buf(Pin::new(io), cx, &mut free);
        if let Poll::Ready(Ok(n)) = read
            && n > 0
        {
            *buf = free;
        } else {
            give_back(free);
        }
        read
    }
}
