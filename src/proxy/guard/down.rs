//! The guard's down direction: an update served by a backend older than another cannot store the
//! fields only the newer versions know. The apiserver decodes the stored object into its own types
//! on every write, so such a field the object has is gone after the update, whatever the body says;
//! one the body sets is dropped. The object is read as the newest backend stores it (with the
//! client's own credentials), and those fields are the loss.

use http::header::HeaderValue;
use serde_json::Value;

use super::body::Sent;
use super::judge::{Judge, warning};
use super::read_stored;
use crate::config::{BackendId, GuardAction, RouteTable};
use crate::proxy::forwarding::upstream_uri;
use crate::proxy::routing::Routing;
use crate::proxy::status::ProxyError;
use crate::skew::unstorable;
use crate::upstream::Credential;

/// The newest backend whose version is above the serving backend's, if any.
pub(super) fn newest_above(table: &RouteTable, serving: BackendId) -> Option<BackendId> {
    let at = table.backends[serving.index()].version?;
    BackendId::all(table.backends.len())
        .filter_map(|b| Some((table.backends[b.index()].version?, b)))
        .filter(|(v, _)| *v > at)
        .max_by_key(|(v, _)| *v)
        .map(|(_, b)| b)
}

/// Judges an update served by an older backend than `newer`: `Ok(Some(warning))` when it loses
/// fields under `warn`, `Ok(None)` when it loses none, `Err` to answer instead.
pub(super) async fn check(
    judge: &Judge<'_>,
    routing: &Routing,
    newer: BackendId,
    head: &http::request::Parts,
    sent: &Sent,
    credential: Credential,
) -> Result<Option<HeaderValue>, ProxyError> {
    let (schemas, guard, update) = (judge.reads.schemas, judge.guard, judge.update);
    let table = routing.table();
    let fail = |why: String| judge.fail(why);
    let (serving_name, newer_name) = (
        table.backend_name(update.backend),
        table.backend_name(newer),
    );
    if !(schemas.knows(serving_name) && schemas.knows(newer_name)) {
        return fail("the versions' schemas are not known yet".to_owned());
    }
    let find = |b: &str| schemas.kind_fields(b, update.info);
    let (serving, newest) = match (find(serving_name), find(newer_name)) {
        (Some(s), Some(n)) => (s, n),
        // The newer version describes no such kind: no field of it is known to be lost.
        (_, None) => return Ok(None),
        (None, Some(_)) => {
            return fail(format!(
                "backend {serving_name:?} does not describe {}",
                update.info.resource
            ));
        }
    };
    let Some(endpoint) = routing.backends[newer.index()].pick() else {
        return fail(format!(
            "backend {:?}, which the stored object is read through, has no endpoint up",
            table.backend_name(newer)
        ));
    };
    let uri = upstream_uri(&head.uri, endpoint).map_err(|e| ProxyError::GuardCannotCheck {
        guard: guard.name.clone(),
        why: e.to_string(),
    })?;
    let stored = match read_stored(
        endpoint,
        credential,
        head,
        &uri,
        &update.info.subresource,
        false,
    )
    .await
    {
        Ok(stored) => stored.map_or(Value::Null, |s| s.view),
        Err(why) => return fail(why),
    };
    // What the stored object has, and what the body sets, in whatever encoding: every field of
    // either that only the newer version knows.
    let mut paths: Vec<String> = Vec::new();
    for object in [&stored, &sent.view] {
        for path in unstorable(&newest, &serving, object) {
            if !paths.contains(&path) {
                paths.push(path);
            }
        }
    }
    if paths.is_empty() {
        // The up direction, if any, counts the outcome.
        return Ok(None);
    }
    let serving = match table.backends[update.backend.index()].version {
        Some((major, minor)) => format!("backend {serving_name:?} (v{major}.{minor})"),
        None => format!("backend {serving_name:?}"),
    };
    judge.lost(&serving, &paths);
    match guard.action {
        GuardAction::Warn => Ok(warning(&format!(
            "skewgate guard {:?}: this update is served by {serving}, which cannot store {} that the stored object has; they are dropped",
            guard.name,
            paths.join(", ")
        ))),
        GuardAction::Reject | GuardAction::Preserve => Err(ProxyError::GuardCannotStore {
            guard: guard.name.clone(),
            serving,
            fields: paths,
            preserve: guard.action == GuardAction::Preserve,
        }),
    }
}
