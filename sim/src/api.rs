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
    /// The first version that serves it.
    pub since: (u32, u32),
    /// The last version that serves it, if it was removed.
    pub until: Option<(u32, u32)>,
    /// The verbs discovery lists for it.
    pub verbs: &'static [&'static str],
    /// It has a `status` subresource: a write of the main object keeps the stored status, and
    /// `/status` writes the status alone (as kube-apiserver's strategies do).
    pub status: bool,
}

impl ApiResource {
    /// Whether a simulator of this version serves the resource.
    pub fn served_by(&self, version: (u32, u32)) -> bool {
        version >= self.since && self.until.is_none_or(|u| version <= u)
    }

    /// `v1` or `group/version`, as objects carry it in `apiVersion`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

const ALWAYS: (u32, u32) = (1, 0);

const ALL_VERBS: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];

const fn resource(
    group: &'static str,
    version: &'static str,
    resource: &'static str,
    kind: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
) -> ApiResource {
    ApiResource {
        group,
        version,
        resource,
        kind,
        namespaced,
        short,
        since: ALWAYS,
        until: None,
        verbs: ALL_VERBS,
        status: false,
    }
}

/// Every resource the simulator knows, with the versions that serve it. Three are made up to show
/// API skew: `widgets.sim.skewgate.io/v1` appears in 1.30 (a new version adds an API group),
/// `gadgets.apps/v1` too (a new version adds a kind to a group/version both serve), and
/// `apps/v1beta2` deployments are served up to 1.29 (an old version still serves a removed one).
pub const RESOURCES: &[ApiResource] = &[
    resource("", "v1", "namespaces", "Namespace", false, &["ns"]),
    resource("", "v1", "configmaps", "ConfigMap", true, &["cm"]),
    ApiResource {
        status: true,
        ..resource("", "v1", "pods", "Pod", true, &["po"])
    },
    ApiResource {
        status: true,
        ..resource("apps", "v1", "deployments", "Deployment", true, &["deploy"])
    },
    ApiResource {
        until: Some((1, 29)),
        status: true,
        ..resource("apps", "v1beta2", "deployments", "Deployment", true, &[])
    },
    resource("coordination.k8s.io", "v1", "leases", "Lease", true, &[]),
    // The `default/kubernetes` Service's endpoints, which the apiserver's endpoint reconciler (or,
    // with `--endpoint-reconciler-type=none`, skewgate) keeps.
    resource("", "v1", "endpoints", "Endpoints", true, &["ep"]),
    resource(
        "discovery.k8s.io",
        "v1",
        "endpointslices",
        "EndpointSlice",
        true,
        &[],
    ),
    ApiResource {
        since: (1, 30),
        ..resource("sim.skewgate.io", "v1", "widgets", "Widget", true, &[])
    },
    // A kind a newer version adds to a group/version both serve, as kube-apiserver v1.36 adds
    // `mutatingadmissionpolicies` to `admissionregistration.k8s.io/v1`, which v1.35 serves too.
    ApiResource {
        since: (1, 30),
        ..resource("apps", "v1", "gadgets", "Gadget", true, &[])
    },
    // Who am I (`kubectl auth whoami`): created, never stored.
    ApiResource {
        since: (1, 28),
        verbs: &["create"],
        ..resource(
            "authentication.k8s.io",
            "v1",
            "selfsubjectreviews",
            "SelfSubjectReview",
            false,
            &[],
        )
    },
];

/// The resource at this group, version and plural name, if a simulator of `served` serves it.
pub fn find(
    served: (u32, u32),
    group: &str,
    version: &str,
    resource: &str,
) -> Option<&'static ApiResource> {
    RESOURCES.iter().find(|r| {
        r.group == group && r.version == version && r.resource == resource && r.served_by(served)
    })
}

/// `/api`: the core group's versions.
pub fn core_versions() -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}]})
}

/// `/apis`: the named groups a simulator of `served` serves, each with its versions.
pub fn groups(served: (u32, u32)) -> Value {
    let mut names: Vec<&str> = RESOURCES
        .iter()
        .filter(|r| !r.group.is_empty() && r.served_by(served))
        .map(|r| r.group)
        .collect();
    names.sort();
    names.dedup();
    let groups: Vec<Value> = names
        .iter()
        .map(|g| {
            let mut versions: Vec<&str> = RESOURCES
                .iter()
                .filter(|r| r.group == *g && r.served_by(served))
                .map(|r| r.version)
                .collect();
            versions.sort();
            versions.dedup();
            let gvs: Vec<Value> = versions
                .iter()
                .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
                .collect();
            // The preferred version is the GA one when there is one.
            let preferred = gvs
                .iter()
                .find(|gv| gv["version"] == "v1")
                .or(gvs.first())
                .cloned();
            json!({"name": g, "versions": gvs, "preferredVersion": preferred})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/api/v1` or `/apis/{group}/{version}`: the resources of one group/version, if served.
pub fn resource_list(served: (u32, u32), group: &str, version: &str) -> Option<Value> {
    let resources: Vec<Value> = RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version && r.served_by(served))
        .flat_map(|r| {
            let main = json!({
                "name": r.resource,
                "singularName": r.kind.to_lowercase(),
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": r.verbs,
                "shortNames": r.short,
            });
            let status = r.status.then(|| {
                json!({
                    "name": format!("{}/status", r.resource),
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": ["get", "patch", "update"],
                })
            });
            std::iter::once(main).chain(status)
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
