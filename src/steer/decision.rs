//! A decision and how to say it to a person: the backend, the rule that decided, and the reason.

use std::fmt;

use crate::config::{BackendId, Percent, RouteTable};

/// Whether a request is a pinned write or a read (everything that is not a pinned write).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// A verb in `writes.verbs`.
    Write,
    /// Any other request.
    Read,
}

impl Class {
    /// `write` or `read`, as in metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Write => "write",
            Class::Read => "read",
        }
    }
}

/// The rule that decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rule {
    /// `writes.pins[i]`.
    Pin(usize),
    /// `reads.rollouts[i]`.
    Rollout(usize),
    /// `writes.default`.
    WriteDefault,
    /// `reads.default`.
    ReadDefault,
}

/// Why the rule gave this backend. Carries numbers, not text, so deciding never allocates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// A write matched a pin.
    PinnedWrite,
    /// A write matched a pin that moves at `flipAt`, which has not come yet: the previous backend.
    BeforeFlip,
    /// A write matched a pin inside its fence: it is held until `until`, then goes to the pin's
    /// backend.
    Fenced {
        /// When the fence ends.
        until: std::time::SystemTime,
    },
    /// A write matched a pin whose move this replica cannot tell the other replicas have or have
    /// not made: it is refused (429), sent nowhere.
    FleetUnsure,
    /// A write matched no pin.
    NoPin,
    /// A read matched a pin whose reads follow it.
    ReadFollowsPin,
    /// A read matched no follow pin and no rollout.
    NoRollout,
    /// A read matched a rollout; its key's bucket against the percent in force.
    Rollout {
        /// The key's bucket, 0..10,000.
        bucket: u16,
        /// The percent in force, in hundredths (0 when aborted).
        percent: u16,
        /// Whether the key went to the rollout's `to`.
        selected: bool,
        /// Whether the rollout is held at 0 % after an abort.
        aborted: bool,
    },
}

/// Where one request goes and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Write or read.
    pub class: Class,
    /// The backend that serves it.
    pub backend: BackendId,
    /// The rule that decided.
    pub rule: Rule,
    /// Why.
    pub reason: Reason,
    /// The backend the rules chose, when it does not serve the request's group/version/resource
    /// and `backend` does.
    pub fallback_from: Option<BackendId>,
}

impl Decision {
    pub(crate) fn new(class: Class, backend: BackendId, rule: Rule, reason: Reason) -> Decision {
        Decision {
            class,
            backend,
            rule,
            reason,
            fallback_from: None,
        }
    }

    /// The rule's name: the pin's or rollout's name, or `writes.default` / `reads.default`.
    pub fn rule_name<'t>(&self, table: &'t RouteTable) -> &'t str {
        match self.rule {
            Rule::Pin(i) => &table.writes.pins[i].name,
            Rule::Rollout(i) => &table.reads.rollouts[i].name,
            Rule::WriteDefault => "writes.default",
            Rule::ReadDefault => "reads.default",
        }
    }

    /// A sentence for a person, naming the rule and backend.
    pub fn explain<'t>(&self, table: &'t RouteTable) -> Explained<'t> {
        Explained {
            decision: *self,
            table,
        }
    }
}

/// A decision ready to print.
pub struct Explained<'t> {
    decision: Decision,
    table: &'t RouteTable,
}

impl fmt::Display for Explained<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = &self.decision;
        let t = self.table;
        let backend = t.backend_name(d.fallback_from.unwrap_or(d.backend));
        let rule = d.rule_name(t);
        self.explain_rule(f, backend, rule)?;
        if d.fallback_from.is_some() {
            write!(
                f,
                "; {backend} does not serve this group/version/resource, so it falls back to {}, which does",
                t.backend_name(d.backend)
            )?;
        }
        Ok(())
    }
}

impl Explained<'_> {
    fn explain_rule(&self, f: &mut fmt::Formatter<'_>, backend: &str, rule: &str) -> fmt::Result {
        let d = &self.decision;
        match d.reason {
            Reason::PinnedWrite => {
                write!(f, "write matches pin {rule:?}, which pins it to {backend}")
            }
            Reason::NoPin => write!(
                f,
                "write matches no pin, so it goes to writes.default ({backend})"
            ),
            Reason::BeforeFlip => write!(
                f,
                "write matches pin {rule:?}, which moves at its flipAt; until then it stays on {backend}"
            ),
            Reason::Fenced { until } => write!(
                f,
                "write matches pin {rule:?}, which is moving: it is held until {} (flipAt + fence), then goes to {backend}",
                humantime::format_rfc3339_seconds(until)
            ),
            Reason::FleetUnsure => write!(
                f,
                "write matches pin {rule:?}, which is moving, and this replica cannot tell whether the other replicas have moved it: it is refused (429) until they agree"
            ),
            Reason::ReadFollowsPin => write!(
                f,
                "read of what pin {rule:?} covers; its reads follow the pin to {backend}"
            ),
            Reason::NoRollout => write!(
                f,
                "read matches no follow pin and no rollout, so it goes to reads.default ({backend})"
            ),
            Reason::Rollout {
                bucket,
                percent,
                selected,
                aborted,
            } => {
                let key = Percent(bucket);
                let share = Percent(percent);
                if aborted {
                    write!(
                        f,
                        "read matches rollout {rule:?}, which aborted and holds at 0 %; "
                    )?;
                } else {
                    write!(f, "read matches rollout {rule:?} at {share}; ")?;
                }
                let side = if selected { "under" } else { "not under" };
                write!(
                    f,
                    "its sticky key falls at {key}, {side} the share, so it goes to {backend}"
                )
            }
        }
    }
}
