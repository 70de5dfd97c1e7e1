//! The resources Kubernetes itself ships (kube-apiserver 1.29 to 1.34, alpha and beta groups
//! included), by group: what a route file may name without a custom resource definition, and
//! what the request metrics label before discovery has run.

/// `(group, resources)`: the core group is empty.
pub const BUILTIN_RESOURCES: &[(&str, &[&str])] = &[
    (
        "",
        &[
            "bindings",
            "componentstatuses",
            "configmaps",
            "endpoints",
            "events",
            "limitranges",
            "namespaces",
            "nodes",
            "persistentvolumeclaims",
            "persistentvolumes",
            "pods",
            "podtemplates",
            "replicationcontrollers",
            "resourcequotas",
            "secrets",
            "serviceaccounts",
            "services",
        ],
    ),
    (
        "admissionregistration.k8s.io",
        &[
            "mutatingadmissionpolicies",
            "mutatingadmissionpolicybindings",
            "mutatingwebhookconfigurations",
            "validatingadmissionpolicies",
            "validatingadmissionpolicybindings",
            "validatingwebhookconfigurations",
        ],
    ),
    ("apiextensions.k8s.io", &["customresourcedefinitions"]),
    ("apiregistration.k8s.io", &["apiservices"]),
    (
        "apps",
        &[
            "controllerrevisions",
            "daemonsets",
            "deployments",
            "replicasets",
            "statefulsets",
        ],
    ),
    (
        "authentication.k8s.io",
        &["selfsubjectreviews", "tokenreviews"],
    ),
    (
        "authorization.k8s.io",
        &[
            "localsubjectaccessreviews",
            "selfsubjectaccessreviews",
            "selfsubjectrulesreviews",
            "subjectaccessreviews",
        ],
    ),
    ("autoscaling", &["horizontalpodautoscalers"]),
    ("batch", &["cronjobs", "jobs"]),
    (
        "certificates.k8s.io",
        &["certificatesigningrequests", "clustertrustbundles"],
    ),
    ("coordination.k8s.io", &["leases", "leasecandidates"]),
    ("discovery.k8s.io", &["endpointslices"]),
    ("events.k8s.io", &["events"]),
    (
        "flowcontrol.apiserver.k8s.io",
        &["flowschemas", "prioritylevelconfigurations"],
    ),
    ("internal.apiserver.k8s.io", &["storageversions"]),
    (
        "networking.k8s.io",
        &[
            "ingressclasses",
            "ingresses",
            "ipaddresses",
            "networkpolicies",
            "servicecidrs",
        ],
    ),
    ("node.k8s.io", &["runtimeclasses"]),
    ("policy", &["poddisruptionbudgets"]),
    (
        "rbac.authorization.k8s.io",
        &[
            "clusterrolebindings",
            "clusterroles",
            "rolebindings",
            "roles",
        ],
    ),
    (
        "resource.k8s.io",
        &[
            "deviceclasses",
            "resourceclaims",
            "resourceclaimtemplates",
            "resourceslices",
        ],
    ),
    ("scheduling.k8s.io", &["priorityclasses"]),
    (
        "storage.k8s.io",
        &[
            "csidrivers",
            "csinodes",
            "csistoragecapacities",
            "storageclasses",
            "volumeattachments",
            "volumeattributesclasses",
        ],
    ),
    ("storagemigration.k8s.io", &["storageversionmigrations"]),
];

/// Every built-in `(group, resource)`.
pub fn builtin_resources() -> impl Iterator<Item = (&'static str, &'static str)> {
    BUILTIN_RESOURCES
        .iter()
        .flat_map(|(g, rs)| rs.iter().map(move |r| (*g, *r)))
}
