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
    skew_policy(c);
}

/// What the version-skew policy costs a component's request: a kubelet's read (as old as the
/// backend the rules choose: the policy looks, and keeps the decision) and a newer
/// controller-manager's read (raised), on the 100-rule table without and with backend versions.
fn skew_policy(c: &mut Criterion) {
    let mut group = c.benchmark_group("skew-policy");
    let text = table(100);
    let versioned = text
        .replace(
            "{name: old, endpoints",
            "{name: old, version: v1.29, endpoints",
        )
        .replace(
            "{name: new, endpoints",
            "{name: new, version: v1.30, endpoints",
        );
    for (tables, text) in [("unversioned", &text), ("versioned", &versioned)] {
        let steering = Steering::new(Arc::new(
            parse_route_table(Path::new("bench.yaml"), text).expect("valid"),
        ));
        for (label, ua) in [
            (
                "kubelet-read",
                "kubelet/v1.29.4 (linux/amd64) kubernetes/abc1234",
            ),
            (
                "newer-kcm-read",
                "kube-controller-manager/v1.30.2 (linux/amd64) kubernetes/abc",
            ),
        ] {
            group.bench_function(BenchmarkId::new(label, tables), |b| {
                b.iter(|| {
                    let info = classify(
                        black_box("GET"),
                        black_box("/api/v1/namespaces/web/pods"),
                        None,
                    );
                    let req = SteerRequest {
                        info: &info,
                        user: black_box("system:node:n1"),
                        groups: &[],
                        client: Client::from_user_agent(black_box(Some(ua))),
                    };
                    black_box(steering.decide(&req, SystemTime::UNIX_EPOCH, &Quiet))
                })
            });
        }
    }
    group.finish();
}

/// The routing identity of a bearer-token client (identity/token.rs): a bound ServiceAccount token
/// of the size kube-apiserver issues (about 1 KiB, RS256), read on each request when some rule
/// looks at users or groups.
fn token(c: &mut Criterion) {
    use base64::Engine;
    let b64 = |v: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
    let claims = r#"{"aud":["https://kubernetes.default.svc.cluster.local"],"exp":1795000000,"iat":1763464000,"iss":"https://kubernetes.default.svc.cluster.local","jti":"8c9d6a4e-6a0f-4c1e-9f55-3d1f0a7b2c11","kubernetes.io":{"namespace":"kube-system","node":{"name":"worker-17","uid":"2f0c9b5e-0d6e-4b7a-a2b1-7f3c5d9e8a10"},"pod":{"name":"replicaset-controller-7c9f5d8b6-x2k4q","uid":"b3e1f2a4-5c6d-4e7f-8a9b-0c1d2e3f4a5b"},"serviceaccount":{"name":"replicaset-controller","uid":"c4d5e6f7-a8b9-4c0d-9e1f-2a3b4c5d6e7f"},"warnafter":1763467607},"nbf":1763464000,"sub":"system:serviceaccount:kube-system:replicaset-controller"}"#;
    let header = format!(
        "Bearer {}.{}.{}",
        b64(br#"{"alg":"RS256","kid":"Zb3dQ2m3yYc7t0Y8JrJ6wq2aG9zq1hX1n8R3u4v5w6A"}"#),
        b64(claims.as_bytes()),
        b64(&[7u8; 256])
    );
    let (read, cached) = (
        skewgate::identity::read_token_identity,
        skewgate::identity::token_identity,
    );
    c.bench_function("token-identity/read", |b| {
        b.iter(|| black_box(read(black_box(header.as_bytes()))))
    });
    c.bench_function("token-identity/cached", |b| {
        b.iter(|| black_box(cached(black_box(header.as_bytes()))))
    });
}

criterion_group!(benches, bench, token);
criterion_main!(benches);
