//! `skewgate rollback-check` against the simulators (v1.29 "old", v1.30 "new", one store): what
//! moving writes back to v1.29 would strand, read in pages through v1.30; the pins it suggests;
//! a plan with them passes; and `check --rollback-record` judges tables by its record without the
//! cluster. The real apiservers are in tests/real/rollback.rs.

mod common;

use std::path::Path;
use std::process::Output;

use common::*;
use serde_json::{Value, json};

const RUNNING: &str = "writes:\n  default: new\nreads:\n  default: new\n";

/// Objects written through v1.30: what v1.29 cannot store or serve, and what it can.
async fn populate(base: &str) {
    let c = h1();
    let post = |url: String, body: Value| {
        let c = c.clone();
        async move {
            let r = c.post(url).json(&body).send().await.expect("post");
            assert_eq!(r.status(), 201, "{}", r.text().await.unwrap_or_default());
        }
    };
    let pod = |name: &str, sidecar: bool| {
        let mut spec = json!({"containers": [{"name": "c", "image": "busybox"}]});
        if sidecar {
            spec["sidecarPolicy"] = json!("Always");
        }
        json!({"metadata": {"name": name}, "spec": spec})
    };
    post(
        format!("{base}/api/v1/namespaces/ns-a/pods"),
        pod("p1", true),
    )
    .await;
    post(
        format!("{base}/api/v1/namespaces/ns-b/pods"),
        pod("p2", false),
    )
    .await;
    // Twelve configmaps with the new field and three without, over pages of four.
    for i in 0..15 {
        let mut cm = json!({"metadata": {"name": format!("cm-{i:02}")}, "data": {"k": "v"}});
        if i < 12 {
            cm["policy"] = json!("Keep");
        }
        post(format!("{base}/api/v1/namespaces/ns-b/configmaps"), cm).await;
    }
    // A kind only v1.30 serves, in a namespace of its own: the namespace v1.29 could not delete.
    let widget = json!({"metadata": {"name": "w1"}, "spec": {"size": 1}});
    post(
        format!("{base}/apis/sim.skewgate.io/v1/namespaces/ns-c/widgets"),
        widget,
    )
    .await;
}

fn skewgate(args: Vec<String>) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_skewgate"))
        .args(args)
        .output()
        .expect("skewgate runs")
}

async fn rollback_check(routes: &Path, extra: &[&str]) -> (Option<i32>, Value, String) {
    let mut args: Vec<String> = ["rollback-check", "--routes", &routes.display().to_string()]
        .map(str::to_owned)
        .to_vec();
    args.extend(
        [
            "--to",
            "old",
            "--page-size",
            "4",
            "--max-names",
            "3",
            "-o",
            "json",
        ]
        .map(str::to_owned),
    );
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    let out = tokio::task::spawn_blocking(move || skewgate(args))
        .await
        .expect("join");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code(), json, stderr)
}

