//! Decisions for classified requests against a route table, at a controlled time.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::*;
use crate::classify::{Client, RequestInfo, classify};
use crate::config::{Percent, Schedule, parse_route_table};

const TABLE: &str = r#"
apiVersion: skewgate.io/v1alpha1
kind: RouteTable
backends:
  - {name: old, endpoints: ["http://127.0.0.1:1"]}
  - {name: new, endpoints: ["http://127.0.0.1:2"]}
writes:
  default: old
  pins:
    - name: team-a
      namespaces: [team-a, "/^canary-/", "!canary-hold"]
      backend: new
    - name: apps-everywhere
      resources: ["*.apps"]
      backend: new
    - name: leases
      namespaces: [kube-node-lease]
      resources: [leases.coordination.k8s.io]
      backend: old
      reads: rollout
reads:
  default: old
  rollouts:
    - name: kubelets
      match:
        clients: ["kubelet>=1.30"]
        resources: [pods, nodes, leases.coordination.k8s.io]
      to: new
      stickyBy: user
      percent: 100
    - name: old-kubectl
      match:
        clients: ["kubectl<1.29"]
      to: new
      percent: 0
    - name: admins
      match:
        groups: ["system:masters"]
        users: ["!break-glass"]
        verbs: [get, list]
      to: new
      percent: 100
    - name: half
      match:
        namespaces: ["!kube-system", "!kube-public"]
      to: new
      stickyBy: namespace
      percent: 50
"#;

fn steering(text: &str) -> Steering {
    let table = parse_route_table(Path::new("t.yaml"), text).expect("valid table");
    Steering::new(Arc::new(table))
}

struct Req {
    method: &'static str,
    url: String,
    user: &'static str,
    groups: Vec<&'static str>,
    ua: Option<&'static str>,
}

fn req(method: &'static str, url: impl Into<String>) -> Req {
    Req {
        method,
        url: url.into(),
        user: "",
        groups: vec![],
        ua: None,
    }
}

impl Req {
    fn user(mut self, u: &'static str) -> Req {
        self.user = u;
        self
    }
    fn group(mut self, g: &'static str) -> Req {
        self.groups.push(g);
        self
    }
    fn ua(mut self, ua: &'static str) -> Req {
        self.ua = Some(ua);
        self
    }
    fn decide_at(&self, s: &Steering, now: SystemTime, live: &impl LiveState) -> (String, String) {
        let (path, query) = match self.url.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (self.url.as_str(), None),
        };
        let info: RequestInfo<'_> = classify(self.method, path, query);
        let r = SteerRequest {
            info: &info,
            user: self.user,
            groups: &self.groups,
            client: Client::from_user_agent(self.ua),
        };
        let d = s.decide(&r, now, live);
        let t = s.table();
        (
            d.rule_name(t).to_owned(),
            t.backend_name(d.backend).to_owned(),
        )
    }
    fn decide(&self, s: &Steering) -> (String, String) {
        self.decide_at(s, SystemTime::UNIX_EPOCH, &Quiet)
    }
}

fn pair(rule: &str, backend: &str) -> (String, String) {
    (rule.to_owned(), backend.to_owned())
}

#[test]
fn writes_go_to_the_first_matching_pin_else_the_default() {
    let s = steering(TABLE);
    let cases = [
        (
            req("PUT", "/api/v1/namespaces/team-a/configmaps/x"),
            pair("team-a", "new"),
        ),
        (
            req("PATCH", "/api/v1/namespaces/canary-7/pods/p"),
            pair("team-a", "new"),
        ),
        (
            req("PATCH", "/api/v1/namespaces/canary-hold/pods/p"),
            pair("writes.default", "old"),
        ),
        (
            req("PUT", "/api/v1/namespaces/team-b/configmaps/x"),
            pair("writes.default", "old"),
        ),
        (
            req("PUT", "/apis/apps/v1/namespaces/team-b/deployments/d"),
            pair("apps-everywhere", "new"),
        ),
        (
            req("PUT", "/apis/apps/v1/namespaces/team-b/deployments/d/scale"),
            pair("apps-everywhere", "new"),
        ),
        // The namespace object itself is in its own namespace, as the apiserver sees it.
        (
            req("PUT", "/api/v1/namespaces/team-a"),
            pair("team-a", "new"),
        ),
        // Cluster-scoped requests never match a namespaces selector.
        (
            req("PATCH", "/api/v1/nodes/n1"),
            pair("writes.default", "old"),
        ),
        (
            req(
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1",
            ),
            pair("leases", "old"),
        ),
    ];
    for (r, want) in cases {
        assert_eq!(r.decide(&s), want, "{} {}", r.method, r.url);
    }
}

