//! The route table as it runs: validated, compiled, immutable. It carries no serde and no source text
//! beyond what errors and `/debug/routes` show.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use super::schedule::Schedule;
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
    /// The version-skew policy: which components the table may send to an older apiserver.
    pub skew_policy: SkewPolicy,
    /// Which watches are served from one upstream watch per distinct watch, in file order: the
    /// first that matches a watch decides.
    pub shares: Vec<Share>,
    /// What the file says that loads but likely is not meant (rules that never decide or change
    /// nothing): printed by `check`, logged at load.
    pub warnings: Vec<super::ConfigError>,
}

/// The version-skew policy as the table keeps it: a Kubernetes component (`classify::Component`)
/// whose User-Agent names its version is never served by a backend whose `version` is older,
/// except the components named in `skewPolicy.allowOlderApiserver`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SkewPolicy {
    /// The components the table may send to an older backend, as it decides.
    pub allow_older_apiserver: crate::classify::ComponentSet,
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

/// A rule of `shareWatches`: the watches it matches (by resources, namespaces, users, groups,
/// clients) are served from one upstream watch per distinct watch (`proxy/share`).
#[derive(Clone, Debug, PartialEq)]
pub struct Share {
    /// Its name, in metrics and `explain`.
    pub name: String,
    /// Which watches.
    pub selectors: Selectors,
    /// Whether only watches of one object by name share, or any.
    pub by_name: bool,
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
