//! The route table as it runs: validated, compiled, immutable. It carries no serde and no source text
//! beyond what errors and `/debug/routes` show.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use super::selector::{ClientPattern, NamePattern, ResourcePattern, Selector, VerbSet};

/// A backend of a route table: its place in `RouteTable::backends`. Not a number to compute with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BackendId(u32);

impl BackendId {
    /// The backend at `index` of `RouteTable::backends`.
    pub(crate) fn new(index: usize) -> BackendId {
        // Validation bounds a table's backends far below u32::MAX.
        BackendId(u32::try_from(index).unwrap_or(u32::MAX))
    }

    /// Its place in `RouteTable::backends` (and in every per-backend table built from it).
    pub(crate) fn index(self) -> usize {
        self.0 as usize
    }

    /// Every backend of a table with `count` backends.
    pub(crate) fn all(count: usize) -> impl Iterator<Item = BackendId> {
        (0..count).map(BackendId::new)
    }
}

/// A validated route table.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteTable {
    /// The file it came from.
    pub source: PathBuf,
    /// `metadata.name`, if given.
    pub name: Option<String>,
    /// The backends, in file order.
    pub backends: Vec<Backend>,
    /// How writes are pinned.
    pub writes: Writes,
    /// How reads are rolled out.
    pub reads: Reads,
    /// Update guards, in file order: the first that matches an update decides.
    pub guards: Vec<Guard>,
    /// What the file says that loads but likely is not meant (rules that never decide or change
    /// nothing): printed by `check`, logged at load.
    pub warnings: Vec<super::ConfigError>,
}

/// An update guard: full-object updates it matches, from clients older than the backend serving
/// them, are checked for fields the client cannot know that the stored object has.
#[derive(Clone, Debug, PartialEq)]
pub struct Guard {
    /// Its name, in metrics and errors.
    pub name: String,
    /// Which updates (resources, namespaces, users, groups, clients).
    pub selectors: Selectors,
    /// What it does with an update that would drop such fields.
    pub action: GuardAction,
    /// What it does with a client whose User-Agent carries no usable version.
    pub unknown_version: UnknownVersion,
}

/// What a guard does with an update that would drop fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuardAction {
    /// 422 with a cause per field; nothing is sent.
    Reject,
    /// Sent unchanged; the answer carries a `Warning` naming the fields.
    Warn,
    /// The stored values are put back into the body before it is sent; a `Warning` says so.
    Preserve,
}

impl GuardAction {
    /// `reject`, `warn` or `preserve`, as in the route file and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            GuardAction::Reject => "reject",
            GuardAction::Warn => "warn",
            GuardAction::Preserve => "preserve",
        }
    }
}

/// What a guard does with a client whose version is unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnknownVersion {
    /// Treated as older than every backend (the default).
    Guard,
    /// Let through unguarded.
    Pass,
}

impl RouteTable {
    /// The backend's name.
    pub fn backend_name(&self, id: BackendId) -> &str {
        &self.backends[id.index()].name
    }
}

/// A set of apiserver endpoints that run one version.
#[derive(Clone, Debug, PartialEq)]
pub struct Backend {
    /// A DNS-1123 label, unique in the table.
    pub name: String,
    /// The `major.minor` the endpoints must report on /version, if given.
    pub version: Option<(u32, u32)>,
    /// The endpoints, in file order.
    pub endpoints: Vec<Endpoint>,
}

/// One apiserver address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The URL as written.
    pub url: String,
    /// TLS (`https`) or cleartext h2c (`http`).
    pub tls: bool,
    /// Host name or IP address (without brackets).
    pub host: String,
    /// Port (the scheme's default when the URL has none).
    pub port: u16,
    /// The name its TLS certificate is verified against: the backend's `serverName` (for
    /// certificates issued to `kubernetes.default.svc`), else the URL's host.
    pub server_name: String,
}

