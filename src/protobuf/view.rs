//! A protobuf object as JSON, as Go's encoding/json writes the same Go object, for the guard to
//! compare with the field paths of the apiservers' OpenAPI (whose names are the proto fields'
//! names: go-to-protobuf names each field by its JSON tag).
//!
//! - A field whose value is its zero (`""`, `0`, `false`, an empty list, map or byte string) is
//!   left out, as `omitempty` leaves it out and as the apiserver, decoding it into a Go value,
//!   cannot tell it from one not sent. Go's protobuf encoder writes every non-pointer field, so
//!   without this a field added in a newer release would show in every newer client's body. A
//!   message field is kept even when empty (`emptyDir: {}` says something).
//! - Kubernetes' own JSON forms: `Time` and `MicroTime` as RFC 3339 text, `Duration` as Go writes
//!   a duration, `Quantity` and `IntOrString` as the text or number, `RawExtension` and
//!   `FieldsV1` as the JSON they hold, `Verbs` and `ExtraValue` as lists.
//!
//! The view is for judging, never sent: a body that must change is changed in its protobuf form.

use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

use base64::Engine as _;
use prost_reflect::{DynamicMessage, MapKey, ReflectMessage as _, Value};
use serde_json::{Map, Value as Json};

use super::names::{inline, json_name};

const META: &str = "k8s.io.apimachinery.pkg.apis.meta.v1";

/// Go's zero `time.Time` in Unix seconds (year 1).
const ZERO_TIME: i64 = -62_135_596_800;

/// The first field a view met that the schema does not know: its number, and the message it is
/// a field of.
pub(super) type Unknown = Option<(u32, String)>;

/// `message` as JSON.
pub fn view(message: &DynamicMessage) -> Json {
    view_noting(message, &mut None)
}

/// `message` as JSON, noting in `unknown` the first field the schema does not know (one walk for
/// both: judging a body reads every field once).
pub(super) fn view_noting(message: &DynamicMessage, unknown: &mut Unknown) -> Json {
    if unknown.is_none()
        && let Some(field) = message.unknown_fields().next()
    {
        *unknown = Some((field.number(), message.descriptor().full_name().to_owned()));
    }
    if let Some(special) = well_known(message) {
        return special;
    }
    let descriptor = message.descriptor();
    let mut out = Map::new();
    for (field, value) in message.fields() {
        match (field_value(value, unknown), value) {
            // Go's embedded struct: its fields are the parent's in JSON.
            (Some(Json::Object(inner)), Value::Message(_)) if inline(&descriptor, field.name()) => {
                out.extend(inner);
            }
            (Some(v), _) => {
                out.insert(json_name(&descriptor, &field).into_owned(), v);
            }
            (None, _) => {}
        }
    }
    Json::Object(out)
}

/// A field's value, `None` when it is its zero (left out).
fn field_value(value: &Value, unknown: &mut Unknown) -> Option<Json> {
    let zero = match value {
        Value::Bool(b) => !b,
        Value::I32(n) | Value::EnumNumber(n) => *n == 0,
        Value::I64(n) => *n == 0,
        Value::U32(n) => *n == 0,
        Value::U64(n) => *n == 0,
        Value::F32(n) => *n == 0.0,
        Value::F64(n) => *n == 0.0,
        Value::String(s) => s.is_empty(),
        Value::Bytes(b) => b.is_empty(),
        Value::List(l) => l.is_empty(),
        Value::Map(m) => m.is_empty(),
        Value::Message(_) => false,
    };
    if zero {
        return None;
    }
    let json = element(value, unknown);
    // A zero time or an unset IntOrString reads as null: left out, as omitempty leaves out a nil.
    (!json.is_null()).then_some(json)
}

/// One value, as it reads in a list or map too (where zeros stay).
fn element(value: &Value, unknown: &mut Unknown) -> Json {
    match value {
        Value::Bool(b) => Json::Bool(*b),
        Value::I32(n) | Value::EnumNumber(n) => Json::from(*n),
        Value::I64(n) => Json::from(*n),
        Value::U32(n) => Json::from(*n),
        Value::U64(n) => Json::from(*n),
        Value::F32(n) => Json::from(f64::from(*n)),
        Value::F64(n) => Json::from(*n),
        Value::String(s) => Json::String(s.clone()),
        Value::Bytes(b) => Json::String(base64::engine::general_purpose::STANDARD.encode(b)),
        Value::Message(m) => view_noting(m, unknown),
        Value::List(items) => Json::Array(items.iter().map(|v| element(v, unknown)).collect()),
        Value::Map(entries) => {
            let mut out = Map::new();
            for (key, v) in entries {
                out.insert(map_key(key), element(v, unknown));
            }
            Json::Object(out)
        }
    }
}

fn map_key(key: &MapKey) -> String {
    match key {
        MapKey::Bool(b) => b.to_string(),
        MapKey::I32(n) => n.to_string(),
        MapKey::I64(n) => n.to_string(),
        MapKey::U32(n) => n.to_string(),
        MapKey::U64(n) => n.to_string(),
        MapKey::String(s) => s.clone(),
    }
}

