//! One guarded update being judged: the guard, the update, the encoding its body was read in, and
//! what the judging counts and says (the failure rule, the metrics, the log, `/debug/recent`).

use http::HeaderValue;

use super::{Encoding, Update};
use crate::config::{Guard, GuardAction};
use crate::metrics::Metrics;
use crate::proxy::Proxy;
use crate::proxy::recent::Recent;
use crate::proxy::schemas::Schemas;
use crate::proxy::status::ProxyError;
use crate::steer::Clock;

/// What of the process the guard reads, and no more (as `fence::Fence`): the backends' schemas,
/// the metrics and the recent decisions it counts and keeps, and the clock it keeps them by.
#[derive(Clone, Copy)]
pub(crate) struct Guarding<'a> {
    pub(crate) schemas: &'a Schemas,
    metrics: &'a Metrics,
    recent: &'a Recent,
    clock: &'a dyn Clock,
}

impl Proxy {
    /// What the update guard reads of the pipeline.
    pub(crate) fn guarding(&self) -> Guarding<'_> {
        Guarding {
            schemas: &self.schemas,
            metrics: &self.metrics,
            recent: &self.recent,
            clock: &*self.settings.clock,
        }
    }
}

/// How a judged update came out, counted in `skewgate_guard_checks_total{outcome}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Read and judged: nothing to lose.
    NothingLost,
    /// Read and judged: fields would be lost; the guard's action followed.
    Lost,
    /// Not judged: the guard could not read or check it, and its failure rule decided.
    CannotCheck,
    /// A body in no encoding the apiserver reads either: sent, for the apiserver to refuse.
    Malformed,
}

impl Outcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::NothingLost => "nothing_lost",
            Outcome::Lost => "lost",
            Outcome::CannotCheck => "cannot_check",
            Outcome::Malformed => "malformed",
        }
    }
}

/// The update under judgement.
pub(crate) struct Judge<'a> {
    pub(crate) reads: Guarding<'a>,
    pub(crate) guard: &'a Guard,
    pub(crate) update: &'a Update<'a>,
    /// As the body's `Content-Type` says.
    pub(crate) encoding: Encoding,
}

impl Judge<'_> {
    /// Counts how the update came out.
    pub(crate) fn outcome(&self, outcome: Outcome) {
        self.reads
            .metrics
            .guard_checks
            .with_label_values(&[
                self.guard.name.as_str(),
                self.encoding.as_str(),
                outcome.as_str(),
            ])
            .inc();
    }

    /// The guard cannot check: `reject` and `preserve` fail closed (503), `warn` lets it pass.
    pub(crate) fn fail(&self, why: String) -> Result<Option<HeaderValue>, ProxyError> {
        self.outcome(Outcome::CannotCheck);
        let guard = self.guard;
        let encoding = self.encoding.as_str();
        match guard.action {
            GuardAction::Warn => {
                tracing::warn!(guard = %guard.name, %encoding, %why, "cannot check a guarded update; sending it (warn fails open)");
                Ok(None)
            }
            GuardAction::Reject | GuardAction::Preserve => Err(ProxyError::GuardCannotCheck {
                guard: guard.name.clone(),
                why,
            }),
        }
    }

    /// Counts and logs an update that would lose `paths` to `against` (what cannot know or store
    /// them), and keeps the decision for `/debug/recent`.
    pub(crate) fn lost(&self, against: &str, paths: &[String]) {
        self.outcome(Outcome::Lost);
        let (reads, guard, update) = (self.reads, self.guard, self.update);
        let resource = update.info.resource.to_string();
        let encoding = self.encoding.as_str();
        reads
            .metrics
            .guarded_updates
            .with_label_values(&[
                guard.name.as_str(),
                guard.action.as_str(),
                resource.as_str(),
                encoding,
            ])
            .inc();
        tracing::info!(guard = %guard.name, action = guard.action.as_str(), %resource, name = %update.info.name, client = %against, %encoding, fields = ?paths, "guarded update");
        let decision = crate::proxy::recent::Guarded {
            guard: guard.name.clone(),
            action: guard.action.as_str(),
            namespace: update.info.namespace.to_string(),
            name: update.info.name.to_string(),
            resource,
            against: against.to_owned(),
            fields: paths.to_vec(),
            encoding,
        };
        reads.recent.guarded(reads.clock.now(), decision);
    }
}

/// A `Warning: 299 - "..."` value (what kubectl prints).
pub(crate) fn warning(text: &str) -> Option<HeaderValue> {
    let text = text.replace(['"', '\\'], "'");
    HeaderValue::from_str(&format!("299 - \"{text}\"")).ok()
}
