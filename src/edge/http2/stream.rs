//! One HTTP/2 client stream: its request's answer awaited (and dropped if the client resets the
//! stream first), the response head sent, its body piped within the client's flow-control window.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use h2::Reason;
use http::header::{self, HeaderValue};
use http::{HeaderMap, Response};
use http_body::Body;

use super::handles::Responder;
use crate::proxy::entry::ProxyBody;

/// One stream being served: its request's answer awaited, raced against the client's reset, then
/// the response's body piped.
///
/// A reset drops the answer, and with it the request's upstream stream and its accounting, as a
/// closed HTTP/1.1 connection does. Written as states, not as an async fn: a watch's stream is
/// held for hours, and the async fn held its response beside its pipe (864 bytes against 232).
pub(super) enum StreamTask<F> {
    Answering {
        answer: Pin<Box<F>>,
        respond: Responder,
        /// Polled before: a stream reset in the same read as its HEADERS (rapid reset, a backlog
        /// of them read at once) is dropped before its request is ever begun.
        begun: bool,
    },
    Piping(Pipe),
    Done,
}

impl<F> StreamTask<F> {
    pub(super) fn new(answer: Pin<Box<F>>, respond: Responder) -> StreamTask<F> {
        StreamTask::Answering {
            answer,
            respond,
            begun: false,
        }
    }
}

impl<F> Future for StreamTask<F>
where
    F: Future<Output = Response<ProxyBody>>,
{
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        match this {
            StreamTask::Answering {
                answer,
                respond,
                begun,
            } => {
                if !std::mem::replace(begun, true) && respond.poll_reset(cx).is_ready() {
                    *this = StreamTask::Done;
                    return Poll::Ready(());
                }
                let resp = match answer.as_mut().poll(cx) {
                    Poll::Ready(resp) => resp,
                    Poll::Pending => {
                        if respond.poll_reset(cx).is_pending() {
                            return Poll::Pending;
                        }
                        *this = StreamTask::Done;
                        return Poll::Ready(());
                    }
                };
                // The request's future is freed here: a watch streams for hours with only what
                // follows.
                let StreamTask::Answering { respond, .. } =
                    std::mem::replace(this, StreamTask::Done)
                else {
                    return Poll::Ready(());
                };
                match send_head(resp, respond, cx) {
                    Some(pipe) => *this = StreamTask::Piping(pipe),
                    None => return Poll::Ready(()),
                }
                Pin::new(this).poll(cx)
            }
            StreamTask::Piping(pipe) => {
                if let Err(e) = std::task::ready!(Pin::new(pipe).poll(cx)) {
                    tracing::debug!(error = %e, "response body to an HTTP/2 client ended early");
                }
                *this = StreamTask::Done;
                Poll::Ready(())
            }
            StreamTask::Done => Poll::Ready(()),
        }
    }
}

/// Sends the response's head, with the body's end or its only chunk when they are at hand (a
/// small answer: the whole of it under one lock); the pipe for the rest of the body, if any.
fn send_head(
    resp: Response<ProxyBody>,
    mut respond: Responder,
    cx: &mut Context<'_>,
) -> Option<Pipe> {
    let (mut parts, mut body) = resp.into_parts();
    if body.is_own() {
        complete_head(&mut parts.headers, &body);
    }
    // A response's head carries no connection-specific field: the apiserver's would have been
    // refused as malformed by the upstream connection's codec, and skewgate adds none.
    if body.is_end_stream() {
        respond.send_whole(parts, None);
        return None;
    }
    let first = match Pin::new(&mut body).poll_frame(cx) {
        Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
            Ok(chunk) if body.is_end_stream() => {
                respond.send_whole(parts, Some(chunk));
                return None;
            }
            Ok(chunk) => Some(chunk).filter(|c| !c.is_empty()),
            Err(frame) => {
                if respond.send_head(parts)
                    && let Ok(trailers) = frame.into_trailers()
                {
                    let _ = respond.poll_send(cx, &mut None, Some(Some(Box::new(trailers))));
                }
                return None;
            }
        },
        Poll::Ready(None) => {
            respond.send_whole(parts, None);
            return None;
        }
        Poll::Ready(Some(Err(e))) => {
            tracing::debug!(error = %e, "response body to an HTTP/2 client ended early");
            if respond.send_head(parts) {
                respond.send_reset(e.reason().unwrap_or(Reason::INTERNAL_ERROR));
            }
            return None;
        }
        Poll::Pending => None,
    };
    if !respond.send_head(parts) {
        return None;
    }
    Some(Pipe {
        out: respond,
        body,
        held: first,
    })
}

