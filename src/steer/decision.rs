//! A decision and how to say it to a person: the backend, the rule that decided, and the reason.

use std::fmt;

use crate::classify::{ClientVersion, Component};
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
    /// What the version-skew policy did, when the client is a component the rules would send to
    /// an older backend (`skew_policy.rs`).
    pub skew: Option<Skewed>,
}

impl Decision {
    pub(crate) fn new(class: Class, backend: BackendId, rule: Rule, reason: Reason) -> Decision {
        Decision {
            class,
            backend,
            rule,
            reason,
            fallback_from: None,
            skew: None,
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
        let chosen = d.skew.map_or(d.backend, |s| s.chosen);
        let backend = t.backend_name(d.fallback_from.unwrap_or(chosen));
        let rule = d.rule_name(t);
        self.explain_rule(f, backend, rule)?;
        if d.fallback_from.is_some() {
            write!(
                f,
                "; {backend} does not serve this group/version/resource, so it falls back to {}, which does",
                t.backend_name(chosen)
            )?;
        }
        if let Some(skewed) = &d.skew {
            write!(f, "; {}", skewed.explain(t, d.backend))?;
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

/// A component's request whose rules would send it to an older backend, and what the policy did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Skewed {
    /// The component.
    pub component: Component,
    /// Its version, from its User-Agent.
    pub version: ClientVersion,
    /// The backend the rules chose (older than the component, or for `LeadershipHeld` the
    /// backend of the Lease's own rule).
    pub chosen: BackendId,
    /// What the policy did.
    pub step: SkewStep,
}

/// What the version-skew policy did with a component's request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkewStep {
    /// Sent to `Decision::backend`, the oldest backend not older than the component.
    Raised,
    /// Sent to the older backend: `skewPolicy.allowOlderApiserver` names the component.
    Allowed,
    /// A pinned write: refused (429), sent nowhere.
    WriteRefused,
    /// A leader-election Lease write while `rule` sends writes to `backend`, older than the
    /// component: refused (429), sent nowhere.
    LeadershipHeld {
        /// The write rule that holds it back.
        rule: Rule,
        /// Where that rule's writes go.
        backend: BackendId,
    },
    /// No backend is as new as the component: refused (503), sent nowhere.
    NoBackend,
}

impl SkewStep {
    /// The label of `skewgate_skew_policy_total{outcome}`.
    pub fn as_str(self) -> &'static str {
        match self {
            SkewStep::Raised => "raised",
            SkewStep::Allowed => "allowed",
            SkewStep::WriteRefused => "write_refused",
            SkewStep::LeadershipHeld { .. } => "leadership_held",
            SkewStep::NoBackend => "no_backend",
        }
    }

    /// Whether the request is refused, sent nowhere.
    pub fn refuses(self) -> bool {
        matches!(
            self,
            SkewStep::WriteRefused | SkewStep::LeadershipHeld { .. } | SkewStep::NoBackend
        )
    }
}

impl Skewed {
    /// A sentence for a person: what the policy did with the request and why (`explain`, and the
    /// `Status` of a refusal). `backend` is where the decision sends it.
    pub fn explain(&self, table: &RouteTable, backend: BackendId) -> String {
        let named = |b: BackendId| {
            let version = table
                .backends
                .get(b.index())
                .and_then(|x| x.version)
                .map_or(String::new(), |(ma, mi)| format!(" (v{ma}.{mi})"));
            format!("backend {:?}{version}", table.backend_name(b))
        };
        let who = format!("{} v{}", self.component, self.version);
        let minor = format!("v{}.{}", self.version.major, self.version.minor);
        let chosen = named(self.chosen);
        match self.step {
            SkewStep::Raised => format!(
                "{who} is newer than {chosen}, which the rules chose; the version-skew policy \
                 sends it to {}, the oldest backend not older than it",
                named(backend)
            ),
            SkewStep::Allowed => format!(
                "{who} is newer than {chosen}; skewPolicy.allowOlderApiserver lets the table \
                 send it there"
            ),
            SkewStep::WriteRefused => format!(
                "{who} may not write through {chosen}, which is older (the version-skew policy), \
                 and the write's rule keeps its writes there: refused (429) until the rule moves \
                 them to {minor} or newer"
            ),
            SkewStep::LeadershipHeld { rule, backend } => {
                let rule = match rule {
                    Rule::Pin(i) => format!("pin {:?}", table.writes.pins[i].name),
                    _ => "writes.default".to_owned(),
                };
                format!(
                    "{who} elects a leader, and {rule} still sends writes to {}, older than it: \
                     its Lease writes are refused (429), so it does not lead until the writes \
                     move to {minor} or newer",
                    named(backend)
                )
            }
            SkewStep::NoBackend => format!(
                "{who} is newer than every backend, and the version-skew policy forbids an older \
                 apiserver to serve it: refused (503); add a backend of {minor}, or name the \
                 component in skewPolicy.allowOlderApiserver"
            ),
        }
    }
}
