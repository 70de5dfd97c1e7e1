//! OpenAPI v3 as kube-apiserver serves it: `/openapi/v3` lists one document per group/version, each
//! at a URL carrying its hash, and each document holds the schemas of that group/version's kinds,
//! tagged with `x-kubernetes-group-version-kind` (what `kubectl explain` looks up).
//!
//! The schemas are small: the standard fields and the fields the simulator's `schema` knows for the
//! version serving it.

use std::collections::BTreeMap;

use http::Response;
use http::StatusCode;
use serde_json::{Value, json};

use super::api::{self, ApiResource};
use super::handler::{SimBody, json_response, status_error};
use super::schema::{self, Minor};

/// Answers `/openapi/v3` and `/openapi/v3/{api/v1 | apis/GROUP/VERSION}`. A document asked for
/// with a `hash` that is not its own is redirected (301) to its URL with its own, as
/// kube-apiserver (kube-openapi's handler3) does.
pub fn serve(
    version: Minor,
    git_version: &str,
    rest: &[&str],
    query: Option<&str>,
) -> Response<SimBody> {
    let docs = documents(version, git_version);
    let hash = |doc: &Value| {
        format!(
            "{:016X}",
            xxhash_rust::xxh3::xxh3_64(doc.to_string().as_bytes())
        )
    };
    let path = rest.join("/");
    match rest {
        [] | [""] => {
            let paths: serde_json::Map<String, Value> = docs
                .iter()
                .map(|(path, doc)| {
                    let url = format!("/openapi/v3/{path}?hash={}", hash(doc));
                    (path.clone(), json!({"serverRelativeURL": url}))
                })
                .collect();
            json_response(StatusCode::OK, &json!({"paths": paths}))
        }
        _ => match docs.get(&path) {
            Some(doc) => {
                let asked = query
                    .into_iter()
                    .flat_map(|q| q.split('&'))
                    .find_map(|kv| kv.strip_prefix("hash="));
                let own = hash(doc);
                match asked {
                    Some(h) if h != own => redirect(&format!("/openapi/v3/{path}?hash={own}")),
                    _ => json_response(StatusCode::OK, doc),
                }
            }
            None => status_error(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
        },
    }
}

fn redirect(location: &str) -> Response<SimBody> {
    let mut resp = json_response(StatusCode::MOVED_PERMANENTLY, &Value::Null);
    if let Ok(l) = http::HeaderValue::from_str(location) {
        resp.headers_mut().insert(http::header::LOCATION, l);
    }
    resp
}

/// Every group/version document a simulator of `version` serves, by its path (`api/v1`,
/// `apis/apps/v1`).
fn documents(version: Minor, git_version: &str) -> BTreeMap<String, Value> {
    let mut docs: BTreeMap<String, Value> = BTreeMap::new();
    for r in api::RESOURCES.iter().filter(|r| r.served_by(version)) {
        let path = if r.group.is_empty() {
            format!("api/{}", r.version)
        } else {
            format!("apis/{}/{}", r.group, r.version)
        };
        let doc = docs.entry(path).or_insert_with(|| {
            json!({
                "openapi": "3.0.0",
                "info": {"title": "Kubernetes", "version": git_version},
                "paths": {},
                "components": {"schemas": {}},
            })
        });
        let name = schema_name(r);
        let mut schema = kind_schema(version, r);
        // As kube-apiserver's documents do: every nested object is a schema of its own, referred to
        // by `allOf: [{$ref}]` (before 1.30 wrapped in one more `allOf`, as v1.35.6 wraps them
        // where v1.36.3 does not).
        let wrap = version < (1, 30);
        hoist(&mut schema, &name, &mut doc["components"]["schemas"], wrap);
        doc["components"]["schemas"][name] = schema;
        add_paths(doc, r);
    }
    docs
}

/// The list and get paths of a resource, each operation tagged with its kind (what
/// `kubectl explain` looks a resource up by).
fn add_paths(doc: &mut Value, r: &ApiResource) {
    let prefix = if r.group.is_empty() {
        format!("/api/{}", r.version)
    } else {
        format!("/apis/{}/{}", r.group, r.version)
    };
    let list = if r.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}", r.resource)
    } else {
        format!("{prefix}/{}", r.resource)
    };
    let gvk = json!({"group": r.group, "kind": r.kind, "version": r.version});
    let operation = |action: &str| {
        json!({
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk,
            "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{}", schema_name(r))}}}}},
        })
    };
    if r.verbs.contains(&"list") {
        doc["paths"][list.as_str()] = json!({"get": operation("list")});
        doc["paths"][format!("{list}/{{name}}")] = json!({"get": operation("get")});
    } else {
        doc["paths"][list.as_str()] = json!({"post": operation("post")});
    }
}

/// Moves every object property of `node` that has properties of its own into `components` as
/// `{name}.{property}` (deepest first), leaving an `allOf` reference in its place.
fn hoist(node: &mut Value, name: &str, components: &mut Value, wrap: bool) {
    let Some(properties) = node.get_mut("properties").and_then(Value::as_object_mut) else {
        return;
    };
    for (key, property) in properties.iter_mut() {
        if property.get("properties").is_none() {
            continue;
        }
        let component = format!("{name}.{key}");
        hoist(property, &component, components, wrap);
        let description = property.get("description").cloned();
        let mut target = json!({"$ref": format!("#/components/schemas/{component}")});
        if wrap {
            target = json!({"allOf": [target]});
        }
        let mut reference = json!({"allOf": [target], "default": {}});
        if let Some(d) = description {
            reference["description"] = d;
        }
        components[component.as_str()] = std::mem::replace(property, reference);
    }
}

fn schema_name(r: &ApiResource) -> String {
    let group = match r.group {
        "" => "core",
        "apps" => "apps",
        g => g,
    };
    format!("io.k8s.api.{group}.{}.{}", r.version, r.kind)
}

/// An object's metadata, in part: its labels and finalizers, whose values and items carry
/// `default: ""` before 1.30 (as v1.35.6's OpenAPI writes them, and v1.36.3's does not).
fn metadata(version: Minor) -> Value {
    let mut element = json!({"type": "string"});
    if version < (1, 30) {
        element["default"] = json!("");
    }
    json!({
        "type": "object",
        "description": "Standard object's metadata.",
        "properties": {
            "labels": {"type": "object", "additionalProperties": element},
            "finalizers": {"type": "array", "items": element},
        },
    })
}

fn kind_schema(version: Minor, r: &ApiResource) -> Value {
    let mut properties = json!({
        "apiVersion": {"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."},
        "kind": {"type": "string", "description": "Kind is a string value representing the REST resource this object represents."},
        "metadata": metadata(version),
    });
    for (path, field) in schema::fields(version, r.resource) {
        let mut at = &mut properties;
        let Some((last, parents)) = path.split_last() else {
            continue;
        };
        for p in parents {
            let entry = &mut at[*p];
            if entry.get("type").is_none() {
                *entry = json!({"type": "object", "properties": {}});
            }
            at = &mut entry["properties"];
        }
        at[*last] = field;
    }
    json!({
        "description": format!("{} of the simulated apiserver.", r.kind),
        "type": "object",
        "properties": properties,
        "x-kubernetes-group-version-kind": [{"group": r.group, "kind": r.kind, "version": r.version}],
    })
}
