//! The OpenAPI documents of group/versions that other backends add resources to. Discovery lists
//! such a resource with the source backend's group/version (v1.36's `mutatingadmissionpolicies` in
//! `admissionregistration.k8s.io/v1`, served by v1.35 too), so `kubectl explain` reads its schema
//! from that group/version's OpenAPI document: merged here, the source backend's document with
//! the paths and schemas only the others have.
//!
//! The documents are read and merged in the background when discovery refreshes (each only when
//! a backend's hash URL for it changed), never on the request path. The merged index names the
//! merged document by a hash of the documents it was made from; until it is made, the index names
//! the source backend's own.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use super::Document;
use crate::config::BackendId;
use crate::upstream::{BackendPool, own_get};

/// One group/version document to merge.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    /// Its key in the `/openapi/v3` index (`apis/GROUP/VERSION`, `api/v1`).
    pub(super) index_path: String,
    /// The hash of the documents it is made from: the merged document's `?hash=`.
    pub(super) key: String,
    /// The backends' hash URLs of the document, the source backend's first.
    pub(super) parts: Vec<(BackendId, String)>,
}

impl Plan {
    /// `index_path`'s documents: the source backend's and those of each other backend in `served`
    /// (their `/openapi/v3` paths) that lists it.
    pub(super) fn new(
        index_path: &str,
        source: BackendId,
        indexes: &[(BackendId, &Map<String, Value>)],
    ) -> Option<Plan> {
        let url = |paths: &Map<String, Value>| {
            paths.get(index_path)?["serverRelativeURL"]
                .as_str()
                .map(str::to_owned)
        };
        let (_, own) = indexes.iter().find(|(id, _)| *id == source)?;
        let mut parts = vec![(source, url(own)?)];
        for (id, paths) in indexes.iter().filter(|(id, _)| *id != source) {
            if let Some(u) = url(paths) {
                parts.push((*id, u));
            }
        }
        let all: String = parts.iter().map(|(_, u)| u.as_str()).collect();
        let key = format!("{:032X}", xxhash_rust::xxh3::xxh3_128(all.as_bytes()));
        Some(Plan {
            index_path: index_path.to_owned(),
            key,
            parts,
        })
    }

    /// The merged document's URL, as the index names it.
    pub(super) fn url(&self) -> String {
        format!("/openapi/v3/{}?hash={}", self.index_path, self.key)
    }
}

/// The merged documents made so far, by their key.
#[derive(Default)]
pub(crate) struct OpenApiMerges {
    docs: Mutex<HashMap<String, Arc<Document>>>,
    refreshing: AtomicBool,
}

impl OpenApiMerges {
    pub(super) fn get(&self, key: &str) -> Option<Arc<Document>> {
        self.lock().get(key).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Document>>> {
        self.docs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes the documents of `plans` not made yet, in the background (one refresh at a time), then
    /// calls `done` if it made any. The documents of other plans are forgotten.
    pub(crate) fn refresh(
        self: &Arc<Self>,
        plans: Vec<Plan>,
        backends: Vec<Arc<BackendPool>>,
        done: impl FnOnce() + Send + 'static,
    ) {
        let keys: Vec<&str> = plans.iter().map(|p| p.key.as_str()).collect();
        self.lock().retain(|k, _| keys.contains(&k.as_str()));
        let missing: Vec<Plan> = plans
            .iter()
            .filter(|p| self.get(&p.key).is_none())
            .cloned()
            .collect();
        if missing.is_empty() || self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            let mut made = false;
            for plan in missing {
                match read_and_merge(&plan, &backends).await {
                    Ok(doc) => {
                        me.lock()
                            .insert(plan.key.clone(), Arc::new(Document::new(&doc)));
                        made = true;
                    }
                    Err(error) => {
                        tracing::debug!(document = %plan.index_path, %error, "cannot merge an OpenAPI document");
                    }
                }
            }
            me.refreshing.store(false, Ordering::Release);
            if made {
                done();
            }
        });
    }
}

