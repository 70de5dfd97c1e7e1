//! The client's stream lent to one hyper connection (`serve`'s bursts): read first from what the
//! fast path had read, then from the socket as far as the request hyper was lent it for reaches
//! (`Framing`), and handed back at hyper's end of it.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;

use super::super::http1::{ChunkedEnd, RequestLen, Scan};
use super::{Exchanges, sweep};

/// The client's stream, lent to one hyper connection.
pub(super) struct Lent<I> {
    io: Option<I>,
    exchanges: Arc<Exchanges>,
    back: Option<oneshot::Sender<(I, Bytes)>>,
    /// hyper was shown the end of the stream; the next shutdown hands it back.
    ended: bool,
    /// Bytes were read while no request was under way, and `begun` was this then: until a request
    /// begins, they are (part of) a head hyper holds, and the stream cannot be given back.
    unclaimed: Option<u32>,
    /// What the fast path read of the request it left to hyper: read first.
    prefix: Bytes,
    /// How much more hyper may read before the stream is held back from it: the rest of the
    /// request the fast path left, when its framing says how far it reaches
    /// (`head::request_len`). The requests after it go back to the fast path, which reads their
    /// targets as Go does (`#` kept in the path): hyper's `http::Uri` would cut the path at a `#`.
    framing: Framing,
    /// The bytes read past `limit` (pipelined after the request): the fast path's, with the stream.
    leftover: Bytes,
}

impl<I> Lent<I> {
    pub(super) fn new(
        io: I,
        exchanges: Arc<Exchanges>,
        back: oneshot::Sender<(I, Bytes)>,
        mut prefix: Bytes,
        len: Option<RequestLen>,
    ) -> Lent<I> {
        let (framing, end) = Framing::of(len, &prefix);
        let leftover = match end {
            Some(n) if n < prefix.len() => prefix.split_off(n),
            _ => Bytes::new(),
        };
        exchanges.prompt.store(false, Ordering::Relaxed);
        Lent {
            io: Some(io),
            exchanges,
            back: Some(back),
            ended: false,
            unclaimed: None,
            prefix,
            framing,
            leftover,
        }
    }

    /// Nothing to read now (the client sent nothing, or hyper has had all of its request): once
    /// every response has ended and the sweep has ticked, hyper is shown the end of the stream and
    /// gives it back.
    fn idle(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.can_give_back() {
            // Woken by the sweep (or the first read of a burst): quiet now, so the buffers go.
            if self.exchanges.swept() {
                self.ended = true;
                return Poll::Ready(Ok(()));
            }
            self.exchanges
                .wake_at_next_tick(|| Some(cx.waker().clone()));
            return Poll::Pending;
        }
        // A response is under way: the last to end has the sweep wake this task.
        self.exchanges.waiting.register(cx.waker());
        Poll::Pending
    }

    /// Whether hyper holds nothing of the client's: no request under way, no partial head.
    fn can_give_back(&self) -> bool {
        self.exchanges.quiet() && self.unclaimed.is_none_or(|at| at != self.exchanges.begun())
    }
}

