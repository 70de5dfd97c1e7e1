//! What moving writes back to an older backend would strand or damage, from the objects stored now:
//! objects of kinds the older version does not serve, objects holding fields it cannot store, and
//! resources stored in a version it cannot read. Read through the newer backends (`scan.rs`), judged
//! against a rollback plan's pins (`plan.rs`), written as a record that `check` reads without the
//! cluster (`record.rs`), and shown to a person (`text.rs`).

mod plan;
mod record;
mod scan;
mod storage;
mod text;
mod verify;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use plan::{Kept, Plan, suggested_pins};
pub use record::{RECORD_FORMAT, record_warnings};
pub use scan::{Progress, ScanOptions};
pub use storage::{StorageVersions, StoredAs};
pub use verify::DryRun;

use crate::config::RouteTable;
use crate::upstream::PoolSettings;
use scan::Source;

/// A backend as the check names it: its name in the route file and its declared version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendRef {
    pub name: String,
    /// `v1.35`, when the route file declares one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// A resource as a route file's `resources` selector names it, with where it is served.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRef {
    /// API group; empty for core.
    pub group: String,
    /// The version it was read in.
    pub version: String,
    /// The plural.
    pub resource: String,
}

impl ResourceRef {
    /// `pods`, `mutatingadmissionpolicies.admissionregistration.k8s.io`: a `resources` item.
    pub fn selector(&self) -> String {
        selector(&self.group, &self.resource)
    }

    /// The path of an object of it: `/api/v1/namespaces/NS/pods/NAME`.
    pub fn object_path(&self, namespace: &str, name: &str) -> String {
        let base = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        match namespace {
            "" => format!("{base}/{}/{name}", self.resource),
            ns => format!("{base}/namespaces/{ns}/{}/{name}", self.resource),
        }
    }
}

/// The objects of one finding in one namespace (`""`: cluster-scoped).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InNamespace {
    pub namespace: String,
    pub count: u64,
    /// The first names found, at most `--max-names`.
    pub names: Vec<String>,
    /// Where the plan keeps their writes instead of the older backend, if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<Kept>,
}

/// What is at stake.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "type")]
pub enum Stake {
    /// Objects of a kind the older version does not serve: unreadable to it, and a namespace that
    /// holds one cannot be deleted once it alone serves.
    KindNotServed,
    /// Objects that hold a field the older version cannot store: dropped on their next write
    /// through it. `field` is the outermost such field (`status.containerStatuses[].x`).
    Field { field: String },
}

/// One finding: a resource, what is at stake, and the objects by namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    pub resource: ResourceRef,
    pub stake: Stake,
    pub count: u64,
    pub namespaces: Vec<InNamespace>,
    /// What the older apiserver said it would drop of one of them (`--dry-run`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<DryRun>,
}

impl Finding {
    /// The objects that the plan does not keep off the older backend: the loss.
    pub fn lost(&self) -> u64 {
        (self.namespaces.iter())
            .filter(|n| n.kept.is_none())
            .map(|n| n.count)
            .sum()
    }
}

/// The whole check: what it read, what it found, and what follows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RollbackCheck {
    /// [`RECORD_FORMAT`]: how `check` knows it reads a record it understands.
    pub format: String,
    /// When it ran (RFC 3339, UTC).
    pub checked_at: String,
    /// The route file it read the backends from.
    pub routes: String,
    /// The rollback table it judged the pins of, if any (else: every write moves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// The older backend writes would move to.
    pub to: BackendRef,
    /// The newer backends the objects were read through.
    pub from: Vec<BackendRef>,
    /// Objects read.
    pub objects: u64,
    /// Resources listed.
    pub resources: u64,
    pub findings: Vec<Finding>,
    pub storage_versions: StorageVersions,
    /// Whether something would be lost: what the exit code says.
    pub loses: bool,
}

impl RollbackCheck {
    /// Whether a finding or a storage version loses something under the plan.
    pub fn judge_loss(&mut self) {
        self.loses = self.findings.iter().any(|f| f.lost() > 0) || self.storage_versions.loses();
    }
}

