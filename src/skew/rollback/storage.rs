//! Storage versions: the version each apiserver writes a resource in (the StorageVersion API,
//! `internal.apiserver.k8s.io/v1alpha1`, served only with the `StorageVersionAPI` feature gate and
//! that API enabled). A resource stored in a version the older backend does not serve is unreadable
//! to it. Where the API is not served, the check says so, and names the resources a newer backend
//! serves in versions the older does not: those it cannot judge.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::scan::Source;
use crate::upstream::own_get_with_groups;

/// What the check found of storage versions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StorageVersions {
    /// Whether the StorageVersion API answered.
    pub visible: bool,
    /// What it could not see, and why, in words.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
    /// Resources stored in a version the older backend does not serve: a loss.
    #[serde(default)]
    pub unreadable: Vec<StoredAs>,
    /// Resources a newer backend serves in a version the older does not, whose storage version
    /// could not be seen: judge them by hand.
    #[serde(default)]
    pub unknown: Vec<StoredAs>,
}

/// A resource and the versions at stake.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredAs {
    /// `deployments.apps`.
    pub resource: String,
    /// The version it is (or may be) stored in, `apps/v1`.
    pub stored_as: Vec<String>,
    /// The versions the older backend serves it in.
    pub older_serves: Vec<String>,
}

impl StorageVersions {
    pub fn loses(&self) -> bool {
        !self.unreadable.is_empty()
    }
}

const PATH: &str = "/apis/internal.apiserver.k8s.io/v1alpha1/storageversions";

/// Reads the StorageVersion API through `through`, or says what cannot be seen.
pub(crate) async fn read(
    to: &Source,
    from: &[&Source],
    through: &Source,
    groups: &[http::HeaderValue],
) -> StorageVersions {
    let older = served_versions(to);
    let answer =
        own_get_with_groups(through.endpoint(), PATH, groups, Duration::from_secs(30)).await;
    let items = match &answer {
        Ok((code, body)) if code.is_success() => serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v["items"].as_array().cloned()),
        _ => None,
    };
    let Some(items) = items else {
        let why = match answer {
            Ok((code, _)) => format!("{PATH} answered {code}"),
            Err(e) => format!("{PATH}: {e}"),
        };
        return StorageVersions {
            visible: false,
            note: format!(
                "storage versions not visible: {why} (the apiservers need the StorageVersionAPI feature gate and --runtime-config=internal.apiserver.k8s.io/v1alpha1=true); listed instead: the resources a newer backend serves in versions {} does not",
                to.backend.name
            ),
            unreadable: Vec::new(),
            unknown: unknown(&older, from),
        };
    };
    let mut unreadable = Vec::new();
    for item in &items {
        let Some(stored) = judge(item, &older) else {
            continue;
        };
        unreadable.push(stored);
    }
    StorageVersions {
        visible: true,
        note: String::new(),
        unreadable,
        unknown: Vec::new(),
    }
}

/// A StorageVersion whose encoding versions the older backend does not serve, if so.
fn judge(item: &Value, older: &BTreeMap<String, BTreeSet<String>>) -> Option<StoredAs> {
    let name = item["metadata"]["name"].as_str()?;
    let resource_name = name.rsplit('.').next().unwrap_or(name);
    let encodings: BTreeSet<String> = (item["status"]["storageVersions"].as_array())
        .into_iter()
        .flatten()
        .filter_map(|s| s["encodingVersion"].as_str().map(str::to_owned))
        .collect();
    let group = encodings
        .iter()
        .next()
        .map(|e| e.rsplit_once('/').map_or("", |(g, _)| g).to_owned())?;
    let key = selector(&group, resource_name);
    let serves = older.get(&key).cloned().unwrap_or_default();
    let lost: Vec<String> = encodings
        .iter()
        .filter(|e| !serves.contains(*e))
        .cloned()
        .collect();
    (!lost.is_empty()).then(|| StoredAs {
        resource: key,
        stored_as: lost,
        older_serves: serves.into_iter().collect(),
    })
}

/// The resources the newer backends serve in a version the older does not, while it serves them
/// in another: stored in the one it does not serve, they would be unreadable to it.
fn unknown(older: &BTreeMap<String, BTreeSet<String>>, from: &[&Source]) -> Vec<StoredAs> {
    let mut newer: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for source in from {
        for (resource, versions) in served_versions(source) {
            newer.entry(resource).or_default().extend(versions);
        }
    }
    let mut out = Vec::new();
    for (resource, versions) in newer {
        let Some(serves) = older.get(&resource) else {
            continue;
        };
        let only_newer: Vec<String> = versions.difference(serves).cloned().collect();
        if !only_newer.is_empty() {
            out.push(StoredAs {
                resource,
                stored_as: only_newer,
                older_serves: serves.iter().cloned().collect(),
            });
        }
    }
    out
}

/// Each resource (`deployments.apps`) a backend serves, with its group/versions (`apps/v1`).
fn served_versions(source: &Source) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (gvk, kind) in &source.fields.kinds {
        let gv = if gvk.group.is_empty() {
            gvk.version.clone()
        } else {
            format!("{}/{}", gvk.group, gvk.version)
        };
        out.entry(selector(&gvk.group, &kind.resource))
            .or_default()
            .insert(gv);
    }
    out
}

fn selector(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}.{group}")
    }
}
