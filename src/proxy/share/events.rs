//! A watch's bytes cut into its events, as the apiserver frames them: JSON events one per line, or
//! protobuf frames (a 4-byte big-endian length and a `WatchEvent`). Of each event, only what a
//! shared watch needs: its type and its object's resourceVersion. The bytes pass on unchanged.
//!
//! A protobuf `WatchEvent` has its type at field 1 and its object at 2 (a `RawExtension`, whose
//! field 1 is the object: `k8s\0` and a `runtime.Unknown`, the object's bytes at its field 2). An
//! object's `ObjectMeta` is its field 1, with resourceVersion at 6.

use bytes::{Buf, Bytes, BytesMut};

/// The most one event may weigh: a larger frame ends the shared watch (the apiserver's own bound
/// on a request is 3 MiB, and an object in etcd 1.5 MiB by default).
pub(super) const MAX_EVENT: usize = 16 << 20;

/// What an event is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// ADDED, MODIFIED or DELETED: a change, replayed to clients that join behind it.
    Change,
    /// BOOKMARK: progress, sent on to clients that asked for bookmarks.
    Bookmark,
    /// ERROR: the watch's end, with a `Status`.
    Error,
}

/// One event: its kind, its resourceVersion (0 when it has none, as an ERROR), and its bytes as
/// framed.
#[derive(Clone, Debug)]
pub(crate) struct Event {
    pub kind: Kind,
    pub rv: u64,
    pub bytes: Bytes,
}

/// Cuts a watch's bytes into events.
pub(crate) struct Framer {
    protobuf: bool,
    buf: BytesMut,
}

/// Why a watch's bytes could not be read as events.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Unreadable(pub &'static str);

impl Framer {
    /// A framer for a watch whose `Content-Type` is protobuf or not.
    pub(crate) fn new(protobuf: bool) -> Framer {
        Framer {
            protobuf,
            buf: BytesMut::new(),
        }
    }

    /// Takes `data`; the events it completes, in order.
    pub(crate) fn feed(&mut self, data: &[u8]) -> Result<Vec<Event>, Unreadable> {
        self.buf.extend_from_slice(data);
        let mut out = Vec::new();
        while let Some(frame) = self.next_frame()? {
            out.push(self.event(frame)?);
        }
        Ok(out)
    }

    fn next_frame(&mut self) -> Result<Option<Bytes>, Unreadable> {
        let len = if self.protobuf {
            let Some(head) = self.buf.get(..4) else {
                return Ok(None);
            };
            let body = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
            if body > MAX_EVENT {
                return Err(Unreadable("a protobuf frame over the event bound"));
            }
            4 + body
        } else {
            match self.buf.iter().position(|&b| b == b'\n') {
                Some(nl) => nl + 1,
                None if self.buf.len() > MAX_EVENT => {
                    return Err(Unreadable("a JSON event over the event bound"));
                }
                None => return Ok(None),
            }
        };
        if self.buf.len() < len {
            return Ok(None);
        }
        Ok(Some(self.buf.split_to(len).freeze()))
    }

    fn event(&self, bytes: Bytes) -> Result<Event, Unreadable> {
        let (kind, rv) = if self.protobuf {
            let mut body = bytes.clone();
            body.advance(4);
            proto_event(&body).ok_or(Unreadable("a protobuf frame that is no WatchEvent"))?
        } else {
            json_event(&bytes).ok_or(Unreadable("a line that is no JSON watch event"))?
        };
        Ok(Event { kind, rv, bytes })
    }
}

fn kind_of(name: &[u8]) -> Option<Kind> {
    match name {
        b"ADDED" | b"MODIFIED" | b"DELETED" => Some(Kind::Change),
        b"BOOKMARK" => Some(Kind::Bookmark),
        b"ERROR" => Some(Kind::Error),
        _ => None,
    }
}

/// A resourceVersion as the watch cache compares them: a decimal number; none is 0.
fn version(text: &[u8]) -> Option<u64> {
    if text.is_empty() {
        return Some(0);
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

fn json_event(line: &[u8]) -> Option<(Kind, u64)> {
    #[derive(serde::Deserialize)]
    struct Meta<'a> {
        #[serde(rename = "resourceVersion", borrow, default)]
        resource_version: Option<std::borrow::Cow<'a, str>>,
    }
    #[derive(serde::Deserialize)]
    struct Object<'a> {
        #[serde(borrow, default)]
        metadata: Option<Meta<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct Line<'a> {
        #[serde(rename = "type", borrow)]
        kind: std::borrow::Cow<'a, str>,
        #[serde(borrow)]
        object: Object<'a>,
    }
    let e: Line<'_> = serde_json::from_slice(line).ok()?;
    let kind = kind_of(e.kind.as_bytes())?;
    let rv = e
        .object
        .metadata
        .and_then(|m| m.resource_version)
        .unwrap_or_default();
    let rv = if kind == Kind::Error {
        0
    } else {
        version(rv.as_bytes())?
    };
    Some((kind, rv))
}

