//! A protobuf body made from an object's JSON: what a Go client of the compiled-in release would
//! encode for the same object, as far as the JSON says it. For tests, benches and the fuzz
//! target's seeds; the guard never encodes a body from JSON.

use prost::Message as _;
use prost_reflect::{
    DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor, ReflectMessage as _, Value,
};
use serde_json::Value as Json;

use super::names::route;
use super::{MAGIC, schema};

/// `k8s\0` and a `runtime.Unknown` holding `object` (JSON with `apiVersion` and `kind`) encoded as
/// its kind's message.
pub fn encode_json(object: &Json) -> Result<Vec<u8>, String> {
    let text = |k: &str| object.get(k).and_then(Json::as_str).unwrap_or_default();
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    let descriptor = schema()
        .kind(api_version, kind)
        .ok_or_else(|| format!("no kind {kind:?} in {api_version:?}"))?;
    let message = message(descriptor, object)?;
    let mut envelope = DynamicMessage::new(schema().unknown.clone());
    let type_meta = envelope
        .descriptor()
        .get_field_by_name("typeMeta")
        .and_then(|f| f.kind().as_message().cloned())
        .ok_or("runtime.Unknown has no typeMeta")?;
    let mut meta = DynamicMessage::new(type_meta);
    meta.set_field_by_name("apiVersion", Value::String(api_version.to_owned()));
    meta.set_field_by_name("kind", Value::String(kind.to_owned()));
    envelope.set_field_by_name("typeMeta", Value::Message(meta));
    envelope.set_field_by_name("raw", Value::Bytes(message.encode_to_vec().into()));
    envelope.set_field_by_name("contentEncoding", Value::String(String::new()));
    envelope.set_field_by_name("contentType", Value::String(String::new()));
    let mut out = MAGIC.to_vec();
    out.extend(envelope.encode_to_vec());
    Ok(out)
}

/// Decodes a body made by [`encode_json`] or by a client back to the JSON view.
pub fn decode_to_json(bytes: &[u8]) -> Result<Json, String> {
    super::Body::decode(bytes)
        .map(|b| b.view())
        .map_err(|e| e.to_string())
}

fn message(descriptor: &MessageDescriptor, json: &Json) -> Result<DynamicMessage, String> {
    if let Some(special) = well_known(descriptor, json) {
        return special;
    }
    let name = descriptor.full_name();
    let Json::Object(fields) = json else {
        return Err(format!("{name}: {json} is not an object"));
    };
    let mut out = DynamicMessage::new(descriptor.clone());
    for (key, value) in fields {
        // apiVersion and kind are the envelope's; what the schema lacks is dropped, as Go does.
        let Some(route) = route(descriptor, key) else {
            continue;
        };
        let Some((field, through)) = route.split_last() else {
            continue;
        };
        if value.is_null() {
            continue;
        }
        let v = field_value(field, key, value)?;
        let mut at = &mut out;
        for f in through {
            at = at
                .get_field_mut(f)
                .as_message_mut()
                .ok_or_else(|| format!("{key}: an embedded struct that is no message"))?;
        }
        at.set_field(field, v);
    }
    Ok(out)
}

/// Kubernetes' types whose JSON is not their message's fields (the inverse of `view.rs`'s):
/// `None` for any other message.
fn well_known(
    descriptor: &MessageDescriptor,
    json: &Json,
) -> Option<Result<DynamicMessage, String>> {
    let with = |fields: &[(&str, Value)]| {
        let mut m = DynamicMessage::new(descriptor.clone());
        for (field, v) in fields {
            m.set_field_by_name(field, v.clone());
        }
        m
    };
    let name = descriptor.full_name();
    Some(Ok(match (name, json) {
        ("k8s.io.apimachinery.pkg.api.resource.Quantity", Json::String(s)) => {
            with(&[("string", Value::String(s.clone()))])
        }
        ("k8s.io.apimachinery.pkg.util.intstr.IntOrString", Json::String(s)) => with(&[
            ("type", Value::I64(1)),
            ("strVal", Value::String(s.clone())),
        ]),
        ("k8s.io.apimachinery.pkg.util.intstr.IntOrString", Json::Number(n)) => {
            let n = n.as_i64().and_then(|n| i32::try_from(n).ok()).unwrap_or(0);
            with(&[("type", Value::I64(0)), ("intVal", Value::I32(n))])
        }
        (
            "k8s.io.apimachinery.pkg.apis.meta.v1.Time"
            | "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime",
            Json::String(s),
        ) => {
            let since = humantime::parse_rfc3339(s)
                .map_err(|e| format!("{s:?}: {e}"))
                .and_then(|at| {
                    at.duration_since(std::time::UNIX_EPOCH)
                        .map_err(|e| e.to_string())
                });
            let since = match since {
                Ok(since) => since,
                Err(e) => return Some(Err(e)),
            };
            let seconds = i64::try_from(since.as_secs()).unwrap_or(0);
            let nanos = i32::try_from(since.subsec_nanos()).unwrap_or(0);
            with(&[
                ("seconds", Value::I64(seconds)),
                ("nanos", Value::I32(nanos)),
            ])
        }
        ("k8s.io.apimachinery.pkg.runtime.RawExtension", v) => {
            with(&[("raw", Value::Bytes(v.to_string().into_bytes().into()))])
        }
        ("k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1", v) => {
            with(&[("Raw", Value::Bytes(v.to_string().into_bytes().into()))])
        }
        _ => return None,
    }))
}

fn field_value(field: &FieldDescriptor, key: &str, value: &Json) -> Result<Value, String> {
    Ok(if field.is_map() {
        let entry = field.kind();
        let entry = entry.as_message().ok_or("a map's entry")?;
        let value_kind = entry.map_entry_value_field().kind();
        let mut map = std::collections::HashMap::new();
        for (k, v) in value.as_object().into_iter().flatten() {
            map.insert(MapKey::String(k.clone()), single(&value_kind, v)?);
        }
        Value::Map(map)
    } else if field.is_list() {
        let items = value
            .as_array()
            .ok_or_else(|| format!("{key}: not a list"))?;
        Value::List(
            items
                .iter()
                .map(|v| single(&field.kind(), v))
                .collect::<Result<_, _>>()?,
        )
    } else {
        single(&field.kind(), value)?
    })
}

fn single(kind: &Kind, json: &Json) -> Result<Value, String> {
    let wrong = || format!("{json} is not a {kind:?}");
    Ok(match kind {
        Kind::Message(m) => Value::Message(message(m, json)?),
        Kind::String => Value::String(json.as_str().ok_or_else(wrong)?.to_owned()),
        Kind::Bool => Value::Bool(json.as_bool().ok_or_else(wrong)?),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => Value::I32(
            json.as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .ok_or_else(wrong)?,
        ),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Value::I64(json.as_i64().ok_or_else(wrong)?),
        Kind::Uint32 | Kind::Fixed32 => Value::U32(
            json.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(wrong)?,
        ),
        Kind::Uint64 | Kind::Fixed64 => Value::U64(json.as_u64().ok_or_else(wrong)?),
        Kind::Double => Value::F64(json.as_f64().ok_or_else(wrong)?),
        Kind::Float => Value::F32(json.as_f64().ok_or_else(wrong)? as f32),
        Kind::Bytes => {
            use base64::Engine as _;
            let text = json.as_str().ok_or_else(wrong)?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|e| e.to_string())?;
            Value::Bytes(bytes.into())
        }
        Kind::Enum(_) => Value::EnumNumber(
            json.as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .ok_or_else(wrong)?,
        ),
    })
}
