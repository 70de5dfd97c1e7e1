//! Sends one request on a pooled HTTP/2 stream and streams both bodies, never buffering them.

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use h2::{RecvStream, SendStream};
use http::{Request, Response};
use http_body::{Body, Frame};
use http_body_util::BodyExt;

use super::UpstreamError;
use super::deadline::Deadline;
use super::pool::{Credential, EndpointPool, StreamSlot};

/// Sends `head` (and `body`, unless it is already at its end) to the endpoint, on a connection that
/// presents `credential`; returns the response head and a body that streams the rest, or
/// `UpstreamError::Timeout` if the head has not come by `deadline`. A connection found closing
/// before the request was handed to it (GOAWAY received, PING failed) is retired and the request
/// goes on another connection.
///
/// Not an async fn: an async fn holds its arguments twice (as passed, and as its body's own
/// variables), and the head and body are 416 bytes, copied with the future. The block captures them
/// once.
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn would hold its arguments twice"
)]
pub(crate) fn send<B>(
    pool: &Arc<EndpointPool>,
    credential: Credential,
    (mut head, body): (Request<()>, B),
    deadline: Option<Instant>,
) -> impl Future<Output = Result<Response<UpstreamBody>, UpstreamError>>
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: std::fmt::Display + Send,
{
    async move {
        let end_of_stream = body.is_end_stream();
        *head.version_mut() = http::Version::HTTP_2;
        // Armed at the first wait, disarmed when the head has come (or the send is dropped).
        let mut deadline = Deadline::at(deadline);
        let mut attempt = 0;
        let (slot, mut sender) = loop {
            let acquire = std::pin::pin!(pool.acquire(credential));
            let slot = deadline
                .bound(acquire)
                .await
                .ok_or(UpstreamError::Timeout)??;
            let ready = deadline.bound(slot.sender().ready()).await;
            match ready.ok_or(UpstreamError::Timeout)? {
                Ok(sender) => break (slot, sender),
                Err(e) => {
                    slot.retire_connection();
                    attempt += 1;
                    if attempt == 2 {
                        return Err(UpstreamError::from_h2(e));
                    }
                    tracing::debug!(endpoint = %pool.endpoint.url, error = %e, "upstream connection is closing; using another");
                }
            }
        };
        // An apiserver fails a header list larger than it accepts, and may take the whole connection
        // (every other client's streams) with it: such a request is refused here, unsent.
        let limit = slot
            .header_list_limit()
            .min(pool.settings().max_header_list_size);
        let size = super::settings::header_list_size(&head);
        if size > limit {
            return Err(UpstreamError::HeadersTooLarge { size, limit });
        }
        let (response, stream) = sender.send_request(head, end_of_stream).map_err(|e| {
            slot.retire_connection();
            UpstreamError::from_h2(e)
        })?;
        if !end_of_stream {
            tokio::spawn(pump_request_body(body, stream));
        }
        let response = deadline.bound(response).await;
        let response = response.ok_or(UpstreamError::Timeout)?.map_err(|e| {
            if e.is_go_away() || e.is_io() {
                slot.retire_connection();
            }
            UpstreamError::AfterSend(Box::new(e))
        })?;
        let (parts, recv) = response.into_parts();
        let body = UpstreamBody {
            recv,
            data_done: false,
            ended: std::cell::Cell::new(false),
            _slot: slot,
        };
        Ok(Response::from_parts(parts, body))
    }
}

/// Copies the client's request body to the upstream stream, honouring HTTP/2 flow control.
async fn pump_request_body<B>(mut body: B, mut stream: SendStream<Bytes>)
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display + Send,
{
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(f) => f,
            Err(e) => {
                tracing::debug!(error = %e, "client request body failed; resetting the upstream stream");
                stream.send_reset(h2::Reason::CANCEL);
                return;
            }
        };
        match frame.into_data() {
            Ok(mut data) => {
                while !data.is_empty() {
                    stream.reserve_capacity(data.len());
                    let granted = match poll_fn(|cx| stream.poll_capacity(cx)).await {
                        Some(Ok(n)) => n,
                        _ => return,
                    };
                    let chunk = data.split_to(granted.min(data.len()));
                    if stream.send_data(chunk, false).is_err() {
                        return;
                    }
                }
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    let _ = stream.send_trailers(trailers);
                    return;
                }
            }
        }
    }
    let _ = stream.send_data(Bytes::new(), true);
}

/// The body of an upstream response, streamed as it arrives. Holds its stream slot until it ends
/// or is dropped (dropping it resets the upstream stream, as when a client goes away).
pub(crate) struct UpstreamBody {
    recv: RecvStream,
    data_done: bool,
    /// Whether `recv` was found at its end.
    ended: std::cell::Cell<bool>,
    _slot: StreamSlot,
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        let this = &mut *self;
        if !this.data_done {
            match this.recv.poll_data(cx) {
                Poll::Ready(Some(Ok(data))) => {
                    // Passed on to the client now; hyper polls again only when it can write.
                    let _ = this.recv.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => this.data_done = true,
                Poll::Pending => return Poll::Pending,
            }
        }
        match this.recv.poll_trailers(cx) {
            Poll::Ready(Ok(Some(trailers))) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Poll::Ready(Ok(None)) => Poll::Ready(None),
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        // Asked after every frame (by the proxy's body and by hyper), and each answer takes the
        // connection's lock: once at its end, the body says so without asking again.
        if self.ended.get() {
            return true;
        }
        let ended = self.recv.is_end_stream();
        self.ended.set(ended);
        ended
    }
}
