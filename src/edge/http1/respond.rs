//! A response written by the fast path: its head, then its body as it comes (by its length, or
//! chunked), the client's side read meanwhile so that a client that goes away ends the request.

use std::future::{Future, poll_fn};
use std::io::{self, IoSlice};
use std::pin::pin;
use std::task::{Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, DATE, TRANSFER_ENCODING};
use http::response::Parts;
use http::{HeaderValue, Response, StatusCode};
use http_body::Body;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::buffers;
use crate::proxy::entry::ProxyBody;

/// How a response's body is delimited on the wire.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Framing {
    /// `content-length` bytes.
    Length(u64),
    Chunked,
    /// No body (1xx, 204, 304).
    None,
}

/// Sends the response `response` resolves to. Returns whether the connection stays open for the
/// next request; an error when the client went away or the response could not be finished.
pub(super) async fn respond<I, F>(
    io: &mut I,
    buf: &mut BytesMut,
    room: usize,
    response: F,
    close: bool,
    stop: &CancellationToken,
) -> io::Result<bool>
where
    I: AsyncRead + AsyncWrite + Unpin,
    F: Future<Output = Response<ProxyBody>>,
{
    let mut response = pin!(response);
    let response = watching(io, buf, room, |cx| response.as_mut().poll(cx)).await?;
    let (mut parts, mut body) = response.into_parts();
    let framing = framing(&mut parts, &body);
    // A server that is stopping closes the connection after this response.
    let close = close || stop.is_cancelled();
    let mut head = buffers::take();
    encode_head(&mut head, &parts, framing, close);
    let mut body_out = BodyOut {
        framing,
        left: match framing {
            Framing::Length(n) => n,
            _ => 0,
        },
        head: Some(head),
    };
    // A response whose length is sent whole is over, as hyper ends it: the body is dropped (its
    // upstream stream reset if the apiserver has not ended it yet), and the request with it.
    if matches!(framing, Framing::None | Framing::Length(0)) {
        body_out.write(io, None, false).await?;
        return Ok(!close);
    }
    let mut frame = poll_fn(|cx| Poll::Ready(poll_body(&mut body, cx))).await;
    loop {
        let data = match frame {
            Poll::Pending => {
                // Nothing to send with the head: the head goes now (a watch waits for events).
                body_out.write(io, None, false).await?;
                frame = Poll::Ready(watching(io, buf, room, |cx| poll_body(&mut body, cx)).await?);
                continue;
            }
            Poll::Ready(Some(Ok(data))) => Some(data),
            Poll::Ready(Some(Err(e))) => {
                tracing::debug!(error = %e, "response body to an HTTP/1.1 client ended early");
                return Err(io::Error::other(e));
            }
            Poll::Ready(None) => None,
        };
        let whole = matches!(
            (body_out.framing, &data),
            (Framing::Length(left), Some(d)) if d.len() as u64 >= left
        );
        let end = whole || data.is_none() || body.is_end_stream();
        body_out.write(io, data, end).await?;
        if end {
            return Ok(!close && body_out.left == 0);
        }
        frame = poll_fn(|cx| Poll::Ready(poll_body(&mut body, cx))).await;
    }
}

/// The next data of `body` (trailers are not sent over HTTP/1.1).
fn poll_body(body: &mut ProxyBody, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, h2::Error>>> {
    loop {
        return match std::pin::Pin::new(&mut *body).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => Poll::Ready(Some(Ok(data))),
                Err(_trailers) => continue,
            },
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        };
    }
}

/// Waits for `f`, reading what the client sends meanwhile into `buf` (up to `room`): a pipelined
/// request is kept, an end of stream or a failure ends the wait with an error (the client went
/// away: the request is dropped, its upstream stream reset).
pub(super) async fn watching<I, T>(
    io: &mut I,
    buf: &mut BytesMut,
    room: usize,
    mut f: impl FnMut(&mut Context<'_>) -> Poll<T>,
) -> io::Result<T>
where
    I: AsyncRead + Unpin,
{
    poll_fn(|cx| {
        if let Poll::Ready(t) = f(cx) {
            return Poll::Ready(Ok(t));
        }
        while buf.len() < room {
            match buffers::poll_fill(io, buf, cx) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into())),
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => break,
            }
        }
        Poll::Pending
    })
    .await
}

/// How the body of `parts` is delimited, its head completed as hyper completes it: a `Date` if it
/// has none, and the length of a body whose length is known (a body of skewgate's own; an
/// apiserver's carries its own length, or none and goes chunked). One pass over the fields, no
/// look-ups.
fn framing(parts: &mut Parts, body: &ProxyBody) -> Framing {
    let (mut dated, mut length) = (false, None);
    for (name, value) in &parts.headers {
        if name == DATE {
            dated = true;
        } else if name == CONTENT_LENGTH {
            length = Some(
                value
                    .to_str()
                    .ok()
                    .and_then(|v| v.trim().parse::<u64>().ok()),
            );
        }
    }
    if !dated {
        parts.headers.insert(DATE, crate::edge::http2::date());
    }
    let status = parts.status;
    if status.is_informational() || status == StatusCode::NO_CONTENT {
        // These have no body and no length (RFC 9110, 8.6).
        if length.is_some() {
            parts.headers.remove(CONTENT_LENGTH);
        }
        return Framing::None;
    }
    if status == StatusCode::NOT_MODIFIED {
        // Its length, if any, is the selected representation's: sent as it is, with no body.
        return Framing::None;
    }
    match length {
        Some(Some(n)) => return Framing::Length(n),
        Some(None) => {
            parts.headers.remove(CONTENT_LENGTH);
        }
        None => {}
    }
    let known = if body.is_end_stream() {
        Some(0)
    } else {
        body.size_hint().exact()
    };
    match known {
        Some(n) => {
            parts.headers.insert(CONTENT_LENGTH, HeaderValue::from(n));
            Framing::Length(n)
        }
        None => Framing::Chunked,
    }
}

