//! The fields of each kind, from one apiserver's OpenAPI v3 documents: every field path a version
//! knows, with its default, found by walking the kind's schema through `$ref`, `allOf`, arrays and
//! maps, with a guard against cycles (a schema that refers to itself, as `JSONSchemaProps` does).

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

/// A kind by group, version and kind (`apps/v1 Deployment`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Gvk {
    /// API group; empty for core.
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
}

impl Gvk {
    /// `deployments.apps/v1`-style name of the resource serving it, given its plural.
    pub fn resource_name(&self, plural: &str) -> String {
        if self.group.is_empty() {
            format!("{plural} ({})", self.version)
        } else {
            format!("{plural}.{} ({})", self.group, self.version)
        }
    }
}

/// One kind as one version describes it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KindFields {
    /// The resource (plural) that serves it, from the document's paths.
    pub resource: String,
    /// Every field path (`spec.template.spec.containers[].image`) with its default, if any.
    pub fields: BTreeMap<String, Option<Value>>,
}

impl KindFields {
    /// The fields one object has (`spec.containers[].name`), none with a default: a kind as far
    /// as this object shows it, for tests, benches and the fuzz targets.
    pub fn of_object(object: &Value) -> KindFields {
        fn walk(value: &Value, at: &str, out: &mut BTreeMap<String, Option<Value>>) {
            match value {
                Value::Object(map) => {
                    for (k, v) in map {
                        let here = if at.is_empty() {
                            k.clone()
                        } else {
                            format!("{at}.{k}")
                        };
                        out.insert(here.clone(), None);
                        walk(v, &here, out);
                    }
                }
                Value::Array(items) => {
                    let here = format!("{at}[]");
                    items.iter().for_each(|i| walk(i, &here, out));
                }
                _ => {}
            }
        }
        let mut fields = BTreeMap::new();
        walk(object, "", &mut fields);
        KindFields {
            resource: String::new(),
            fields,
        }
    }
}

/// Every kind one version serves, with its fields.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VersionFields {
    /// By group/version/kind.
    pub kinds: BTreeMap<Gvk, KindFields>,
}

/// How many path segments deep a schema is walked at most: a guard besides the cycle check, for
/// very deep documents. Counted in fields, list items and map values, not in `$ref` and `allOf`
/// hops: kube-apiserver v1.35 wraps a reference in one more `allOf` than v1.36 does, and a
/// count of hops cut the same field at different depths in the two.
const MAX_DEPTH: usize = 32;

impl VersionFields {
    /// The kinds of one version, from its group/version OpenAPI v3 documents (what
    /// `/openapi/v3/apis/GROUP/VERSION` answers).
    pub fn from_documents<'d>(documents: impl IntoIterator<Item = &'d Value>) -> VersionFields {
        let mut out = VersionFields::default();
        for doc in documents {
            let components = &doc["components"]["schemas"];
            let resources = resources_by_kind(doc);
            for (name, schema) in components.as_object().into_iter().flatten() {
                let Some(gvk) = gvk_of(schema) else {
                    continue;
                };
                let Some(resource) = resources.get(&gvk) else {
                    // A kind no path serves (a list, an options type): not a resource.
                    continue;
                };
                let mut fields = BTreeMap::new();
                let mut walk = Walk {
                    components,
                    fields: &mut fields,
                    stack: vec![name.as_str()],
                };
                walk.node(schema, "", 0);
                out.kinds.insert(
                    gvk,
                    KindFields {
                        resource: resource.clone(),
                        fields,
                    },
                );
            }
        }
        out
    }
}

/// The group/version/kind a component schema describes (its first `x-kubernetes-group-version-kind`).
fn gvk_of(schema: &Value) -> Option<Gvk> {
    let gvk = schema["x-kubernetes-group-version-kind"]
        .as_array()?
        .first()?;
    Some(Gvk {
        group: gvk["group"].as_str()?.to_owned(),
        version: gvk["version"].as_str()?.to_owned(),
        kind: gvk["kind"].as_str()?.to_owned(),
    })
}

/// The plural resource name of every kind the document's paths serve: the last path segment that
/// is not a parameter, of a path whose operation names the kind.
fn resources_by_kind(doc: &Value) -> HashMap<Gvk, String> {
    let mut out = HashMap::new();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        let plural = path
            .split('/')
            .rev()
            .find(|s| !s.is_empty() && !is_parameter(s))
            .unwrap_or_default();
        // Subresources (`pods/{name}/status`) name the kind too, but are not the resource.
        let segments: Vec<&str> = path.split('/').collect();
        let subresource = segments
            .iter()
            .position(|s| *s == "{name}")
            .is_some_and(|i| i + 1 < segments.len());
        if subresource {
            continue;
        }
        for op in item.as_object().into_iter().flat_map(|o| o.values()) {
            let gvk = &op["x-kubernetes-group-version-kind"];
            let gvk = Gvk {
                group: gvk["group"].as_str().unwrap_or_default().to_owned(),
                version: gvk["version"].as_str().unwrap_or_default().to_owned(),
                kind: gvk["kind"].as_str().unwrap_or_default().to_owned(),
            };
            if !gvk.kind.is_empty() {
                out.entry(gvk).or_insert_with(|| plural.to_owned());
            }
        }
    }
    out
}

/// Whether a path segment is a parameter (`{namespace}`, `{name}`).
fn is_parameter(segment: &str) -> bool {
    segment.starts_with('{') && segment.ends_with('}')
}

