//! Where a chunked request body ends (RFC 9112, 7.1), found as its bytes pass on their way to
//! hyper, read exactly as hyper's decoder reads them (`hyper/src/proto/h1/decode.rs`, 1.x): a size
//! in hex (at least one digit, within u64), optional whitespace, extensions up to a CR (no bare
//! LF), CRLF, the data and its CRLF; after the last chunk (size 0), trailer lines and the CRLF
//! that ends them. Anything hyper would refuse ends the scan (`Scan::Unknown`): hyper then reads
//! on as it would alone, and answers the request 400.
//!
//! So a request with a chunked body that hyper serves gets the stream only up to its end, and the
//! request pipelined behind it goes back to the fast path, which keeps a `#` in its path as Go does
//! (`keepalive::Lent`).

/// The most extension bytes hyper takes in one body (its `CHUNKED_EXTENSIONS_LIMIT`).
const EXTENSIONS_LIMIT: u64 = 16 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ChunkState {
    Start,
    Size,
    SizeLws,
    Extension,
    SizeLf,
    Body,
    BodyCr,
    BodyLf,
    Trailer,
    TrailerLf,
    EndCr,
    EndLf,
}

/// What the bytes scanned so far say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scan {
    /// The body goes on past them.
    More,
    /// The body ends after this many of the bytes just scanned.
    End(usize),
    /// Not a chunked body as hyper reads it.
    Unknown,
}

/// A chunked body's end, being looked for.
#[derive(Clone, Debug)]
pub(crate) struct ChunkedEnd {
    state: ChunkState,
    /// The chunk's size as read, then what is left of its data.
    size: u64,
    extensions: u64,
}

impl Default for ChunkedEnd {
    fn default() -> Self {
        ChunkedEnd {
            state: ChunkState::Start,
            size: 0,
            extensions: 0,
        }
    }
}

impl ChunkedEnd {
    /// Scans the body's next `bytes`.
    pub(crate) fn scan(&mut self, bytes: &[u8]) -> Scan {
        let mut at = 0;
        while at < bytes.len() {
            if self.state == ChunkState::Body {
                // Data is passed over whole, not byte by byte.
                let take = usize::try_from(self.size)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len() - at);
                at += take;
                self.size -= take as u64;
                if self.size == 0 {
                    self.state = ChunkState::BodyCr;
                }
                continue;
            }
            let Some(next) = self.step(bytes[at]) else {
                return Scan::Unknown;
            };
            at += 1;
            if next == Step::End {
                return Scan::End(at);
            }
        }
        Scan::More
    }

    /// One byte outside a chunk's data.
    fn step(&mut self, b: u8) -> Option<Step> {
        use ChunkState::*;
        self.state = match (self.state, b) {
            (Start | Size, _) if hex(b).is_some() => {
                let digit = u64::from(hex(b)?);
                self.size = self.size.checked_mul(16)?.checked_add(digit)?;
                Size
            }
            (Size | SizeLws, b'\t' | b' ') => SizeLws,
            (Size | SizeLws, b';') => Extension,
            (Size | SizeLws | Extension, b'\r') => SizeLf,
            (Extension, b'\n') => return None,
            (Extension, _) => {
                self.extensions += 1;
                if self.extensions >= EXTENSIONS_LIMIT {
                    return None;
                }
                Extension
            }
            (SizeLf, b'\n') if self.size == 0 => EndCr,
            (SizeLf, b'\n') => Body,
            (BodyCr, b'\r') => BodyLf,
            (BodyLf, b'\n') => Start,
            (EndCr, b'\r') => EndLf,
            (Trailer, b'\r') => TrailerLf,
            (EndCr | Trailer, _) => Trailer,
            (TrailerLf, b'\n') => EndCr,
            (EndLf, b'\n') => return Some(Step::End),
            _ => return None,
        };
        Some(Step::On)
    }
}

#[derive(PartialEq, Eq)]
enum Step {
    On,
    End,
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end_of(body: &[u8]) -> Scan {
        ChunkedEnd::default().scan(body)
    }

    #[test]
    fn the_end_is_found_after_the_last_chunk_and_its_trailers() {
        let body = b"5\r\nhello\r\n0\r\n\r\nGET /next";
        assert_eq!(end_of(body), Scan::End(body.len() - 9));
        let trailers = b"3;ext=1\r\nabc\r\n0\r\nX-T: 1\r\nY: 2\r\n\r\nrest";
        assert_eq!(end_of(trailers), Scan::End(trailers.len() - 4));
        let padded = b"A \t;x\r\n0123456789\r\n00\r\n\r\n";
        assert_eq!(end_of(padded), Scan::End(padded.len()));
    }

    #[test]
    fn a_body_split_anywhere_is_scanned_the_same() {
        let body = b"10\r\n0123456789abcdef\r\n0\r\nT: x\r\n\r\n";
        for cut in 0..body.len() {
            let mut scan = ChunkedEnd::default();
            let first = scan.scan(&body[..cut]);
            assert_eq!(first, Scan::More, "cut at {cut}");
            assert_eq!(scan.scan(&body[cut..]), Scan::End(body.len() - cut));
        }
    }

    #[test]
    fn what_hyper_refuses_is_not_scanned_on() {
        for bad in [
            &b"x\r\n"[..],
            b"5\nhello",
            b"5;a\nb\r\n",
            b"5 5\r\n",
            b"2\r\nabX\n",
            b"0\r\n\rX",
            b"0\r\nT: 1\rX",
            b"ffffffffffffffffff\r\n",
            b"\r\n",
        ] {
            assert_eq!(
                end_of(bad),
                Scan::Unknown,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let mut long = b"1;".to_vec();
        long.extend(std::iter::repeat_n(b'e', EXTENSIONS_LIMIT as usize));
        assert_eq!(end_of(&long), Scan::Unknown);
    }

    proptest::proptest! {
        /// Bytes scanned in two parts come to what they come to whole: the scan keeps its place.
        #[test]
        fn a_scan_split_anywhere_agrees_with_the_whole(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            cut in 0usize..200,
        ) {
            let cut = cut.min(bytes.len());
            let whole = end_of(&bytes);
            let mut scan = ChunkedEnd::default();
            let split = match scan.scan(&bytes[..cut]) {
                Scan::More => match scan.scan(&bytes[cut..]) {
                    Scan::End(n) => Scan::End(cut + n),
                    other => other,
                },
                first => first,
            };
            proptest::prop_assert_eq!(whole, split);
        }

        /// A body made of any chunks ends where its last CRLF does.
        #[test]
        fn a_well_formed_body_ends_where_it_ends(
            chunks in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 1..40), 0..6),
            upper in proptest::prelude::any::<bool>(),
        ) {
            let mut body = Vec::new();
            for chunk in &chunks {
                let size = if upper { format!("{:X}", chunk.len()) } else { format!("{:x}", chunk.len()) };
                body.extend_from_slice(size.as_bytes());
                body.extend_from_slice(b"\r\n");
                body.extend_from_slice(chunk);
                body.extend_from_slice(b"\r\n");
            }
            body.extend_from_slice(b"0\r\n\r\n");
            let len = body.len();
            body.extend_from_slice(b"GET / HTTP/1.1\r\n");
            proptest::prop_assert_eq!(end_of(&body), Scan::End(len));
        }
    }
}