#[test]
fn verbs_outside_writes_verbs_are_reads() {
    let s = steering(TABLE);
    // create is not in the default writes.verbs, so a create is a read: it follows the pin.
    let r = req("POST", "/api/v1/namespaces/team-a/configmaps");
    assert_eq!(r.decide(&s), pair("team-a", "new"));
    let s = steering(&TABLE.replace(
        "  default: old\n  pins:",
        "  verbs: [create]\n  default: old\n  pins:",
    ));
    let info = classify("POST", "/api/v1/namespaces/team-b/configmaps", None);
    let d = s.decide(
        &SteerRequest {
            info: &info,
            user: "",
            groups: &[],
            client: Client::default(),
        },
        SystemTime::UNIX_EPOCH,
        &Quiet,
    );
    assert_eq!(d.class, Class::Write);
    let info = classify("PUT", "/api/v1/namespaces/team-b/configmaps/x", None);
    let d = s.decide(
        &SteerRequest {
            info: &info,
            user: "",
            groups: &[],
            client: Client::default(),
        },
        SystemTime::UNIX_EPOCH,
        &Quiet,
    );
    assert_eq!(d.class, Class::Read);
}

#[test]
fn reads_follow_pins_unless_the_pin_says_rollout() {
    let s = steering(TABLE);
    let kubelet = "kubelet/v1.30.1 (linux/amd64) kubernetes/abc";
    let cases = [
        (
            req("GET", "/api/v1/namespaces/team-a/pods/p").ua(kubelet),
            pair("team-a", "new"),
        ),
        (
            req("GET", "/api/v1/namespaces/team-a/pods?watch=1"),
            pair("team-a", "new"),
        ),
        (
            req("GET", "/apis/apps/v1/deployments"),
            pair("apps-everywhere", "new"),
        ),
        // reads: rollout lets the rollouts decide the pin's reads.
        (
            req(
                "GET",
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1",
            )
            .ua(kubelet),
            pair("kubelets", "new"),
        ),
        (
            req("GET", "/api/v1/nodes/n1")
                .ua(kubelet)
                .user("system:node:n1"),
            pair("kubelets", "new"),
        ),
        (
            req("GET", "/api/v1/nodes/n1").ua("kubelet/v1.29.9"),
            pair("reads.default", "old"),
        ),
        (
            req("GET", "/api/v1/pods").ua("kubectl/v1.28.0"),
            pair("old-kubectl", "old"),
        ),
        (
            req("GET", "/api/v1/namespaces")
                .group("system:masters")
                .user("alice"),
            pair("admins", "new"),
        ),
        (
            req("GET", "/api/v1/namespaces")
                .group("system:masters")
                .user("break-glass"),
            pair("reads.default", "old"),
        ),
        (
            req("GET", "/api/v1/namespaces?watch=1").group("system:masters"),
            pair("reads.default", "old"),
        ),
        (
            req("GET", "/api/v1/namespaces/kube-system/pods"),
            pair("reads.default", "old"),
        ),
        (req("GET", "/version"), pair("reads.default", "old")),
    ];
    for (r, want) in cases {
        assert_eq!(r.decide(&s), want, "{} {} {:?}", r.method, r.url, r.ua);
    }
}

