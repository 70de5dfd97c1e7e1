//! One HTTP/2 client stream: its request's answer awaited (and dropped if the client resets the
//! stream first), the response head sent, its body piped within the client's flow-control window.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, SendStream};
use http::header::{self, HeaderValue};
use http::{HeaderMap, Response};
use http_body::Body;

use crate::proxy::body::ProxyBody;

/// One stream being served: its request's answer awaited, raced against the client's reset, then
/// the response's body piped.
///
/// A reset drops the answer, and with it the request's upstream stream and its accounting, as a
/// closed HTTP/1.1 connection does. Written as states, not as an async fn: a watch's stream is
/// held for hours, and the async fn held its response beside its pipe (864 bytes against 232).
pub(super) enum Stream<F> {
    Answering {
        answer: Pin<Box<F>>,
        respond: SendResponse<Bytes>,
    },
    Piping(Pipe),
    Done,
}

impl<F> Stream<F> {
    pub(super) fn new(answer: Pin<Box<F>>, respond: SendResponse<Bytes>) -> Stream<F> {
        Stream::Answering { answer, respond }
    }
}

impl<F> Future for Stream<F>
where
    F: Future<Output = Response<ProxyBody>>,
{
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        match this {
            Stream::Answering { answer, respond } => {
                let resp = match answer.as_mut().poll(cx) {
                    Poll::Ready(resp) => resp,
                    Poll::Pending => {
                        if respond.poll_reset(cx).is_pending() {
                            return Poll::Pending;
                        }
                        *this = Stream::Done;
                        return Poll::Ready(());
                    }
                };
                // The request's future is freed here: a watch streams for hours with only what
                // follows.
                match send_head(resp, respond) {
                    Some(pipe) => *this = Stream::Piping(pipe),
                    None => {
                        *this = Stream::Done;
                        return Poll::Ready(());
                    }
                }
                Pin::new(this).poll(cx)
            }
            Stream::Piping(pipe) => {
                if let Err(e) = std::task::ready!(Pin::new(pipe).poll(cx)) {
                    tracing::debug!(error = %e, "response body to an HTTP/2 client ended early");
                }
                *this = Stream::Done;
                Poll::Ready(())
            }
            Stream::Done => Poll::Ready(()),
        }
    }
}

/// Sends the response's head; the pipe for its body, if it has one.
fn send_head(resp: Response<ProxyBody>, respond: &mut SendResponse<Bytes>) -> Option<Pipe> {
    let (mut parts, body) = resp.into_parts();
    if body.is_own() {
        complete_head(&mut parts.headers, &body);
    }
    let end = body.is_end_stream();
    // A response's head carries no connection-specific field: the apiserver's would have been
    // refused as malformed by the upstream connection's codec, and skewgate adds none.
    match respond.send_response(Response::from_parts(parts, ()), end) {
        Ok(out) => (!end).then_some(Pipe {
            out,
            body,
            held: None,
        }),
        Err(e) => {
            tracing::debug!(error = %e, "cannot send a response head to an HTTP/2 client");
            respond.send_reset(Reason::INTERNAL_ERROR);
            None
        }
    }
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
fn date() -> HeaderValue {
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

/// A response body sent as the client's window allows: a chunk waits for a window of at least one
/// byte (the last is handed over at once), and h2 holds what does not fit, up to the connection's
/// send buffer (`SEND_BUFFER` in listener.rs) before the next chunk is taken. As hyper's pipe does
/// (hyper #4003: no window is claimed before there is a chunk to send, so a body with nothing to
/// send holds none).
pub(super) struct Pipe {
    out: SendStream<Bytes>,
    body: ProxyBody,
    /// A chunk taken from the body, waiting for a window (never the last: that one is sent at once).
    held: Option<Bytes>,
}

impl Future for Pipe {
    type Output = Result<(), h2::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let me = &mut *self;
        match me.advance(cx) {
            // Waiting, for the client's window or for the apiserver: the client's reset wakes it
            // too. (A reset that came while it went on fails its next send.)
            Poll::Pending => match me.out.poll_reset(cx) {
                Poll::Ready(reason) => Poll::Ready(Err(reason.map_or_else(|e| e, h2::Error::from))),
                Poll::Pending => Poll::Pending,
            },
            done => done,
        }
    }
}

impl Pipe {
    /// Sends what the body has and the window allows.
    fn advance(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), h2::Error>> {
        loop {
            if self.held.is_some() {
                while self.out.capacity() == 0 {
                    match std::task::ready!(self.out.poll_capacity(cx)) {
                        Some(Ok(0)) => {}
                        Some(Ok(_)) => break,
                        Some(Err(e)) => return Poll::Ready(Err(e)),
                        None => return Poll::Ready(Err(h2::Error::from(Reason::CANCEL))),
                    }
                }
                if let Some(chunk) = self.held.take() {
                    self.out.send_data(chunk, false)?;
                }
                continue;
            }
            match std::task::ready!(Pin::new(&mut self.body).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(chunk) => {
                        let end = self.body.is_end_stream();
                        // An empty chunk needs no window; nor does the last one wait for it: h2
                        // holds it until the window opens, and nothing is taken after it.
                        if chunk.is_empty() || end {
                            self.out.send_data(chunk, end)?;
                            if end {
                                return Poll::Ready(Ok(()));
                            }
                            continue;
                        }
                        self.out.reserve_capacity(1);
                        self.held = Some(chunk);
                    }
                    Err(frame) => {
                        if let Ok(trailers) = frame.into_trailers() {
                            self.out.reserve_capacity(0);
                            self.out.send_trailers(trailers)?;
                            return Poll::Ready(Ok(()));
                        }
                    }
                },
                Some(Err(e)) => {
                    self.out
                        .send_reset(e.reason().unwrap_or(Reason::INTERNAL_ERROR));
                    return Poll::Ready(Err(e));
                }
                None => {
                    self.out.send_data(Bytes::new(), true)?;
                    return Poll::Ready(Ok(()));
                }
            }
        }
    }
}
