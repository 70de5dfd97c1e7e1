//! What deploy/ ships is what it claims: every manifest parses into the objects it names, with the
//! properties the layouts rely on; the kubeadm configuration uses only fields of
//! kubeadm.k8s.io/v1beta4 (kubeadm 1.35 and 1.36, the versions of its example) and keeps the
//! apiserver off skewgate's port across upgrades; every route file passes `skewgate check` without
//! a warning; and the static pod's and the Deployment's arguments
//! start `skewgate serve --dry-run` on a kubeadm-shaped /etc/kubernetes/pki.

mod common;
#[path = "common/pki.rs"]
mod pki;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

/// Every YAML document under deploy/ (route files included), with the file it came from; not the
/// kubeadm patches, which are JSON patches (tested on their own).
fn documents() -> Vec<(PathBuf, Value)> {
    let mut out = Vec::new();
    let mut dirs = vec![deploy()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("deploy/").flatten() {
            let path = entry.path();
            if path.ends_with("kubeadm/patches") {
                continue;
            } else if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "yaml") {
                let text = std::fs::read_to_string(&path).expect("read");
                let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                out.extend(docs.into_iter().map(|d| (path.clone(), d)));
            }
        }
    }
    out
}

fn of_kind<'a>(docs: &'a [(PathBuf, Value)], file: &str, kind: &str) -> Vec<&'a Value> {
    docs.iter()
        .filter(|(p, d)| p.ends_with(file) && d["kind"] == kind)
        .map(|(_, d)| d)
        .collect()
}

fn args(container: &Value) -> Vec<String> {
    container["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect()
}

fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .find_map(|a| a.strip_prefix(&format!("--{name}=")))
}

#[test]
fn every_manifest_names_its_kind_and_the_layouts_hold() {
    let docs = documents();
    for (path, d) in &docs {
        assert!(
            d["apiVersion"].is_string() && d["kind"].is_string(),
            "{}: a document without apiVersion and kind",
            path.display()
        );
    }
    // The static pod: host network, the node's own files, admin on loopback, probes there.
    let pods = of_kind(&docs, "kubeadm/skewgate.yaml", "Pod");
    assert_eq!(pods.len(), 1);
    let pod = pods[0];
    assert_eq!(pod["metadata"]["namespace"], "kube-system");
    assert_eq!(pod["spec"]["hostNetwork"], true);
    let c = &pod["spec"]["containers"][0];
    let a = args(c);
    assert_eq!(a.first().map(String::as_str), Some("serve"));
    assert_eq!(flag(&a, "admin-listen"), Some("127.0.0.1:9443"));
    assert_eq!(flag(&a, "listen"), Some("0.0.0.0:6443"));
    assert_eq!(flag(&a, "advertise-address"), Some("NODE_IP"));
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        assert_eq!(c[probe]["httpGet"]["host"], "127.0.0.1", "{probe}");
        assert_eq!(c[probe]["httpGet"]["port"], 9443, "{probe}");
    }
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/livez");
    assert!(
        pod["spec"]["volumes"]
            .as_array()
            .is_some_and(|v| v.iter().all(|v| v["hostPath"].is_object())),
        "the static pod reads only the node's files"
    );
    hardened(c, "the static pod");

    // The Deployment: no token, no Secret, one pod per control-plane node, never surging.
    let deployments = of_kind(&docs, "deploy/skewgate.yaml", "Deployment");
    assert_eq!(deployments.len(), 1);
    let spec = &deployments[0]["spec"]["template"]["spec"];
    assert_eq!(spec["automountServiceAccountToken"], false);
    assert_eq!(spec["hostNetwork"], true);
    assert_eq!(
        deployments[0]["spec"]["strategy"]["rollingUpdate"]["maxSurge"],
        0
    );
    assert!(spec["affinity"]["podAntiAffinity"].is_object());
    assert!(
        spec["volumes"]
            .as_array()
            .is_some_and(|v| v.iter().all(|v| v.get("secret").is_none())),
        "front-proxy material never from a Secret"
    );
    let c = &spec["containers"][0];
    assert!(
        flag(&args(c), "admin-listen").is_some_and(|a| a.starts_with("127.0.0.1:")),
        "admin on loopback"
    );
    hardened(c, "the Deployment");
    let namespaces = of_kind(&docs, "deploy/skewgate.yaml", "Namespace");
    assert_eq!(
        namespaces[0]["metadata"]["labels"]["pod-security.kubernetes.io/warn"],
        "baseline"
    );

    // RBAC: skewgate's own user, and only the objects it writes.
    for binding in of_kind(&docs, "kubeadm/rbac.yaml", "RoleBinding") {
        assert_eq!(binding["subjects"][0]["name"], "skewgate");
        assert_eq!(binding["subjects"][0]["kind"], "User");
    }
    assert_eq!(of_kind(&docs, "kubeadm/rbac.yaml", "Role").len(), 2);
    assert!(of_kind(&docs, "kubeadm/rbac.yaml", "ClusterRole").is_empty());
}

