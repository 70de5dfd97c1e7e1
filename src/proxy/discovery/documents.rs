//! The merged discovery documents: the union of the backends' versions and groups, the backend
//! each group/version is taken from, and the JSON of `/api`, `/apis` (legacy and aggregated forms)
//! and `/openapi/v3`.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{DiscoveryPath, MergedGroup, discovery_path};
use crate::config::BackendId;
use crate::upstream::Served;

fn push_unique(list: &mut Vec<String>, item: &str) {
    if !list.iter().any(|x| x == item) {
        list.push(item.to_owned());
    }
}

/// Every core version and every group (with its versions) that some backend serves, in the
/// backends' order of preference.
pub(super) fn union_of_versions(
    served: &[(BackendId, Arc<Served>)],
) -> (Vec<String>, Vec<MergedGroup>) {
    let mut core_versions = Vec::new();
    let mut groups: Vec<MergedGroup> = Vec::new();
    for (_, s) in served {
        for v in s.core["versions"].as_array().into_iter().flatten() {
            if let Some(v) = v.as_str() {
                push_unique(&mut core_versions, v);
            }
        }
        for g in &s.groups {
            let i = match groups.iter().position(|m| m.name == g.name) {
                Some(i) => i,
                None => {
                    groups.push(MergedGroup {
                        name: g.name.clone(),
                        versions: Vec::new(),
                        preferred: g.preferred.clone(),
                    });
                    groups.len() - 1
                }
            };
            for v in &g.versions {
                push_unique(&mut groups[i].versions, v);
            }
        }
    }
    (core_versions, groups)
}

/// For each group/version: the backend its documents come from (the one the route table sends
/// its first resource to, if it serves it, else the most preferred that does) and its resource
/// list, merged per resource: that backend's list, and after it each resource (with its
/// subresources) that only other backends serve in the group/version, from the most preferred of
/// them (a request for it falls back to a backend that serves it).
#[allow(clippy::type_complexity)]
pub(super) fn choose_sources(
    served: &[(BackendId, Arc<Served>)],
    core_versions: &[String],
    groups: &[MergedGroup],
    source_of: impl Fn(&str, &str, &str) -> BackendId,
) -> (
    HashMap<(String, String), BackendId>,
    HashMap<(String, String), Listed>,
) {
    let mut sources = HashMap::new();
    let mut lists = HashMap::new();
    let gvs = core_versions
        .iter()
        .map(|v| (String::new(), v.clone()))
        .chain(
            groups
                .iter()
                .flat_map(|g| g.versions.iter().map(|v| (g.name.clone(), v.clone()))),
        );
    for (group, version) in gvs {
        let candidates: Vec<(BackendId, &Value)> = served
            .iter()
            .filter_map(|(id, s)| {
                let l = s
                    .lists
                    .iter()
                    .find(|l| l.group == group && l.version == version)?;
                Some((*id, &l.list))
            })
            .collect();
        let Some(first) = candidates.first() else {
            continue;
        };
        let resource = first.1["resources"][0]["name"].as_str().unwrap_or("");
        let chosen = source_of(&group, &version, resource);
        let &(id, list) = candidates
            .iter()
            .find(|(id, _)| *id == chosen)
            .unwrap_or(first);
        sources.insert((group.clone(), version.clone()), id);
        let others = candidates.iter().filter(|(other, _)| *other != id);
        lists.insert(
            (group, version),
            merge_resources(list, others.map(|(_, l)| *l)),
        );
    }
    (sources, lists)
}

/// A group/version's resource list as merged discovery lists it.
pub(super) struct Listed {
    pub(super) list: Value,
    /// Resources were added to the source backend's own list.
    pub(super) added: bool,
}

/// `list` with the resources of `others` it does not have (each with its subresources).
fn merge_resources<'a>(list: &'a Value, others: impl Iterator<Item = &'a Value>) -> Listed {
    let top = |name: &str| name.split('/').next().unwrap_or(name).to_owned();
    let entries = |l: &'a Value| l["resources"].as_array().map_or(&[][..], Vec::as_slice);
    let mut merged = list.clone();
    let mut known: Vec<String> = entries(list)
        .iter()
        .filter_map(|r| r["name"].as_str().map(top))
        .collect();
    let mut added = false;
    for other in others {
        let new: Vec<String> = entries(other)
            .iter()
            .filter_map(|r| r["name"].as_str().map(top))
            .filter(|name| !known.contains(name))
            .collect();
        for r in entries(other) {
            let is_new = r["name"].as_str().is_some_and(|n| new.contains(&top(n)));
            if is_new && let Some(all) = merged["resources"].as_array_mut() {
                all.push(r.clone());
                added = true;
            }
        }
        known.extend(new);
    }
    Listed {
        list: merged,
        added,
    }
}

pub(super) fn core_group(versions: &[String]) -> MergedGroup {
    MergedGroup {
        name: String::new(),
        versions: versions.to_vec(),
        preferred: versions.first().cloned(),
    }
}

fn group_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    }
}