/// What the check is asked.
pub struct Request {
    /// The table the backends are read from, and its file.
    pub routes: (String, RouteTable),
    /// The older backend's name.
    pub to: String,
    /// The rollback table whose pins are judged, and its file; `None`: every write moves to `to`.
    pub plan: Option<(String, RouteTable)>,
    /// How to connect, as `serve` does.
    pub pool: PoolSettings,
    pub options: ScanOptions,
    /// Ask the older apiserver, by a dry-run update of one object per field finding, what it drops.
    pub dry_run: bool,
}

/// Runs the check: reads every backend's kinds, lists what is at stake through the newer ones,
/// reads the storage versions, and judges the plan.
pub async fn run(req: Request, progress: &mut dyn Progress) -> Result<RollbackCheck, String> {
    let sources = scan::connect(&req.routes.1, req.pool.clone()).await?;
    let Some(to) = sources.iter().find(|s| s.backend.name == req.to) else {
        let names: Vec<&str> = sources.iter().map(|s| s.backend.name.as_str()).collect();
        return Err(format!(
            "--to {:?} is not a backend of {}: give one of {}",
            req.to,
            req.routes.0,
            names.join(", ")
        ));
    };
    let from: Vec<&Source> = (sources.iter())
        .filter(|s| s.backend.name != to.backend.name)
        .filter(|s| match (s.version, to.version) {
            (Some(v), Some(t)) => v > t,
            _ => true,
        })
        .collect();
    let Some(newest) = from.iter().max_by_key(|s| s.version).copied() else {
        return Err(format!(
            "no backend of {} is newer than {:?}: there is nothing to roll back from",
            req.routes.0, req.to
        ));
    };
    let scanned = scan::scan(to, &from, &req.options, progress).await?;
    let storage_versions = storage::read(to, &from, newest, &req.options.groups).await;
    let now = std::time::SystemTime::now();
    let mut check = RollbackCheck {
        format: RECORD_FORMAT.to_owned(),
        checked_at: humantime::format_rfc3339_seconds(now).to_string(),
        routes: req.routes.0.clone(),
        plan: req.plan.as_ref().map(|(p, _)| p.clone()),
        to: to.backend.clone(),
        from: from.iter().map(|s| s.backend.clone()).collect(),
        objects: scanned.objects,
        resources: scanned.resources,
        findings: scanned.tally.into_findings(),
        storage_versions,
        loses: false,
    };
    if req.dry_run {
        verify::verify(&mut check.findings, (to, newest), &req.options.groups).await;
    }
    if let Some((_, table)) = req.plan {
        Plan::new(table, now).mark(&mut check.findings, &check.to);
    }
    check.judge_loss();
    Ok(check)
}

/// Findings as they are gathered, bounded: per finding and namespace a count and the first names.
#[derive(Default)]
pub(crate) struct Tally {
    by: BTreeMap<(ResourceRef, Stake), BTreeMap<String, InNamespace>>,
    max_names: usize,
}

impl Tally {
    pub(crate) fn new(max_names: usize) -> Tally {
        Tally {
            by: BTreeMap::new(),
            max_names,
        }
    }

    /// Counts one object.
    pub(crate) fn add(
        &mut self,
        resource: &ResourceRef,
        stake: Stake,
        namespace: &str,
        name: &str,
    ) {
        let entry = self.by.entry((resource.clone(), stake)).or_default();
        let at = entry
            .entry(namespace.to_owned())
            .or_insert_with(|| InNamespace {
                namespace: namespace.to_owned(),
                ..InNamespace::default()
            });
        at.count += 1;
        if at.names.len() < self.max_names {
            at.names.push(name.to_owned());
        }
    }

    pub(crate) fn into_findings(self) -> Vec<Finding> {
        (self.by.into_iter())
            .map(|((resource, stake), namespaces)| {
                let namespaces: Vec<InNamespace> = namespaces.into_values().collect();
                Finding {
                    count: namespaces.iter().map(|n| n.count).sum(),
                    resource,
                    stake,
                    namespaces,
                    dry_run: None,
                }
            })
            .collect()
    }
}

/// A resource as a route file's `resources` selector names it: `pods`, `deployments.apps`.
pub(crate) fn selector(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}.{group}")
    }
}

/// A concrete path (`status.containerStatuses[1].x`) as the field it is of
/// (`status.containerStatuses[].x`).
pub(crate) fn field_of(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut in_index = false;
    for c in path.chars() {
        match c {
            '[' => {
                in_index = true;
                out.push_str("[]");
            }
            ']' => in_index = false,
            _ if in_index => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests;
