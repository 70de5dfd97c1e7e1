//! The body of every response the proxy sends: an upstream body streamed through, or a small body
//! of the proxy's own. It carries the request's tracker, so accounting ends when the body does.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::access_log::AccessRecord;
use super::routing::RequestTracker;
use super::wire::{Exchange, StreamGuard};
use crate::upstream::UpstreamBody;

/// A response body.
pub(crate) struct ProxyBody {
    inner: Inner,
    tracker: Option<RequestTracker>,
    stream: Option<StreamGuard>,
    /// An HTTP/1.1 request under way: its connection is not idle until this body is dropped.
    exchange: Option<Exchange>,
    /// The access-log record, written when the body is dropped.
    access: Option<Box<AccessRecord>>,
    /// What reads the body as it streams (`exposure.rs`: a write's answer), told its end. Behind
    /// a thin pointer: a watch's body holds the slot, and a fat one would make it 8 bytes larger.
    copy: Option<Box<Tapped>>,
}

/// A [`Tap`] behind one more box, so that the slot is one word.
pub(crate) struct Tapped(Box<dyn Tap>);

/// What reads a response body as it streams to the client, without holding it up.
pub(crate) trait Tap: Send {
    /// A frame's data; `false` to be told no more.
    fn push(&mut self, data: &Bytes) -> bool;
    /// The body ended whole.
    fn finish(self: Box<Self>);
}

/// What feeds a response body of skewgate's own making, chunk by chunk, until its end.
pub(crate) trait Feed: Send {
    /// The next chunk, or the end (`None`).
    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>>;
}

enum Inner {
    Upstream {
        body: UpstreamBody,
        /// Long-running responses end cleanly on an upstream failure (nothing is appended to a
        /// watch); others fail, so a client never takes a cut-off list for a whole one.
        end_cleanly: bool,
        /// Ends a long-running response cleanly when it fires (shutdown).
        stop: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    },
    Full(Option<Bytes>),
    /// A body fed by skewgate itself (`share`: a watch served from a shared one): boxed, as it is
    /// the rarer body.
    Fed(Box<dyn Feed>),
}

impl ProxyBody {
    /// A body of the proxy's own.
    pub(crate) fn full(bytes: Bytes) -> ProxyBody {
        ProxyBody {
            inner: Inner::Full(Some(bytes)),
            tracker: None,
            stream: None,
            exchange: None,
            access: None,
            copy: None,
        }
    }

    /// An upstream body streamed through.
    pub(crate) fn upstream(
        body: UpstreamBody,
        end_cleanly: bool,
        stop: Option<WaitForCancellationFutureOwned>,
    ) -> ProxyBody {
        ProxyBody {
            inner: Inner::Upstream {
                body,
                end_cleanly,
                stop: stop.map(Box::pin),
            },
            tracker: None,
            stream: None,
            exchange: None,
            access: None,
            copy: None,
        }
    }

    /// A body `feed` makes (a watch served from a shared one).
    pub(crate) fn fed(feed: Box<dyn Feed>) -> ProxyBody {
        ProxyBody {
            inner: Inner::Fed(feed),
            tracker: None,
            stream: None,
            exchange: None,
            access: None,
            copy: None,
        }
    }

    /// Whether the body is skewgate's own (an error's `Status`, a merged discovery document), not
    /// the apiserver's.
    pub(crate) fn is_own(&self) -> bool {
        matches!(self.inner, Inner::Full(_))
    }

    /// Attaches the client stream's guard, which learns whether the client waited for the end.
    pub(crate) fn with_stream(mut self, stream: StreamGuard) -> ProxyBody {
        self.stream = Some(stream);
        self
    }

    /// Attaches the HTTP/1.1 exchange, which keeps the connection busy until the body is dropped.
    pub(crate) fn with_exchange(mut self, exchange: Option<Exchange>) -> ProxyBody {
        self.exchange = exchange;
        self
    }

    /// Attaches the request's access-log record, which counts the bytes sent and is written when
    /// the body is dropped.
    pub(crate) fn with_access(&mut self, access: Option<Box<AccessRecord>>) {
        if access.is_some() {
            self.access = access;
        }
    }

    /// Copies the body as it streams, for `exposure.rs` to judge at its end.
    pub(crate) fn copy_into(&mut self, copy: Box<dyn Tap>) {
        self.copy = Some(Box::new(Tapped(copy)));
    }

    /// Attaches the request's tracker, dropped when the body ends.
    pub(crate) fn with_tracker(mut self, tracker: RequestTracker) -> ProxyBody {
        self.tracker = Some(tracker);
        self
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        let this = &mut *self;
        let polled = match &mut this.inner {
            Inner::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Inner::Fed(f) => f.poll_data(cx).map(|d| d.map(|b| Ok(Frame::data(b)))),
            Inner::Upstream {
                body,
                end_cleanly,
                stop,
            } => {
                if let Some(stop) = stop
                    && stop.as_mut().poll(cx).is_ready()
                {
                    Poll::Ready(None)
                } else {
                    match Pin::new(body).poll_frame(cx) {
                        Poll::Ready(Some(Err(e))) if *end_cleanly => {
                            tracing::debug!(error = %e, "upstream ended a long-running response; ending it cleanly");
                            Poll::Ready(None)
                        }
                        other => other,
                    }
                }
            }
        };
        if let (Some(a), Poll::Ready(Some(Ok(frame)))) = (&mut this.access, &polled)
            && let Some(data) = frame.data_ref()
        {
            a.add_bytes(data.len() as u64);
        }
        if let (Some(c), Poll::Ready(Some(Ok(frame)))) = (&mut this.copy, &polled)
            && let Some(data) = frame.data_ref()
            && !c.0.push(data)
        {
            this.copy = None;
        }
        let ended = match &polled {
            Poll::Ready(None) => true,
            // A failure on the apiserver's side is no premature reset of the client's.
            Poll::Ready(Some(Err(_))) => true,
            // hyper does not poll again once the body says it is at its end.
            Poll::Ready(Some(Ok(_))) => this.is_end_stream(),
            Poll::Pending => false,
        };
        if ended {
            if let Some(s) = &mut this.stream {
                s.done();
            }
            if let Poll::Ready(None) = polled {
                this.tracker = None;
            }
            match &polled {
                Poll::Ready(Some(Err(_))) => this.copy = None,
                _ => {
                    if let Some(c) = this.copy.take() {
                        c.0.finish();
                    }
                }
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Inner::Full(b) => b.is_none(),
            Inner::Fed(_) => false,
            Inner::Upstream { body, .. } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Inner::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            Inner::Full(None) => SizeHint::with_exact(0),
            Inner::Upstream { body, .. } => body.size_hint(),
            Inner::Fed(_) => SizeHint::default(),
        }
    }
}
