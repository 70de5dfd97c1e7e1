//! Just enough of Kubernetes' protobuf encoding for the bench's kubelets to follow a watch: a
//! list's resourceVersion, and each watch event's type, object name and resourceVersion, from
//! JSON lines or protobuf frames alike.
//!
//! A protobuf object is `k8s\0` and a `runtime.Unknown` (field 2: the object's bytes); a list's
//! ListMeta is its field 1, with resourceVersion at 2; an object's ObjectMeta is its field 1, with
//! name at 1 and resourceVersion at 6. A protobuf watch is a stream of frames, each a 4-byte
//! big-endian length and a `WatchEvent` (type at 1, object at 2: a RawExtension whose field 1 is
//! the encoded object).

const MAGIC: &[u8] = b"k8s\0";

fn varint(b: &[u8], i: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*i)?;
        *i += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// The first length-delimited field `num` of message `m`.
fn field(m: &[u8], num: u64) -> Option<&[u8]> {
    let mut i = 0;
    while i < m.len() {
        let key = varint(m, &mut i)?;
        match key & 7 {
            0 => {
                varint(m, &mut i)?;
            }
            1 => i += 8,
            2 => {
                let len = usize::try_from(varint(m, &mut i)?).ok()?;
                let value = m.get(i..i.checked_add(len)?)?;
                i += len;
                if key >> 3 == num {
                    return Some(value);
                }
            }
            5 => i += 4,
            _ => return None,
        }
    }
    None
}

/// The object inside `k8s\0` + Unknown, or the bytes as they are.
fn object(b: &[u8]) -> Option<&[u8]> {
    match b.strip_prefix(MAGIC) {
        Some(unknown) => field(unknown, 2),
        None => Some(b),
    }
}

fn text(b: Option<&[u8]>) -> String {
    b.map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default()
}

/// A protobuf list's resourceVersion (`None` for JSON).
pub fn list_version(body: &[u8]) -> Option<String> {
    body.starts_with(MAGIC).then_some(())?;
    let meta = field(object(body)?, 1)?;
    Some(text(field(meta, 2)))
}

/// One watch event, as far as the bench reads it.
pub struct Event {
    pub kind: String,
    pub name: String,
    pub version: String,
}

/// A watch's bytes, cut into events.
pub struct Events {
    protobuf: bool,
    buf: Vec<u8>,
}

impl Events {
    pub fn new(protobuf: bool) -> Events {
        Events {
            protobuf,
            buf: Vec::new(),
        }
    }

    /// The events `data` completes.
    pub fn feed(&mut self, data: &[u8]) -> Vec<Event> {
        self.buf.extend_from_slice(data);
        let mut out = Vec::new();
        loop {
            let (len, skip) = if self.protobuf {
                let Some(head) = self.buf.get(..4) else { break };
                let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
                if self.buf.len() < 4 + len {
                    break;
                }
                (len, 4)
            } else {
                let Some(nl) = self.buf.iter().position(|&b| b == b'\n') else {
                    break;
                };
                (nl, 0)
            };
            let one = &self.buf[skip..skip + len];
            out.extend(if self.protobuf {
                proto_event(one)
            } else {
                json_event(one)
            });
            let used = skip + len + usize::from(!self.protobuf);
            self.buf.drain(..used);
        }
        out
    }
}

fn proto_event(m: &[u8]) -> Option<Event> {
    let kind = text(field(m, 1));
    let obj = object(field(field(m, 2)?, 1)?)?;
    let meta = field(obj, 1);
    Some(Event {
        kind,
        name: text(meta.and_then(|m| field(m, 1))),
        version: text(meta.and_then(|m| field(m, 6))),
    })
}

fn json_event(line: &[u8]) -> Option<Event> {
    let e: serde_json::Value = serde_json::from_slice(line).ok()?;
    let meta = &e["object"]["metadata"];
    Some(Event {
        kind: e["type"].as_str()?.to_owned(),
        name: meta["name"].as_str().unwrap_or_default().to_owned(),
        version: meta["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    })
}
