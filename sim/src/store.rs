//! The simulator's etcd: objects shared by every simulated version, resourceVersions, a history of
//! events for watches, and a record of which version served each write.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime};

use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::api::ApiResource;

/// Events kept for watches that start from an older resourceVersion.
const HISTORY: usize = 10_000;

/// The identity of one object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    /// `resource.group` (`configmaps`, `deployments.apps`).
    pub resource: String,
    /// Namespace; empty for cluster-scoped objects.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ObjectKey {
    /// The key of an object of `res` in `namespace` named `name`.
    pub fn new(res: &ApiResource, namespace: &str, name: &str) -> ObjectKey {
        let resource = if res.group.is_empty() {
            res.resource.to_owned()
        } else {
            format!("{}.{}", res.resource, res.group)
        };
        ObjectKey {
            resource,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }
}

/// A watch event type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Created.
    Added,
    /// Updated or patched.
    Modified,
    /// Deleted.
    Deleted,
}

impl EventType {
    /// As the watch stream spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change to the store.
#[derive(Clone, Debug)]
pub struct Event {
    /// The resourceVersion the change produced.
    pub rv: u64,
    /// What happened.
    pub kind: EventType,
    /// To which object.
    pub key: ObjectKey,
    /// The object after the change (before it, for deletes), as stored.
    pub object: Arc<Value>,
}

/// One write the simulator served, for tests that check who wrote what, and when.
#[derive(Clone, Debug)]
pub struct WriteRecord {
    /// The serving version's gitVersion.
    pub version: String,
    /// The object.
    pub key: ObjectKey,
    /// `create`, `update`, `patch`, `delete`.
    pub verb: &'static str,
    /// When the request arrived at the simulator.
    pub arrived: Instant,
    /// When the simulator answered.
    pub completed: Instant,
    /// The HTTP status it answered with.
    pub status: u16,
    /// The client's User-Agent, as the simulator received it.
    pub client: String,
}

/// A failed store operation, as a Kubernetes reason and code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreError {
    /// HTTP status.
    pub code: u16,
    /// Kubernetes reason (`NotFound`, `AlreadyExists`, `Conflict`).
    pub reason: &'static str,
    /// A message for the client.
    pub message: String,
}

#[derive(Default)]
struct State {
    rv: u64,
    objects: BTreeMap<ObjectKey, Arc<Value>>,
    history: VecDeque<Event>,
}

/// The shared store. Cheap to clone; every clone is the same store.
#[derive(Clone)]
pub struct Store {
    state: Arc<Mutex<State>>,
    events: broadcast::Sender<Event>,
    writes: Arc<Mutex<Vec<WriteRecord>>>,
}

impl Default for Store {
    fn default() -> Self {
        Store::new()
    }
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

impl Store {
    /// A store holding the namespaces every cluster has.
    pub fn new() -> Store {
        let (events, _) = broadcast::channel(4096);
        let store = Store {
            state: Arc::default(),
            events,
            writes: Arc::default(),
        };
        if let Some(ns) = super::api::find((1, 0), "", "v1", "namespaces") {
            for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
                let _ = store.create(ns, "", json!({"metadata": {"name": name}}));
            }
        }
        store
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent data (every change is one insert).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// One object as stored.
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<Value>> {
        self.lock().objects.get(key).cloned()
    }

    /// Objects of a resource (in one namespace, or all when `namespace` is empty), and the list's RV.
    pub fn list(&self, resource: &str, namespace: &str) -> (Vec<Arc<Value>>, u64) {
        let state = self.lock();
        let items = state
            .objects
            .iter()
            .filter(|(k, _)| {
                k.resource == resource && (namespace.is_empty() || k.namespace == namespace)
            })
            .map(|(_, v)| v.clone())
            .collect();
        (items, state.rv)
    }

    /// One page of [`Store::list`]: up to `limit` objects (0: all) in key order (namespace, name)
    /// after `after`, as etcd ranges over its keys; and whether more follow.
    pub fn list_from(
        &self,
        resource: &str,
        namespace: &str,
        after: Option<(&str, &str)>,
        limit: usize,
    ) -> (Vec<Arc<Value>>, u64, bool) {
        use std::ops::Bound;
        let state = self.lock();
        let key = |ns: &str, name: &str| ObjectKey {
            resource: resource.to_owned(),
            namespace: ns.to_owned(),
            name: name.to_owned(),
        };
        let start = match after {
            Some((ns, name)) => Bound::Excluded(key(ns, name)),
            None => Bound::Included(key(namespace, "")),
        };
        let take = if limit == 0 { usize::MAX } else { limit + 1 };
        let mut items: Vec<Arc<Value>> = state
            .objects
            .range((start, Bound::Unbounded))
            .take_while(|(k, _)| {
                k.resource == resource && (namespace.is_empty() || k.namespace == namespace)
            })
            .map(|(_, v)| v.clone())
            .take(take)
            .collect();
        let more = limit != 0 && items.len() > limit;
        if more {
            items.truncate(limit);
        }
        (items, state.rv, more)
    }

