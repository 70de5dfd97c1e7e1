//! What each backend serves: its group/version/resources, read from discovery (`/api`, `/apis` and
//! each group/version), so a request can fall back to a backend that serves what its own does not.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::Value;
use xxhash_rust::xxh3::Xxh3;

use super::EndpointPool;
use super::health::get;

/// The resources one backend serves, as hashes of (group, version, resource).
#[derive(Debug, Default)]
pub struct Served {
    set: HashSet<u64>,
}

fn key(group: &str, version: &str, resource: &str) -> u64 {
    // One-shot hashing of a stack buffer: this runs for every resource request.
    let mut buf = [0u8; 256];
    let mut n = 0;
    for part in [group, version, resource] {
        let bytes = part.as_bytes();
        if n + bytes.len() + 1 > buf.len() {
            return streamed_key(group, version, resource);
        }
        buf[n..n + bytes.len()].copy_from_slice(bytes);
        buf[n + bytes.len()] = 0xff;
        n += bytes.len() + 1;
    }
    xxhash_rust::xxh3::xxh3_64(&buf[..n])
}

fn streamed_key(group: &str, version: &str, resource: &str) -> u64 {
    let mut h = Xxh3::new();
    for part in [group, version, resource] {
        h.update(part.as_bytes());
        h.update(&[0xff]);
    }
    h.digest()
}

impl Served {
    /// Whether the backend serves `resource` in `group`/`version`.
    pub fn contains(&self, group: &str, version: &str, resource: &str) -> bool {
        self.set.contains(&key(group, version, resource))
    }

    /// How many group/version/resources it serves.
    pub fn len(&self) -> usize {
        self.set.len()
    }

    /// Whether it serves none.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }
}

async fn json(ep: &Arc<EndpointPool>, path: &str) -> Result<Value, String> {
    let (code, body) = get(ep, path).await?;
    if !code.is_success() {
        return Err(format!("{path} answered {code}"));
    }
    serde_json::from_slice(&body).map_err(|e| format!("{path}: {e}"))
}

/// Reads an endpoint's discovery documents.
pub async fn discover(ep: &Arc<EndpointPool>) -> Result<Served, String> {
    let mut gvs: Vec<(String, String)> = Vec::new();
    let core = json(ep, "/api").await?;
    for v in core["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        gvs.push((String::new(), v.to_owned()));
    }
    let groups = json(ep, "/apis").await?;
    for g in groups["groups"].as_array().into_iter().flatten() {
        let name = g["name"].as_str().unwrap_or_default();
        for v in g["versions"].as_array().into_iter().flatten() {
            if let Some(version) = v["version"].as_str() {
                gvs.push((name.to_owned(), version.to_owned()));
            }
        }
    }
    let mut served = Served::default();
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
    }
    Ok(served)
}
