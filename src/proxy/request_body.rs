//! The body of a client's request on its way upstream: streamed as it arrives, its trailers cleaned
//! of identity headers as its head was, and a failure to read it (bad chunked framing, a client
//! reset or gone) remembered as the client's fault, never the apiserver's.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use crate::identity::IdentityHeaders;

/// Whether reading a client's request body failed: shared by the body and the request's handler.
#[derive(Clone, Debug, Default)]
pub(crate) struct ClientFault(Option<Arc<AtomicBool>>);

impl ClientFault {
    /// Whether the client's body failed.
    pub(crate) fn happened(&self) -> bool {
        self.0.as_ref().is_some_and(|f| f.load(Ordering::Acquire))
    }
}

/// Why a body could not be read whole.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum WholeBody {
    /// Longer than the limit.
    TooLarge,
    /// The client's body failed (malformed, reset, gone).
    Failed,
}

/// A request body as the client's connection delivers it: hyper's over HTTP/1.1, skewgate's own
/// HTTP/2 server's (`http2::RecvBody`) over HTTP/2.
pub(crate) enum Incoming {
    Http1(hyper::body::Incoming),
    Http2(super::wire::StreamBody),
    /// No body: a request the HTTP/1.1 fast path read (`http1`).
    Empty,
}

/// Why a client's body could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum IncomingError {
    #[error(transparent)]
    Http1(#[from] hyper::Error),
    #[error(transparent)]
    Http2(#[from] h2::Error),
}

impl Incoming {
    /// Whether the body is at its end (most requests bring none).
    pub(crate) fn is_end_stream(&self) -> bool {
        match self {
            Incoming::Http1(b) => b.is_end_stream(),
            Incoming::Http2(b) => b.is_end_stream(),
            Incoming::Empty => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Incoming::Http1(b) => b.size_hint(),
            // The connection checks the data against the request's `content-length` itself.
            Incoming::Http2(_) => SizeHint::default(),
            Incoming::Empty => SizeHint::with_exact(0),
        }
    }

    /// The next frame; over HTTP/2 the window its data took is given back to the client as it is
    /// taken (the upstream stream's window is what holds a client that sends faster than the
    /// apiserver reads).
    fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, IncomingError>>> {
        match self {
            Incoming::Http1(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
            Incoming::Http2(b) => b.poll_frame(cx).map_err(Into::into),
            Incoming::Empty => Poll::Ready(None),
        }
    }
}

/// A client's request body, forwarded.
pub(crate) struct ClientBody {
    /// The client's body was at its end when the request arrived (most requests): asking it again
    /// takes its connection's lock each time.
    at_end: bool,
    inner: Incoming,
    names: Arc<IdentityHeaders>,
    fault: ClientFault,
    /// The first frame taken by `check_arrived` when it is data, sent first; the others it took,
    /// sent next. Data, not a frame: a frame is 96 bytes (it may be trailers), and this body is
    /// held twice in every request's future.
    first: Option<Bytes>,
    more: VecDeque<Frame<Bytes>>,
}

/// How much of a body that has already arrived `check_arrived` looks at.
const LOOK_AHEAD_BYTES: usize = 64 << 10;

impl ClientBody {
    /// Wraps `inner`; the returned `ClientFault` says later whether reading it failed. A body that
    /// is already at its end (most requests) costs no allocation.
    pub(crate) fn new(inner: Incoming, names: Arc<IdentityHeaders>) -> (ClientBody, ClientFault) {
        let at_end = inner.is_end_stream();
        let fault = ClientFault((!at_end).then(Arc::default));
        (
            ClientBody {
                at_end,
                inner,
                names,
                fault: fault.clone(),
                first: None,
                more: VecDeque::new(),
            },
            fault,
        )
    }

    /// Looks at what of the body has already arrived (up to 64 KiB), without waiting for more of it
    /// (the task yields once, so that an HTTP/1.1 connection decodes what it has read). A body
    /// broken in what came with the head (bad chunked framing sent at once) fails here, before the
    /// request is sent upstream: the apiserver never starts work on it. The frames that arrived
    /// are kept and sent first; a body in one frame (most writes) allocates nothing more.
    pub(crate) async fn check_arrived(&mut self) -> Result<(), IncomingError> {
        if self.at_end || self.inner.is_end_stream() {
            return Ok(());
        }
        let (mut yielded, mut seen) = (false, 0);
        std::future::poll_fn(|cx| {
            loop {
                match self.poll_cleaned(cx) {
                    Poll::Ready(Some(Ok(frame))) => {
                        seen += frame.data_ref().map_or(0, Bytes::len);
                        if self.first.is_none() && self.more.is_empty() {
                            match frame.into_data() {
                                Ok(data) => self.first = Some(data),
                                Err(frame) => self.more.push_back(frame),
                            }
                        } else {
                            self.more.push_back(frame);
                        }
                        if seen >= LOOK_AHEAD_BYTES || self.inner.is_end_stream() {
                            return Poll::Ready(Ok(()));
                        }
                    }
                    Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e)),
                    Poll::Ready(None) => return Poll::Ready(Ok(())),
                    Poll::Pending if !yielded => {
                        yielded = true;
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                    Poll::Pending => return Poll::Ready(Ok(())),
                }
            }
        })
        .await
    }

    /// Reads the whole body, at most `limit` bytes (a guarded update is checked whole). Its
    /// trailers are kept, to be sent after it.
    pub(crate) async fn read_whole(&mut self, limit: usize) -> Result<Bytes, WholeBody> {
        let mut data = bytes::BytesMut::new();
        let mut trailers = VecDeque::new();
        let mut take = |frame: Frame<Bytes>, data: &mut bytes::BytesMut| match frame.into_data() {
            Ok(d) => {
                data.extend_from_slice(&d);
                (data.len() <= limit)
                    .then_some(())
                    .ok_or(WholeBody::TooLarge)
            }
            Err(frame) => {
                trailers.push_back(frame);
                Ok(())
            }
        };
        let held: Vec<Frame<Bytes>> = self
            .first
            .take()
            .map(Frame::data)
            .into_iter()
            .chain(self.more.drain(..))
            .collect();
        for frame in held {
            take(frame, &mut data)?;
        }
        while let Some(frame) = std::future::poll_fn(|cx| self.poll_cleaned(cx)).await {
            take(frame.map_err(|_| WholeBody::Failed)?, &mut data)?;
        }
        self.more = trailers;
        Ok(data.freeze())
    }

    /// Sends `bytes` as the body (after `read_whole`), then the trailers it kept.
    pub(crate) fn replace(&mut self, bytes: Bytes) {
        self.first = (!bytes.is_empty()).then_some(bytes);
    }

    /// The next frame from the client, trailers cleaned of identity headers, a failure remembered.
    fn poll_cleaned(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, IncomingError>>> {
        match self.inner.poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let frame = match frame.into_trailers() {
                    Ok(mut trailers) => {
                        self.names.strip(&mut trailers);
                        Frame::trailers(trailers)
                    }
                    Err(frame) => frame,
                };
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                if let Some(f) = &self.fault.0 {
                    f.store(true, Ordering::Release);
                }
                Poll::Ready(Some(Err(e)))
            }
            other => other,
        }
    }
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = IncomingError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, IncomingError>>> {
        let this = &mut *self;
        match this
            .first
            .take()
            .map(Frame::data)
            .or_else(|| this.more.pop_front())
        {
            Some(frame) => Poll::Ready(Some(Ok(frame))),
            None => this.poll_cleaned(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.more.is_empty() && (self.at_end || self.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        let held: u64 = self
            .first
            .iter()
            .chain(self.more.iter().filter_map(Frame::data_ref))
            .map(|d| d.len() as u64)
            .sum();
        let inner = self.inner.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + held);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + held);
        }
        hint
    }
}