    /// Creates an object; `object` must carry `metadata.name`.
    pub fn create(
        &self,
        res: &ApiResource,
        namespace: &str,
        mut object: Value,
    ) -> Result<Arc<Value>, StoreError> {
        let name = object_name(&object)?;
        let key = ObjectKey::new(res, namespace, &name);
        let mut state = self.lock();
        if state.objects.contains_key(&key) {
            return Err(StoreError {
                code: 409,
                reason: "AlreadyExists",
                message: format!("{} \"{name}\" already exists", res.resource),
            });
        }
        state.rv += 1;
        let rv = state.rv;
        stamp(&mut object, res, namespace, rv, true);
        Ok(self.commit(&mut state, EventType::Added, key, object))
    }

    /// Replaces an object with `change(current)`; a `metadata.resourceVersion` in the result that is
    /// not the current one is a conflict, as in the apiserver's optimistic concurrency.
    pub fn update(
        &self,
        res: &ApiResource,
        key: &ObjectKey,
        change: impl FnOnce(&Value) -> Result<Value, StoreError>,
    ) -> Result<Arc<Value>, StoreError> {
        let mut state = self.lock();
        let Some(current) = state.objects.get(key).cloned() else {
            return Err(not_found(res, &key.name));
        };
        let mut object = change(&current)?;
        let sent_rv = object
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        let current_rv = current
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !sent_rv.is_empty() && sent_rv != current_rv {
            return Err(StoreError {
                code: 409,
                reason: "Conflict",
                message: format!(
                    "Operation cannot be fulfilled on {} \"{}\": the object has been modified; please apply your changes to the latest version and try again",
                    res.resource, key.name
                ),
            });
        }
        // Fields the client may not change come from the stored object.
        for field in ["uid", "creationTimestamp"] {
            if let (Some(meta), Some(v)) = (
                object.get_mut("metadata").and_then(Value::as_object_mut),
                current.pointer(&format!("/metadata/{field}")),
            ) {
                meta.insert(field.to_owned(), v.clone());
            }
        }
        state.rv += 1;
        let rv = state.rv;
        stamp(&mut object, res, &key.namespace, rv, false);
        Ok(self.commit(&mut state, EventType::Modified, key.clone(), object))
    }

    /// Deletes an object and returns it.
    pub fn delete(&self, res: &ApiResource, key: &ObjectKey) -> Result<Arc<Value>, StoreError> {
        let mut state = self.lock();
        let Some(object) = state.objects.remove(key) else {
            return Err(not_found(res, &key.name));
        };
        state.rv += 1;
        let event = Event {
            rv: state.rv,
            kind: EventType::Deleted,
            key: key.clone(),
            object: object.clone(),
        };
        push_history(&mut state, event.clone());
        let _ = self.events.send(event);
        Ok(object)
    }

    fn commit(
        &self,
        state: &mut State,
        kind: EventType,
        key: ObjectKey,
        object: Value,
    ) -> Arc<Value> {
        let object = Arc::new(object);
        state.objects.insert(key.clone(), object.clone());
        let event = Event {
            rv: state.rv,
            kind,
            key,
            object: object.clone(),
        };
        push_history(state, event.clone());
        // Sent under the lock so that subscribers see events in resourceVersion order.
        let _ = self.events.send(event);
        object
    }

    /// Subscribes to changes: the events after `since` that history still holds (or `None` when it
    /// no longer reaches back that far), and a receiver for the ones after them.
    pub fn watch(&self, since: u64) -> (Option<Vec<Event>>, broadcast::Receiver<Event>) {
        let state = self.lock();
        let rx = self.events.subscribe();
        let oldest = state.history.front().map_or(state.rv + 1, |e| e.rv);
        let past = if since + 1 < oldest && since < state.rv {
            None
        } else {
            Some(
                state
                    .history
                    .iter()
                    .filter(|e| e.rv > since)
                    .cloned()
                    .collect(),
            )
        };
        (past, rx)
    }

    /// Records a write the simulator served.
    pub fn record_write(&self, record: WriteRecord) {
        self.writes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(record);
    }

    /// Every write served so far, in completion order.
    pub fn writes(&self) -> Vec<WriteRecord> {
        self.writes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

fn push_history(state: &mut State, event: Event) {
    if state.history.len() == HISTORY {
        state.history.pop_front();
    }
    state.history.push_back(event);
}

fn object_name(object: &Value) -> Result<String, StoreError> {
    match object.pointer("/metadata/name").and_then(Value::as_str) {
        Some(n) if !n.is_empty() => Ok(n.to_owned()),
        _ => Err(StoreError {
            code: 422,
            reason: "Invalid",
            message: "metadata.name: Required value: name is required".to_owned(),
        }),
    }
}

fn not_found(res: &ApiResource, name: &str) -> StoreError {
    StoreError {
        code: 404,
        reason: "NotFound",
        message: format!("{} \"{name}\" not found", res.resource),
    }
}

/// Sets the fields the server owns: kind, apiVersion, namespace, resourceVersion, uid, creation time.
fn stamp(object: &mut Value, res: &ApiResource, namespace: &str, rv: u64, new: bool) {
    if !object.is_object() {
        *object = json!({});
    }
    object["kind"] = json!(res.kind);
    object["apiVersion"] = json!(res.api_version());
    if !object.get("metadata").is_some_and(Value::is_object) {
        object["metadata"] = json!({});
    }
    let meta = &mut object["metadata"];
    if res.namespaced {
        meta["namespace"] = json!(namespace);
    }
    meta["resourceVersion"] = json!(rv.to_string());
    if new {
        meta["uid"] = json!(format!("00000000-0000-4000-8000-{rv:012}"));
        meta["creationTimestamp"] = json!(now_rfc3339());
    }
}
