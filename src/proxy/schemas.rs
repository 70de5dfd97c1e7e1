//! The versions' fields as the running apiservers describe them (their OpenAPI v3), read again
//! when discovery refreshes, each document only when its hash URL changed: `/debug/skew` shows
//! what differs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::skew::{DocumentCache, Report, VersionFields, compare, version_fields};
use crate::upstream::BackendPool;

/// Each backend's fields, by backend name.
#[derive(Default)]
pub(crate) struct Schemas {
    caches: Mutex<HashMap<String, Arc<DocumentCache>>>,
    fields: ArcSwap<Vec<(String, Arc<VersionFields>)>>,
    refreshing: AtomicBool,
}

impl Schemas {
    /// Reads the backends' documents again (in the background; one refresh at a time).
    pub(crate) fn refresh(self: &Arc<Self>, backends: Vec<Arc<BackendPool>>) {
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            let mut fields = Vec::new();
            for backend in &backends {
                let (Some(ep), Some(served)) = (backend.pick(), backend.served.load_full()) else {
                    continue;
                };
                let Some(paths) = served.openapi.as_ref() else {
                    continue;
                };
                let cache = me.cache_of(&backend.name);
                match version_fields(ep, paths, &cache).await {
                    Ok(f) => fields.push((backend.name.clone(), Arc::new(f))),
                    Err(e) => {
                        tracing::debug!(backend = %backend.name, error = %e, "cannot read the OpenAPI documents")
                    }
                }
            }
            me.fields.store(Arc::new(fields));
            me.refreshing.store(false, Ordering::Release);
        });
    }

    fn cache_of(&self, backend: &str) -> Arc<DocumentCache> {
        let mut caches = self.caches.lock().unwrap_or_else(|e| e.into_inner());
        caches.entry(backend.to_owned()).or_default().clone()
    }

    /// Whether backend `backend`'s OpenAPI documents have been read.
    pub(crate) fn knows(&self, backend: &str) -> bool {
        self.fields.load().iter().any(|(n, _)| n == backend)
    }

    /// The kind of the resource `info` names, as backend `backend` describes it.
    pub(crate) fn kind_fields(
        &self,
        backend: &str,
        info: &crate::classify::RequestInfo<'_>,
    ) -> Option<crate::skew::KindFields> {
        let all = self.fields.load();
        let (_, fields) = all.iter().find(|(n, _)| n == backend)?;
        fields
            .kinds
            .iter()
            .find(|(gvk, k)| {
                gvk.group == info.api_group
                    && gvk.version == info.api_version
                    && k.resource == info.resource
            })
            .map(|(_, k)| k.clone())
    }

    /// What differs between the backends read so far.
    pub(crate) fn report(&self) -> Report {
        let versions: Vec<(String, VersionFields)> = self
            .fields
            .load()
            .iter()
            .map(|(n, f)| (n.clone(), VersionFields::clone(f)))
            .collect();
        compare(&versions)
    }
}
