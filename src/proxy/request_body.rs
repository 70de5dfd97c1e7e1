//! The body of a client's request on its way upstream: streamed as it arrives, its trailers cleaned
//! of identity headers as its head was, and a failure to read it (bad chunked framing, a client
//! reset or gone) remembered as the client's fault, never the apiserver's.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use crate::identity::IdentityHeaders;

/// Whether reading a client's request body failed: shared by the body and the request's handler.
#[derive(Clone, Debug, Default)]
pub struct ClientFault(Option<Arc<AtomicBool>>);

impl ClientFault {
    /// Whether the client's body failed.
    pub fn happened(&self) -> bool {
        self.0.as_ref().is_some_and(|f| f.load(Ordering::Acquire))
    }
}

/// A client's request body, forwarded.
pub struct ClientBody {
    inner: Incoming,
    names: Arc<IdentityHeaders>,
    fault: ClientFault,
}

impl ClientBody {
    /// Wraps `inner`; the returned `ClientFault` says later whether reading it failed. A body that
    /// is already at its end (most requests) costs no allocation.
    pub fn new(inner: Incoming, names: Arc<IdentityHeaders>) -> (ClientBody, ClientFault) {
        let fault = ClientFault((!inner.is_end_stream()).then(Arc::default));
        (
            ClientBody {
                inner,
                names,
                fault: fault.clone(),
            },
            fault,
        )
    }
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let frame = match frame.into_trailers() {
                    Ok(mut trailers) => {
                        this.names.strip(&mut trailers);
                        Frame::trailers(trailers)
                    }
                    Err(frame) => frame,
                };
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                if let Some(f) = &this.fault.0 {
                    f.store(true, Ordering::Release);
                }
                Poll::Ready(Some(Err(e)))
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
