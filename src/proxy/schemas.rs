//! The versions' fields as the running apiservers describe them (their OpenAPI v3), read again
//! when discovery refreshes, each document only when its hash URL changed: `/debug/skew` shows
//! what differs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::skew::{DocumentCache, Gvk, Report, VersionFields, compare, version_fields};
use crate::upstream::BackendPool;

/// A backend as its fields are remembered: its name and its declared version.
type BackendKey = (String, Option<(u32, u32)>);

/// Each backend's fields, by backend name.
#[derive(Default)]
pub(crate) struct Schemas {
    caches: Mutex<HashMap<String, Arc<DocumentCache>>>,
    fields: ArcSwap<Vec<(String, Arc<VersionFields>)>>,
    /// The fields last read of every backend this process has known, by name and version: a
    /// backend that a reload brings back (a rollback's table), or whose endpoints are down for a
    /// round, is judged by them until it is read again, rather than the guards failing closed.
    last_known: Mutex<HashMap<BackendKey, Arc<VersionFields>>>,
    refreshing: AtomicBool,
    /// What each (newer, older) pair of backends differs in, made on first use, forgotten when
    /// the fields change: what `exposure.rs` asks of every write a newer backend serves.
    pairs: Mutex<Vec<(String, String, Arc<PairSkew>)>>,
}

/// What a newer backend serves that an older cannot keep: the kinds whose fields differ (with both
/// descriptions) and the resources the older does not serve at all.
#[derive(Default)]
pub(crate) struct PairSkew {
    pub(crate) newer: Arc<VersionFields>,
    pub(crate) older: Arc<VersionFields>,
    /// Kinds both serve, in the newer's description with fields the older lacks.
    pub(crate) differs: Vec<Gvk>,
    /// (group, resource) the newer serves and the older does not, in any version.
    pub(crate) unserved: Vec<(String, String)>,
}

impl PairSkew {
    fn new(newer: Arc<VersionFields>, older: Arc<VersionFields>) -> PairSkew {
        let mut differs = Vec::new();
        let mut unserved = Vec::new();
        for (gvk, kind) in &newer.kinds {
            let served = (older.kinds.iter())
                .any(|(g, k)| g.group == gvk.group && k.resource == kind.resource);
            if !served {
                unserved.push((gvk.group.clone(), kind.resource.clone()));
            } else if let Some(old) = older.kinds.get(gvk)
                && kind.fields.keys().any(|p| !old.fields.contains_key(p))
            {
                differs.push(gvk.clone());
            }
        }
        PairSkew {
            newer,
            older,
            differs,
            unserved,
        }
    }

    /// The kind of `resource` in `group`/`version` whose fields differ, if it is one.
    pub(crate) fn differing(&self, group: &str, version: &str, resource: &str) -> Option<&Gvk> {
        self.differs.iter().find(|g| {
            g.group == group
                && g.version == version
                && self
                    .newer
                    .kinds
                    .get(*g)
                    .is_some_and(|k| k.resource == resource)
        })
    }

    /// Whether the older does not serve `resource` of `group` at all.
    pub(crate) fn unserved(&self, group: &str, resource: &str) -> bool {
        (self.unserved.iter()).any(|(g, r)| g == group && r == resource)
    }
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
                match me.read(backend).await {
                    Some(f) => {
                        let key = (backend.name.clone(), backend.version);
                        me.remembered().insert(key, f.clone());
                        fields.push((backend.name.clone(), f));
                    }
                    None => fields.extend(me.last_known_of(backend)),
                }
            }
            me.store(fields);
            me.refreshing.store(false, Ordering::Release);
        });
    }

    /// Backend `backend`'s fields read now, if an endpoint and its discovery answer.
    async fn read(&self, backend: &BackendPool) -> Option<Arc<VersionFields>> {
        let (ep, served) = (backend.pick()?, backend.served.load_full()?);
        let paths = served.openapi.as_ref()?;
        let cache = self.cache_of(&backend.name);
        match version_fields(ep, paths, &cache).await {
            Ok(f) => Some(Arc::new(f)),
            Err(e) => {
                tracing::debug!(backend = %backend.name, error = %e, "cannot read the OpenAPI documents");
                None
            }
        }
    }

    fn remembered(&self) -> std::sync::MutexGuard<'_, HashMap<BackendKey, Arc<VersionFields>>> {
        self.last_known.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The fields last read of `backend` (its name and version), if any.
    fn last_known_of(&self, backend: &BackendPool) -> Option<(String, Arc<VersionFields>)> {
        let key = (backend.name.clone(), backend.version);
        let f = self.remembered().get(&key).cloned()?;
        Some((backend.name.clone(), f))
    }

    /// The fields of a reloaded table's backends, from what was last read of each, at once: a
    /// guard does not wait for the next refresh to judge by a backend the reload brought back.
    pub(crate) fn carry_over(&self, backends: &[Arc<BackendPool>]) {
        let fields: Vec<_> = backends
            .iter()
            .filter_map(|b| self.last_known_of(b))
            .collect();
        self.store(fields);
    }

    fn store(&self, fields: Vec<(String, Arc<VersionFields>)>) {
        self.fields.store(Arc::new(fields));
        self.pairs.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// What backend `newer` serves that backend `older` cannot keep, once both were read.
    pub(crate) fn pair(&self, newer: &str, older: &str) -> Option<Arc<PairSkew>> {
        let mut pairs = self.pairs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, _, p)) = pairs.iter().find(|(n, o, _)| n == newer && o == older) {
            return Some(p.clone());
        }
        let all = self.fields.load();
        let of = |name: &str| all.iter().find(|(n, _)| n == name).map(|(_, f)| f.clone());
        let made = Arc::new(PairSkew::new(of(newer)?, of(older)?));
        pairs.push((newer.to_owned(), older.to_owned(), made.clone()));
        Some(made)
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
