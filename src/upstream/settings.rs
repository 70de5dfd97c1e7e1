//! The apiserver's `SETTINGS_MAX_HEADER_LIST_SIZE`, read off the connection as its frames go by.
//!
//! h2 neither enforces nor exposes the limit the peer advertises for the header lists it accepts. A
//! request whose header list is larger makes the apiserver fail the stream or the whole connection,
//! and with it every other client's stream on it; so skewgate must answer such a request 431 itself,
//! before sending it, and for that it must know the limit. This reader follows frame boundaries
//! (nine-byte headers, payloads skipped) and decodes only SETTINGS frames, which are few and small.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

const FRAME_HEADER: usize = 9;
const SETTINGS: u8 = 0x4;
const ACK: u8 = 0x1;
const MAX_HEADER_LIST_SIZE: u16 = 0x6;
/// A SETTINGS payload larger than this (64 settings, far more than HTTP/2 defines) is skipped.
const MAX_SETTINGS_PAYLOAD: usize = 6 * 64;

/// The limit one connection's peer advertised; `u32::MAX` until it says.
pub(super) type HeaderListLimit = Arc<AtomicU32>;

/// An upstream stream that records the peer's `SETTINGS_MAX_HEADER_LIST_SIZE` in `limit`.
pub(super) struct SettingsReader<T> {
    inner: T,
    limit: HeaderListLimit,
    /// Notified once, when the peer's first SETTINGS frame has been read whole.
    settled: Option<Arc<tokio::sync::Notify>>,
    /// The frame header being read, and how much of it.
    header: [u8; FRAME_HEADER],
    header_len: usize,
    /// What is left of the current frame's payload, and whether it is a SETTINGS payload kept in
    /// `settings`.
    remaining: usize,
    settings: Option<Vec<u8>>,
}

impl<T> SettingsReader<T> {
    /// Wraps `inner`; `limit` is updated as SETTINGS frames arrive, and `settled` is notified when
    /// the first one has.
    pub(super) fn new(
        inner: T,
        limit: HeaderListLimit,
        settled: Arc<tokio::sync::Notify>,
    ) -> SettingsReader<T> {
        SettingsReader {
            inner,
            limit,
            settled: Some(settled),
            header: [0; FRAME_HEADER],
            header_len: 0,
            remaining: 0,
            settings: None,
        }
    }

    /// Follows the frames in `bytes`, just read from the peer.
    fn observe(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.remaining > 0 {
                let n = self.remaining.min(bytes.len());
                if let Some(buf) = &mut self.settings {
                    buf.extend_from_slice(&bytes[..n]);
                }
                self.remaining -= n;
                bytes = &bytes[n..];
                if self.remaining == 0
                    && let Some(payload) = self.settings.take()
                {
                    self.apply(&payload);
                }
                continue;
            }
            let n = (FRAME_HEADER - self.header_len).min(bytes.len());
            self.header[self.header_len..self.header_len + n].copy_from_slice(&bytes[..n]);
            self.header_len += n;
            bytes = &bytes[n..];
            if self.header_len < FRAME_HEADER {
                continue;
            }
            self.header_len = 0;
            let h = self.header;
            let len = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
            let is_settings = h[3] == SETTINGS && h[4] & ACK == 0;
            self.settings = (is_settings && len <= MAX_SETTINGS_PAYLOAD).then(Vec::new);
            self.remaining = len;
            if is_settings && len == 0 {
                self.apply(&[]);
            }
        }
    }

    fn apply(&mut self, payload: &[u8]) {
        for setting in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([setting[0], setting[1]]);
            if id == MAX_HEADER_LIST_SIZE {
                let value = u32::from_be_bytes([setting[2], setting[3], setting[4], setting[5]]);
                self.limit.store(value, Ordering::Relaxed);
            }
        }
        // h2 applies the frame in the same poll that read it, before the waiter runs.
        if let Some(settled) = self.settled.take() {
            settled.notify_one();
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for SettingsReader<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            let this = &mut *self;
            this.observe(&buf.filled()[before..]);
        }
        polled
    }
}

forward_async_write!(SettingsReader);

/// The size of a header list as HTTP/2 counts it (RFC 9113 6.5.2): each field's name and value
/// plus 32, pseudo-headers included.
pub(super) fn header_list_size(head: &http::Request<()>) -> usize {
    let fields: usize = head
        .headers()
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 32)
        .sum();
    let path = head.uri().path_and_query().map_or(1, |p| p.as_str().len());
    let authority = head.uri().authority().map_or(0, |a| a.as_str().len());
    // :method, :scheme (https, the longer), :path and :authority: names, values and 32 each.
    let names = ":method".len() + ":scheme".len() + ":path".len() + ":authority".len();
    fields + names + head.method().as_str().len() + "https".len() + path + authority + 4 * 32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let mut f = vec![
            (len >> 16) as u8,
            (len >> 8) as u8,
            len as u8,
            kind,
            flags,
            0,
            0,
            0,
            0,
        ];
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn a_header_list_is_measured_as_http2_counts_it() {
        let head = http::Request::get("https://a:1/p?q")
            .header("x-remote-user", "alice")
            .body(())
            .expect("request");
        // RFC 9113 6.5.2: name + value + 32 for every field, pseudo-headers included.
        let expected = (13 + 5 + 32) // x-remote-user: alice
            + (7 + 3 + 32) // :method GET
            + (7 + 5 + 32) // :scheme https
            + (5 + 4 + 32) // :path /p?q
            + (10 + 3 + 32); // :authority a:1
        assert_eq!(header_list_size(&head), expected);
    }

    #[test]
    fn the_limit_is_read_from_settings_split_anywhere() {
        let mut bytes = frame(SETTINGS, 0, &[0, 3, 0, 0, 0, 100, 0, 6, 0, 0, 0x40, 0]);
        bytes.extend(frame(0x0, 0, &[0, 6, 0, 0, 0, 1, 9, 9, 9]));
        bytes.extend(frame(SETTINGS, ACK, &[]));
        bytes.extend(frame(SETTINGS, 0, &[0, 6, 0, 0, 0x20, 0]));
        for split in 1..bytes.len() {
            let limit = HeaderListLimit::new(AtomicU32::new(u32::MAX));
            let settled = Arc::new(tokio::sync::Notify::new());
            let mut r = SettingsReader::new((), limit.clone(), settled.clone());
            r.observe(&bytes[..split]);
            r.observe(&bytes[split..]);
            assert_eq!(limit.load(Ordering::Relaxed), 0x2000, "split at {split}");
        }
    }
}
