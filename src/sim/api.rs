//! The simulator's API surface: which resources it serves, and the discovery documents kubectl reads.

use serde_json::{Value, json};

/// One resource the simulator serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiResource {
    /// API group; empty for core.
    pub group: &'static str,
    /// API version.
    pub version: &'static str,
    /// Plural resource name.
    pub resource: &'static str,
    /// Kind of one object.
    pub kind: &'static str,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// Short names for kubectl.
    pub short: &'static [&'static str],
}

impl ApiResource {
    /// `v1` or `group/version`, as objects carry it in `apiVersion`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// Every resource the simulator serves.
pub const RESOURCES: &[ApiResource] = &[
    ApiResource {
        group: "",
        version: "v1",
        resource: "namespaces",
        kind: "Namespace",
        namespaced: false,
        short: &["ns"],
    },
    ApiResource {
        group: "",
        version: "v1",
        resource: "configmaps",
        kind: "ConfigMap",
        namespaced: true,
        short: &["cm"],
    },
    ApiResource {
        group: "",
        version: "v1",
        resource: "pods",
        kind: "Pod",
        namespaced: true,
        short: &["po"],
    },
    ApiResource {
        group: "apps",
        version: "v1",
        resource: "deployments",
        kind: "Deployment",
        namespaced: true,
        short: &["deploy"],
    },
    ApiResource {
        group: "coordination.k8s.io",
        version: "v1",
        resource: "leases",
        kind: "Lease",
        namespaced: true,
        short: &[],
    },
];

/// The resource at this group, version and plural name, if served.
pub fn find(group: &str, version: &str, resource: &str) -> Option<&'static ApiResource> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.resource == resource)
}

/// `/api`: the core group's versions.
pub fn core_versions() -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}]})
}

/// `/apis`: the named groups.
pub fn groups(extra: &[(&str, &str)]) -> Value {
    let mut names: Vec<(&str, &str)> = RESOURCES
        .iter()
        .filter(|r| !r.group.is_empty())
        .map(|r| (r.group, r.version))
        .chain(extra.iter().copied())
        .collect();
    names.sort();
    names.dedup();
    let groups: Vec<Value> = names
        .iter()
        .map(|(g, v)| {
            let gv = json!({"groupVersion": format!("{g}/{v}"), "version": v});
            json!({"name": g, "versions": [gv.clone()], "preferredVersion": gv})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/api/v1` or `/apis/{group}/{version}`: the resources of one group/version, if served.
pub fn resource_list(group: &str, version: &str) -> Option<Value> {
    let resources: Vec<Value> = RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .map(|r| {
            json!({
                "name": r.resource,
                "singularName": r.kind.to_lowercase(),
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                "shortNames": r.short,
            })
        })
        .collect();
    if resources.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}
