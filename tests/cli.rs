//! The `check` and `explain` commands, run as the real binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn skewgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_skewgate"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn temp_file(name: &str, body: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("skewgate-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, body).expect("write");
    path
}

#[test]
fn check_accepts_the_shipped_routes() {
    let out = skewgate(&["check", "routes/example.yaml", "routes"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("routes/example.yaml: ok"));
}

#[test]
fn check_prints_every_error_with_file_line_and_field_and_fails() {
    let example =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("routes/example.yaml"))
            .expect("example");
    let broken = example
        .replace("      backend: v1-30\n", "      backend: v1-31\n")
        .replace("      percent: 25\n", "      percent: 250\n");
    let file = temp_file("broken.yaml", &broken);
    let out = skewgate(&[
        "check",
        file.to_str().expect("utf-8 path"),
        "routes/example.yaml",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    let f = file.display();
    assert!(lines[0].starts_with(&format!("{f}:")), "{err}");
    assert!(
        lines[0].contains(": writes.pins[0].backend: unknown backend \"v1-31\""),
        "{err}"
    );
    assert!(
        lines[1].contains(": reads.rollouts[1].percent: 250 is not a percent"),
        "{err}"
    );
    // The line number is the line of the bad value.
    let line_no: usize = lines[0]
        .split(':')
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("line");
    assert!(
        broken
            .lines()
            .nth(line_no - 1)
            .is_some_and(|l| l.contains("v1-31")),
        "{err}"
    );
    // The good file is still reported ok.
    assert!(text(&out.stdout).contains("routes/example.yaml: ok"));
}

#[test]
fn explain_prints_the_request_info_the_rule_and_the_backend() {
    let out = skewgate(&[
        "explain",
        "--routes",
        "routes/example.yaml",
        "--user-agent",
        "kubectl/v1.28.0 (linux/amd64) kubernetes/abc",
        "PATCH",
        "https://10.0.0.11:6443/apis/apps/v1/namespaces/canary-web/deployments/web/scale",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    for want in [
        "verb:         patch",
        "group:        apps",
        "resource:     deployments",
        "subresource:  scale",
        "namespace:    canary-web",
        "name:         web",
        "client:       kubectl 1.28.0",
        "class:        write",
        "rule:         team-a",
        "backend:      v1-30",
    ] {
        assert!(s.contains(want), "missing {want:?} in\n{s}");
    }
}

#[test]
fn explain_json_is_for_scripts() {
    let out = skewgate(&[
        "explain",
        "--routes",
        "routes/example.yaml",
        "--user",
        "system:node:n1",
        "--group",
        "system:nodes",
        "--user-agent",
        "kubelet/v1.29.4 (linux/amd64) kubernetes/abc1234",
        "--at",
        "2026-11-25T00:00:00Z",
        "-o",
        "json",
        "get",
        "/api/v1/namespaces/team-b/pods?watch=true",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["requestInfo"]["verb"], "watch");
    assert_eq!(v["requestInfo"]["longRunning"], true);
    assert_eq!(v["client"]["name"], "kubelet");
    assert_eq!(v["class"], "read");
    assert_eq!(v["rule"]["kind"], "rollout");
    assert_eq!(v["rule"]["name"], "kubelet-reads");
    assert_eq!(v["rollout"]["percent"], 100.0);
    assert_eq!(v["backend"], "v1-30");
    assert_eq!(v["groups"][0], "system:nodes");
}

#[test]
fn explain_refuses_a_bad_route_file_or_url() {
    let file = temp_file("bad.yaml", "kind: RouteTable\n");
    let out = skewgate(&[
        "explain",
        "--routes",
        file.to_str().expect("utf-8"),
        "GET",
        "/api",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("missing field"),
        "{}",
        text(&out.stderr)
    );
    let out = skewgate(&[
        "explain",
        "--routes",
        "routes/example.yaml",
        "GET",
        "api/v1/pods",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("must be a path starting with /"));
}
