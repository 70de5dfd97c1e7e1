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
use super::selector;
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

/// A StorageVersion (`<group>.<resource>`) stored in a version some apiserver cannot read, if so:
/// one whose encoding version another apiserver's `decodableVersions` lacks (the older reports its
/// own while it runs), or, where they are not given, one the older backend does not serve. A
/// resource the older does not serve at all is a finding of its kind already.
fn judge(item: &Value, older: &BTreeMap<String, BTreeSet<String>>) -> Option<StoredAs> {
    let name = item["metadata"]["name"].as_str()?;
    let resource_name = name.rsplit('.').next().unwrap_or(name);
    let servers = item["status"]["storageVersions"].as_array()?;
    let strings = |v: &Value| -> BTreeSet<String> {
        (v.as_array().into_iter().flatten())
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect()
    };
    let encodings: BTreeSet<String> = servers
        .iter()
        .filter_map(|s| s["encodingVersion"].as_str().map(str::to_owned))
        .collect();
    let group = encodings
        .iter()
        .next()
        .map(|e| e.rsplit_once('/').map_or("", |(g, _)| g).to_owned())?;
    let key = selector(&group, resource_name);
    let serves = older.get(&key).cloned().unwrap_or_default();
    if serves.is_empty() {
        return None;
    }
    let decodable: Vec<BTreeSet<String>> = servers
        .iter()
        .map(|s| strings(&s["decodableVersions"]))
        .filter(|d| !d.is_empty())
        .collect();
    let lost: Vec<String> = encodings
        .iter()
        .filter(|e| match decodable.is_empty() {
            true => !serves.contains(*e),
            false => decodable.iter().any(|d| !d.contains(*e)),
        })
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

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use serde_json::json;

    fn older() -> BTreeMap<String, BTreeSet<String>> {
        let mut m = BTreeMap::new();
        m.insert(
            "widgets.example.com".to_owned(),
            ["example.com/v1beta1".to_owned()].into(),
        );
        m.insert("pods".to_owned(), ["v1".to_owned()].into());
        m
    }

    #[test]
    fn a_version_one_apiserver_cannot_decode_is_unreadable() {
        // The newer stores v1; the older, running beside it, decodes only v1beta1.
        let sv = json!({"metadata": {"name": "example.com.widgets"}, "status": {"storageVersions": [
            {"apiServerID": "new", "encodingVersion": "example.com/v1", "decodableVersions": ["example.com/v1", "example.com/v1beta1"]},
            {"apiServerID": "old", "encodingVersion": "example.com/v1beta1", "decodableVersions": ["example.com/v1beta1"]}
        ]}});
        let found = super::judge(&sv, &older()).expect("unreadable");
        assert_eq!(found.resource, "widgets.example.com");
        assert_eq!(found.stored_as, ["example.com/v1"]);
        // Every apiserver decodes what the others write: nothing to say.
        let pods = json!({"metadata": {"name": "core.pods"}, "status": {"storageVersions": [
            {"apiServerID": "new", "encodingVersion": "v1", "decodableVersions": ["v1"]},
            {"apiServerID": "old", "encodingVersion": "v1", "decodableVersions": ["v1"]}
        ]}});
        assert!(super::judge(&pods, &older()).is_none());
        // Without decodableVersions, by what the older serves.
        let bare = json!({"metadata": {"name": "example.com.widgets"}, "status": {"storageVersions": [
            {"apiServerID": "new", "encodingVersion": "example.com/v1"}
        ]}});
        assert!(super::judge(&bare, &older()).is_some());
    }
}