#[test]
fn a_rollout_is_sticky_and_raising_it_only_moves_keys_forward() {
    let keys: Vec<String> = (0..2000).map(|i| format!("ns-{i}")).collect();
    let percents = [0.0, 0.01, 1.0, 5.0, 10.0, 25.5, 50.0, 75.0, 99.99, 100.0];
    let mut previous: Option<Vec<bool>> = None;
    for p in percents {
        let s = steering(&TABLE.replace("percent: 50", &format!("percent: {p}")));
        let sides: Vec<bool> = keys
            .iter()
            .map(|ns| {
                let r = req("GET", format!("/api/v1/namespaces/{ns}/configmaps"));
                let first = r.decide(&s);
                // The same key always lands on the same side.
                assert_eq!(r.decide(&s), first);
                assert_eq!(
                    req("GET", format!("/api/v1/namespaces/{ns}/secrets/x")).decide(&s),
                    first
                );
                first.1 == "new"
            })
            .collect();
        let share = sides.iter().filter(|x| **x).count() as f64 / keys.len() as f64 * 100.0;
        assert!((share - p).abs() <= 3.5, "{p}%: {share}% of keys moved");
        if let Some(prev) = &previous {
            for (i, (was, is)) in prev.iter().zip(&sides).enumerate() {
                assert!(
                    !was || *is,
                    "{p}%: key {} moved back from new to old",
                    keys[i]
                );
            }
        }
        previous = Some(sides);
    }
    let last = previous.unwrap_or_default();
    assert!(last.iter().all(|x| *x), "100 % sends every key");
}

#[test]
fn different_rollouts_hash_the_same_key_differently() {
    let a = sticky::salt("a");
    let b = sticky::salt("b");
    let differ = (0..1000)
        .filter(|i| {
            let k = format!("k{i}");
            (sticky::bucket_of_key(a, &k) < 5000) != (sticky::bucket_of_key(b, &k) < 5000)
        })
        .count();
    assert!(differ > 300, "salts decorrelate rollouts: {differ}");
}

#[test]
fn a_schedule_decides_by_the_clock_and_an_abort_holds_at_zero() {
    let text = TABLE.replace(
        "      stickyBy: user\n      percent: 100\n",
        "      stickyBy: user\n      startAt: 2026-11-22T10:00:00Z\n      steps: [{percent: 0, hold: 10m}, {percent: 100}]\n      abort: {errorRatio: 0.1, window: 1m, minRequests: 10}\n",
    );
    let s = steering(&text);
    let start = humantime::parse_rfc3339("2026-11-22T10:00:00Z").unwrap();
    let r = req("GET", "/api/v1/nodes/n1")
        .ua("kubelet/v1.30.0")
        .user("system:node:n1");
    assert_eq!(
        r.decide_at(&s, start - Duration::from_secs(1), &Quiet),
        pair("kubelets", "old")
    );
    assert_eq!(
        r.decide_at(&s, start + Duration::from_secs(599), &Quiet),
        pair("kubelets", "old")
    );
    assert_eq!(
        r.decide_at(&s, start + Duration::from_secs(600), &Quiet),
        pair("kubelets", "new")
    );

    struct Aborted;
    impl LiveState for Aborted {
        fn rollout_aborted(&self, rollout: usize) -> bool {
            rollout == 0
        }
    }
    assert_eq!(
        r.decide_at(&s, start + Duration::from_secs(600), &Aborted),
        pair("kubelets", "old")
    );
    // A rollout without `abort` cannot be aborted by live state.
    let half = req("GET", "/api/v1/namespaces/x/pods");
    struct AllAborted;
    impl LiveState for AllAborted {
        fn rollout_aborted(&self, _: usize) -> bool {
            true
        }
    }
    assert_eq!(
        half.decide_at(&s, start, &AllAborted),
        half.decide_at(&s, start, &Quiet)
    );
    assert!(matches!(
        s.table().reads.rollouts[0].schedule,
        Schedule::Steps { .. }
    ));
}