/// Kubernetes' types whose JSON is not their message's fields.
fn well_known(message: &DynamicMessage) -> Option<Json> {
    let descriptor = message.descriptor();
    let name = descriptor.full_name();
    let int = |field: &str| {
        message
            .get_field_by_name(field)
            .and_then(|v| v.as_i64().or_else(|| v.as_i32().map(i64::from)))
            .unwrap_or(0)
    };
    let bytes = |field: &str| {
        message
            .get_field_by_name(field)
            .and_then(|v| v.as_bytes().cloned())
            .unwrap_or_default()
    };
    let text = |field: &str| {
        message
            .get_field_by_name(field)
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    };
    let json = match name.strip_prefix(META).unwrap_or(name) {
        ".Time" | ".Timestamp" => time(int("seconds"), int("nanos"), false),
        ".MicroTime" => time(int("seconds"), int("nanos"), true),
        ".Duration" => Json::String(go_duration(int("duration"))),
        ".FieldsV1" => embedded(&bytes("Raw")),
        ".Verbs" => list(message),
        _ => match name {
            "k8s.io.apimachinery.pkg.api.resource.Quantity" => Json::String(text("string")),
            "k8s.io.apimachinery.pkg.util.intstr.IntOrString" => match int("type") {
                1 => Json::String(text("strVal")),
                _ => Json::from(int("intVal")),
            },
            "k8s.io.apimachinery.pkg.runtime.RawExtension" => embedded(&bytes("raw")),
            n if n.ends_with(".ExtraValue") => list(message),
            _ => return None,
        },
    };
    Some(json)
}

/// A wrapper of one repeated `items` (`Verbs`, `ExtraValue`): the list.
fn list(message: &DynamicMessage) -> Json {
    message
        .get_field_by_name("items")
        .map_or(Json::Array(Vec::new()), |v| element(&v, &mut None))
}

/// Bytes that hold JSON (a RawExtension's, FieldsV1's): the JSON, else the bytes in base64.
fn embedded(raw: &[u8]) -> Json {
    if raw.is_empty() {
        return Json::Null;
    }
    serde_json::from_slice(raw)
        .unwrap_or_else(|_| Json::String(base64::engine::general_purpose::STANDARD.encode(raw)))
}

/// A time as `metav1.Time` (seconds) or `metav1.MicroTime` (microseconds) writes it, in UTC;
/// Go's zero time as null. A zero `metav1.Time` encodes as an empty message, which it decodes as
/// zero again (the real apiservers' pod templates carry one): so does the view.
fn time(seconds: i64, nanos: i64, micros: bool) -> Json {
    if (seconds == ZERO_TIME || seconds == 0) && nanos == 0 {
        return Json::Null;
    }
    let offset = Duration::from_secs(seconds.unsigned_abs())
        + Duration::from_nanos(u64::try_from(nanos).unwrap_or(0));
    let at = if seconds >= 0 {
        UNIX_EPOCH.checked_add(offset)
    } else {
        UNIX_EPOCH.checked_sub(Duration::from_secs(seconds.unsigned_abs()))
    };
    let Some(at) = at.filter(|t| *t >= UNIX_EPOCH) else {
        // Before 1970: humantime does not write it; the seconds say as much.
        return Json::from(seconds);
    };
    // humantime's Display fails past year 9999 (a client's bytes may say anything): the seconds.
    let mut text = String::new();
    let written = if micros {
        write!(text, "{}", humantime::format_rfc3339_micros(at))
    } else {
        write!(text, "{}", humantime::format_rfc3339_seconds(at))
    };
    match written {
        Ok(()) => Json::String(text),
        Err(_) => Json::from(seconds),
    }
}

/// A duration in nanoseconds as Go's `time.Duration.String` writes it (`1h30m0s`, `1.5s`, `0s`).
fn go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".to_owned();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    if n < 1_000_000_000 {
        let (unit, div) = match n {
            0..1_000 => ("ns", 1),
            1_000..1_000_000 => ("µs", 1_000),
            _ => ("ms", 1_000_000),
        };
        return format!("{sign}{}{unit}", fraction(n, div));
    }
    let (h, rest) = (n / 3_600_000_000_000, n % 3_600_000_000_000);
    let (m, rest) = (rest / 60_000_000_000, rest % 60_000_000_000);
    let seconds = fraction(rest, 1_000_000_000);
    match (h, m) {
        (0, 0) => format!("{sign}{seconds}s"),
        (0, m) => format!("{sign}{m}m{seconds}s"),
        (h, m) => format!("{sign}{h}h{m}m{seconds}s"),
    }
}

/// `n / div` with its fraction, trailing zeros dropped (`1500, 1000`: `1.5`).
fn fraction(n: u64, div: u64) -> String {
    let (whole, part) = (n / div, n % div);
    if part == 0 {
        return whole.to_string();
    }
    let width = div.to_string().len() - 1;
    let digits = format!("{part:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_go_writes_them() {
        assert_eq!(go_duration(0), "0s");
        assert_eq!(go_duration(1_500_000_000), "1.5s");
        assert_eq!(go_duration(90 * 60 * 1_000_000_000), "1h30m0s");
        assert_eq!(go_duration(61 * 1_000_000_000), "1m1s");
        assert_eq!(go_duration(2_500_000), "2.5ms");
        assert_eq!(go_duration(-1_000_000_000), "-1s");
    }

    #[test]
    fn times_read_as_kubernetes_writes_them() {
        assert_eq!(time(0, 0, false), Json::Null);
        assert_eq!(time(1, 0, false), "1970-01-01T00:00:01Z");
        assert_eq!(time(1_700_000_000, 0, false), "2023-11-14T22:13:20Z");
        assert_eq!(
            time(1_700_000_000, 5_000, true),
            "2023-11-14T22:13:20.000005Z"
        );
        assert_eq!(time(ZERO_TIME, 0, false), Json::Null);
        // Found by the fuzz target: past year 9999 humantime cannot write it (it panicked).
        assert_eq!(time(300_000_000_000, 0, false), 300_000_000_000_i64);
        assert_eq!(time(i64::MAX, 999_999_999, true), i64::MAX);
    }
}