fn hardened(c: &Value, what: &str) {
    let sc = &c["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"], false, "{what}");
    assert_eq!(sc["readOnlyRootFilesystem"], true, "{what}");
    assert_eq!(sc["capabilities"]["drop"][0], "ALL", "{what}");
    assert!(
        c["resources"]["limits"]["memory"].is_string(),
        "{what}: a memory limit"
    );
}

/// The fields of kubeadm.k8s.io/v1beta4 that the configuration may use, by kind.
fn kubeadm_fields(kind: &str) -> &'static [&'static str] {
    match kind {
        "InitConfiguration" => &[
            "apiVersion",
            "kind",
            "bootstrapTokens",
            "dryRun",
            "nodeRegistration",
            "localAPIEndpoint",
            "certificateKey",
            "skipPhases",
            "patches",
            "timeouts",
        ],
        "ClusterConfiguration" => &[
            "apiVersion",
            "kind",
            "etcd",
            "networking",
            "kubernetesVersion",
            "controlPlaneEndpoint",
            "apiServer",
            "controllerManager",
            "scheduler",
            "dns",
            "proxy",
            "certificatesDir",
            "imageRepository",
            "featureGates",
            "clusterName",
            "encryptionAlgorithm",
            "certificateValidityPeriod",
            "caCertificateValidityPeriod",
        ],
        "JoinConfiguration" => &[
            "apiVersion",
            "kind",
            "dryRun",
            "nodeRegistration",
            "caCertPath",
            "discovery",
            "controlPlane",
            "skipPhases",
            "patches",
            "timeouts",
        ],
        "UpgradeConfiguration" => &[
            "apiVersion",
            "kind",
            "apply",
            "diff",
            "node",
            "plan",
            "timeouts",
        ],
        _ => &[],
    }
}

/// The kubeadm configuration's documents: kubeadm-config.yaml's and upgrade-config.yaml's.
fn kubeadm_config(docs: &[(PathBuf, Value)]) -> Vec<&Value> {
    docs.iter()
        .filter(|(p, _)| {
            p.ends_with("kubeadm/kubeadm-config.yaml") || p.ends_with("kubeadm/upgrade-config.yaml")
        })
        .map(|(_, d)| d)
        .collect()
}

/// An apiserver flag of a v1beta4 `extraArgs` list of name/value pairs.
fn extra_arg<'a>(extra: &'a Value, name: &str) -> Option<&'a Value> {
    extra
        .as_array()?
        .iter()
        .find(|a| a["name"] == name)
        .map(|a| &a["value"])
}

const PATCHES: &str = "/etc/kubernetes/skewgate/kubeadm-patches";

