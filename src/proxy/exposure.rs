//! A rollback's cost as it grows: every write a backend newer than another answers with success is
//! looked at for what the older could not keep. A create of a kind the older does not serve counts
//! at once; a write of a kind whose fields differ counts when the stored object it answers with
//! (its response body, copied as it streams to the client, up to the apiserver's 3 MiB) holds a
//! field only the newer knows. `skewgate_rollback_exposure_total` and the status page show it;
//! `skewgate rollback-check` names the objects.
//!
//! Only writes to a backend with an older one beside it (by declared version) pay anything: the
//! path classified again, and two short lists looked through; only those of a kind whose fields
//! differ copy their answer.

use std::sync::Arc;

use bytes::Bytes;
use http::StatusCode;
use prometheus::IntCounter;
use serde_json::Value;

use super::context::Decided;
use super::guard::Encoding;
use super::routing::Routing;
use super::schemas::{PairSkew, Schemas};
use crate::classify::{Verb, classify};
use crate::config::{BackendId, RouteTable};
use crate::metrics::Metrics;
use crate::skew::{Gvk, unstorable};

/// The most of an answer copied: kube-apiserver's bound on a request body, which an object stored
/// cannot pass.
const MAX_COPY: usize = super::guard::MAX_BODY;

/// What a write to a newer backend is watched for, decided before it is sent.
pub(super) enum Watch {
    /// A create of a kind the older does not serve: counted when it succeeds.
    Created(IntCounter),
    /// A write of a kind whose fields differ: its answer is judged.
    Fields(Box<Judge>),
}

/// What judges an answer.
pub(crate) struct Judge {
    pair: Arc<PairSkew>,
    gvk: Gvk,
    counter: IntCounter,
}

/// The oldest backend older than `backend` (by declared version), if any.
fn older_than(table: &RouteTable, backend: BackendId) -> Option<BackendId> {
    let at = table.backends[backend.index()].version?;
    BackendId::all(table.backends.len())
        .filter_map(|b| Some((table.backends[b.index()].version?, b)))
        .filter(|(v, _)| *v < at)
        .min_by_key(|(v, _)| *v)
        .map(|(_, b)| b)
}

/// What to watch a write for, if anything: `head` is the request as the client sent it.
pub(super) fn watch(
    (schemas, metrics): (&Schemas, &Metrics),
    routing: &Routing,
    request: &Decided,
    head: &http::request::Parts,
) -> Option<Watch> {
    if !matches!(request.verb, Verb::Create | Verb::Update | Verb::Patch) {
        return None;
    }
    let table = routing.table();
    let serving = request.decision.backend;
    let older = older_than(table, serving)?;
    mark_since(metrics);
    let pair = schemas.pair(table.backend_name(serving), table.backend_name(older))?;
    let info = classify(head.method.as_str(), head.uri.path(), head.uri.query());
    let (group, version, resource) = (&*info.api_group, &*info.api_version, &*info.resource);
    let counter = |stake: &str| {
        let resource = if group.is_empty() {
            resource.to_owned()
        } else {
            format!("{resource}.{group}")
        };
        (metrics.rollback_exposure).with_label_values(&[
            table.backend_name(older),
            resource.as_str(),
            stake,
        ])
    };
    if pair.unserved(group, resource) {
        return (request.verb == Verb::Create).then(|| Watch::Created(counter("kind")));
    }
    let gvk = pair.differing(group, version, resource)?.clone();
    Some(Watch::Fields(Box::new(Judge {
        counter: counter("field"),
        pair,
        gvk,
    })))
}

/// The first write to a newer backend, for the status page's "since".
fn mark_since(metrics: &Metrics) {
    if metrics.rollback_exposure_since.get() == 0.0 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        metrics.rollback_exposure_since.set(now);
    }
}

impl Watch {
    /// The answer's head is in: a create counts now; a judged write gets its body copied.
    pub(super) fn answered(
        self,
        code: StatusCode,
        content_type: Option<&http::HeaderValue>,
    ) -> Option<Copy> {
        if !code.is_success() {
            return None;
        }
        match self {
            Watch::Created(counter) => {
                counter.inc();
                None
            }
            Watch::Fields(judge) => Some(Copy {
                judge,
                encoding: Encoding::of(content_type),
                bytes: Vec::new(),
            }),
        }
    }
}

/// An answer's body as it streams to the client, judged at its end.
pub(crate) struct Copy {
    judge: Box<Judge>,
    encoding: Encoding,
    bytes: Vec<u8>,
}

impl Copy {
    /// Copies a frame's data; `false` once the answer is larger than any object stored.
    pub(crate) fn push(&mut self, data: &Bytes) -> bool {
        if self.bytes.len() + data.len() > MAX_COPY {
            return false;
        }
        self.bytes.extend_from_slice(data);
        true
    }

    /// The whole answer is in: counts it if the object holds a field the older cannot store.
    pub(crate) fn finish(self) {
        let view: Option<Value> = match self.encoding {
            Encoding::Json => serde_json::from_slice(&self.bytes).ok(),
            Encoding::Protobuf => crate::protobuf::Body::decode(&self.bytes)
                .ok()
                .map(|b| b.view()),
            Encoding::Yaml | Encoding::Unknown => None,
        };
        let Some(object) = view else {
            return;
        };
        let j = &self.judge;
        let (Some(newer), Some(older)) = (
            j.pair.newer.kinds.get(&j.gvk),
            j.pair.older.kinds.get(&j.gvk),
        ) else {
            return;
        };
        if !unstorable(newer, older, &object).is_empty() {
            j.counter.inc();
        }
    }
}
