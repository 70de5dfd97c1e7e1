//! The version-skew policy's decisions: a component is never sent to an older backend, its pinned
//! writes there are refused, and a newer leader-electing component does not lead while writes go
//! to an older backend.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::*;
use crate::classify::{Client, classify};
use crate::config::parse_route_table;

/// Mid-upgrade: team-a pinned to v1.36, everything else written through v1.35.
const TABLE: &str = r#"
apiVersion: skewgate.io/v1alpha1
kind: RouteTable
backends:
  - {name: v1-35, version: v1.35, endpoints: ["http://127.0.0.1:1"]}
  - {name: v1-36, version: v1.36, endpoints: ["http://127.0.0.1:2"]}
  - {name: v1-37, version: v1.37, endpoints: ["http://127.0.0.1:3"]}
writes:
  default: v1-35
  pins:
    - {name: team-a, namespaces: [team-a], backend: v1-36}
reads:
  default: v1-35
"#;

const KCM_NEW: &str = "kube-controller-manager/v1.36.3 (linux/amd64) kubernetes/abc";
const KCM_OLD: &str = "kube-controller-manager/v1.35.6 (linux/amd64) kubernetes/abc";

fn steering(text: &str) -> Steering {
    let table = parse_route_table(Path::new("r.yaml"), text).unwrap_or_else(|e| panic!("{e}"));
    Steering::new(Arc::new(table))
}

fn decide(s: &Steering, ua: &str, method: &str, path: &str) -> Decision {
    let info = classify(method, path, None);
    let req = SteerRequest {
        info: &info,
        user: "",
        groups: &[],
        client: Client::from_user_agent(Some(ua)),
    };
    s.decide(&req, SystemTime::UNIX_EPOCH, &Quiet)
}

fn backend(s: &Steering, d: &Decision) -> String {
    s.table().backend_name(d.backend).to_owned()
}

const LEASE: &str =
    "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-controller-manager";

#[test]
fn a_newer_component_reads_from_the_oldest_backend_not_older_than_itself() {
    let s = steering(TABLE);
    let d = decide(&s, KCM_NEW, "GET", "/api/v1/pods");
    assert_eq!(backend(&s, &d), "v1-36", "not v1-37: the oldest not older");
    let skewed = d.skew.expect("the policy acted");
    assert_eq!(skewed.step, SkewStep::Raised);
    assert_eq!(s.table().backend_name(skewed.chosen), "v1-35");
    assert!(
        d.explain(s.table())
            .to_string()
            .contains("reads.default (v1-35)")
    );
    // A create is not a pinned verb: it is steered as a read, and raised too.
    let d = decide(&s, KCM_NEW, "POST", "/api/v1/namespaces/b/pods");
    assert_eq!(
        (backend(&s, &d), d.skew.map(|x| x.step)),
        ("v1-36".into(), Some(SkewStep::Raised))
    );
    // The old component and other clients go where the rules say.
    for ua in [
        KCM_OLD,
        "kubectl/v1.37.0",
        "my-operator/v9.1.0",
        "kubelet/vX",
    ] {
        let d = decide(&s, ua, "GET", "/api/v1/pods");
        assert_eq!((backend(&s, &d), d.skew), ("v1-35".into(), None), "{ua}");
    }
}

#[test]
fn a_newer_components_pinned_write_to_an_older_backend_is_refused() {
    let s = steering(TABLE);
    let d = decide(&s, KCM_NEW, "PUT", "/api/v1/namespaces/b/configmaps/x");
    assert_eq!(d.skew.map(|x| x.step), Some(SkewStep::WriteRefused));
    assert!(SkewStep::WriteRefused.refuses());
    // Where its pin is new enough, it writes.
    let d = decide(&s, KCM_NEW, "PUT", "/api/v1/namespaces/team-a/configmaps/x");
    assert_eq!((backend(&s, &d), d.skew), ("v1-36".into(), None));
    // A kubelet newer than the write's backend: the same.
    let d = decide(&s, "kubelet/v1.36.0", "PATCH", "/api/v1/nodes/n/status");
    assert_eq!(d.skew.map(|x| x.step), Some(SkewStep::WriteRefused));
}