/// Each finding as (resource, stake, count, lost, namespaces with their names).
fn findings(check: &Value) -> Vec<(String, String, u64, Value)> {
    let all = check["findings"].as_array().cloned().unwrap_or_default();
    all.iter()
        .map(|f| {
            let stake = match f["stake"]["type"].as_str() {
                Some("field") => f["stake"]["field"].as_str().unwrap_or("").to_owned(),
                other => other.unwrap_or("").to_owned(),
            };
            let namespaces: Value = (f["namespaces"].as_array().into_iter().flatten())
                .map(|n| {
                    json!([
                        n["namespace"],
                        n["count"],
                        n["names"],
                        n["kept"].is_object()
                    ])
                })
                .collect();
            (
                f["resource"]["resource"].as_str().unwrap_or("").to_owned(),
                stake,
                f["count"].as_u64().unwrap_or(0),
                namespaces,
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_names_what_it_would_strand_and_passes_with_the_pins_it_suggests() {
    let sims = sims().await;
    populate(&sims.new.url()).await;
    let dir = temp_dir("rollback-check");
    let running = dir.join("running.yaml");
    std::fs::write(&running, routes(&sims, RUNNING)).expect("routes");
    let record = dir.join("record.json");
    let pins = names_what_it_would_strand(&running, &record).await;
    the_older_says_what_it_drops(&sims, &running).await;
    // The rollback table: the suggested pins first, then every other write back to v1.29.
    let plan_text = routes(&sims, &rollback_plan(&pins, "2099-01-01T00:00:00Z", "5s"));
    let plan = dir.join("plan.yaml");
    std::fs::write(&plan, &plan_text).expect("plan");
    let plan_arg = plan.display().to_string();
    let (code, kept, stderr) = rollback_check(&running, &["--plan", &plan_arg]).await;
    assert_eq!(
        code,
        Some(0),
        "the pins keep everything: {stderr}\n{kept:#}\n{plan_text}"
    );
    assert_eq!(kept["loses"], false);
    check_judges_tables_by_the_record(&sims, (&plan, &record));
}

/// The first check, its record written: every object at stake by namespace, the names limited,
/// a failing exit, and the pins that keep them.
async fn names_what_it_would_strand(running: &Path, record: &Path) -> String {
    let record_arg = record.display().to_string();
    let (code, check, stderr) = rollback_check(running, &["--record", &record_arg]).await;
    assert_eq!(
        code,
        Some(1),
        "something would be lost: {stderr}\n{check:#}"
    );
    assert_eq!(check["loses"], true);
    assert_eq!(
        findings(&check),
        [
            (
                "configmaps".to_owned(),
                "policy".to_owned(),
                12,
                json!([["ns-b", 12, ["cm-00", "cm-01", "cm-02"], false]])
            ),
            (
                "pods".to_owned(),
                "spec.sidecarPolicy".to_owned(),
                1,
                json!([["ns-a", 1, ["p1"], false]])
            ),
            (
                "widgets".to_owned(),
                "kindNotServed".to_owned(),
                1,
                json!([["ns-c", 1, ["w1"], false]])
            ),
        ],
        "{check:#}"
    );
    // Every object was read, page by page (15 configmaps in pages of 4), and progress was told.
    assert!(
        check["objects"].as_u64().is_some_and(|n| n >= 18),
        "{check:#}"
    );
    assert!(
        stderr.contains("listing configmaps through new"),
        "{stderr}"
    );
    let pins = check["suggestedPins"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    for pin in [
        "namespaces: [ns-b]\n      resources: [configmaps]",
        "namespaces: [ns-a]\n      resources: [pods]",
        "namespaces: [ns-c]\n      resources: [widgets.sim.skewgate.io]",
    ] {
        assert!(pins.contains(pin), "{pin} in\n{pins}");
    }
    pins
}

/// The older's own word: a dry-run update of one object per field, through v1.29, drops the
/// field, and stores nothing.
async fn the_older_says_what_it_drops(sims: &Sims, running: &Path) {
    let (_, told, stderr) = rollback_check(running, &["--dry-run"]).await;
    let pods = (told["findings"].as_array().into_iter().flatten())
        .find(|f| f["resource"]["resource"] == "pods")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        pods["dryRun"],
        json!({"object": "ns-a/p1", "dropped": ["spec.sidecarPolicy"]}),
        "{stderr}\n{told:#}"
    );
    let p1 = format!("{}/api/v1/namespaces/ns-a/pods/p1", sims.new.url());
    let stored: Value = h1()
        .get(p1)
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert_eq!(stored["spec"]["sidecarPolicy"], "Always");
}

/// `check` judges tables by the record, without the cluster: the plan with the pins has nothing
/// to say; a plan without them names what it strands; no record, and the move back is named.
fn check_judges_tables_by_the_record(sims: &Sims, (plan, record): (&Path, &Path)) {
    let record_arg = record.display().to_string();
    let check_of = |table: &Path, more: &[&str]| {
        let mut args = vec!["check".to_owned(), table.display().to_string()];
        args.extend(more.iter().map(|s| (*s).to_owned()));
        skewgate(args)
    };
    let with_pins = check_of(plan, &["--rollback-record", &record_arg]);
    let said = String::from_utf8_lossy(&with_pins.stderr);
    assert!(
        with_pins.status.success() && !said.contains("warning"),
        "{said}"
    );
    let bare = plan.with_file_name("bare.yaml");
    std::fs::write(
        &bare,
        routes(
            sims,
            "writes:\n  default: new\n  fence: 5s\n  pins:\n    - {name: everything, backend: old, from: new, flipAt: 2099-01-01T00:00:00Z}\nreads:\n  default: new\n",
        ),
    )
    .expect("bare");
    let said =
        String::from_utf8_lossy(&check_of(&bare, &["--rollback-record", &record_arg]).stderr)
            .into_owned();
    assert!(
        said.contains(
            "1 widgets.sim.skewgate.io objects are of a kind backend \"old\" (v1.29) does not serve"
        ) && said.contains("1 in ns-c")
            && said.contains("12 configmaps objects hold policy"),
        "{said}"
    );
    let said = String::from_utf8_lossy(&check_of(&bare, &[]).stderr).into_owned();
    assert!(
        said.contains("pin \"everything\" moves writes back from \"new\" to \"old\", and no rollback-check says what that strands"),
        "{said}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_not_in_the_table_is_a_clear_error() {
    let sims = sims().await;
    let dir = temp_dir("rollback-check-to");
    let running = dir.join("running.yaml");
    std::fs::write(&running, routes(&sims, RUNNING)).expect("routes");
    let stderr_to = |to: &str| {
        let args: Vec<String> = ["rollback-check", "--routes", &running.display().to_string()]
            .into_iter()
            .chain(["--to", to])
            .map(str::to_owned)
            .collect();
        async move {
            let out = tokio::task::spawn_blocking(move || skewgate(args))
                .await
                .expect("join");
            assert!(!out.status.success());
            String::from_utf8_lossy(&out.stderr).into_owned()
        }
    };
    let stderr = stderr_to("v1-28").await;
    assert!(
        stderr.contains("--to \"v1-28\" is not a backend of") && stderr.contains("old, new"),
        "{stderr}"
    );
    // Nothing to roll back from: the older backend is the newest.
    let stderr = stderr_to("new").await;
    assert!(stderr.contains("no backend of"), "{stderr}");
}

/// The sample `name{labels}` in Prometheus text, 0 when absent.
fn sample(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// While writes go to v1.30, the proxy counts those that stored what v1.29 could not keep: a
/// field it cannot store (judged in the answer, in JSON and protobuf alike), and a create of a
/// kind it does not serve; the writes that keep nothing of the kind count nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_counts_what_a_rollback_would_strand_as_writes_pass() {
    let sims = sims().await;
    let gate = gate(&routes(&sims, RUNNING)).await;
    let known = eventually(10, || async {
        gate.debug_skew().await["report"]["kinds"]
            .as_array()
            .is_some_and(|k| !k.is_empty())
    })
    .await;
    assert!(known, "the schemas were read");
    populate(&gate.url()).await;
    let c = h1();
    let cm = format!("{}/api/v1/namespaces/ns-b/configmaps/cm-00", gate.url());
    let patch = json!({"data": {"k": "w"}});
    let r = c
        .patch(&cm)
        .header("content-type", "application/merge-patch+json")
        .json(&patch)
        .send()
        .await
        .expect("patch");
    assert_eq!(r.status(), 200);
    // A write answered with an error stores nothing.
    let missing = format!("{}/api/v1/namespaces/ns-b/configmaps/nope", gate.url());
    let r = c
        .patch(&missing)
        .header("content-type", "application/merge-patch+json")
        .json(&patch)
        .send()
        .await
        .expect("patch");
    assert_eq!(r.status(), 404);
    let m = gate.metrics().await;
    let series = |resource: &str, stake: &str| {
        sample(
            &m,
            &format!(
                "skewgate_rollback_exposure_total{{older=\"old\",resource=\"{resource}\",stake=\"{stake}\"}}"
            ),
        )
    };
    // 12 configmaps created with the field and one patched that holds it; one pod of two.
    assert_eq!(series("configmaps", "field"), 13.0, "{m}");
    assert_eq!(series("pods", "field"), 1.0, "{m}");
    assert_eq!(series("widgets.sim.skewgate.io", "kind"), 1.0, "{m}");
    assert!(sample(&m, "skewgate_rollback_exposure_since_timestamp_seconds") > 0.0);
}