/// What hyper added to the head of a response of skewgate's own: its `Date` and `Content-Length`.
/// The apiserver's responses carry their own (a relayed body's length is not known beforehand).
fn complete_head(headers: &mut HeaderMap, body: &ProxyBody) {
    if !headers.contains_key(header::DATE) {
        headers.insert(header::DATE, date());
    }
    if !body.is_end_stream()
        && let Some(len) = body.size_hint().exact()
    {
        headers
            .entry(header::CONTENT_LENGTH)
            .or_insert_with(|| HeaderValue::from(len));
    }
}

/// Now as an HTTP date, made once a second per worker.
pub(in crate::edge) fn date() -> HeaderValue {
    thread_local! {
        static NOW: RefCell<(u64, HeaderValue)> =
            const { RefCell::new((u64::MAX, HeaderValue::from_static(""))) };
    }
    let now = SystemTime::now();
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    NOW.with_borrow_mut(|(at, value)| {
        if *at != secs {
            *at = secs;
            *value = HeaderValue::try_from(httpdate::fmt_http_date(now))
                .unwrap_or_else(|_| HeaderValue::from_static(""));
        }
        value.clone()
    })
}

/// A response body sent as the client's window allows: a chunk is taken from the body while the
/// stream holds nothing unwritten, or less than the client's windows take at once (and less than
/// the connection's send buffer, `SEND_BUFFER` in listener.rs). A client that reads slower than the
/// apiserver sends holds one chunk in skewgate, and the upstream stream's window holds the
/// apiserver back; no window is waited for before there is a chunk to send, as hyper's pipe does
/// (hyper #4003), so a body with nothing to send holds none.
pub(super) struct Pipe {
    out: Responder,
    body: ProxyBody,
    /// A chunk taken from the body, waiting for room.
    held: Option<Bytes>,
}

impl Future for Pipe {
    type Output = Result<(), h2::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let me = &mut *self;
        match me.advance(cx) {
            // Waiting, for room or for the apiserver: the client's reset wakes it too. (A reset
            // that came while it went on fails its next send.)
            Poll::Pending => match me.out.poll_reset(cx) {
                Poll::Ready(e) => Poll::Ready(Err(e)),
                Poll::Pending => Poll::Pending,
            },
            done => done,
        }
    }
}

impl Pipe {
    /// Sends what the body has and the buffer takes.
    fn advance(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), h2::Error>> {
        loop {
            if self.held.is_some() {
                std::task::ready!(self.out.poll_send(cx, &mut self.held, None))?;
                continue;
            }
            if self.out.is_shut() {
                std::task::ready!(self.out.poll_room(cx))?;
            }
            match std::task::ready!(Pin::new(&mut self.body).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(chunk) => {
                        if self.body.is_end_stream() {
                            // The last chunk is queued with the end at once.
                            let mut last = Some(chunk);
                            return self.out.poll_send(cx, &mut last, Some(None));
                        }
                        if !chunk.is_empty() {
                            self.held = Some(chunk);
                        }
                    }
                    Err(frame) => {
                        if let Ok(trailers) = frame.into_trailers() {
                            let end = Some(Some(Box::new(trailers)));
                            return self.out.poll_send(cx, &mut None, end);
                        }
                    }
                },
                Some(Err(e)) => {
                    self.out
                        .send_reset(e.reason().unwrap_or(Reason::INTERNAL_ERROR));
                    return Poll::Ready(Err(e));
                }
                None => return self.out.poll_send(cx, &mut None, Some(None)),
            }
        }
    }
}