#[test]
fn the_kubeadm_configuration_uses_only_v1beta4_fields_of_its_kubernetes_versions() {
    let docs = documents();
    let config = kubeadm_config(&docs);
    assert_eq!(config.len(), 4);
    for d in &config {
        assert_eq!(d["apiVersion"], "kubeadm.k8s.io/v1beta4");
        let kind = d["kind"].as_str().unwrap_or_default();
        let known = kubeadm_fields(kind);
        assert!(!known.is_empty(), "unknown kind {kind}");
        for key in d.as_object().into_iter().flat_map(|o| o.keys()) {
            assert!(
                known.contains(&key.as_str()),
                "{kind}.{key} is not a v1beta4 field"
            );
        }
    }
    let kind = |k: &str| config.iter().find(|d| d["kind"] == k).copied();
    let cluster = kind("ClusterConfiguration").expect("ClusterConfiguration");
    // The cluster runs v1.35 and upgrades to v1.36: kubeadm 1.31 and later read v1beta4.
    let version = cluster["kubernetesVersion"].as_str().unwrap_or_default();
    assert!(version.starts_with("v1.35."), "{version}");
    // v1beta4 extraArgs are a list of name/value pairs (a map of strings in v1beta3).
    let extra = &cluster["apiServer"]["extraArgs"];
    let pairs = extra.as_array().expect("a list of name/value pairs");
    assert!(
        pairs
            .iter()
            .all(|a| a["name"].is_string() && a["value"].is_string()),
        "{extra}"
    );
    assert_eq!(
        extra_arg(extra, "endpoint-reconciler-type"),
        Some(&Value::from("none")),
        "the apiservers leave the kubernetes endpoints to skewgate"
    );
    assert!(
        cluster["controlPlaneEndpoint"]
            .as_str()
            .is_some_and(|e| e.ends_with(":6443"))
    );
    // `kubeadm upgrade apply` and `node` with upgrade-config.yaml patch every kube-apiserver.yaml
    // they write anew.
    let upgrade = kind("UpgradeConfiguration").expect("UpgradeConfiguration");
    let to = upgrade["apply"]["kubernetesVersion"]
        .as_str()
        .unwrap_or_default();
    assert!(to.starts_with("v1.36."), "{to}");
    assert_eq!(upgrade["apply"]["patches"]["directory"], PATCHES);
    assert_eq!(upgrade["node"]["patches"]["directory"], PATCHES);
}

/// Every kubeconfig kubeadm writes names bindPort: the VIP's for admin.conf and the kubelets,
/// the node's own for controller-manager.conf and scheduler.conf (and a control-plane kubelet in
/// kubeadm's local mode). So bindPort is skewgate's :6443, and the apiserver's real port, 6444,
/// is set where `kubeadm upgrade` keeps it: its `secure-port` and a patch of its probes.
#[test]
fn every_kubeconfig_kubeadm_writes_names_skewgate_and_upgrades_keep_it() {
    let docs = documents();
    let config = kubeadm_config(&docs);
    let init = config.iter().find(|d| d["kind"] == "InitConfiguration");
    let join = config.iter().find(|d| d["kind"] == "JoinConfiguration");
    let (Some(init), Some(join)) = (init, join) else {
        panic!("InitConfiguration and JoinConfiguration");
    };
    assert_eq!(init["localAPIEndpoint"]["bindPort"], 6443);
    assert_eq!(join["controlPlane"]["localAPIEndpoint"]["bindPort"], 6443);
    assert_eq!(init["patches"]["directory"], PATCHES);
    assert_eq!(join["patches"]["directory"], PATCHES);
    let cluster = config.iter().find(|d| d["kind"] == "ClusterConfiguration");
    let extra = &cluster.expect("ClusterConfiguration")["apiServer"]["extraArgs"];
    assert_eq!(extra_arg(extra, "secure-port"), Some(&Value::from("6444")));
    // The patch: a JSON patch of kube-apiserver (kubeadm's name for it) moving its three probes.
    let text = std::fs::read_to_string(deploy().join("kubeadm/patches/kube-apiserver+json.yaml"))
        .expect("the patch");
    let ops: Value = serde_saphyr::from_str(&text).expect("YAML");
    let ports: Vec<(&str, &Value)> = ops
        .as_array()
        .expect("a JSON patch")
        .iter()
        .map(|op| (op["path"].as_str().unwrap_or_default(), &op["value"]))
        .collect();
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        let path = format!("/spec/containers/0/{probe}/httpGet/port");
        assert!(
            ports.iter().any(|(p, v)| *p == path && **v == 6444),
            "{probe}: {ports:?}"
        );
    }
    // skewgate takes :6443, and its route files name the apiservers at :6444.
    let pod = &of_kind(&docs, "kubeadm/skewgate.yaml", "Pod")[0];
    let args = pod["spec"]["containers"][0]["args"].to_string();
    assert!(args.contains("--listen=0.0.0.0:6443"), "{args}");
    let routes =
        std::fs::read_to_string(deploy().join("kubeadm/routes/routes.yaml")).expect("routes");
    assert!(
        routes.contains(":6444") && !routes.contains(":6443"),
        "{routes}"
    );
}

