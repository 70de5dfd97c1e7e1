//! The rollback table the check judges: where it sends the writes of each object at stake once
//! every one of its moves is done, and the pins that would keep the rest where it can be stored.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::{BackendRef, Finding, ResourceRef};
use crate::classify::{Client, ClientVersion, classify};
use crate::config::RouteTable;
use crate::steer::{Quiet, Rule, SteerRequest, Steering};

/// Where a rollback table keeps a finding's writes, off the older backend.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Kept {
    pub backend: String,
    /// The rule that sends them there: `pin keep-pods`, `writes.default`.
    pub by: String,
}

/// A rollback table, judged once its moves are done.
pub struct Plan {
    steering: Steering,
    at: SystemTime,
}

impl Plan {
    /// `table` as it routes after its last `flipAt` (and fence), or `now` if later.
    pub fn new(table: RouteTable, now: SystemTime) -> Plan {
        let settled = (table.writes.pins.iter())
            .filter_map(|p| p.flip_at)
            .max()
            .map(|t| t + table.writes.fence + Duration::from_secs(1));
        Plan {
            at: settled.map_or(now, |t| t.max(now)),
            steering: Steering::new(Arc::new(table)),
        }
    }

    pub fn table(&self) -> &RouteTable {
        self.steering.table()
    }

    /// The backend an update of an object of `resource` in `namespace` goes to, and the rule.
    pub fn writes_of(&self, resource: &ResourceRef, namespace: &str) -> (&str, String) {
        let path = resource.object_path(namespace, "x");
        let info = classify("PUT", &path, None);
        let req = SteerRequest {
            info: &info,
            user: "",
            groups: &[],
            client: Client::from_user_agent(None),
        };
        let d = self.steering.decide(&req, self.at, &Quiet);
        let table = self.table();
        let by = match d.rule {
            Rule::Pin(i) => format!("pin {}", table.writes.pins[i].name),
            Rule::WriteDefault => "writes.default".to_owned(),
            Rule::Rollout(i) => format!("rollout {}", table.reads.rollouts[i].name),
            Rule::ReadDefault => "reads.default".to_owned(),
        };
        (table.backend_name(d.backend), by)
    }

    /// Whether backend `name` of this table can store what `to` cannot: a newer version, or
    /// another backend where versions are not declared.
    pub fn newer_than(&self, name: &str, to: &BackendRef) -> bool {
        if name == to.name {
            return false;
        }
        let version = (self.table().backends.iter())
            .find(|b| b.name == name)
            .and_then(|b| b.version);
        match (
            version,
            to.version.as_deref().and_then(ClientVersion::parse_minor),
        ) {
            (Some(v), Some(t)) => v > t,
            _ => true,
        }
    }

    /// Marks each finding's namespaces that the table keeps off `to`.
    pub fn mark(&self, findings: &mut [Finding], to: &BackendRef) {
        for f in findings {
            for ns in &mut f.namespaces {
                let (backend, by) = self.writes_of(&f.resource, &ns.namespace);
                ns.kept = self.newer_than(backend, to).then(|| Kept {
                    backend: backend.to_owned(),
                    by,
                });
            }
        }
    }
}

/// More namespaces than this, and a pin takes the whole resource.
const MAX_PIN_NAMESPACES: usize = 20;

/// The pins that keep what is lost on `backend` (a newer backend), to go first in the rollback
/// table's `writes.pins`: one per resource, by the namespaces that hold it.
pub fn suggested_pins(findings: &[Finding], backend: &str) -> String {
    let mut by_resource: std::collections::BTreeMap<String, BTreeSet<String>> = Default::default();
    let mut whole: BTreeSet<String> = BTreeSet::new();
    for f in findings.iter().filter(|f| f.lost() > 0) {
        let selector = f.resource.selector();
        for ns in f.namespaces.iter().filter(|n| n.kept.is_none()) {
            if ns.namespace.is_empty() {
                whole.insert(selector.clone());
            } else {
                by_resource
                    .entry(selector.clone())
                    .or_default()
                    .insert(ns.namespace.clone());
            }
        }
    }
    if by_resource.is_empty() && whole.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "# Keeps on {backend} the objects it alone can store: first in writes.pins of the rollback\n# table, before any pin that moves writes back.\nwrites:\n  pins:\n"
    );
    let mut names = BTreeSet::new();
    for (selector, namespaces) in &by_resource {
        if whole.contains(selector) {
            continue;
        }
        let name = pin_name(selector, &mut names);
        if namespaces.len() > MAX_PIN_NAMESPACES {
            out.push_str(&format!(
                "    - name: {name}\n      resources: [{selector}]\n      backend: {backend}\n"
            ));
        } else {
            let list: Vec<&str> = namespaces.iter().map(String::as_str).collect();
            out.push_str(&format!(
                "    - name: {name}\n      namespaces: [{}]\n      resources: [{selector}]\n      backend: {backend}\n",
                list.join(", ")
            ));
        }
    }
    if !whole.is_empty() {
        let name = pin_name("cluster-scoped", &mut names);
        let list: Vec<&str> = whole.iter().map(String::as_str).collect();
        out.push_str(&format!(
            "    - name: {name}\n      resources: [{}]\n      backend: {backend}\n",
            list.join(", ")
        ));
    }
    out
}

/// `keep-pods`, a DNS-1123 label, unique among `taken`.
fn pin_name(selector: &str, taken: &mut BTreeSet<String>) -> String {
    let plural = selector.split('.').next().unwrap_or("objects");
    let mut base: String = format!("keep-{plural}");
    base.truncate(58);
    let mut name = base.clone();
    let mut i = 2;
    while !taken.insert(name.clone()) {
        name = format!("{base}-{i}");
        i += 1;
    }
    name
}
