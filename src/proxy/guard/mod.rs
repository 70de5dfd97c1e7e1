//! The update guard: a full-object update (PUT) that a guard matches is judged in both directions
//! of skew before it is sent.
//!
//! - **Down** (`down.rs`): served by a backend older than another, the update would drop every
//!   field of the stored object that the serving version cannot store. The object is read as the
//!   newest backend stores it, and the fields only newer versions know are the loss.
//! - **Up**: from a client older than the serving backend, or from one whose reads of this object
//!   go to an older backend (a rollout reads it there, the pin writes it here), the body lacks what
//!   the reader could not see. The body is compared with the object as stored (read from the
//!   serving backend with the client's own credentials): the fields the stored object has, the body
//!   lacks and the reader's version cannot know (and the omitted fields whose default changed).
//!
//! The guard rejects the update, warns, or puts the stored values back (up only: no body can make
//! a version store what it does not know, so `preserve` refuses a down loss as `reject` does).
//!
//! Every body is judged the same way, whatever its encoding (`body.rs`): JSON, YAML, and the
//! Kubernetes protobuf that kubelets and the control plane's components send, read with the
//! schema compiled into skewgate. A body the guard cannot read follows its failure rule.

mod body;
mod decide;
mod down;
mod judge;
mod stored;

use std::sync::Arc;

use http::header::{self, HeaderValue};

use super::request_body::{ClientBody, WholeBody};
use super::routing::Routing;
use super::status::ProxyError;
use crate::classify::{ClientVersion, RequestInfo};
use crate::config::{BackendId, Guard, UnknownVersion};
use crate::skew::losses;
use crate::upstream::{Credential, EndpointPool};

pub use body::Encoding;
use body::{Sent, Unread};
use decide::decide;
pub(crate) use judge::Guarding;
use judge::{Judge, Outcome};
use stored::read_stored;

/// kube-apiserver's limit on a request body (3 MiB): larger updates are refused.
pub(crate) const MAX_BODY: usize = 3 << 20;

/// The update to guard.
pub(crate) struct Update<'a> {
    pub(crate) guard: usize,
    pub(crate) info: &'a RequestInfo<'a>,
    pub(crate) client: Option<ClientVersion>,
    pub(crate) backend: BackendId,
    /// Where this client's reads of the object go (the same request as a get), when known.
    pub(crate) reader: Option<BackendId>,
}

/// The update on its way: its head and body as they will be sent, and where and as whom.
pub(crate) struct InTransit<'a> {
    pub(crate) head: &'a mut http::request::Parts,
    pub(crate) body: &'a mut ClientBody,
    pub(crate) endpoint: &'a Arc<EndpointPool>,
    pub(crate) credential: Credential,
}

/// Checks a guarded update before it is sent: `Ok(Some(warning))` to send it with a `Warning`,
/// `Ok(None)` to send it as it is, `Err` to answer instead. `head` is the update's head as it will
/// be sent (its identity headers and credentials are those of the stored object's read).
pub(crate) async fn check(
    reads: Guarding<'_>,
    routing: &Routing,
    update: Update<'_>,
    transit: InTransit<'_>,
) -> Result<Option<HeaderValue>, ProxyError> {
    let table = routing.table();
    let guard = &table.guards[update.guard];
    let newer = down::newest_above(table, update.backend);
    let level = client_level(routing, &update, guard);
    if newer.is_none() && level.is_none() {
        return Ok(None);
    }
    let content_type = transit.head.headers.get(header::CONTENT_TYPE);
    let judge = Judge {
        reads,
        guard,
        update: &update,
        encoding: Encoding::of(content_type),
    };
    let whole = transit
        .body
        .read_whole(MAX_BODY)
        .await
        .map_err(|e| match e {
            WholeBody::TooLarge => ProxyError::BodyTooLarge { limit: MAX_BODY },
            WholeBody::Failed => ProxyError::ClientBody,
        })?;
    transit.body.replace(whole.clone());
    let media = content_type.and_then(|v| v.to_str().ok()).unwrap_or("");
    let sent = match Sent::read(judge.encoding, &whole, media) {
        Ok(sent) => sent,
        Err(Unread::Malformed) => {
            // The apiserver refuses it as it refuses it straight: nothing is stored.
            judge.outcome(Outcome::Malformed);
            return Ok(None);
        }
        Err(Unread::Cannot(why)) => return judge.fail(why),
    };
    if let Some(newer) = newer {
        let warning = down::check(
            &judge,
            routing,
            newer,
            transit.head,
            &sent,
            transit.credential,
        )
        .await?;
        if warning.is_some() {
            return Ok(warning);
        }
    }
    let Some(level) = level else {
        judge.outcome(Outcome::NothingLost);
        return Ok(None);
    };
    up(&judge, (routing, &level), transit, sent).await
}