impl<I: AsyncRead + Unpin> Lent<I> {
    /// Reads no more than `left` bytes of the request hyper serves; at its end, the stream is
    /// held back from hyper (the client's next request waits for the fast path).
    fn read_within(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
        left: usize,
    ) -> Poll<io::Result<()>> {
        if left == 0 {
            // hyper has all of its request: the stream goes back once the response has ended
            // (registered first, so that an end that comes meanwhile wakes this read).
            self.exchanges.prompt.store(true, Ordering::Relaxed);
            self.exchanges.waiting.register(cx.waker());
            if self.can_give_back() {
                self.ended = true;
                return Poll::Ready(Ok(()));
            }
            return Poll::Pending;
        }
        let Some(io) = self.io.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        let before = buf.filled().len();
        let read = if left >= buf.remaining() {
            // hyper's buffer takes no more than the request's rest: read into it.
            Pin::new(io).poll_read(cx, buf)
        } else {
            let mut part = [0u8; 4096];
            let mut within = ReadBuf::new(&mut part[..left.min(4096)]);
            let read = Pin::new(io).poll_read(cx, &mut within);
            buf.put_slice(within.filled());
            read
        };
        match read {
            Poll::Pending => self.idle(cx),
            Poll::Ready(Ok(())) => {
                let n = buf.filled().len() - before;
                self.framing = Framing::Left(left - n);
                if n > 0 && self.exchanges.quiet() {
                    self.unclaimed = Some(self.exchanges.begun());
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
        }
    }

    /// Reads on in a chunked body, its bytes scanned as they pass to hyper: at its end, what came
    /// after it is kept for the fast path, and the stream is held back as after a body of known
    /// length (`read_within`).
    fn read_chunked(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        std::task::ready!(self.read_io(cx, buf))?;
        let read = &buf.filled()[before..];
        if let Framing::Chunked(scan) = &mut self.framing {
            match scan.scan(read) {
                Scan::More => {}
                Scan::Unknown => self.framing = Framing::Open,
                Scan::End(n) => {
                    self.leftover = Bytes::copy_from_slice(&read[n..]);
                    buf.set_filled(before + n);
                    self.framing = Framing::Left(0);
                }
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Reads what the socket has into `buf`; bytes read while no request is under way are (part
    /// of) a head hyper holds. Nothing to read: `idle`.
    fn read_io(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let Some(io) = self.io.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        let before = buf.filled().len();
        match Pin::new(io).poll_read(cx, buf) {
            Poll::Pending => self.idle(cx),
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before && self.exchanges.quiet() {
                    self.unclaimed = Some(self.exchanges.begun());
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Lent<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if !this.prefix.is_empty() && buf.remaining() > 0 {
            let n = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix[..n]);
            this.prefix.advance(n);
            if this.exchanges.quiet() {
                this.unclaimed = Some(this.exchanges.begun());
            }
            return Poll::Ready(Ok(()));
        }
        if this.ended || this.io.is_none() {
            return Poll::Ready(Ok(()));
        }
        match &this.framing {
            Framing::Left(left) => return this.read_within(cx, buf, *left),
            Framing::Chunked(_) => return this.read_chunked(cx, buf),
            Framing::Open => {}
        }
        this.read_io(cx, buf)
    }
}

fn gone() -> io::Error {
    io::ErrorKind::NotConnected.into()
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Lent<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.io.as_mut() {
            Some(io) => Pin::new(io).poll_write(cx, buf),
            None => Poll::Ready(Err(gone())),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.io.as_mut() {
            Some(io) => Pin::new(io).poll_write_vectored(cx, bufs),
            None => Poll::Ready(Err(gone())),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.io.as_ref().is_some_and(AsyncWrite::is_write_vectored)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.io.as_mut() {
            Some(io) => Pin::new(io).poll_flush(cx),
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.ended
            && let (Some(io), Some(back)) = (this.io.take(), this.back.take())
        {
            // hyper flushed before this; the stream goes back to the connection's idle wait.
            let _ = back.send((io, std::mem::take(&mut this.leftover)));
            sweep::gave_back();
            return Poll::Ready(Ok(()));
        }
        match this.io.as_mut() {
            Some(io) => Pin::new(io).poll_shutdown(cx),
            None => Poll::Ready(Ok(())),
        }
    }
}

/// How far hyper may read the client's stream (`Lent::framing`).
enum Framing {
    /// As long as it reads requests.
    Open,
    /// This many bytes more: the rest of the request it was lent the stream for.
    Left(usize),
    /// To the end of a chunked body, not found yet.
    Chunked(ChunkedEnd),
}

impl Framing {
    /// The framing of the request at the start of `prefix` (what the fast path read), and where
    /// in `prefix` that request ends, if it does there.
    fn of(len: Option<RequestLen>, prefix: &[u8]) -> (Framing, Option<usize>) {
        match len {
            None => (Framing::Open, None),
            Some(RequestLen::Known(n)) => (Framing::Left(n - prefix.len().min(n)), Some(n)),
            Some(RequestLen::Chunked(head)) => {
                let mut end = ChunkedEnd::default();
                match end.scan(prefix.get(head..).unwrap_or_default()) {
                    Scan::More => (Framing::Chunked(end), None),
                    Scan::Unknown => (Framing::Open, None),
                    Scan::End(n) => (Framing::Left(0), Some(head + n)),
                }
            }
        }
    }
}
