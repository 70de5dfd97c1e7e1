//! The skew report: what a person reads (`skewgate skew`, `/debug/skew`), as text or JSON, ending
//! with the route-file fragment that pins the resources whose fields differ.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

use serde::Serialize;
use serde_json::Value;

use super::Gvk;

/// What differs between the versions.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The versions compared, as named.
    pub versions: Vec<String>,
    /// Kinds that more than one version serves and whose fields differ.
    pub kinds: Vec<KindSkew>,
    /// Resources some versions serve and others do not.
    pub served_by_some: Vec<ServedBySome>,
}

/// The differences of one kind.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KindSkew {
    /// The kind.
    #[serde(skip)]
    pub gvk: Gvk,
    /// `deployments.apps (v1)`.
    pub resource: String,
    /// Fields only some versions know.
    pub fields: Vec<FieldSkew>,
    /// Fields all know whose default differs.
    pub defaults: Vec<DefaultChange>,
}

/// A field only some versions know.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldSkew {
    /// `spec.template.spec.containers[].startupProbe`.
    pub path: String,
    /// The versions that know it.
    pub known_by: Vec<String>,
    /// The versions that drop it on every write.
    pub unknown_to: Vec<String>,
    /// Under a Pod's containers: a change restarts the container (the kubelet's container hash).
    pub container_hash_risk: bool,
}

/// A field whose default differs between versions.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DefaultChange {
    /// The field.
    pub path: String,
    /// Each version's default (`None`: none).
    pub by_version: BTreeMap<String, Option<Value>>,
    /// Under a Pod's containers.
    pub container_hash_risk: bool,
}

/// A resource some versions serve and others do not.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServedBySome {
    /// The resource.
    pub resource: String,
    /// The versions that serve it.
    pub served_by: Vec<String>,
    /// The versions that do not.
    pub not_by: Vec<String>,
}

impl KindSkew {
    /// The name a route file's `resources` selector uses: `configmaps`, `deployments.apps`.
    pub fn selector_name(&self) -> String {
        let plural = self.resource.split(' ').next().unwrap_or_default();
        plural.to_owned()
    }
}

impl Report {
    /// The route-file fragment that pins every resource whose fields differ to `backend` (the one
    /// writes go to now), so that one version at a time writes them.
    pub fn suggested_pins(&self, backend: &str) -> String {
        let mut resources: Vec<String> = self.kinds.iter().map(KindSkew::selector_name).collect();
        resources.sort();
        resources.dedup();
        if resources.is_empty() {
            return "# No resource's fields differ: no pin is needed for schema skew.\n".to_owned();
        }
        format!(
            "# Resources whose fields differ between the versions: one writer version at a time.\nwrites:\n  pins:\n    - name: schema-skew\n      resources: [{}]\n      backend: {backend}\n",
            resources.join(", ")
        )
    }
}

/// The flag printed after a field under a Pod's containers.
fn risk(container_hash: bool) -> &'static str {
    if container_hash {
        "  [container hash: restarts containers]"
    } else {
        ""
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "versions: {}", self.versions.join(", "))?;
        if self.kinds.is_empty() {
            writeln!(f, "\nno kind's fields differ")?;
        }
        for k in &self.kinds {
            writeln!(f, "\n{}", k.resource)?;
            for field in &k.fields {
                let risk = risk(field.container_hash_risk);
                writeln!(
                    f,
                    "  field    {}  known by {}; dropped by {}{risk}",
                    field.path,
                    field.known_by.join(", "),
                    field.unknown_to.join(", ")
                )?;
            }
            for d in &k.defaults {
                let mut values = String::new();
                for (version, value) in &d.by_version {
                    let shown = value.as_ref().map_or("none".to_owned(), Value::to_string);
                    let _ = write!(
                        values,
                        "{}{version}: {shown}",
                        if values.is_empty() { "" } else { ", " }
                    );
                }
                let risk = risk(d.container_hash_risk);
                writeln!(f, "  default  {}  {values}{risk}", d.path)?;
            }
        }
        if !self.served_by_some.is_empty() {
            writeln!(f, "\nserved by some versions only")?;
            for s in &self.served_by_some {
                writeln!(
                    f,
                    "  {}  served by {}; not by {}",
                    s.resource,
                    s.served_by.join(", "),
                    s.not_by.join(", ")
                )?;
            }
        }
        Ok(())
    }
}
