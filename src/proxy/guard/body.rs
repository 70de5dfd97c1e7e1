//! A guarded update's body, read whatever its encoding, as the apiserver reads it: JSON, YAML
//! (which the apiserver turns into JSON first) and Kubernetes protobuf (read with the compiled-in
//! schema, `crate::protobuf`). Each gives a JSON view the guard judges the same way; a body that
//! must change is written back in its own encoding (YAML as the JSON it stands for).

use bytes::Bytes;
use http::HeaderValue;
use serde_json::Value;

use crate::protobuf::{self, Unreadable};
use crate::skew::{Loss, restore};

/// How a body is encoded: what the guard judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Json,
    Yaml,
    Protobuf,
    /// A content type the guard does not read (CBOR, anything else): a bounded label.
    Unknown,
}

impl Encoding {
    /// `json`, `yaml`, `protobuf`, `unknown`: as metrics and `/debug/recent` name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::Json => "json",
            Encoding::Yaml => "yaml",
            Encoding::Protobuf => "protobuf",
            Encoding::Unknown => "unknown",
        }
    }

    /// The encoding of a body of `Content-Type` `content_type`: the apiserver takes a body
    /// without one as JSON.
    pub(crate) fn of(content_type: Option<&HeaderValue>) -> Encoding {
        match content_type {
            Some(value) => value.to_str().map_or(Encoding::Unknown, Encoding::of_media),
            None => Encoding::Json,
        }
    }

    /// The encoding of a body whose `Content-Type` is `value`.
    pub fn of_media(value: &str) -> Encoding {
        let media = value
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match media.as_str() {
            "" | "application/json" => Encoding::Json,
            "application/yaml" => Encoding::Yaml,
            protobuf::MEDIA_TYPE => Encoding::Protobuf,
            _ => Encoding::Unknown,
        }
    }
}

/// An update's body, read.
pub(crate) struct Sent {
    pub(crate) encoding: Encoding,
    /// As JSON: what the guard judges.
    pub(crate) view: Value,
    /// The protobuf object, to put fields back into.
    protobuf: Option<protobuf::Body>,
}

/// Why a body is not judged.
#[derive(Debug)]
pub(crate) enum Unread {
    /// Not JSON, YAML or protobuf at all: the apiserver refuses it too, and stores nothing.
    Malformed,
    /// What the guard cannot read, though the apiserver might: the guard's failure rule decides.
    Cannot(String),
}

impl Sent {
    /// Reads a body of `encoding`.
    pub(crate) fn read(encoding: Encoding, bytes: &[u8], media: &str) -> Result<Sent, Unread> {
        let (view, protobuf) = match encoding {
            Encoding::Json => (
                serde_json::from_slice(bytes).map_err(|_| Unread::Malformed)?,
                None,
            ),
            Encoding::Yaml => (yaml(bytes)?, None),
            Encoding::Protobuf => {
                let body = protobuf::Body::decode(bytes).map_err(|e| match e {
                    Unreadable::NoMagic | Unreadable::Envelope(_) => Unread::Malformed,
                    other => Unread::Cannot(format!("a protobuf body: {other}")),
                })?;
                let (view, unknown) = body.view_checked();
                if let Some(at) = unknown {
                    return Err(Unread::Cannot(newer_than_schema(&body.kind, &at)));
                }
                (view, Some(body))
            }
            Encoding::Unknown => {
                return Err(Unread::Cannot(format!(
                    "it reads JSON, YAML and protobuf bodies, not {media:?}"
                )));
            }
        };
        Ok(Sent {
            encoding,
            view,
            protobuf,
        })
    }

    /// The body with the stored values of `lost` put back, in the body's own encoding (YAML as
    /// JSON), and the content type to send it with when that changes.
    pub(crate) fn restored(
        mut self,
        stored: &Stored,
        lost: &[Loss],
    ) -> Result<(Bytes, Option<&'static str>), String> {
        match (self.protobuf, &stored.protobuf) {
            (Some(mut body), Some(from)) => {
                body.restore(from, lost);
                Ok((body.encode(), None))
            }
            (Some(_), None) => Err("the stored object was not read as protobuf".to_owned()),
            (None, _) => {
                restore(&mut self.view, &stored.view, lost);
                let json = serde_json::to_vec(&self.view).map_err(|e| e.to_string())?;
                let retyped = (self.encoding == Encoding::Yaml).then_some("application/json");
                Ok((Bytes::from(json), retyped))
            }
        }
    }
}

/// The object as stored: its JSON view, and its protobuf form when read so.
pub(crate) struct Stored {
    pub(crate) view: Value,
    pub(crate) protobuf: Option<protobuf::Body>,
}

impl Stored {
    /// Reads a stored object's answer: protobuf when `protobuf`, else JSON.
    pub(crate) fn read(bytes: &[u8], protobuf: bool) -> Result<Stored, String> {
        if !protobuf {
            let view = serde_json::from_slice(bytes)
                .map_err(|e| format!("the stored object is not JSON: {e}"))?;
            return Ok(Stored {
                view,
                protobuf: None,
            });
        }
        let body = protobuf::Body::decode(bytes)
            .map_err(|e| format!("the stored object, read as protobuf: {e}"))?;
        let (view, unknown) = body.view_checked();
        if let Some(at) = unknown {
            return Err(newer_than_schema(&body.kind, &at));
        }
        Ok(Stored {
            view,
            protobuf: Some(body),
        })
    }
}

fn newer_than_schema(kind: &str, at: &str) -> String {
    format!(
        "the {kind} has {at}, which skewgate's protobuf schema (Kubernetes {}) does not know: a release newer than skewgate's",
        protobuf::KUBERNETES
    )
}

/// A YAML body as the JSON it stands for (the apiserver converts YAML to JSON before it decodes).
fn yaml(bytes: &[u8]) -> Result<Value, Unread> {
    let text = std::str::from_utf8(bytes).map_err(|_| Unread::Malformed)?;
    serde_saphyr::from_str::<Value>(text).map_err(|_| Unread::Malformed)
}

#[cfg(test)]
mod tests {
    use super::*;

    impl std::fmt::Debug for Sent {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{} {}", self.encoding.as_str(), self.view)
        }
    }

    #[test]
    fn a_body_is_read_by_its_content_type() {
        let of = |v: &str| Encoding::of(Some(&HeaderValue::from_str(v).expect("value")));
        assert_eq!(Encoding::of(None), Encoding::Json);
        assert_eq!(of("application/json; charset=utf-8"), Encoding::Json);
        assert_eq!(of("Application/YAML"), Encoding::Yaml);
        assert_eq!(
            of("application/vnd.kubernetes.protobuf"),
            Encoding::Protobuf
        );
        assert_eq!(of("application/cbor"), Encoding::Unknown);
        let yaml = Sent::read(Encoding::Yaml, b"kind: Pod\nmetadata:\n  name: p\n", "")
            .expect("YAML reads");
        assert_eq!(yaml.view["metadata"]["name"], "p");
        assert!(matches!(
            Sent::read(Encoding::Json, b"{not json", ""),
            Err(Unread::Malformed)
        ));
        assert!(matches!(
            Sent::read(Encoding::Protobuf, b"{\"kind\":\"Pod\"}", ""),
            Err(Unread::Malformed)
        ));
        let cbor = Sent::read(Encoding::Unknown, b"\xd9\xd9\xf7", "application/cbor");
        assert!(matches!(cbor, Err(Unread::Cannot(why)) if why.contains("application/cbor")));
    }
}
