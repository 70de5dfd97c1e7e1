//! What each backend serves: its group/version/resources, read from discovery (`/api`, `/apis` and
//! each group/version), so a request can fall back to a backend that serves what its own does not.

use foldhash::HashSet;
use std::sync::Arc;

use serde_json::Value;

use super::EndpointPool;
use super::own::get;

/// What one backend serves: hashes of (group, version, resource) for the request path, and the
/// discovery documents it answered, for the merged discovery that skewgate answers clients with.
#[derive(Debug, Default)]
pub(crate) struct Served {
    set: HashSet<u64>,
    /// `/api`: the core group's versions (an `APIVersions`).
    pub core: Value,
    /// `/apis`: the named groups, in the order the apiserver lists them.
    pub groups: Vec<Group>,
    /// Each group/version's `APIResourceList`, core first.
    pub lists: Vec<GroupVersionList>,
    /// `/openapi/v3`'s `paths`, when the apiserver serves OpenAPI v3.
    pub openapi: Option<serde_json::Map<String, Value>>,
}

/// A named API group as `/apis` lists it.
#[derive(Clone, Debug)]
pub(crate) struct Group {
    /// The group's name.
    pub name: String,
    /// Its versions, most preferred first.
    pub versions: Vec<String>,
    /// The preferred version.
    pub preferred: Option<String>,
}

/// One group/version's `APIResourceList`.
#[derive(Clone, Debug)]
pub(crate) struct GroupVersionList {
    /// The group; empty for the core group.
    pub group: String,
    /// The version.
    pub version: String,
    /// The document as the apiserver served it.
    pub list: Value,
}

fn key(group: &str, version: &str, resource: &str) -> u64 {
    crate::keys::key_of(&[group, version, resource])
}

impl Served {
    /// Whether the backend serves `resource` in `group`/`version`.
    pub(crate) fn contains(&self, group: &str, version: &str, resource: &str) -> bool {
        self.set.contains(&key(group, version, resource))
    }

    /// Whether the backend serves `resource`'s `sub`resource (`pods/status`) in `group`/`version`.
    /// Looked up in the documents (only for a guarded update, rarely).
    pub(crate) fn has_subresource(
        &self,
        group: &str,
        version: &str,
        resource: &str,
        sub: &str,
    ) -> bool {
        let name = format!("{resource}/{sub}");
        self.lists
            .iter()
            .filter(|l| l.group == group && l.version == version)
            .flat_map(|l| l.list["resources"].as_array().into_iter().flatten())
            .any(|r| r["name"].as_str() == Some(name.as_str()))
    }

    /// How many group/version/resources it serves.
    pub(crate) fn len(&self) -> usize {
        self.set.len()
    }
}

async fn json(ep: &Arc<EndpointPool>, path: &str) -> Result<Value, String> {
    let (code, body) = get(ep, path).await?;
    if !code.is_success() {
        return Err(super::own::answered(ep, path, code, &body));
    }
    serde_json::from_slice(&body).map_err(|e| format!("{path}: {e}"))
}

/// Reads an endpoint's discovery documents.
pub(super) async fn discover(ep: &Arc<EndpointPool>) -> Result<Served, String> {
    let mut served = Served {
        core: json(ep, "/api").await?,
        ..Served::default()
    };
    let mut gvs: Vec<(String, String)> = served.core["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|v| (String::new(), v.to_owned()))
        .collect();
    let groups = json(ep, "/apis").await?;
    for g in groups["groups"].as_array().into_iter().flatten() {
        let name = g["name"].as_str().unwrap_or_default().to_owned();
        let versions: Vec<String> = g["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v["version"].as_str().map(str::to_owned))
            .collect();
        gvs.extend(versions.iter().map(|v| (name.clone(), v.clone())));
        let preferred = g["preferredVersion"]["version"].as_str().map(str::to_owned);
        served.groups.push(Group {
            name,
            versions,
            preferred,
        });
    }
    for (group, version) in gvs {
        let path = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let list = json(ep, &path).await?;
        for r in list["resources"].as_array().into_iter().flatten() {
            // Subresources (`pods/status`) are served with their resource.
            if let Some(name) = r["name"].as_str().filter(|n| !n.contains('/')) {
                served.set.insert(key(&group, &version, name));
            }
        }
        served.lists.push(GroupVersionList {
            group,
            version,
            list,
        });
    }
    // OpenAPI v3 is optional: an apiserver without it (or one that forbids it) still serves.
    served.openapi = json(ep, "/openapi/v3")
        .await
        .ok()
        .and_then(|v| v.get("paths")?.as_object().cloned());
    Ok(served)
}
