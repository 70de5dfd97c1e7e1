//! The `check` and `explain` commands, run as the real binary.

use std::path::{Path, PathBuf};

#[path = "common/binary.rs"]
mod binary;

use binary::{skewgate, text};

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
fn check_takes_the_route_file_as_serve_spells_it_and_counts_in_words() {
    let out = skewgate(&["check", "--routes", "routes/demo.yaml"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.contains("routes/demo.yaml: ok (2 backends, 1 pin, 1 rollout, 2 guards)"),
        "{said}"
    );
    let none = skewgate(&["check"]);
    assert_eq!(none.status.code(), Some(2), "a file is required");
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
    let f = file.display();
    let headers: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(headers.len(), 2, "{err}");
    assert!(
        headers[0].contains("writes.pins[0].backend: unknown backend \"v1-31\""),
        "{err}"
    );
    assert!(
        headers[1].contains("reads.rollouts[1].percent: 250 is not a percent"),
        "{err}"
    );
    // The place is the line of the bad value, shown under it.
    let place = err
        .lines()
        .find_map(|l| l.strip_prefix(&format!("  --> {f}:")))
        .expect("a place");
    let line_no: usize = place
        .split(':')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("line");
    assert!(
        broken
            .lines()
            .nth(line_no - 1)
            .is_some_and(|l| l.contains("v1-31")),
        "{err}"
    );
    assert!(
        err.contains(&format!("{line_no} |       backend: v1-31")),
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
        text(&out.stderr).contains("needs `apiVersion`"),
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

/// Runs `check` on `file`: it exits with `code` and its stderr holds each of `expected`.
fn check_says(file: &str, code: i32, expected: &[&str]) -> String {
    let out = skewgate(&["check", file]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{err}");
    for e in expected {
        assert!(err.contains(e), "{e}\n---\n{err}");
    }
    err
}

/// `check` on a file with six structural mistakes: all six, each with file:line:col, the field
/// path, what to do (a "did you mean" for misspelt fields), and the line with a caret.
#[test]
fn check_reports_every_structural_mistake_with_its_line_and_a_caret() {
    let err = check_says(
        "tests/fixtures/many-mistakes.yaml",
        1,
        &[
            "error: backends[1].endpoint: unknown field `endpoint`: did you mean `endpoints`?\n  --> tests/fixtures/many-mistakes.yaml:8:5\n  |\n8 |     endpoint: [https://10.0.0.21:6443]\n  |     ^^^^^^^^\n",
            "error: backends[1].endpoints: backends[1] needs `endpoints`",
            "error: writes.pins[0].namespaces: namespaces must be a list, not a string; e.g. `namespaces: [team-a]`\n  --> tests/fixtures/many-mistakes.yaml:13:19",
            "error: writes.pins[0].flip_at: unknown field `flip_at`: did you mean `flipAt`?",
            "error: reads.rollouts[0].percent: percent is a number: write 50 without quotes\n  --> tests/fixtures/many-mistakes.yaml:21:16\n   |\n21 |       percent: \"50\"\n   |                ^^^^\n",
            "error: reads.rollouts[0].stickyby: unknown field `stickyby`: did you mean `stickyBy`?",
            "many-mistakes.yaml: 6 errors",
        ],
    );
    // The project's words, never the parser's.
    for internal in [
        "expected sequence",
        "invalid type",
        "serde",
        "DuplicateKeyPolicy",
    ] {
        assert!(!err.contains(internal), "{internal}: {err}");
    }
}

/// Unknown fields and mistaken values in one file: every one in one run, in file order, at the
/// places in the file as written, and no follow-on error.
#[test]
fn check_reports_unknown_fields_and_mistaken_values_in_one_run() {
    let err = check_says(
        "tests/fixtures/shape-and-values.yaml",
        1,
        &[
            "error: backends[0].weight: unknown field `weight`",
            "error: writes.fence: must be at least 3s",
            "error: writes.pins[0].backend: unknown backend \"v1-31\": did you mean v1-30?\n  --> tests/fixtures/shape-and-values.yaml:19:16",
            "error: reads.rollouts[0].percent: 150 is not a percent",
            "error: reads.rollouts[0].stickBy: unknown field `stickBy`: did you mean `stickyBy`?",
            "shape-and-values.yaml: 5 errors",
        ],
    );
    assert!(
        !err.contains("the pin's own backend"),
        "a follow-on error: {err}"
    );
    let fence = err.find("writes.fence").unwrap_or_default();
    assert!(
        err.find("backends[0].weight") < Some(fence),
        "file order: {err}"
    );
}

/// `check` on a file of the right shape with mistaken values: every one, resources checked against
/// the kinds Kubernetes ships, backend names with the one meant, a duplicate reported once.
#[test]
fn check_reports_every_mistaken_value_with_the_name_meant() {
    let err = check_says(
        "tests/fixtures/mistaken-values.yaml",
        1,
        &[
            "error: backends[1].name: duplicate backend name \"v1-29\"",
            "resources[0]: Kubernetes has no resource \"deploymnets\" in group apps: did you mean deployments.apps?",
            "resources[1]: Kubernetes has no resource \"pod\" in the core group: did you mean pods?",
            "resources[2]: Kubernetes has no resource \"deployments\" in the core group: did you mean deployments.apps?",
            "writes.pins[0].backend: unknown backend \"v1-31\": did you mean v1-30?",
            "mistaken-values.yaml: 5 errors",
        ],
    );
    assert_eq!(err.matches("duplicate backend name").count(), 1, "{err}");
}

/// Rules that never decide or change nothing load, with warnings.
#[test]
fn check_warns_of_shadowed_and_no_op_rules_and_passes() {
    check_says(
        "tests/fixtures/warnings.yaml",
        0,
        &[
            "warning: reads.rollouts[1].to: to is \"v1-29\", reads.default itself: this rollout changes nothing",
            "warning: reads.rollouts[1]: never decides: rollout \"everything\" before it has no match",
            // (even at 0 %: a rollout is there to be raised)
            "warning: reads.rollouts[0]: reads and writes part: rollout \"everything\" reads from \"v1-30\" every object, and writes.default writes them through \"v1-29\"",
        ],
    );
    let out = skewgate(&["check", "tests/fixtures/warnings.yaml"]);
    assert!(text(&out.stdout).contains("3 warnings"));
}

/// The YAML itself, in the project's words: an empty file, two documents, a key given twice.
#[test]
fn check_explains_yaml_problems_in_its_own_words() {
    for (body, expected) in [
        (
            "",
            "the file is empty; a route table needs apiVersion, kind, backends, writes and reads",
        ),
        (
            "kind: RouteTable\n---\nkind: RouteTable\n",
            "a second YAML document ('---')",
        ),
        (
            "kind: RouteTable\nkind: RouteTable\n",
            "`kind` is given twice in this mapping (first on line 1); keep one",
        ),
    ] {
        let file = temp_file("yaml.yaml", body);
        let out = skewgate(&["check", file.to_str().expect("utf-8")]);
        assert_eq!(out.status.code(), Some(1));
        let err = text(&out.stderr);
        assert!(err.contains(expected), "{expected}\n---\n{err}");
        assert!(!err.contains("unexpected end of input"), "{err}");
    }
}

/// `explain` names the user and groups, every rule considered and why, the sticky key, its bucket
/// and the schedule step in force; `-o yaml` says the same for a script.
#[test]
fn explain_shows_each_rule_considered_the_sticky_key_and_the_step() {
    let args = [
        "explain",
        "--routes",
        "routes/example.yaml",
        "--as",
        "system:node:n1",
        "--as-group",
        "system:nodes",
        "--user-agent",
        "kubelet/v1.30.2 (linux/amd64) kubernetes/abc",
        "--at",
        "2026-11-22T12:00:00Z",
        "GET",
        "/api/v1/namespaces/team-b/pods",
    ];
    let out = skewgate(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    for expected in [
        "  user:         system:node:n1\n",
        "  groups:       system:nodes\n",
        "  pin     team-a                  namespaces does not match\n",
        "  pin     node-leases             reads: rollout, so the rollouts decide its reads\n",
        "  rollout kubelet-reads           matches: decides\n",
        "  rollout new-kubectl             not considered: an earlier rule decided\n",
        "  sticky by:    user \"system:node:n1\"\n",
        "  bucket:       2.33 (goes to v1-30 when under the percent)\n",
        "  in force:     10 %, step 2 of the schedule\n",
    ] {
        assert!(t.contains(expected), "{expected}\n---\n{t}");
    }
    let mut yaml_args = args.to_vec();
    yaml_args.extend(["-o", "yaml"]);
    let out = skewgate(&yaml_args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_saphyr::from_str(&text(&out.stdout)).expect("YAML");
    assert_eq!(v["backend"], "v1-30");
    assert_eq!(v["rollout"]["stickyBy"], "user");
    assert_eq!(v["rollout"]["key"], "system:node:n1");
    assert_eq!(v["rollout"]["step"], 1);
    assert_eq!(v["rules"][2]["name"], "kubelet-reads");
    assert_eq!(v["rules"][2]["matched"], true);
    assert_eq!(v["groups"][0], "system:nodes");
}

/// A create is steered as a read unless writes.verbs names it, and explain says so; a method the
/// apiserver does not serve is refused.
#[test]
fn explain_says_why_a_create_is_steered_as_a_read_and_refuses_unknown_methods() {
    let out = skewgate(&[
        "explain",
        "--routes",
        "routes/example.yaml",
        "POST",
        "/api/v1/namespaces/team-b/configmaps",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(
            "class:        read (create is not in writes.verbs, so it is steered as a read)"
        ),
        "{}",
        text(&out.stdout)
    );
    let out = skewgate(&["explain", "--routes", "routes/example.yaml", "FLY", "/api"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("\"FLY\" is not a method the apiserver serves"),
        "{}",
        text(&out.stderr)
    );
}

/// `--version` names the commit the binary was built from.
#[test]
fn version_names_the_commit() {
    let out = skewgate(&["--version"]);
    assert!(out.status.success());
    let v = text(&out.stdout);
    assert!(
        v.starts_with(&format!("skewgate {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{v}"
    );
}

/// `explain` of a guarded update says how the guard judges it in each direction: through 1.29
/// (older than 1.30) down, and a 1.29 kubectl writing through 1.30 up.
#[test]
fn explain_says_how_the_guard_judges_an_update_in_both_directions() {
    let explain = |ua: &str, namespace: &str| {
        let path = format!("/api/v1/namespaces/{namespace}/configmaps/settings");
        let out = skewgate(&[
            "explain",
            "--routes",
            "routes/demo.yaml",
            "--user-agent",
            ua,
            "PUT",
            &path,
        ]);
        assert!(out.status.success());
        text(&out.stdout)
    };
    let said = explain("kubectl/v1.30.1", "ns-7");
    assert!(
        said.contains("name:         read-elsewhere")
            && said.contains("down:         served by v1-29 (v1.29), older than v1-30 (v1.30)")
            && said.contains(
                "up:           this v1.30 client is as new as v1-29 (v1.29): not checked"
            ),
        "{said}"
    );
    let said = explain("kubectl/v1.29.4", "team-a");
    assert!(
        said.contains("name:         old-kubectl")
            && said.contains("down:         served by v1-30 (v1.30), the newest: nothing to check")
            && said.contains("up:           this v1.29 client is older than v1-30 (v1.30)"),
        "{said}"
    );
}

/// `explain` says how a guard reads the body it would judge: by its `--content-type`, protobuf
/// with the schema compiled in; a type it does not read goes by the guard's failure rule.
#[test]
fn explain_says_which_encoding_the_guard_would_judge() {
    let explain = |content_type: &str, output: &str| {
        let out = skewgate(&[
            "explain",
            "--routes",
            "routes/demo.yaml",
            "--user-agent",
            "kubelet/v1.29.4",
            "--content-type",
            content_type,
            "-o",
            output,
            "PUT",
            "/api/v1/namespaces/team-a/configmaps/settings",
        ]);
        assert!(out.status.success());
        text(&out.stdout)
    };
    let said = explain("application/json", "text");
    assert!(said.contains("body:         judged as JSON"), "{said}");
    let said = explain("application/vnd.kubernetes.protobuf", "text");
    assert!(
        said.contains("body:         judged as protobuf, read with skewgate's Kubernetes v1."),
        "{said}"
    );
    let said = explain("application/cbor", "json");
    let v: serde_json::Value = serde_json::from_str(&said).expect("JSON");
    let body = &v["guard"]["body"];
    assert_eq!(
        (&body["encoding"], &body["judged"]),
        (&"unknown".into(), &false.into()),
        "{said}"
    );
    assert!(
        body["why"]
            .as_str()
            .is_some_and(|w| w.contains("failure rule")),
        "{said}"
    );
}

/// `serve --dry-run` refuses what `serve` could never make ready: an https endpoint with no
/// upstream TLS to dial it. It said ok, and `serve` then reported the endpoint never ready.
#[test]
fn serve_dry_run_refuses_https_endpoints_without_upstream_tls() {
    let routes = temp_file(
        "https.yaml",
        "apiVersion: skewgate.io/v1alpha1\nkind: RouteTable\nbackends:\n  - {name: a, endpoints: [\"https://10.0.0.1:6443\"]}\nwrites:\n  default: a\nreads:\n  default: a\n",
    );
    let routes = routes.to_string_lossy();
    let out = skewgate(&["serve", "--routes", &routes, "--dry-run"]);
    let said = text(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("--upstream-ca-file") && said.contains("https://10.0.0.1:6443 (a)"),
        "{said}"
    );
}

/// `check --routes DIR` reads the directory as `serve --routes DIR` does: one route file, or the
/// error `serve` gives. `check DIR` (a PATH) checks each file in it, as before.
#[test]
fn check_routes_reads_a_directory_as_serve_reads_it() {
    let dir = std::env::temp_dir().join(format!("skewgate-cli-dir-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let table = std::fs::read_to_string("routes/demo.yaml").expect("demo routes");
    for name in ["a.yaml", "b.yaml"] {
        std::fs::write(dir.join(name), &table).expect("write");
    }
    let dir = dir.to_string_lossy();
    let out = skewgate(&["check", "--routes", &dir]);
    let said = text(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("holds 2 route files"), "{said}");
    let out = skewgate(&["check", &dir]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// An unknown field in a flow mapping (`- {name: p, nmspaces: [x], backend: a}`, as the shipped
/// files write pins) leaves the values checked too, as in block style: every mistake in one run.
#[test]
fn check_reports_the_values_beside_an_unknown_field_in_a_flow_mapping() {
    let head = "apiVersion: skewgate.io/v1alpha1\nkind: RouteTable\nbackends:\n  - {name: a, endpoints: [\"https://10.0.0.1:6443\"]}\n  - {name: b, endpoints: [\"https://10.0.0.2:6443\"]}\nwrites:\n  default: nowhere\n  pins:\n";
    let flow = format!(
        "{head}    - {{name: p, nmspaces: [x, y], backend: a}}\nreads:\n  default: a\n  rollouts:\n    - {{name: r, to: b, percent: 250}}\n"
    );
    let block = format!(
        "{head}    - name: p\n      nmspaces: [x, y]\n      backend: a\nreads:\n  default: a\n  rollouts:\n    - name: r\n      to: b\n      percent: 250\n"
    );
    for (name, body) in [("flow.yaml", flow), ("block.yaml", block)] {
        let file = temp_file(name, &body);
        let out = skewgate(&["check", &file.to_string_lossy()]);
        let said = text(&out.stderr);
        for expected in [
            "unknown field `nmspaces`",
            "unknown backend \"nowhere\"",
            "250 is not a percent",
            "3 errors",
        ] {
            assert!(said.contains(expected), "{name}: {expected}: {said}");
        }
    }
}

#[test]
fn explain_says_which_rule_shares_a_watch_and_why_another_goes_on_its_own() {
    let url = "/api/v1/namespaces/a/secrets?fieldSelector=metadata.name%3Dtoken&watch=true&resourceVersion=5";
    let kubelet = [
        "explain",
        "--routes",
        "routes/example.yaml",
        "--as",
        "system:node:n1",
        "--as-group",
        "system:nodes",
        "--accept",
        "application/vnd.kubernetes.protobuf,application/json",
    ];
    let out = skewgate(&[&kubelet[..], &["GET", url]].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.contains("rule:         kubelet-mounts"), "{said}");
    assert!(
        said.contains("/api/v1/namespaces/a/secrets?fieldSelector=metadata.name%3Dtoken (application/vnd.kubernetes.protobuf,application/json)"),
        "{said}"
    );
    let list = url.replace("&resourceVersion=5", "");
    let said = text(&skewgate(&[&kubelet[..], &["GET", &list]].concat()).stdout);
    assert!(
        said.contains("not shared:   watches on its own: it begins with the state"),
        "{said}"
    );
    let admin = skewgate(&[&kubelet[..], &["-o", "json", "GET", &list]].concat());
    let v: serde_json::Value = serde_json::from_slice(&admin.stdout).expect("JSON");
    assert_eq!(v["share"]["rule"], "kubelet-mounts");
    assert!(v["share"]["watch"].is_null());
    let not_a_node = skewgate(&["explain", "--routes", "routes/example.yaml", "GET", url]);
    let said = text(&not_a_node.stdout);
    assert!(
        said.contains("not shared:   no shareWatches rule matches"),
        "{said}"
    );
    let get = skewgate(&[&kubelet[..], &["GET", "/api/v1/namespaces/a/secrets/token"]].concat());
    assert!(
        !text(&get.stdout).contains("share:"),
        "only watches are shared"
    );
}