/// The legacy `/apis` document.
pub(super) fn group_list(groups: &[MergedGroup]) -> Value {
    let groups: Vec<Value> = groups
        .iter()
        .map(|g| {
            let versions: Vec<Value> = g
                .versions
                .iter()
                .map(|v| json!({"groupVersion": group_version(&g.name, v), "version": v}))
                .collect();
            let preferred = g.preferred.as_ref().or(g.versions.first());
            json!({
                "name": g.name,
                "versions": versions,
                "preferredVersion": preferred.map(|v| json!({"groupVersion": group_version(&g.name, v), "version": v})),
            })
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// The aggregated form (`APIGroupDiscoveryList`) of `groups`, built from each group/version's
/// `APIResourceList`; versions are listed preferred first, as clients expect.
pub(super) fn aggregated(
    api_version: &str,
    groups: &[MergedGroup],
    lists: &HashMap<(String, String), Listed>,
) -> Value {
    let items: Vec<Value> = groups
        .iter()
        .map(|g| {
            let mut order: Vec<&String> = g.preferred.iter().collect();
            order.extend(
                g.versions
                    .iter()
                    .filter(|v| Some(*v) != g.preferred.as_ref()),
            );
            let versions: Vec<Value> = order
                .into_iter()
                .filter_map(|v| {
                    let listed = lists.get(&(g.name.clone(), v.clone()))?;
                    Some(json!({
                        "version": v,
                        "resources": aggregated_resources(&g.name, v, &listed.list),
                        "freshness": "Current",
                    }))
                })
                .collect();
            let mut metadata = json!({"creationTimestamp": null});
            if !g.name.is_empty() {
                metadata["name"] = json!(g.name);
            }
            json!({"metadata": metadata, "versions": versions})
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{api_version}"),
        "metadata": {},
        "items": items,
    })
}

/// The resources of one `APIResourceList` in the aggregated form: each with its subresources.
fn aggregated_resources(group: &str, version: &str, list: &Value) -> Vec<Value> {
    let entries: &[Value] = list["resources"].as_array().map_or(&[], Vec::as_slice);
    let kind_of = |r: &Value| {
        json!({
            "group": r["group"].as_str().unwrap_or(group),
            "version": r["version"].as_str().unwrap_or(version),
            "kind": r["kind"],
        })
    };
    let mut out: Vec<Value> = Vec::new();
    for r in entries {
        let Some(name) = r["name"].as_str() else {
            continue;
        };
        if let Some((parent, sub)) = name.split_once('/') {
            if let Some(p) = out.iter_mut().find(|p| p["resource"] == parent)
                && let Some(subs) = p["subresources"].as_array_mut()
            {
                subs.push(
                    json!({"subresource": sub, "responseKind": kind_of(r), "verbs": r["verbs"]}),
                );
            }
            continue;
        }
        let mut entry = Map::new();
        entry.insert("resource".into(), json!(name));
        entry.insert("responseKind".into(), kind_of(r));
        let scope = if r["namespaced"].as_bool() == Some(true) {
            "Namespaced"
        } else {
            "Cluster"
        };
        entry.insert("scope".into(), json!(scope));
        entry.insert("singularResource".into(), r["singularName"].clone());
        entry.insert("verbs".into(), r["verbs"].clone());
        for optional in ["shortNames", "categories"] {
            if r[optional].as_array().is_some_and(|a| !a.is_empty()) {
                entry.insert(optional.into(), r[optional].clone());
            }
        }
        entry.insert("subresources".into(), json!([]));
        out.push(Value::Object(entry));
    }
    out
}

/// `/openapi/v3`'s paths merged: a group/version's entry from the backend its documents come from,
/// every other entry from the most preferred backend that lists it.
pub(super) fn merged_openapi(
    served: &[(BackendId, Arc<Served>)],
    sources: &HashMap<(String, String), BackendId>,
) -> Option<Map<String, Value>> {
    let mut paths = Map::new();
    let mut any = false;
    for (id, s) in served {
        let Some(own) = &s.openapi else {
            continue;
        };
        any = true;
        for (path, entry) in own {
            let gv = match discovery_path(&format!("/{path}")) {
                Some(DiscoveryPath::GroupVersion { group, version, .. }) => sources
                    .get(&(group.to_owned(), version.to_owned()))
                    .copied(),
                _ => None,
            };
            let take = match gv {
                Some(source) => source == *id,
                None => !paths.contains_key(path),
            };
            if take {
                paths.insert(path.clone(), entry.clone());
            }
        }
    }
    any.then_some(paths)
}

/// For each group/version whose resource list other backends added resources to, the OpenAPI
/// document to merge (when the source backend serves OpenAPI v3).
pub(super) fn openapi_plans(
    served: &[(BackendId, Arc<Served>)],
    sources: &HashMap<(String, String), BackendId>,
    lists: &HashMap<(String, String), Listed>,
) -> Vec<((String, String), super::Plan)> {
    let indexes: Vec<(BackendId, &Map<String, Value>)> = served
        .iter()
        .filter_map(|(id, s)| Some((*id, s.openapi.as_ref()?)))
        .collect();
    let mut plans: Vec<_> = lists
        .iter()
        .filter(|(_, l)| l.added)
        .filter_map(|((group, version), _)| {
            let source = *sources.get(&(group.clone(), version.clone()))?;
            let index_path = if group.is_empty() {
                format!("api/{version}")
            } else {
                format!("apis/{group}/{version}")
            };
            let plan = super::Plan::new(&index_path, source, &indexes)?;
            Some(((group.clone(), version.clone()), plan))
        })
        .collect();
    plans.sort_by(|a, b| a.0.cmp(&b.0));
    plans
}
