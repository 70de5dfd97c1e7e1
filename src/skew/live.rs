//! Reading the versions' fields from running apiservers: `/openapi/v3` lists one document per
//! group/version at a URL that carries the document's hash, so a document already read is not read
//! again until its hash changes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use super::VersionFields;
use crate::config::RouteTable;
use crate::metrics::Metrics;
use crate::upstream::{EndpointPool, PoolSettings, Upstreams, own_get};

/// The fields of the documents read so far, by their hash URL.
#[derive(Default)]
pub(crate) struct DocumentCache {
    by_url: Mutex<HashMap<String, Arc<VersionFields>>>,
}

impl DocumentCache {
    fn get(&self, url: &str) -> Option<Arc<VersionFields>> {
        self.lock().get(url).cloned()
    }

    fn put(&self, url: &str, fields: Arc<VersionFields>) {
        self.lock().insert(url.to_owned(), fields);
    }

    /// Forgets the documents no longer listed.
    fn keep_only(&self, urls: &[&str]) {
        self.lock().retain(|u, _| urls.contains(&u.as_str()));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<VersionFields>>> {
        self.by_url.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The fields of every kind the apiserver at `ep` serves, from the documents `paths` lists (the
/// `paths` of its `/openapi/v3`).
pub(crate) async fn version_fields(
    ep: &Arc<EndpointPool>,
    paths: &Map<String, Value>,
    cache: &DocumentCache,
) -> Result<VersionFields, String> {
    let urls: Vec<&str> = paths
        .values()
        .filter_map(|p| p["serverRelativeURL"].as_str())
        .collect();
    let mut out = VersionFields::default();
    for url in &urls {
        let fields = match cache.get(url) {
            Some(f) => f,
            None => {
                let (code, body) = own_get(ep, url).await?;
                if !code.is_success() {
                    return Err(format!("{url} answered {code}"));
                }
                let doc: Value =
                    serde_json::from_slice(&body).map_err(|e| format!("{url}: {e}"))?;
                let fields = Arc::new(VersionFields::from_documents([&doc]));
                cache.put(url, fields.clone());
                fields
            }
        };
        out.kinds
            .extend(fields.kinds.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    cache.keep_only(&urls);
    Ok(out)
}

/// Reads every backend of `table` as `serve` would connect to it (`pool`: its TLS and front-proxy
/// settings): each backend's fields from its first endpoint that answers, or why none did.
pub async fn fetch(
    table: &RouteTable,
    pool: PoolSettings,
) -> Vec<(String, Result<VersionFields, String>)> {
    let upstreams = Upstreams::new(pool, Arc::new(Metrics::new()));
    let mut out = Vec::new();
    for backend in upstreams.backends_for(table) {
        let mut result = Err(format!("backend {} has no endpoint", backend.name));
        for ep in &backend.endpoints {
            result = fetch_endpoint(ep).await;
            if result.is_ok() {
                break;
            }
        }
        out.push((backend.name.clone(), result));
    }
    out
}

pub(super) async fn fetch_endpoint(ep: &Arc<EndpointPool>) -> Result<VersionFields, String> {
    let (code, body) = own_get(ep, "/openapi/v3").await?;
    if !code.is_success() {
        return Err(format!("{}: /openapi/v3 answered {code}", ep.endpoint.url));
    }
    let index: Value = serde_json::from_slice(&body).map_err(|e| format!("/openapi/v3: {e}"))?;
    let paths = index["paths"].as_object().cloned().unwrap_or_default();
    version_fields(ep, &paths, &DocumentCache::default()).await
}

/// The documents of a version saved in `dir` (`*.json`, each one group/version's document, as
/// `/openapi/v3/apis/GROUP/VERSION` answers it).
pub fn from_dir(dir: &std::path::Path) -> Result<VersionFields, String> {
    let mut docs = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "json") {
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let doc: Value =
                serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            docs.push(doc);
        }
    }
    if docs.is_empty() {
        return Err(format!("{}: no *.json OpenAPI v3 documents", dir.display()));
    }
    Ok(VersionFields::from_documents(&docs))
}