impl Endpoint {
    /// `host:port`, with brackets around an IPv6 address.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// The write section: which verbs are pinned writes, and where they go.
#[derive(Clone, Debug, PartialEq)]
pub struct Writes {
    /// The verbs that are pinned writes.
    pub verbs: VerbSet,
    /// The backend of writes that no pin matches.
    pub default: BackendId,
    /// How long writes are held when a pin moves at `flipAt`.
    pub fence: Duration,
    /// The pins, in file order: the first match decides.
    pub pins: Vec<Pin>,
}

/// A write pin: the objects it covers are written through exactly one backend.
#[derive(Clone, Debug, PartialEq)]
pub struct Pin {
    /// The pin's name, or `writes.pins[i]` when it has none.
    pub name: String,
    /// Which objects it covers.
    pub selectors: Selectors,
    /// Where their writes (and, with `reads: follow`, their reads) go.
    pub backend: BackendId,
    /// Whether the reads of what the pin covers follow it.
    pub reads: PinReads,
    /// When a move of this pin takes effect across replicas.
    pub flip_at: Option<SystemTime>,
    /// The backend the pin moves from at `flip_at`, when the file says so (`from`); otherwise a
    /// replica takes it from the table it ran before.
    pub flip_from: Option<BackendId>,
}

/// What a pin does with the reads of the objects it covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PinReads {
    /// Reads go to the pin's backend too, so reads and writes of a key meet one version.
    Follow,
    /// Reads are decided by `reads` (for clients known never to write back what they read).
    Rollout,
}

/// The read section.
#[derive(Clone, Debug, PartialEq)]
pub struct Reads {
    /// The backend of reads that no pin or rollout takes.
    pub default: BackendId,
    /// The rollouts, in file order: the first match decides.
    pub rollouts: Vec<Rollout>,
}

/// A gradual move of some reads to another backend.
#[derive(Clone, Debug, PartialEq)]
pub struct Rollout {
    /// The rollout's unique name; also the salt of its sticky hash.
    pub name: String,
    /// Which requests it takes.
    pub selectors: Selectors,
    /// The backend a selected key goes to.
    pub to: BackendId,
    /// What a key is.
    pub sticky_by: StickyBy,
    /// The share of keys sent to `to`, over time.
    pub schedule: Schedule,
    /// When to fall back to 0 % by itself.
    pub abort: Option<Abort>,
}

/// What identifies a key for a rollout's sticky hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StickyBy {
    /// The request's namespace (cluster-scoped requests share the key "").
    Namespace,
    /// The authenticated user name.
    User,
    /// The object: namespace, group, resource and name.
    Object,
    /// The client component and its version.
    Client,
}

impl StickyBy {
    /// The name used in route files.
    pub fn as_str(self) -> &'static str {
        match self {
            StickyBy::Namespace => "namespace",
            StickyBy::User => "user",
            StickyBy::Object => "object",
            StickyBy::Client => "client",
        }
    }
}

/// A share of keys in hundredths of a percent: 0 to 10,000.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Percent(pub u16);

impl Percent {
    /// All keys.
    pub const ALL: Percent = Percent(10_000);

    /// The share as a number from 0 to 100.
    pub fn as_f64(self) -> f64 {
        f64::from(self.0) / 100.0
    }
}

impl std::fmt::Display for Percent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_multiple_of(100) {
            write!(f, "{}%", self.0 / 100)
        } else {
            write!(f, "{:.2}%", self.as_f64())
        }
    }
}

/// A rollout's percent over time.
#[derive(Clone, Debug, PartialEq)]
pub enum Schedule {
    /// The same share at all times.
    Fixed(Percent),
    /// Steps from `start_at`: each holds for its `hold`, the last forever; 0 % before `start_at`.
    Steps {
        /// When the first step begins.
        start_at: SystemTime,
        /// The steps in order; every step but the last has a hold.
        steps: Vec<Step>,
    },
}

/// One step of a schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The share during the step.
    pub percent: Percent,
    /// How long the step lasts; `None` only for the last step.
    pub hold: Option<Duration>,
}

/// Where a schedule stands at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedulePoint {
    /// The share in force.
    pub percent: Percent,
    /// The step in force (0-based), or `None` before `startAt` and for fixed percents.
    pub step: Option<usize>,
}