fn proto_event(m: &[u8]) -> Option<(Kind, u64)> {
    let kind = kind_of(field(m, 1)?)?;
    if kind == Kind::Error {
        return Some((kind, 0));
    }
    let raw = field(field(m, 2)?, 1)?;
    let object = match raw.strip_prefix(b"k8s\0") {
        Some(unknown) => field(unknown, 2)?,
        None => raw,
    };
    let rv = field(object, 1)
        .and_then(|meta| field(meta, 6))
        .unwrap_or_default();
    Some((kind, version(rv)?))
}

/// The first length-delimited field `num` of message `m`, read with prost's wire decoding.
fn field(m: &[u8], num: u32) -> Option<&[u8]> {
    use prost::encoding::{WireType, decode_key, decode_varint};
    let mut rest = m;
    while !rest.is_empty() {
        let (tag, wire) = decode_key(&mut rest).ok()?;
        match wire {
            WireType::Varint => {
                decode_varint(&mut rest).ok()?;
            }
            WireType::SixtyFourBit => rest = rest.get(8..)?,
            WireType::ThirtyTwoBit => rest = rest.get(4..)?,
            WireType::LengthDelimited => {
                let len = usize::try_from(decode_varint(&mut rest).ok()?).ok()?;
                let value = rest.get(..len)?;
                rest = &rest[len..];
                if tag == num {
                    return Some(value);
                }
            }
            WireType::StartGroup | WireType::EndGroup => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ld(num: u64, body: &[u8]) -> Vec<u8> {
        let mut out = vec![((num << 3) | 2) as u8, body.len() as u8];
        out.extend_from_slice(body);
        out
    }

    fn proto_frame(kind: &str, rv: &str) -> Vec<u8> {
        let meta = [ld(1, b"cm"), ld(6, rv.as_bytes())].concat();
        let object = ld(1, &meta);
        let unknown = [ld(1, b""), ld(2, &object)].concat();
        let raw = [b"k8s\0".to_vec(), unknown].concat();
        let event = [ld(1, kind.as_bytes()), ld(2, &ld(1, &raw))].concat();
        let mut frame = (event.len() as u32).to_be_bytes().to_vec();
        frame.extend(event);
        frame
    }

    #[test]
    fn protobuf_frames_split_anywhere_give_each_event_whole() {
        let stream = [
            proto_frame("ADDED", "17"),
            proto_frame("BOOKMARK", "20"),
            proto_frame("DELETED", "21"),
        ]
        .concat();
        for cut in 0..stream.len() {
            let mut f = Framer::new(true);
            let mut got = f.feed(&stream[..cut]).unwrap();
            got.extend(f.feed(&stream[cut..]).unwrap());
            let seen: Vec<_> = got.iter().map(|e| (e.kind, e.rv)).collect();
            assert_eq!(
                seen,
                [(Kind::Change, 17), (Kind::Bookmark, 20), (Kind::Change, 21)]
            );
            let whole: Vec<u8> = got.iter().flat_map(|e| e.bytes.to_vec()).collect();
            assert_eq!(whole, stream, "the bytes pass unchanged");
        }
    }

    #[test]
    fn json_lines_give_type_and_version_and_errors_have_none() {
        let mut f = Framer::new(false);
        let got = f
            .feed(concat!(
                r#"{"type":"MODIFIED","object":{"kind":"Secret","metadata":{"name":"s","resourceVersion":"42"}}}"#,
                "\n",
                r#"{"type":"ERROR","object":{"kind":"Status","code":410}}"#,
                "\n",
                r#"{"type":"ADDED","object":"#
            ).as_bytes())
            .unwrap();
        let seen: Vec<_> = got.iter().map(|e| (e.kind, e.rv)).collect();
        assert_eq!(seen, [(Kind::Change, 42), (Kind::Error, 0)]);
    }

    #[test]
    fn what_is_no_watch_event_is_refused_not_guessed() {
        assert!(
            Framer::new(false)
                .feed(b"{\"type\":\"SOMETHING\",\"object\":{}}\n")
                .is_err()
        );
        assert!(Framer::new(false).feed(b"not json\n").is_err());
        assert!(Framer::new(true).feed(&[0xff, 0xff, 0xff, 0xff]).is_err());
        assert!(
            Framer::new(false)
                .feed(b"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"resourceVersion\":\"x1\"}}}\n")
                .is_err(),
            "a resourceVersion that is no number cannot be ordered"
        );
    }
}