/// The status line and the fields of `parts`, as hyper writes them (lower-case names), with the
/// connection's own fields.
fn encode_head(out: &mut BytesMut, parts: &Parts, framing: Framing, close: bool) {
    out.put_slice(b"HTTP/1.1 ");
    out.put_slice(parts.status.as_str().as_bytes());
    out.put_u8(b' ');
    out.put_slice(parts.status.canonical_reason().unwrap_or("").as_bytes());
    out.put_slice(b"\r\n");
    for (name, value) in &parts.headers {
        // The connection's own (an apiserver's response over HTTP/2 has none: `strip_hop_by_hop`).
        if name == CONNECTION || name == TRANSFER_ENCODING {
            continue;
        }
        out.put_slice(name.as_str().as_bytes());
        out.put_slice(b": ");
        out.put_slice(value.as_bytes());
        out.put_slice(b"\r\n");
    }
    if framing == Framing::Chunked {
        out.put_slice(b"transfer-encoding: chunked\r\n");
    }
    if close {
        out.put_slice(b"connection: close\r\n");
    }
    out.put_slice(b"\r\n");
}

/// The body's side of the wire: the head until it is written, and the length still to send.
struct BodyOut {
    framing: Framing,
    left: u64,
    head: Option<BytesMut>,
}

impl BodyOut {
    /// Writes the head (if not yet written), `data` as its framing wants it, and the end of a
    /// chunked body when `end`: one write for all of it when the socket takes it.
    async fn write<I: AsyncWrite + Unpin>(
        &mut self,
        io: &mut I,
        data: Option<Bytes>,
        end: bool,
    ) -> io::Result<()> {
        let mut data = data.unwrap_or_default();
        if let Framing::Length(left) = self.framing {
            let n = (data.len() as u64).min(left);
            // More than the length said: the rest is not sent (the connection closes after).
            data.truncate(n as usize);
            self.left = left - n;
            self.framing = Framing::Length(self.left);
        }
        let mut size = [0u8; 20];
        let (prefix, suffix): (&[u8], &[u8]) = match self.framing {
            Framing::Chunked if !data.is_empty() => {
                let n = chunk_size(&mut size, data.len());
                (&size[..n], if end { b"\r\n0\r\n\r\n" } else { b"\r\n" })
            }
            Framing::Chunked if end => (b"", b"0\r\n\r\n"),
            _ => (b"", b""),
        };
        let head = self.head.take();
        let mut slices = [
            IoSlice::new(head.as_deref().unwrap_or_default()),
            IoSlice::new(prefix),
            IoSlice::new(&data),
            IoSlice::new(suffix),
        ];
        let written = write_all(io, &mut slices).await;
        if let Some(head) = head {
            buffers::give_back(head);
        }
        written
    }
}

/// `len` in hex and CRLF, as a chunk's size line, in `out`; its length.
fn chunk_size(out: &mut [u8; 20], len: usize) -> usize {
    let digits = (usize::BITS - len.leading_zeros()).div_ceil(4).max(1) as usize;
    for (i, slot) in out.iter_mut().take(digits).enumerate() {
        let shift = 4 * (digits - 1 - i);
        *slot = b"0123456789abcdef"[(len >> shift) & 0xf];
    }
    out[digits] = b'\r';
    out[digits + 1] = b'\n';
    digits + 2
}

/// Writes every slice, as the socket takes them.
async fn write_all<I: AsyncWrite + Unpin>(
    io: &mut I,
    slices: &mut [IoSlice<'_>],
) -> io::Result<()> {
    let mut slices = slices;
    IoSlice::advance_slices(&mut slices, 0);
    while !slices.is_empty() {
        let n = io.write_vectored(slices).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut slices, n);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_sizes_are_hex_lines() {
        let mut out = [0u8; 20];
        for (len, line) in [
            (1usize, "1\r\n"),
            (15, "f\r\n"),
            (16, "10\r\n"),
            (255, "ff\r\n"),
            (4096, "1000\r\n"),
        ] {
            let n = chunk_size(&mut out, len);
            assert_eq!(std::str::from_utf8(&out[..n]), Ok(line));
        }
    }

    #[test]
    fn framing_follows_the_status_and_the_length_and_the_head_gets_a_date() {
        let parts = |status: u16, cl: Option<&'static str>| {
            let mut b = Response::builder().status(status);
            if let Some(cl) = cl {
                b = b.header(CONTENT_LENGTH, cl);
            }
            b.body(()).expect("response").into_parts().0
        };
        let some = ProxyBody::full(Bytes::from_static(b"x"));
        let mut p = parts(204, Some("0"));
        assert_eq!(framing(&mut p, &some), Framing::None);
        assert!(p.headers.get(CONTENT_LENGTH).is_none());
        assert!(p.headers.contains_key(DATE));
        let mut p = parts(200, Some("12"));
        assert_eq!(framing(&mut p, &some), Framing::Length(12));
        // A length that is not one is replaced by the body's, when it is known.
        let mut p = parts(200, Some("twelve"));
        assert_eq!(framing(&mut p, &some), Framing::Length(1));
        assert_eq!(p.headers[CONTENT_LENGTH], "1");
        let mut p = parts(200, None);
        assert_eq!(
            framing(&mut p, &ProxyBody::full(Bytes::new())),
            Framing::Length(0)
        );
        assert_eq!(p.headers[CONTENT_LENGTH], "0");
    }
}
