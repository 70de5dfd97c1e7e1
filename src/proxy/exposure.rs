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
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http::StatusCode;
use prometheus::IntCounter;
use serde_json::Value;

use super::body::Tap;
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

/// The most held in copies at once, for all writes together: past it an answer is not copied, and
/// counts as `unjudged`. A bound is global, or it is not a bound.
const MAX_COPIED: usize = 64 << 20;

/// What the copies hold now.
static COPIED: AtomicUsize = AtomicUsize::new(0);

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
    /// Answers not judged: larger than an object, or over the copies' global bound.
    unjudged: IntCounter,
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
        let resource = crate::skew::rollback::selector(group, resource);
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
        unjudged: counter("unjudged"),
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

impl Drop for Copy {
    fn drop(&mut self) {
        COPIED.fetch_sub(self.bytes.len(), Ordering::Relaxed);
    }
}

impl Tap for Copy {
    /// Copies a frame's data; `false` (counted unjudged) once the answer is larger than any object
    /// stored, or the copies together would pass their bound.
    fn push(&mut self, data: &Bytes) -> bool {
        let n = data.len();
        if self.bytes.len() + n > MAX_COPY {
            self.judge.unjudged.inc();
            return false;
        }
        if COPIED.fetch_add(n, Ordering::Relaxed) + n > MAX_COPIED {
            COPIED.fetch_sub(n, Ordering::Relaxed);
            self.judge.unjudged.inc();
            return false;
        }
        self.bytes.extend_from_slice(data);
        true
    }

    /// The whole answer is in: counts it if the object holds a field the older cannot store.
    fn finish(self: Box<Self>) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn copy() -> (Copy, IntCounter) {
        let unjudged = IntCounter::new("unjudged", "test").expect("counter");
        let judge = Judge {
            pair: Arc::default(),
            gvk: Gvk {
                group: String::new(),
                version: "v1".into(),
                kind: "Pod".into(),
            },
            counter: IntCounter::new("field", "test").expect("counter"),
            unjudged: unjudged.clone(),
        };
        let copy = Copy {
            judge: Box::new(judge),
            encoding: Encoding::Json,
            bytes: Vec::new(),
        };
        (copy, unjudged)
    }

    #[test]
    fn an_answer_larger_than_an_object_is_not_copied_and_counts_unjudged() {
        let (mut c, unjudged) = copy();
        let mib = Bytes::from(vec![b' '; 1 << 20]);
        for _ in 0..3 {
            assert!(c.push(&mib));
        }
        assert!(!c.push(&Bytes::from_static(b"x")), "over 3 MiB");
        assert_eq!(unjudged.get(), 1);
        drop(c);
    }

    #[test]
    fn the_copies_together_stay_within_their_bound() {
        let mut held = Vec::new();
        let chunk = Bytes::from(vec![b' '; 2 << 20]);
        let mut refused = 0;
        for _ in 0..40 {
            let (mut c, unjudged) = copy();
            if c.push(&chunk) {
                held.push(c);
            } else {
                refused += 1;
                assert_eq!(unjudged.get(), 1);
            }
        }
        // 64 MiB holds 32 copies of 2 MiB (other tests' copies in flight may take some).
        assert!(refused >= 8, "{refused}");
        assert!(COPIED.load(Ordering::Relaxed) <= MAX_COPIED);
        drop(held);
        let (mut c, _) = copy();
        assert!(c.push(&chunk), "room again once they end");
    }
}