#[test]
fn the_index_keeps_file_order_among_many_pins() {
    let mut text = String::from(
        "apiVersion: skewgate.io/v1alpha1\nkind: RouteTable\nbackends:\n  - {name: old, endpoints: [\"http://a\"]}\n  - {name: new, endpoints: [\"http://b\"]}\nwrites:\n  default: old\n  pins:\n",
    );
    // A regex pin early, plain pins after it, and a later plain pin for a name the regex also covers.
    text.push_str("    - {name: early-regex, namespaces: [\"/^ns-1$/\"], backend: old}\n");
    for i in 0..500 {
        text.push_str(&format!(
            "    - {{name: p{i}, namespaces: [ns-{i}], backend: new}}\n"
        ));
    }
    text.push_str(
        "    - {name: catch-all, namespaces: [\"!ns-0\"], backend: old}\nreads:\n  default: old\n",
    );
    let s = steering(&text);
    assert_eq!(
        req("PUT", "/api/v1/namespaces/ns-1/pods/x").decide(&s),
        pair("early-regex", "old")
    );
    assert_eq!(
        req("PUT", "/api/v1/namespaces/ns-2/pods/x").decide(&s),
        pair("p2", "new")
    );
    assert_eq!(
        req("PUT", "/api/v1/namespaces/ns-499/pods/x").decide(&s),
        pair("p499", "new")
    );
    assert_eq!(
        req("PUT", "/api/v1/namespaces/other/pods/x").decide(&s),
        pair("catch-all", "old")
    );
    assert_eq!(
        req("PUT", "/api/v1/namespaces/ns-0/pods/x").decide(&s),
        pair("p0", "new")
    );
    assert_eq!(
        req("PUT", "/api/v1/nodes/x").decide(&s),
        pair("writes.default", "old")
    );
    assert_eq!(Percent(1025).to_string(), "10.25%");
}