/// Every route file under deploy/ passes `check` without a warning, checked before its flipAts
/// (the runbook's at 09:00Z of the upgrade's night): a flipAt past or close is warned of, and the
/// files keep their example dates.
#[test]
fn every_route_file_under_deploy_passes_check_without_a_warning() {
    let exe = env!("CARGO_BIN_EXE_skewgate");
    let night = "2026-12-01T09:00:00Z";
    // The rollback's tables move writes back: checked with what rollback-check found before it
    // (here: nothing at stake), as UPGRADE.md has it.
    let record = std::env::temp_dir().join(format!(
        "skewgate-deploy-record-{}.json",
        std::process::id()
    ));
    std::fs::write(&record, clean_record(night)).expect("record");
    for (dir, at) in [
        // (the in-cluster example's pin moves at 2026-11-22T10:00Z)
        (deploy().join("routes"), "2026-11-22T09:00:00Z"),
        (deploy().join("kubeadm/routes"), night),
        (deploy().join("kubeadm/upgrade"), night),
        (deploy().join("kubeadm/rollback"), night),
    ] {
        let mut check = Command::new(exe);
        check.args(["check", "--at", at]).arg(&dir);
        if dir.ends_with("rollback") {
            check.arg("--rollback-record").arg(&record);
        }
        let out = check.output().expect("check");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !said.contains("warning"),
            "{}: {}{said}",
            dir.display(),
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

/// What `rollback-check --record` writes when nothing is at stake, checked at `at`.
fn clean_record(at: &str) -> String {
    serde_json::json!({
        "format": "skewgate.io/rollback-check/v1",
        "checkedAt": at,
        "routes": "/etc/skewgate/routes/routes.yaml",
        "to": {"name": "v1-35", "version": "v1.35"},
        "from": [{"name": "v1-36", "version": "v1.36"}],
        "objects": 0,
        "resources": 0,
        "findings": [],
        "storageVersions": {"visible": false, "unreadable": [], "unknown": []},
        "loses": false
    })
    .to_string()
}

/// The rollback's step 2 moves every write back to v1.35: `check` says so when no rollback-check
/// record is given, and names what a record found at stake that the step would send there.
#[test]
fn the_rollback_is_checked_against_what_rollback_check_found() {
    let exe = env!("CARGO_BIN_EXE_skewgate");
    let night = "2026-12-01T09:00:00Z";
    let r2 = deploy().join("kubeadm/rollback/r2-move-writes-back.yaml");
    let check = |more: &[&std::ffi::OsStr]| {
        let out = Command::new(exe)
            .args(["check", "--at", night])
            .arg(&r2)
            .args(more)
            .output()
            .expect("check");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let said = check(&[]);
    assert!(
        said.contains("pin \"everything\" moves writes back from \"v1-36\" to \"v1-35\", and no rollback-check says what that strands"),
        "{said}"
    );
    let mut record: Value = serde_json::from_str(&clean_record(night)).expect("json");
    record["findings"] = serde_json::json!([{
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "stake": {"type": "field", "field": "status.containerStatuses[].allocatedResourcesStatus[].resources[].message"},
        "count": 3,
        "namespaces": [{"namespace": "gpu-jobs", "count": 3, "names": ["a", "b", "c"]}]
    }]);
    let file =
        std::env::temp_dir().join(format!("skewgate-deploy-lossy-{}.json", std::process::id()));
    std::fs::write(&file, record.to_string()).expect("record");
    let said = check(&["--rollback-record".as_ref(), file.as_os_str()]);
    assert!(
        said.contains("3 pods objects hold status.containerStatuses[].allocatedResourcesStatus[].resources[].message, which backend \"v1-35\" (v1.35) cannot store, and this table sends their writes there (3 in gpu-jobs)"),
        "{said}"
    );
    // Stale: checked a day before the step.
    record["checkedAt"] = Value::from("2026-11-30T09:00:00Z");
    std::fs::write(&file, record.to_string()).expect("record");
    let said = check(&["--rollback-record".as_ref(), file.as_os_str()]);
    assert!(
        said.contains("the rollback-check record is 1day old"),
        "{said}"
    );
}

/// kubeadm's /etc/kubernetes/pki, as far as skewgate reads it.
fn kubeadm_pki(dir: &Path) {
    let ca = pki::Ca::new(dir, "ca");
    let front_proxy_ca = pki::Ca::new(dir, "front-proxy-ca");
    ca.issue(
        dir,
        "apiserver",
        "kube-apiserver",
        &[],
        &["k8s-api.example.com", "127.0.0.1"],
    );
    front_proxy_ca.issue(dir, "front-proxy-client", "front-proxy-client", &[], &[]);
}

#[test]
fn the_shipped_arguments_start_serve_on_a_kubeadm_node() {
    let exe = env!("CARGO_BIN_EXE_skewgate");
    let etc = common::temp_dir("deploy-etc");
    std::fs::create_dir_all(etc.join("pki")).expect("mkdir");
    kubeadm_pki(&etc.join("pki"));
    let docs = documents();
    let cases = [
        (
            "kubeadm/skewgate.yaml",
            "Pod",
            &docs,
            deploy().join("kubeadm/routes"),
        ),
        (
            "deploy/skewgate.yaml",
            "Deployment",
            &docs,
            deploy().join("routes"),
        ),
    ];
    for (file, kind, docs, routes) in cases {
        let doc = of_kind(docs, file, kind)[0];
        let container = if kind == "Pod" {
            &doc["spec"]["containers"][0]
        } else {
            &doc["spec"]["template"]["spec"]["containers"][0]
        };
        let args: Vec<String> = args(container)
            .into_iter()
            .map(|a| {
                a.replace(
                    "/etc/kubernetes/pki",
                    &etc.join("pki").display().to_string(),
                )
                // TEST-NET-1: an address the apiservers take in Endpoints, as a node's is.
                .replace("NODE_IP", "192.0.2.10")
                .replace("0.0.0.0:6443", "127.0.0.1:0")
            })
            .map(|a| {
                if a.starts_with("--routes=") {
                    format!("--routes={}", routes.display())
                } else {
                    a
                }
            })
            .collect();
        let out = Command::new(exe)
            .args(&args)
            .arg("--dry-run")
            .output()
            .expect("skewgate");
        assert!(
            out.status.success(),
            "{file}: skewgate {args:?} --dry-run: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).starts_with("ok: would serve"));
        if !args.iter().any(|a| a.contains("192.0.2.10")) {
            continue;
        }
        // A loopback address is refused before serving: kube-apiserver refuses it in Endpoints
        // (422 "may not be in the loopback range"), so the replica would never be published.
        let loopback: Vec<String> = args
            .iter()
            .map(|a| a.replace("192.0.2.10", "127.0.0.1"))
            .collect();
        let out = Command::new(exe)
            .args(&loopback)
            .arg("--dry-run")
            .output()
            .expect("skewgate");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{file}: {said}");
        assert!(
            said.contains("--advertise-address 127.0.0.1: may not be in the loopback range"),
            "{file}: {said}"
        );
        // A Lease renewed no more often than it lapses, or held for part of a second, is refused.
        for (more, words) in [
            (
                ["--lease-renew-interval", "15s"],
                "must be more than 0 and less than --lease-duration",
            ),
            (["--lease-duration", "1500ms"], "is not whole seconds"),
        ] {
            let out = Command::new(exe)
                .args(&args)
                .args(more)
                .arg("--dry-run")
                .output()
                .expect("skewgate");
            let said = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{file} {more:?}: {said}");
            assert!(said.contains(words), "{file} {more:?}: {said}");
        }
    }
}

/// Splits a command line as a shell would: words, and "double-quoted" words.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ' ' if !quoted => {
                if !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

#[test]
fn every_skewgate_command_of_the_runbook_runs_on_the_files_it_names() {
    let exe = env!("CARGO_BIN_EXE_skewgate");
    let runbook = std::fs::read_to_string(deploy().join("UPGRADE.md")).expect("UPGRADE.md");
    // The lines of its ```sh blocks that run skewgate.
    let mut in_block = false;
    let commands: Vec<Vec<String>> = runbook
        .lines()
        .filter(|l| {
            if l.starts_with("```") {
                in_block = *l == "```sh";
                return false;
            }
            in_block && l.starts_with("skewgate ")
        })
        .map(words)
        .collect();
    assert!(commands.len() >= 8, "{commands:?}");
    for command in commands {
        let out = Command::new(exe)
            .args(&command[1..])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("skewgate");
        assert!(
            out.status.success(),
            "{command:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if command[1] == "explain" {
            // Each explains a request the new version serves, or the skew policy holds back.
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                text.contains("backend:      v1-36") || text.contains("version-skew policy"),
                "{command:?}: {text}"
            );
        }
    }
}
