//! Which protocol a cleartext client speaks: the HTTP/2 connection preface means h2c with prior
//! knowledge, anything else HTTP/1.1.
//!
//! The first bytes are read (not peeked: a peek cannot tell a client that sent `PRI` and closed
//! from one still sending, so it either waits forever or spins) and handed back to the HTTP server
//! in front of the rest of the stream.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};

/// The HTTP/2 connection preface a prior-knowledge client sends first.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Reads until the first bytes match the HTTP/2 preface whole, or stop matching it; returns whether
/// the client speaks h2c and the stream with those bytes put back. A client that closes before
/// either is an `UnexpectedEof` error.
pub(super) async fn detect_h2<S>(mut stream: S) -> io::Result<(bool, Prefixed<S>)>
where
    S: AsyncRead + Unpin,
{
    let mut buf = [0u8; H2_PREFACE.len()];
    let mut n = 0;
    while n < buf.len() {
        let read = stream.read(&mut buf[n..]).await?;
        if read == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        n += read;
        if !H2_PREFACE.starts_with(&buf[..n]) {
            break;
        }
    }
    let is_h2 = buf[..n] == *H2_PREFACE;
    Ok((
        is_h2,
        Prefixed {
            prefix: buf,
            start: 0,
            end: n,
            inner: stream,
        },
    ))
}

/// A stream whose first bytes were already read: they are read again, then the rest.
#[derive(Debug)]
pub(super) struct Prefixed<S> {
    prefix: [u8; H2_PREFACE.len()],
    start: usize,
    end: usize,
    inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.start < this.end {
            let n = (this.end - this.start).min(buf.remaining());
            buf.put_slice(&this.prefix[this.start..this.start + n]);
            this.start += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

forward_async_write!(Prefixed);

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn the_preface_is_detected_and_every_byte_is_read_again() {
        for (sent, h2) in [
            (&b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\nrest"[..], true),
            (&b"GET / HTTP/1.1\r\n\r\n"[..], false),
            (&b"PRX"[..], false),
        ] {
            let (mut client, server) = tokio::io::duplex(64);
            client.write_all(sent).await.unwrap();
            drop(client);
            let (is_h2, mut stream) = detect_h2(server).await.unwrap();
            assert_eq!(is_h2, h2);
            let mut all = Vec::new();
            stream.read_to_end(&mut all).await.unwrap();
            assert_eq!(all, sent);
        }
    }

    #[tokio::test]
    async fn a_client_that_closes_mid_preface_is_an_error() {
        let (mut client, server) = tokio::io::duplex(64);
        client.write_all(b"PRI").await.unwrap();
        drop(client);
        let err = detect_h2(server).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    }
}