impl Schedule {
    /// The share in force at `now`: a function of the file and the clock only, so every replica agrees
    /// and a restart changes nothing.
    pub fn at(&self, now: SystemTime) -> SchedulePoint {
        let (start_at, steps) = match self {
            Schedule::Fixed(p) => {
                return SchedulePoint {
                    percent: *p,
                    step: None,
                };
            }
            Schedule::Steps { start_at, steps } => (start_at, steps),
        };
        let Ok(mut elapsed) = now.duration_since(*start_at) else {
            return SchedulePoint {
                percent: Percent(0),
                step: None,
            };
        };
        for (i, step) in steps.iter().enumerate() {
            match step.hold {
                Some(hold) if elapsed >= hold => elapsed -= hold,
                _ => {
                    return SchedulePoint {
                        percent: step.percent,
                        step: Some(i),
                    };
                }
            }
        }
        // Validation guarantees the last step has no hold; a last hold that passed still holds.
        SchedulePoint {
            percent: steps.last().map(|s| s.percent).unwrap_or_default(),
            step: steps.len().checked_sub(1),
        }
    }

    /// The schedule's next step after `now`: when it begins and its share (`None` for a fixed
    /// percent, and once the last step is in force).
    pub fn next(&self, now: SystemTime) -> Option<(SystemTime, Percent)> {
        let Schedule::Steps { start_at, steps } = self else {
            return None;
        };
        let mut begins = *start_at;
        for step in steps {
            if begins > now {
                return Some((begins, step.percent));
            }
            begins = begins.checked_add(step.hold?)?;
        }
        None
    }
}

/// When a rollout takes itself back to 0 %.
#[derive(Clone, Debug, PartialEq)]
pub struct Abort {
    /// Failures / requests sent to `to` above which the rollout aborts.
    pub error_ratio: f64,
    /// The sliding window the ratio is measured over.
    pub window: Duration,
    /// The fewest requests in the window before the ratio counts.
    pub min_requests: u64,
}

/// The selectors of a pin or a rollout; a selector left out (`None`) matches everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selectors {
    /// Namespaces; a given selector never matches a cluster-scoped request.
    pub namespaces: Option<Selector<NamePattern>>,
    /// Resources; a given selector never matches a non-resource request.
    pub resources: Option<Selector<ResourcePattern>>,
    /// Verbs: the verbs included, and the verbs excluded.
    pub verbs: Option<(VerbSet, VerbSet)>,
    /// User names.
    pub users: Option<Selector<NamePattern>>,
    /// Group names: matches when any of the request's groups matches an item.
    pub groups: Option<Selector<NamePattern>>,
    /// Clients (User-Agent components with optional version bounds).
    pub clients: Option<Selector<ClientPattern>>,
}

impl Selectors {
    /// Whether no selector is given: every request matches.
    pub fn is_match_all(&self) -> bool {
        self.namespaces.is_none()
            && self.resources.is_none()
            && self.verbs.is_none()
            && self.users.is_none()
            && self.groups.is_none()
            && self.clients.is_none()
    }

    /// Whether every request `other` matches, these match too, as far as the items as written
    /// tell (equal items; no reasoning about patterns): false when unsure.
    pub fn covers(&self, other: &Selectors) -> bool {
        fn list<I: PartialEq>(a: &Option<Selector<I>>, b: &Option<Selector<I>>) -> bool {
            match (a, b) {
                (None, _) => true,
                (Some(_), None) => false,
                (Some(a), Some(b)) => {
                    let excluded = a.exclude.iter().all(|x| b.exclude.contains(x));
                    let included = a.include.is_empty()
                        || (!b.include.is_empty()
                            && b.include.iter().all(|x| a.include.contains(x)));
                    excluded && included
                }
            }
        }
        let verbs = match (&self.verbs, &other.verbs) {
            (None, _) => true,
            (Some(a), Some(b)) => a == b,
            (Some(_), None) => false,
        };
        list(&self.namespaces, &other.namespaces)
            && list(&self.resources, &other.resources)
            && verbs
            && list(&self.users, &other.users)
            && list(&self.groups, &other.groups)
            && list(&self.clients, &other.clients)
    }
}
