//! classify + steer for one request, with route tables of 10, 100 and 1,000 rules.
//!
//! Run: `cargo bench --bench decide`. The table shape is that of a large upgrade: 80 % of the rules
//! are write pins (most for a single namespace, one in twenty by a regex), 20 % are read rollouts
//! (by client, by resource, and a few by group or negated namespace, which no index can narrow).
//! The requests are a pinned write that matches the last pin, a kubelet read that falls to a rollout,
//! and a read that matches nothing and so visits every rule the index cannot rule out.

use std::fmt::Write;
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use skewgate::classify::{Client, classify};
use skewgate::config::parse_route_table;
use skewgate::steer::{Quiet, SteerRequest, Steering};

fn table(rules: usize) -> String {
    let pins = rules * 4 / 5;
    let rollouts = rules - pins;
    let mut t = String::from(
        "apiVersion: skewgate.io/v1alpha1\nkind: RouteTable\nbackends:\n  - {name: old, endpoints: [\"https://10.0.0.1:6443\"]}\n  - {name: new, endpoints: [\"https://10.0.0.2:6443\"]}\nwrites:\n  default: old\n  pins:\n",
    );
    for i in 0..pins {
        if i % 20 == 19 {
            let _ = writeln!(
                t,
                "    - {{name: p{i}, namespaces: [\"/^batch-{i}-/\"], backend: new}}"
            );
        } else {
            let _ = writeln!(
                t,
                "    - {{name: p{i}, namespaces: [team-{i}], resources: [pods, configmaps, deployments.apps], backend: new}}"
            );
        }
    }
    t.push_str("reads:\n  default: old\n  rollouts:\n");
    for i in 0..rollouts {
        let m = match i % 10 {
            9 => "{groups: [\"group-x\"], namespaces: [\"!kube-system\"]}".to_owned(),
            0..=3 => format!("{{clients: [\"controller-{i}>=1.29\"]}}"),
            _ => format!("{{resources: [\"crd{i}.example.com\"], verbs: [get, list, watch]}}"),
        };
        let _ = writeln!(
            t,
            "    - {{name: r{i}, match: {m}, to: new, stickyBy: user, percent: 10}}"
        );
    }
    let _ = writeln!(
        t,
        "    - {{name: kubelets, match: {{clients: [kubelet], resources: [pods, nodes]}}, to: new, stickyBy: user, percent: 50}}"
    );
    t
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("classify+steer");
    for rules in [10, 100, 1000] {
        let text = table(rules);
        let steering = Steering::new(Arc::new(
            parse_route_table(Path::new("bench.yaml"), &text).expect("valid"),
        ));
        let last_pin = rules * 4 / 5 - 2;
        let write_path = format!("/api/v1/namespaces/team-{last_pin}/configmaps/c");
        let requests: [(&str, &str, &str, Option<&str>, &str); 3] = [
            ("pinned-write", "PUT", write_path.as_str(), None, ""),
            (
                "kubelet-read",
                "GET",
                "/api/v1/namespaces/web/pods",
                Some("kubelet/v1.29.4 (linux/amd64) kubernetes/abc1234"),
                "system:node:n1",
            ),
            (
                "read-no-match",
                "GET",
                "/api/v1/namespaces/other/secrets/s",
                Some("kubectl/v1.30.0"),
                "alice",
            ),
        ];
        for (label, method, path, ua, user) in requests {
            group.bench_with_input(BenchmarkId::new(label, rules), &rules, |b, _| {
                b.iter(|| {
                    let info = classify(
                        black_box(method),
                        black_box(path),
                        black_box(Some("resourceVersion=0")),
                    );
                    let req = SteerRequest {
                        info: &info,
                        user: black_box(user),
                        groups: &[],
                        client: Client::from_user_agent(black_box(ua)),
                    };
                    black_box(steering.decide(&req, SystemTime::UNIX_EPOCH, &Quiet))
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
