//! Each simulated version's schema: the fields it knows and the defaults it fills in.
//!
//! These differences are made up for the simulator (they are not the real 1.29/1.30 changes), but
//! they behave as real skew does: a version drops, on every write and read, the fields it does not
//! know, and fills in its own defaults.
//!
//! | resource | field | difference |
//! |---|---|---|
//! | configmaps | `policy` | known from 1.30; older versions drop it |
//! | pods | `spec.sidecarPolicy` | known from 1.30; older versions drop it |
//! | pods | `status.resizeStatus` | known from 1.30; older versions drop it (a status field, as v1.36 adds `allocatedResourcesStatus[].resources[].message`) |
//! | deployments | `spec.template.spec.sidecarPolicy` | known from 1.30; older versions drop it |
//! | deployments | `spec.revisionHistoryLimit` | defaults to 10 before 1.30, to 5 from 1.30 |
//! | pods | `spec.terminationGracePeriodSeconds` | defaults to 30 before 1.30, to 45 from 1.30 |

use serde_json::{Value, json};

/// A `major.minor` apiserver version.
pub type Minor = (u32, u32);

/// The first version that knows each field; earlier versions drop it.
const NEW_FIELDS: &[(&str, &[&str], Minor)] = &[
    ("configmaps", &["policy"], (1, 30)),
    ("pods", &["spec", "sidecarPolicy"], (1, 30)),
    ("pods", &["status", "resizeStatus"], (1, 30)),
    (
        "deployments",
        &["spec", "template", "spec", "sidecarPolicy"],
        (1, 30),
    ),
];

/// Defaults that changed: (resource, field, version from which `new` applies, old, new).
const DEFAULTS: &[(&str, &[&str], Minor, i64, i64)] = &[
    (
        "deployments",
        &["spec", "revisionHistoryLimit"],
        (1, 30),
        10,
        5,
    ),
    (
        "pods",
        &["spec", "terminationGracePeriodSeconds"],
        (1, 30),
        30,
        45,
    ),
];

/// Rewrites an object as the given version stores and returns it: unknown fields gone, defaults in.
pub fn apply(version: Minor, resource: &str, object: &mut Value) {
    for (r, path, since) in NEW_FIELDS {
        if *r == resource && version < *since {
            remove(object, path);
        }
    }
    for (r, path, since, old, new) in DEFAULTS {
        if *r == resource {
            let value = if version < *since { *old } else { *new };
            default(object, path, json!(value));
        }
    }
}

/// The fields beyond the standard ones that `version` knows for `resource`, by path, with their
/// OpenAPI schema (defaults included): what its OpenAPI document describes. Every version knows the
/// structure its objects have (containers, a deployment's pod template); only the fields and
/// defaults above differ.
pub fn fields(version: Minor, resource: &str) -> Vec<(&'static [&'static str], Value)> {
    let mut out: Vec<(&'static [&'static str], Value)> = match resource {
        "configmaps" => vec![(
            &["data"][..],
            json!({"type": "object", "additionalProperties": {"type": "string"}, "description": "Data contains the configuration data."}),
        )],
        "namespaces" => Vec::new(),
        _ => vec![(
            &["spec"][..],
            json!({"type": "object", "description": "The desired state."}),
        )],
    };
    let containers = json!({"type": "array", "items": {"type": "object", "properties": {
        "name": {"type": "string"},
        "image": {"type": "string"},
    }}});
    match resource {
        "pods" => {
            out.push((&["spec", "containers"][..], containers));
            // Every version knows a pod's status and its phase; 1.30 adds `resizeStatus` to it.
            out.push((&["status"][..], json!({"type": "object"})));
            out.push((&["status", "phase"][..], json!({"type": "string"})));
        }
        "deployments" => {
            out.push((&["spec", "replicas"][..], json!({"type": "integer"})));
            out.push((
                &["spec", "template", "metadata"][..],
                json!({"type": "object"}),
            ));
            out.push((&["spec", "template", "spec", "containers"][..], containers));
        }
        _ => {}
    }
    for (r, path, since) in NEW_FIELDS {
        if *r == resource && version >= *since {
            out.push((path, json!({"type": "string"})));
        }
    }
    for (r, path, since, old, new) in DEFAULTS {
        if *r == resource {
            let value = if version < *since { *old } else { *new };
            out.push((path, json!({"type": "integer", "default": value})));
        }
    }
    out
}

fn remove(object: &mut Value, path: &[&str]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut at = object;
    for p in parents {
        match at.get_mut(*p) {
            Some(next) => at = next,
            None => return,
        }
    }
    if let Some(map) = at.as_object_mut() {
        map.remove(*last);
    }
}

fn default(object: &mut Value, path: &[&str], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut at = object;
    for p in parents {
        let Some(map) = at.as_object_mut() else {
            return;
        };
        at = map.entry(p.to_string()).or_insert_with(|| json!({}));
    }
    if let Some(map) = at.as_object_mut() {
        map.entry(last.to_string()).or_insert(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_versions_drop_new_fields_and_each_fills_its_defaults() {
        let mut cm = json!({"data": {"a": "1"}, "policy": "keep"});
        apply((1, 30), "configmaps", &mut cm);
        assert_eq!(cm["policy"], "keep");
        apply((1, 29), "configmaps", &mut cm);
        assert!(cm.get("policy").is_none());
        assert_eq!(cm["data"]["a"], "1");
        let mut d = json!({"spec": {"replicas": 1}});
        apply((1, 29), "deployments", &mut d);
        assert_eq!(d["spec"]["revisionHistoryLimit"], 10);
        let mut d = json!({"spec": {}});
        apply((1, 30), "deployments", &mut d);
        assert_eq!(d["spec"]["revisionHistoryLimit"], 5);
    }
}