/// A walk of one kind's schema.
struct Walk<'a> {
    components: &'a Value,
    fields: &'a mut BTreeMap<String, Option<Value>>,
    /// The component schemas being walked, outermost first: a reference to one of them is a cycle.
    stack: Vec<&'a str>,
}

impl<'a> Walk<'a> {
    /// Records the fields under `node`, which describes the field at `path` ("" for the object).
    fn node(&mut self, node: &'a Value, path: &str, depth: usize) {
        if depth > MAX_DEPTH {
            return;
        }
        // A default of a list's items or a map's values (v1.35 writes `default: ""` on them, v1.36
        // does not) is what each element defaults to, not a field a client could drop.
        let element = path.ends_with("[]") || path.ends_with("{}");
        if let Some(default) = node.get("default")
            && !path.is_empty()
            && !element
        {
            // An empty object default (`default: {}` beside an `allOf` reference) says only that
            // the struct is there; it is no value a client could lose.
            let meaningful = !default.as_object().is_some_and(serde_json::Map::is_empty);
            if meaningful {
                self.fields.insert(path.to_owned(), Some(default.clone()));
            }
        }
        if let Some(reference) = node["$ref"].as_str() {
            self.reference(reference, path, depth);
        }
        for part in node["allOf"].as_array().into_iter().flatten() {
            self.node(part, path, depth);
        }
        for (key, property) in node["properties"].as_object().into_iter().flatten() {
            let at = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            self.fields.entry(at.clone()).or_insert(None);
            self.node(property, &at, depth + 1);
        }
        if let Some(items) = node.get("items") {
            self.node(items, &format!("{path}[]"), depth + 1);
        }
        // A map's values: walked when they are objects with fields of their own.
        if let Some(values) = node.get("additionalProperties").filter(|v| v.is_object()) {
            self.node(values, &format!("{path}{{}}"), depth + 1);
        }
    }

    fn reference(&mut self, reference: &'a str, path: &str, depth: usize) {
        let Some(name) = reference.strip_prefix("#/components/schemas/") else {
            return;
        };
        if self.stack.contains(&name) {
            return;
        }
        let Some(target) = self.components.get(name) else {
            return;
        };
        self.stack.push(name);
        self.node(target, path, depth);
        self.stack.pop();
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn doc(schemas: Value) -> Value {
        json!({
            "paths": {"/apis/g/v1/namespaces/{namespace}/things": {"get": {"x-kubernetes-group-version-kind": {"group": "g", "version": "v1", "kind": "Thing"}}}},
            "components": {"schemas": schemas},
        })
    }

    #[test]
    fn references_arrays_and_defaults_become_paths_and_cycles_end() {
        let d = doc(json!({
            "Thing": {
                "x-kubernetes-group-version-kind": [{"group": "g", "version": "v1", "kind": "Thing"}],
                "properties": {
                    "spec": {"allOf": [{"$ref": "#/components/schemas/Spec"}], "default": {}},
                },
            },
            "Spec": {"properties": {
                "containers": {"type": "array", "items": {"$ref": "#/components/schemas/Container"}},
                "grace": {"type": "integer", "default": 30},
                "schema": {"$ref": "#/components/schemas/Props"},
            }},
            "Container": {"properties": {"image": {"type": "string"}}},
            // Refers to itself, as JSONSchemaProps does.
            "Props": {"properties": {"items": {"$ref": "#/components/schemas/Props"}, "type": {"type": "string"}}},
        }));
        let v = VersionFields::from_documents([&d]);
        let thing = &v.kinds[&Gvk {
            group: "g".into(),
            version: "v1".into(),
            kind: "Thing".into(),
        }];
        assert_eq!(thing.resource, "things");
        let paths: Vec<&str> = thing.fields.keys().map(String::as_str).collect();
        assert_eq!(
            paths,
            [
                "spec",
                "spec.containers",
                "spec.containers[].image",
                "spec.grace",
                "spec.schema",
                "spec.schema.items",
                "spec.schema.type",
            ]
        );
        assert_eq!(thing.fields["spec.grace"], Some(json!(30)));
        assert_eq!(
            thing.fields["spec"], None,
            "an empty object default is no value"
        );
    }

    #[test]
    fn element_defaults_are_no_fields_and_reference_wrappers_do_not_count_as_depth() {
        // As v1.35 describes labels and list items (`default: ""` on each value), and a field
        // reached through many `allOf` wrappers, as v1.35 wraps each reference once more than
        // v1.36.
        let mut wrapped = json!({"$ref": "#/components/schemas/Leaf"});
        for _ in 0..40 {
            wrapped = json!({"allOf": [wrapped]});
        }
        let d = doc(json!({
            "Thing": {
                "x-kubernetes-group-version-kind": [{"group": "g", "version": "v1", "kind": "Thing"}],
                "properties": {
                    "labels": {"type": "object", "additionalProperties": {"type": "string", "default": ""}},
                    "verbs": {"type": "array", "items": {"type": "string", "default": ""}},
                    "deep": wrapped,
                },
            },
            "Leaf": {"properties": {"message": {"type": "string"}}},
        }));
        let v = VersionFields::from_documents([&d]);
        let thing = v.kinds.values().next().expect("Thing");
        let paths: Vec<&str> = thing.fields.keys().map(String::as_str).collect();
        assert_eq!(paths, ["deep", "deep.message", "labels", "verbs"]);
    }
}
