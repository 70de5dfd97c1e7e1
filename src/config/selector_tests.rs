//! Tests of `selector.rs`.

use super::*;

fn sel(items: &[&str]) -> Selector<NamePattern> {
    let mut s = Selector {
        include: vec![],
        exclude: vec![],
    };
    for item in items {
        match item.strip_prefix('!') {
            Some(rest) => s.exclude.push(NamePattern::parse(rest).unwrap()),
            None => s.include.push(NamePattern::parse(item).unwrap()),
        }
    }
    s
}

fn matches(s: &Selector<NamePattern>, name: &str) -> bool {
    s.matches_with(|p| p.matches(name))
}

#[test]
fn negations_mean_none_of_these() {
    let s = sel(&["!kube-system", "!kube-public"]);
    assert!(matches(&s, "team-a"));
    assert!(!matches(&s, "kube-system"));
    assert!(!matches(&s, "kube-public"));
    let s = sel(&["team-a", "/^canary-/", "!canary-x"]);
    assert!(matches(&s, "team-a"));
    assert!(matches(&s, "canary-1"));
    assert!(!matches(&s, "canary-x"));
    assert!(!matches(&s, "team-b"));
}

#[test]
fn globs_and_regexes() {
    let p = NamePattern::parse("system:node:*").unwrap();
    assert!(p.matches("system:node:n1"));
    assert!(!p.matches("system:nodes"));
    let p = NamePattern::parse("a.b*").unwrap();
    assert!(p.matches("a.bc") && !p.matches("axbc"));
    assert!(
        NamePattern::parse("/^canary-/")
            .unwrap()
            .matches("canary-7")
    );
    assert!(NamePattern::parse("/(/").is_err());
}

#[test]
fn resource_items() {
    let pods = ResourcePattern::parse("pods").unwrap();
    assert!(pods.matches("", "pods", ""));
    assert!(pods.matches("", "pods", "status"));
    assert!(!pods.matches("metrics.k8s.io", "pods", ""));
    let status = ResourcePattern::parse("pods/status").unwrap();
    assert!(status.matches("", "pods", "status"));
    assert!(!status.matches("", "pods", ""));
    assert!(!status.matches("", "pods", "log"));
    let apps = ResourcePattern::parse("*.apps").unwrap();
    assert!(apps.matches("apps", "deployments", "scale"));
    assert!(!apps.matches("", "pods", ""));
    let leases = ResourcePattern::parse("leases.coordination.k8s.io").unwrap();
    assert!(leases.matches("coordination.k8s.io", "leases", ""));
    let all = ResourcePattern::parse("*").unwrap();
    assert!(all.matches("apps", "deployments", "") && all.matches("", "pods", "exec"));
    for item in [
        "pods",
        "deployments.apps",
        "pods/status",
        "*.apps",
        "*",
        "leases.coordination.k8s.io",
        "pods.*",
    ] {
        assert_eq!(
            ResourcePattern::parse(item).unwrap().to_string(),
            item,
            "shown as written"
        );
    }
    for bad in ["", "Pods", "pods/", "pods/a.b", "pods status", ".apps"] {
        assert!(ResourcePattern::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn client_items() {
    let ua = |s| Client::from_user_agent(Some(s));
    let p = ClientPattern::parse("kubectl<1.29").unwrap();
    assert!(p.matches(&ua("kubectl/v1.28.9 (linux/amd64) kubernetes/x")));
    assert!(!p.matches(&ua("kubectl/v1.29.0 (linux/amd64) kubernetes/x")));
    assert!(!p.matches(&ua("kubectl")));
    assert!(!p.matches(&ua("kubelet/v1.20.0")));
    let p = ClientPattern::parse("kube-controller-manager>=1.30").unwrap();
    assert!(p.matches(&ua("kube-controller-manager/v1.30.0")));
    assert!(!p.matches(&ua("kube-controller-manager/v1.29.9")));
    let p = ClientPattern::parse("kubelet=1.29").unwrap();
    assert!(p.matches(&ua("kubelet/v1.29.7")));
    assert!(!p.matches(&ua("kubelet/v1.30.0")));
    assert!(
        ClientPattern::parse("kubelet")
            .unwrap()
            .matches(&ua("kubelet/v1.30.0"))
    );
    // A bound alone is any client of such a version (never one whose version is unknown).
    let any_old = ClientPattern::parse("<1.30").unwrap();
    assert!(any_old.matches(&ua("kubectl/v1.29.4")));
    assert!(any_old.matches(&ua("my-operator/v1.2.0")));
    assert!(!any_old.matches(&ua("kubelet/v1.30.0")));
    assert!(!any_old.matches(&ua("my-operator")));
    for bad in ["", "kubectl<", "kubectl<one", "kubectl=>1.2", "a/b"] {
        assert!(ClientPattern::parse(bad).is_err(), "{bad}");
    }
}
