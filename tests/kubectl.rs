//! Real kubectl through `serve` and the simulators: get, apply, patch, and get -w.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

/// Skewgate over the simulators with `writes_and_reads`, and a kubeconfig for it; `None` (with a
/// SKIPPED line) when kubectl is not on PATH.
async fn kubectl_bed(tag: &str, writes_and_reads: &str) -> Option<(Sims, Gate, PathBuf, PathBuf)> {
    if !kubectl_available() {
        println!("SKIPPED: kubectl is not on PATH");
        return None;
    }
    let sims = sims().await;
    let gate = gate(&routes(&sims, writes_and_reads)).await;
    let dir = temp_dir(tag);
    let kc = kubeconfig(&dir, &gate.url());
    Some((sims, gate, dir, kc))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_apply_patch_and_watch_through_skewgate() {
    let Some((sims, _gate, dir, kc)) = kubectl_bed("kubectl", "writes:\n  default: old\n  pins:\n    - {name: team-a, namespaces: [team-a], backend: new}\nreads:\n  default: old\n").await else {
        return;
    };

    let out = ok(&kubectl(&kc, &["get", "namespaces"]).await);
    assert!(out.contains("kube-system"), "{out}");

    let manifest = dir.join("team-a.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-a\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: team-a\ndata:\n  color: green\n",
    )
    .expect("manifest");
    let m = manifest.to_string_lossy().into_owned();
    let out = ok(&kubectl(&kc, &["apply", "--validate=false", "-f", &m]).await);
    assert!(out.contains("configmap/settings created"), "{out}");

    // A watch across all namespaces, started before the patch, sees it.
    let mut watch = Command::new("kubectl");
    watch
        .arg("--kubeconfig")
        .arg(&kc)
        .args([
            "get",
            "configmaps",
            "-A",
            "-w",
            "-o",
            "jsonpath={.metadata.name}={.data.color}{\"\\n\"}",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = watch.spawn().expect("kubectl get -w");
    tokio::time::sleep(Duration::from_secs(1)).await;

    let out = ok(&kubectl(
        &kc,
        &[
            "patch",
            "configmap",
            "settings",
            "-n",
            "team-a",
            "--type",
            "merge",
            "-p",
            r#"{"data":{"color":"blue"}}"#,
        ],
    )
    .await);
    assert!(out.contains("patched"), "{out}");
    let out = ok(&kubectl(
        &kc,
        &[
            "get",
            "configmap",
            "settings",
            "-n",
            "team-a",
            "-o",
            "jsonpath={.data.color}",
        ],
    )
    .await);
    assert_eq!(out, "blue");

    tokio::time::sleep(Duration::from_secs(1)).await;
    let pid = child.id().to_string();
    let _ = Command::new("kill").arg(&pid).status();
    let watched =
        tokio::task::spawn_blocking(move || child.wait_with_output().expect("watch output"))
            .await
            .expect("join");
    let lines = String::from_utf8_lossy(&watched.stdout).into_owned();
    assert!(lines.contains("settings=green"), "{lines}");
    assert!(
        lines.contains("settings=blue"),
        "the watch saw the patch: {lines}"
    );

    // The writes in team-a went to the pinned version.
    let writes = sims.store.writes();
    assert!(
        writes
            .iter()
            .any(|w| w.key.namespace == "team-a" && w.verb == "patch" && w.version == NEW)
    );
    assert!(
        !writes
            .iter()
            .any(|w| w.key.namespace == "team-a" && w.verb == "patch" && w.version == OLD)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_exec_and_logs_through_skewgate() {
    let Some((_sims, gate, _dir, kc)) = kubectl_bed(
        "kubectl-exec",
        "writes:\n  default: old\nreads:\n  default: old\n",
    )
    .await
    else {
        return;
    };
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Running"}
    });
    let r = h1()
        .post(format!("{}/api/v1/namespaces/default/pods", gate.url()))
        .json(&pod)
        .send()
        .await
        .expect("pod");
    assert_eq!(r.status(), 201);

    let kc2 = kc.clone();
    let out = tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kc2)
            .args(["exec", "-i", "p", "-c", "c", "--", "cat"])
            // kubectl before 1.31 speaks WebSocket only when asked; the simulator's exec speaks no SPDY.
            .env("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "true")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl exec");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(b"hello through skewgate\n")
            .expect("write");
        child.wait_with_output().expect("exec output")
    })
    .await
    .expect("join");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello through skewgate\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = ok(&kubectl(&kc, &["logs", "p", "-c", "c"]).await);
    assert_eq!(out, "log line 1\nlog line 2\nlog line 3\n");
}

/// The damage of a table that reads a namespace from 1.30 and writes it through 1.29, as a user
/// meets it: `kubectl get -o json | kubectl replace -f -` of a configmap with the 1.30 field
/// `policy`. Without a guard 1.29 drops the field; with one (down: the serving version cannot store
/// it) kubectl is refused, told which field, and nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_replace_of_what_it_read_from_1_30_through_1_29_is_refused_by_a_guard() {
    for guarded in [false, true] {
        let guard = if guarded {
            "guards:\n  - {name: read-elsewhere, match: {namespaces: [ns-7]}}\n"
        } else {
            ""
        };
        let table = format!(
            "writes:\n  default: old\nreads:\n  default: old\n  rollouts:\n    - {{name: ns-7, to: new, percent: 100, match: {{namespaces: [ns-7]}}}}\n{guard}"
        );
        let Some((sims, gate, dir, kc)) = kubectl_bed("replace", &table).await else {
            return;
        };
        gate.knows_schemas().await;
        let url = format!("{}/api/v1/namespaces/ns-7/configmaps", sims.new.url());
        let cm = serde_json::json!({"metadata": {"name": "settings"}, "data": {"color": "green"}, "policy": "keep"});
        let r = h1().post(url).json(&cm).send().await.expect("create");
        assert_eq!(r.status(), 201);
        let read = ok(&kubectl(
            &kc,
            &["get", "configmap", "settings", "-n", "ns-7", "-o", "json"],
        )
        .await);
        assert!(
            read.contains("\"policy\": \"keep\""),
            "read from 1.30: {read}"
        );
        let file = dir.join("settings.json");
        std::fs::write(&file, &read).expect("write");
        let out = kubectl(
            &kc,
            &["replace", "--validate=false", "-f", &file.to_string_lossy()],
        )
        .await;
        let stored: serde_json::Value = reqwest::get(format!(
            "{}/api/v1/namespaces/ns-7/configmaps/settings",
            sims.new.url()
        ))
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
        if guarded {
            let said = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "refused");
            assert!(
                said.contains("policy: backend \"old\" (v1.29) cannot store this field"),
                "{said}"
            );
            assert_eq!(stored["policy"], "keep", "nothing changed");
        } else {
            ok(&out);
            assert!(stored.get("policy").is_none(), "1.29 dropped it: {stored}");
        }
    }
}
