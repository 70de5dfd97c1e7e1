//! What the guard does with an update that would lose fields: refuses it, sends it with a
//! warning, or puts the stored values back into its body, in the body's own encoding.

use http::header::{self, HeaderValue};

use super::Who;
use super::body::{Sent, Stored};
use super::judge::{Judge, warning};
use crate::config::GuardAction;
use crate::proxy::request_body::ClientBody;
use crate::proxy::status::ProxyError;
use crate::skew::Loss;

/// Applies the guard's action to an update that would lose `lost`.
pub(super) fn decide(
    judge: &Judge<'_>,
    who: &Who,
    lost: Vec<Loss>,
    sent: Sent,
    stored: &Stored,
    head: &mut http::request::Parts,
    body: &mut ClientBody,
) -> Result<Option<HeaderValue>, ProxyError> {
    let guard = judge.guard;
    let paths: Vec<String> = lost.iter().map(|l| l.path.clone()).collect();
    judge.lost(&who.phrase, &paths);
    match guard.action {
        GuardAction::Reject => Err(ProxyError::GuardRejected {
            guard: guard.name.clone(),
            client: who.phrase.clone(),
            knower: who.knower.clone(),
            fields: lost.iter().map(|l| (l.path.clone(), l.why)).collect(),
        }),
        GuardAction::Warn => Ok(warning(&format!(
            "skewgate guard {:?}: this update from {} drops {} that the stored object has",
            guard.name,
            who.phrase,
            paths.join(", ")
        ))),
        GuardAction::Preserve => {
            let (bytes, retyped) = match sent.restored(stored, &lost) {
                Ok(restored) => restored,
                Err(why) => {
                    return Err(ProxyError::GuardCannotCheck {
                        guard: guard.name.clone(),
                        why: format!("putting {} back: {why}", paths.join(", ")),
                    });
                }
            };
            head.headers.remove(header::CONTENT_LENGTH);
            if let Some(content_type) = retyped {
                head.headers
                    .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            }
            body.replace(bytes);
            Ok(warning(&format!(
                "skewgate guard {:?}: kept {} of the stored object, which {} does not know",
                guard.name,
                paths.join(", "),
                who.knower
            )))
        }
    }
}
