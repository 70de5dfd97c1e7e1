//! Sends one request on a pooled HTTP/2 stream and streams both bodies, never buffering them.

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::Response;
use http_body::{Body, Frame};
use http_body_util::BodyExt;

use super::deadline::Deadline;
use super::frames::{OpenError, RecvBody, ResponseFuture, SendBody};
use super::pool::{Credential, EndpointPool, StreamSlot};
use super::{Head, UpstreamError};

/// Sends `head` (and `body`, unless it is already at its end) to the endpoint, on a connection that
/// presents `credential`; returns the response head and a body that streams the rest, or
/// `UpstreamError::Timeout` if the head has not come by `deadline`. A connection found closing
/// before the request was handed to it (GOAWAY received, PING failed) is retired and the request
/// goes on another connection.
///
/// Not an async fn: an async fn holds its arguments twice (as passed, and as its body's own
/// variables), and the body is 128 bytes, copied with the future. The block captures it once.
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn would hold its arguments twice"
)]
pub(crate) fn send<B>(
    pool: &Arc<EndpointPool>,
    credential: Credential,
    (mut head, body): (Head, B),
    deadline: Option<Instant>,
) -> impl Future<Output = Result<Response<UpstreamBody>, UpstreamError>>
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: std::fmt::Display + Send,
{
    async move {
        let end_of_stream = body.is_end_stream();
        head.version = http::Version::HTTP_2;
        // Armed at the first wait, disarmed when the head has come (or the send is dropped).
        let mut deadline = Deadline::at(deadline);
        let mut attempt = 0;
        loop {
            let acquire = std::pin::pin!(pool.acquire(credential));
            let slot = deadline
                .bound(acquire)
                .await
                .ok_or(UpstreamError::Timeout)??;
            // An apiserver fails a header list larger than it accepts, and may take the whole
            // connection (every other client's streams) with it: such a request is refused here,
            // unsent.
            let limit = slot
                .header_list_limit()
                .min(pool.settings().max_header_list_size);
            let size = super::settings::header_list_size(&head);
            if size > limit {
                return Err(UpstreamError::HeadersTooLarge { size, limit });
            }
            // The answer awaited after the match: awaited in it, the result it matched (264 bytes)
            // would be held in the future while the answer is awaited.
            let (response, stream) = match slot.link().send_request(head, end_of_stream) {
                Ok(sent) => sent,
                Err((OpenError::Malformed(name), _)) => {
                    return Err(UpstreamError::Protocol(
                        format!("the request carries `{name}`, which HTTP/2 forbids").into(),
                    ));
                }
                Err((OpenError::Closing(e), returned_head)) => {
                    slot.retire_connection(pool);
                    attempt += 1;
                    if attempt == 2 {
                        return Err(UpstreamError::from_h2(e));
                    }
                    tracing::debug!(endpoint = %pool.endpoint.url, error = %e, "upstream connection is closing; using another");
                    head = returned_head;
                    continue;
                }
            };
            if let Some(stream) = stream {
                // A body already here goes out behind its head at once, before this task yields:
                // the apiserver never holds a request's head while skewgate waits to send the
                // rest (a process frozen between the two would have it applied after the freeze).
                // The rest of a body still coming is pumped by a task of its own.
                let mut pump = Box::pin(pump_request_body(body, stream));
                let first = poll_fn(|cx| Poll::Ready(pump.as_mut().poll(cx))).await;
                if first.is_pending() {
                    tokio::spawn(pump);
                }
            }
            return receive(slot, response, &mut deadline).await;
        }
    }
}

/// Waits for the response head on `slot`'s stream, within `deadline`.
async fn receive(
    slot: StreamSlot,
    response: ResponseFuture,
    deadline: &mut Deadline,
) -> Result<Response<UpstreamBody>, UpstreamError> {
    let response = deadline.bound(response).await;
    let (parts, recv) = response
        .ok_or(UpstreamError::Timeout)?
        .map_err(|e| UpstreamError::AfterSend(Box::new(e)))?;
    let body = UpstreamBody { recv, _slot: slot };
    Ok(Response::from_parts(parts, body))
}

/// Copies the client's request body to the upstream stream, within HTTP/2 flow control.
async fn pump_request_body<B>(mut body: B, mut stream: SendBody)
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
                let end = body.is_end_stream();
                if poll_fn(|cx| stream.poll_send(cx, &mut data, end))
                    .await
                    .is_err()
                    || end
                {
                    return;
                }
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    stream.send_trailers(trailers);
                }
                return;
            }
        }
    }
    let _ = poll_fn(|cx| stream.poll_send(cx, &mut Bytes::new(), true)).await;
}

/// The body of an upstream response, streamed as it arrives. Holds its stream slot until it ends
/// or is dropped (dropping it resets the upstream stream, as when a client goes away).
pub(crate) struct UpstreamBody {
    recv: RecvBody,
    _slot: StreamSlot,
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        self.recv.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.recv.is_end_stream()
    }
}