/// The up direction: an update judged as older than its serving backend (`level`).
async fn up(
    judge: &Judge<'_>,
    (routing, level): (&Routing, &Level),
    transit: InTransit<'_>,
    sent: Sent,
) -> Result<Option<HeaderValue>, ProxyError> {
    let InTransit {
        head,
        body,
        endpoint,
        credential,
    } = transit;
    let (schemas, update) = (judge.reads.schemas, judge.update);
    let table = routing.table();
    let (serving, client) = {
        let serving_name = table.backend_name(update.backend);
        let client_name = table.backend_name(level.backend);
        let find = |b: &str| schemas.kind_fields(b, update.info);
        match (find(serving_name), find(client_name)) {
            (Some(s), Some(c)) => (s, c),
            _ => return judge.fail("the versions' schemas are not known yet".to_owned()),
        }
    };
    // Read as the body is: a protobuf body's fields are put back from the stored protobuf.
    let as_protobuf = sent.encoding == Encoding::Protobuf;
    let stored = match read_stored(
        endpoint,
        credential,
        head,
        &head.uri,
        &update.info.subresource,
        as_protobuf,
    )
    .await
    {
        Ok(Some(stored)) => stored,
        // Nothing stored: nothing to lose.
        Ok(None) => {
            judge.outcome(Outcome::NothingLost);
            return Ok(None);
        }
        Err(why) => return judge.fail(why),
    };
    let mut lost = losses(&serving, &client, &stored.view, &sent.view);
    let info = update.info;
    let resource = (&*info.api_group, &*info.api_version, &*info.resource);
    let has_status = routing.has_status(update.backend, resource) == Some(true);
    lost.retain(|l| taken_from_update(&l.path, &info.subresource, has_status));
    if lost.is_empty() {
        judge.outcome(Outcome::NothingLost);
        return Ok(None);
    }
    let who = Who::of(routing, update, level);
    decide(judge, &who, lost, sent, &stored, head, body)
}

/// Who an update is judged as, as said to a person.
struct Who {
    /// The whole phrase: `a v1.29 client`, or `a v1.30 client that reads this object through
    /// backend "v1-29" (v1.29)`.
    phrase: String,
    /// What does not know a field: `a v1.29 client`, `a reader through v1.29`.
    knower: String,
}

impl Who {
    fn of(routing: &Routing, update: &Update<'_>, level: &Level) -> Who {
        let table = routing.table();
        let client = update
            .client
            .map_or("a client of unknown version".to_owned(), |v| {
                format!("a v{}.{} client", v.major, v.minor)
            });
        let through = level.through.and_then(|b| {
            let (major, minor) = table.backends[b.index()].version?;
            Some((table.backend_name(b), format!("v{major}.{minor}")))
        });
        match through {
            Some((name, version)) => Who {
                phrase: format!(
                    "{client} that reads this object through backend {name:?} ({version})"
                ),
                knower: format!("a reader through {version}"),
            },
            None => Who {
                knower: client.clone(),
                phrase: client,
            },
        }
    }
}

/// The version an update is judged as, and the backend it was read through when that is older
/// than the client.
pub(crate) struct Level {
    backend: BackendId,
    through: Option<BackendId>,
}

/// The backend that stands for the version the update is judged as: the client's own, or that of
/// the backend its reads of this object go to when older (a reader cannot send back what it did
/// not see). The newest backend with a version at or below it, else the oldest (a client older
/// than every backend is judged by the oldest schema known). `None` when the update is not
/// guarded up: it is judged as new as the serving backend, or its client is of unknown version
/// under `unknownVersion: pass` and reads it where it is written, or the serving backend names no
/// version.
fn client_level(routing: &Routing, update: &Update<'_>, guard: &Guard) -> Option<Level> {
    let table = routing.table();
    let serving = table.backends[update.backend.index()].version?;
    let client = match update.client {
        Some(v) => Some((v.major, v.minor)),
        None if guard.unknown_version == UnknownVersion::Pass => None,
        None => Some((0, 0)),
    };
    let reader = update
        .reader
        .and_then(|b| Some((table.backends[b.index()].version?, b)));
    let (level, through) = match (client, reader) {
        (Some(c), Some((r, b))) if r < c => (r, Some(b)),
        (Some(c), _) => (c, None),
        (None, Some((r, b))) => (r, Some(b)),
        (None, None) => return None,
    };
    if level >= serving {
        return None;
    }
    let versioned: Vec<((u32, u32), BackendId)> = BackendId::all(table.backends.len())
        .filter_map(|b| Some((table.backends[b.index()].version?, b)))
        .collect();
    let at_or_below = versioned
        .iter()
        .copied()
        .filter(|(v, _)| *v <= level)
        .max_by_key(|(v, _)| *v);
    at_or_below
        .or_else(|| versioned.iter().copied().min_by_key(|(v, _)| *v))
        .map(|(_, backend)| Level { backend, through })
}

/// Whether the apiserver takes the field at `path` from an update of `subresource`: with a `status`
/// subresource, a write of the main object keeps the stored status, and a write of `status` the
/// stored rest (kube-apiserver's strategies), so a field it does not take cannot be lost by it.
fn taken_from_update(path: &str, subresource: &str, has_status: bool) -> bool {
    let in_status = path == "status" || path.starts_with("status.") || path.starts_with("status[");
    match (has_status, subresource) {
        (true, "") => !in_status,
        (true, "status") => in_status,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_is_judged_by_the_fields_the_apiserver_takes_from_it() {
        // A pod (status subresource): its main object's PUT keeps the stored status.
        assert!(!taken_from_update("status.resizeStatus", "", true));
        assert!(taken_from_update("spec.sidecarPolicy", "", true));
        // Its status PUT keeps the stored rest.
        assert!(taken_from_update("status.resizeStatus", "status", true));
        assert!(!taken_from_update("spec.sidecarPolicy", "status", true));
        // A kind without one (a ConfigMap, a CRD without subresources) takes it all.
        assert!(taken_from_update("status.x", "", false));
        assert!(taken_from_update("statusOf", "", true));
    }
}