/// Reads each backend's document of `plan` and merges them.
async fn read_and_merge(plan: &Plan, backends: &[Arc<BackendPool>]) -> Result<Value, String> {
    let mut docs = Vec::with_capacity(plan.parts.len());
    for (id, url) in &plan.parts {
        let ep = backends
            .get(id.index())
            .and_then(|b| b.pick())
            .ok_or_else(|| format!("no endpoint of backend {} is up", id.index()))?;
        let (code, body) = own_get(ep, url).await?;
        if !code.is_success() {
            return Err(format!("{url} answered {code}"));
        }
        docs.push(serde_json::from_slice(&body).map_err(|e| format!("{url}: {e}"))?);
    }
    Ok(merge_documents(docs))
}

/// The first document, with the `paths` and `components.schemas` of the others that it lacks.
pub(super) fn merge_documents(docs: Vec<Value>) -> Value {
    let mut docs = docs.into_iter();
    let mut merged = docs.next().unwrap_or_default();
    for other in docs {
        for section in [&["paths"][..], &["components", "schemas"][..]] {
            let Some(theirs) = lookup(&other, section).and_then(Value::as_object) else {
                continue;
            };
            let Some(ours) = lookup_mut(&mut merged, section) else {
                continue;
            };
            for (name, value) in theirs {
                if !ours.contains_key(name) {
                    ours.insert(name.clone(), value.clone());
                }
            }
        }
    }
    merged
}

fn lookup<'a>(doc: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(doc, |v, k| v.get(k))
}

/// The object at `path` in `doc`, made when missing.
fn lookup_mut<'a>(doc: &'a mut Value, path: &[&str]) -> Option<&'a mut Map<String, Value>> {
    let mut at = doc;
    for key in path {
        let object = at.as_object_mut()?;
        at = object
            .entry(key.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    at.as_object_mut()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_source_document_keeps_its_own_and_gains_what_only_others_have() {
        let old = json!({
            "openapi": "3.0.0",
            "paths": {"/apis/g/v1/a": {"get": "old a"}},
            "components": {"schemas": {"A": {"old": true}, "Shared": {"old": true}}},
        });
        let new = json!({
            "openapi": "3.0.0",
            "paths": {"/apis/g/v1/a": {"get": "new a"}, "/apis/g/v1/b": {"get": "new b"}},
            "components": {"schemas": {"A": {"new": true}, "B": {"new": true}, "Shared": {"new": true}}},
        });
        let merged = merge_documents(vec![old, new]);
        assert_eq!(merged["paths"]["/apis/g/v1/a"]["get"], "old a");
        assert_eq!(merged["paths"]["/apis/g/v1/b"]["get"], "new b");
        assert_eq!(merged["components"]["schemas"]["A"], json!({"old": true}));
        assert_eq!(
            merged["components"]["schemas"]["Shared"],
            json!({"old": true})
        );
        assert_eq!(merged["components"]["schemas"]["B"], json!({"new": true}));
    }

    #[test]
    fn a_plan_names_the_documents_it_is_made_from() {
        let old = json!({"apis/g/v1": {"serverRelativeURL": "/openapi/v3/apis/g/v1?hash=OLD"}});
        let new = json!({"apis/g/v1": {"serverRelativeURL": "/openapi/v3/apis/g/v1?hash=NEW"}});
        let (old, new) = (old.as_object().unwrap(), new.as_object().unwrap());
        let (a, b) = (BackendId::new(0), BackendId::new(1));
        let plan = Plan::new("apis/g/v1", a, &[(a, old), (b, new)]).expect("plan");
        assert_eq!(plan.parts[0].1, "/openapi/v3/apis/g/v1?hash=OLD");
        assert_eq!(plan.parts[1].1, "/openapi/v3/apis/g/v1?hash=NEW");
        assert!(plan.url().starts_with("/openapi/v3/apis/g/v1?hash="));
        // Another document of either version is another merged document.
        let newer = json!({"apis/g/v1": {"serverRelativeURL": "/openapi/v3/apis/g/v1?hash=NEWER"}});
        let other = Plan::new("apis/g/v1", a, &[(a, old), (b, newer.as_object().unwrap())]);
        assert_ne!(other.expect("plan").key, plan.key);
        assert!(Plan::new("apis/h/v1", a, &[(a, old), (b, new)]).is_none());
    }
}