#[test]
fn a_newer_leader_does_not_lead_while_writes_go_to_an_older_backend() {
    let s = steering(TABLE);
    for method in ["PUT", "PATCH"] {
        let d = decide(&s, KCM_NEW, method, LEASE);
        let step = d.skew.map(|x| x.step);
        assert_eq!(
            step,
            Some(SkewStep::LeadershipHeld {
                rule: Rule::WriteDefault,
                backend: BackendId::new(0)
            }),
            "{method}"
        );
    }
    let create = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases";
    assert!(
        decide(&s, KCM_NEW, "POST", create)
            .skew
            .unwrap()
            .step
            .refuses()
    );
    // Reading the Lease is not leading: it is raised.
    let d = decide(&s, KCM_NEW, "GET", LEASE);
    assert_eq!(d.skew.map(|x| x.step), Some(SkewStep::Raised));
    // A kubelet's node Lease is no leader election.
    let node_lease = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n";
    let d = decide(&s, "kubelet/v1.36.0", "PUT", node_lease);
    assert_eq!(d.skew.map(|x| x.step), Some(SkewStep::WriteRefused));
    // The old leader leads on.
    assert_eq!(decide(&s, KCM_OLD, "PUT", LEASE).skew, None);
    // Once every write goes to v1.36 or newer, the new one may lead: a pin of everything hides
    // the default after it.
    let moved = TABLE.replace(
        "    - {name: team-a, namespaces: [team-a], backend: v1-36}\n",
        "    - {name: team-a, namespaces: [team-a], backend: v1-36}\n    - {name: everything, backend: v1-36}\n",
    );
    let s = steering(&moved);
    let d = decide(&s, KCM_NEW, "PUT", LEASE);
    assert_eq!((backend(&s, &d), d.skew), ("v1-36".into(), None));
    // A pin that still writes through v1.35 holds it back, wherever it stands in the list.
    let held = moved.replace(
        "{name: team-a, namespaces: [team-a], backend: v1-36}",
        "{name: team-a, namespaces: [team-a], backend: v1-35}",
    );
    let d = decide(&steering(&held), KCM_NEW, "PUT", LEASE);
    assert!(matches!(
        d.skew.map(|x| x.step),
        Some(SkewStep::LeadershipHeld {
            rule: Rule::Pin(0),
            ..
        })
    ));
}

#[test]
fn a_pins_move_at_flip_at_frees_the_leader_when_it_comes() {
    let flip = "2026-12-01T10:00:00Z";
    let text = TABLE.replace(
        "    - {name: team-a, namespaces: [team-a], backend: v1-36}\n",
        &format!("    - {{name: everything, backend: v1-36, from: v1-35, flipAt: {flip}}}\n"),
    );
    let s = steering(&text);
    let at = humantime::parse_rfc3339(flip).unwrap();
    let lease = |now: SystemTime| {
        let info = classify("PUT", LEASE, None);
        let req = SteerRequest {
            info: &info,
            user: "",
            groups: &[],
            client: Client::from_user_agent(Some(KCM_NEW)),
        };
        s.decide(&req, now, &Quiet).skew.map(|x| x.step.refuses())
    };
    assert_eq!(
        lease(at - Duration::from_secs(1)),
        Some(true),
        "before flipAt"
    );
    assert_eq!(lease(at + Duration::from_secs(60)), None, "after its fence");
}

#[test]
fn the_table_may_allow_an_older_apiserver_in_so_many_words() {
    let text = format!("{TABLE}skewPolicy:\n  allowOlderApiserver: [kubelet]\n");
    let s = steering(&text);
    let d = decide(&s, "kubelet/v1.36.0", "PATCH", "/api/v1/nodes/n/status");
    assert_eq!(
        (backend(&s, &d), d.skew.map(|x| x.step)),
        ("v1-35".into(), Some(SkewStep::Allowed))
    );
    let d = decide(&s, KCM_NEW, "GET", "/api/v1/pods");
    assert_eq!(
        d.skew.map(|x| x.step),
        Some(SkewStep::Raised),
        "only the kubelet"
    );
    // A controller-manager the table allows writes through v1.35 as the pins say: its lead is
    // not held back either.
    let text = format!("{TABLE}skewPolicy:\n  allowOlderApiserver: [kube-controller-manager]\n");
    let s = steering(&text);
    let d = decide(&s, KCM_NEW, "PUT", LEASE);
    assert_eq!(
        (backend(&s, &d), d.skew.map(|x| x.step)),
        ("v1-35".into(), Some(SkewStep::Allowed))
    );
}

#[test]
fn a_component_newer_than_every_backend_is_refused_and_unversioned_backends_are_not_judged() {
    let s = steering(TABLE);
    let d = decide(&s, "kube-scheduler/v1.38.0", "GET", "/api/v1/pods");
    assert_eq!(d.skew.map(|x| x.step), Some(SkewStep::NoBackend));
    let unversioned = TABLE
        .replace(", version: v1.35", "")
        .replace(", version: v1.36", "")
        .replace(", version: v1.37", "");
    let s = steering(&unversioned);
    assert_eq!(
        decide(&s, "kube-scheduler/v1.38.0", "GET", "/api/v1/pods").skew,
        None
    );
}
