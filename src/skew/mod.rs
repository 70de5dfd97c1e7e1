//! What differs between the apiserver versions, from their own OpenAPI v3 documents: for every kind
//! that more than one version serves, the fields only some versions know and the defaults that
//! changed; and the resources one version serves and another does not. From this follow the pins an
//! upgrade needs (a resource whose fields differ must have one writer version at a time).

mod fields;
mod live;
mod loss;
mod placement;
mod report;
pub mod rollback;

pub use fields::{Gvk, KindFields, VersionFields};
pub(crate) use live::{DocumentCache, version_fields};
pub use live::{fetch, from_dir};
pub use loss::{Loss, LossReason, Step, losses, restore, unstorable};
pub use report::{DefaultChange, FieldSkew, KindSkew, Report, ServedBySome};

use std::collections::{BTreeMap, BTreeSet};

/// Compares the versions: `versions` names each (a backend name or a version) with its fields.
pub fn compare(versions: &[(String, VersionFields)]) -> Report {
    let names: Vec<&str> = versions.iter().map(|(n, _)| n.as_str()).collect();
    let mut all: BTreeSet<&Gvk> = BTreeSet::new();
    for (_, v) in versions {
        all.extend(v.kinds.keys());
    }
    let mut kinds = Vec::new();
    let mut served_by_some = Vec::new();
    for gvk in all {
        let serving: Vec<(&str, &KindFields)> = versions
            .iter()
            .filter_map(|(n, v)| Some((n.as_str(), v.kinds.get(gvk)?)))
            .collect();
        let resource = serving
            .first()
            .map(|(_, k)| gvk.resource_name(&k.resource))
            .unwrap_or_default();
        if serving.len() < versions.len() {
            served_by_some.push(ServedBySome {
                resource: resource.clone(),
                served_by: serving.iter().map(|(n, _)| (*n).to_owned()).collect(),
                not_by: names
                    .iter()
                    .filter(|n| !serving.iter().any(|(s, _)| s == *n))
                    .map(|n| (*n).to_owned())
                    .collect(),
            });
        }
        if serving.len() < 2 {
            continue;
        }
        let skew = kind_skew(gvk, &resource, &serving);
        if !skew.fields.is_empty() || !skew.defaults.is_empty() {
            kinds.push(skew);
        }
    }
    // As a person looks them up: by resource name.
    kinds.sort_by(|a: &KindSkew, b| a.resource.cmp(&b.resource));
    served_by_some.sort_by(|a: &ServedBySome, b| a.resource.cmp(&b.resource));
    Report {
        versions: names.iter().map(|n| (*n).to_owned()).collect(),
        kinds,
        served_by_some,
    }
}

/// The differences of one kind among the versions that serve it.
fn kind_skew(gvk: &Gvk, resource: &str, serving: &[(&str, &KindFields)]) -> KindSkew {
    let mut paths: BTreeSet<&String> = BTreeSet::new();
    for (_, k) in serving {
        paths.extend(k.fields.keys());
    }
    let mut fields = Vec::new();
    let mut defaults = Vec::new();
    for path in paths {
        let known_by: Vec<String> = serving
            .iter()
            .filter(|(_, k)| k.fields.contains_key(path))
            .map(|(n, _)| (*n).to_owned())
            .collect();
        if known_by.len() < serving.len() {
            // Only the outermost unknown field: its children are unknown with it.
            let parent_listed = fields.iter().any(|f: &FieldSkew| {
                path.starts_with(&f.path)
                    && path[f.path.len()..].starts_with(['.', '[', '{'])
                    && f.known_by == known_by
            });
            if !parent_listed {
                fields.push(FieldSkew {
                    path: path.clone(),
                    unknown_to: serving
                        .iter()
                        .filter(|(n, _)| !known_by.iter().any(|k| k == n))
                        .map(|(n, _)| (*n).to_owned())
                        .collect(),
                    container_hash_risk: container_hash_risk(path),
                    known_by,
                });
            }
            continue;
        }
        let by_version: BTreeMap<String, Option<serde_json::Value>> = serving
            .iter()
            .map(|(n, k)| ((*n).to_owned(), k.fields[path].clone()))
            .collect();
        let mut values = by_version.values();
        let first = values.next().cloned().flatten();
        if values.any(|v| *v != first) {
            defaults.push(DefaultChange {
                path: path.clone(),
                container_hash_risk: container_hash_risk(path),
                by_version,
            });
        }
    }
    KindSkew {
        gvk: gvk.clone(),
        resource: resource.to_owned(),
        fields,
        defaults,
    }
}

/// Whether a field is part of a container's spec: the kubelet hashes the container spec, so a
/// field that one version adds or defaults differently restarts the container.
fn container_hash_risk(path: &str) -> bool {
    ["containers[]", "initContainers[]", "ephemeralContainers[]"]
        .iter()
        .any(|c| path.starts_with(c) || path.contains(&format!(".{c}")))
}

#[cfg(test)]
mod tests;