#[test]
fn the_index_finds_what_a_linear_scan_finds() {
    let s = steering(TABLE);
    let t = s.table().clone();
    let namespaces = [
        "team-a",
        "canary-1",
        "canary-hold",
        "kube-system",
        "kube-node-lease",
        "x",
        "",
    ];
    let paths = [
        "/api/v1/namespaces/{ns}/pods/p",
        "/api/v1/namespaces/{ns}/pods",
        "/apis/apps/v1/namespaces/{ns}/deployments/d",
        "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/l",
        "/api/v1/nodes/n",
        "/healthz",
    ];
    let uas = [
        None,
        Some("kubelet/v1.30.0"),
        Some("kubelet/v1.29.0"),
        Some("kubectl/v1.27.1"),
    ];
    let groups: [&[&str]; 2] = [&[], &["system:masters"]];
    for ns in namespaces {
        for p in paths {
            let path = if ns.is_empty() {
                p.replace("/namespaces/{ns}", "")
            } else {
                p.replace("{ns}", ns)
            };
            for method in ["GET", "PUT", "PATCH", "POST"] {
                for ua in uas {
                    for g in groups {
                        let info = classify(method, &path, None);
                        let r = SteerRequest {
                            info: &info,
                            user: "u",
                            groups: g,
                            client: Client::from_user_agent(ua),
                        };
                        let d = s.decide(&r, SystemTime::UNIX_EPOCH, &Quiet);
                        let pins = &t.writes.pins;
                        let first_pin = |follow_only: bool| {
                            (0..pins.len()).find(|&i| {
                                (!follow_only || pins[i].reads == crate::config::PinReads::Follow)
                                    && request::selectors_match(&pins[i].selectors, &r)
                            })
                        };
                        let want = if t.writes.verbs.contains(info.verb) {
                            first_pin(false).map_or(Rule::WriteDefault, Rule::Pin)
                        } else if let Some(i) = first_pin(true) {
                            Rule::Pin(i)
                        } else {
                            let rollouts = &t.reads.rollouts;
                            (0..rollouts.len())
                                .find(|&i| request::selectors_match(&rollouts[i].selectors, &r))
                                .map_or(Rule::ReadDefault, Rule::Rollout)
                        };
                        assert_eq!(d.rule, want, "{method} {path} {ua:?} {g:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn a_pin_with_flip_at_moves_at_its_time_with_a_fence() {
    let text = TABLE.replace(
        "      namespaces: [team-a, \"/^canary-/\", \"!canary-hold\"]\n      backend: new\n",
        "      namespaces: [team-a, \"/^canary-/\", \"!canary-hold\"]\n      backend: new\n      flipAt: 2030-01-01T00:00:00Z\n",
    );
    let s = steering(&text);
    let at = humantime::parse_rfc3339("2030-01-01T00:00:00Z").unwrap();
    struct Previous(Option<usize>);
    impl LiveState for Previous {
        fn rollout_aborted(&self, _: usize) -> bool {
            false
        }
        fn pin_previous(&self, _: usize) -> Option<BackendId> {
            self.0.map(BackendId::new)
        }
    }
    let write = req("PUT", "/api/v1/namespaces/team-a/configmaps/c");
    let read = req("GET", "/api/v1/namespaces/team-a/configmaps/c");
    let old = Previous(Some(0));
    let decide = |r: &Req, t: SystemTime, live: &Previous| {
        let (path, query) = (r.url.as_str(), None);
        let info = classify(r.method, path, query);
        let sr = SteerRequest {
            info: &info,
            user: "",
            groups: &[],
            client: Client::default(),
        };
        let d = s.decide(&sr, t, live);
        (s.table().backend_name(d.backend).to_owned(), d.reason)
    };
    let second = Duration::from_secs(1);
    assert_eq!(
        decide(&write, at - second, &old),
        ("old".into(), Reason::BeforeFlip)
    );
    assert_eq!(
        decide(&read, at - second, &old).0,
        "old",
        "reads follow the writes"
    );
    let fence_end = at + Duration::from_secs(10);
    assert_eq!(
        decide(&write, at, &old),
        ("new".into(), Reason::Fenced { until: fence_end })
    );
    assert_eq!(
        decide(&write, fence_end - second, &old).1,
        Reason::Fenced { until: fence_end }
    );
    assert_eq!(
        decide(&write, fence_end, &old),
        ("new".into(), Reason::PinnedWrite)
    );
    assert_eq!(decide(&read, at, &old).0, "new");
    // No previous backend known (a replica started after the change): hold until the fence ends.
    let unknown = Previous(None);
    assert_eq!(
        decide(&write, at - second * 100, &unknown).1,
        Reason::Fenced { until: fence_end }
    );
    // The pin did not move: flipAt changes nothing.
    let same = Previous(Some(1));
    assert_eq!(
        decide(&write, at, &same),
        ("new".into(), Reason::PinnedWrite)
    );
    // `from` in the file says where it moves from, with no history needed.
    let s2 = steering(&text.replace("      flipAt: 2030", "      from: old\n      flipAt: 2030"));
    let info = classify("PUT", "/api/v1/namespaces/team-a/configmaps/c", None);
    let sr = SteerRequest {
        info: &info,
        user: "",
        groups: &[],
        client: Client::default(),
    };
    let d = s2.decide(&sr, at - second, &Quiet);
    assert_eq!(
        (s2.table().backend_name(d.backend), d.reason),
        ("old", Reason::BeforeFlip)
    );
}

#[test]
fn a_guard_with_a_version_bound_takes_a_client_of_unknown_version_unless_told_to_pass_it() {
    let table = |unknown: &str| {
        TABLE.to_owned()
            + &format!(
                "guards:\n  - name: old\n    match: {{resources: [pods], clients: [\"<1.36\"]}}\n    unknownVersion: {unknown}\n"
            )
    };
    let guard_of = |s: &Steering, ua: Option<&'static str>| {
        let info = classify("PUT", "/api/v1/namespaces/a/pods/p", None);
        let r = SteerRequest {
            info: &info,
            user: "",
            groups: &[],
            client: Client::from_user_agent(ua),
        };
        s.guard(&r)
    };
    let guarded = steering(&table("guard"));
    assert_eq!(
        guard_of(&guarded, Some("kubectl/v1.35.0 (linux/amd64)")),
        Some(0)
    );
    assert_eq!(
        guard_of(&guarded, Some("kubectl/v1.36.3 (linux/amd64)")),
        None
    );
    // No User-Agent, or one without a version: judged as the oldest (before, never guarded).
    assert_eq!(guard_of(&guarded, None), Some(0));
    assert_eq!(guard_of(&guarded, Some("curl")), Some(0));
    let passed = steering(&table("pass"));
    assert_eq!(guard_of(&passed, None), None);
}
