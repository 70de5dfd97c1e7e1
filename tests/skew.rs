//! Schema skew from the apiservers themselves: the simulator's two versions, read live through
//! their `/openapi/v3` and from saved documents, differ exactly as the simulator's schemas do.

mod common;

use std::path::Path;

use common::*;
use serde_json::{Value, json};
use skewgate::skew::{Report, VersionFields, compare, fetch, from_dir};
use skewgate::upstream::PoolSettings;

async fn live(sims: &Sims) -> Report {
    let text = routes(sims, "writes:\n  default: old\nreads:\n  default: old\n");
    let table =
        skewgate::config::parse_route_table(Path::new("routes.yaml"), &text).expect("routes");
    let fetched = fetch(&table, PoolSettings::default()).await;
    let versions: Vec<(String, VersionFields)> = fetched
        .into_iter()
        .map(|(name, f)| (name, f.expect("read the backend's OpenAPI")))
        .collect();
    compare(&versions)
}

/// Saves a simulator's OpenAPI v3 documents to `dir`, as an operator would for offline use.
async fn save(base: &str, dir: &Path) {
    std::fs::create_dir_all(dir).expect("mkdir");
    let index: Value = reqwest::get(format!("{base}/openapi/v3"))
        .await
        .expect("index")
        .json()
        .await
        .expect("json");
    for (path, entry) in index["paths"].as_object().expect("paths") {
        let url = entry["serverRelativeURL"].as_str().expect("url");
        let doc = reqwest::get(format!("{base}{url}"))
            .await
            .expect("doc")
            .text()
            .await
            .expect("text");
        std::fs::write(dir.join(format!("{}.json", path.replace('/', "_"))), doc).expect("write");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_skew_of_the_simulators_versions_is_exactly_what_they_apply() {
    let sims = sims().await;
    let report = live(&sims).await;
    let as_json = serde_json::to_value(&report).expect("json");
    // sim/src/schema.rs: new fields in 1.30, and two defaults that changed; nothing else.
    let fields: Vec<(String, String, Value)> = report
        .kinds
        .iter()
        .flat_map(|k| {
            k.fields
                .iter()
                .map(|f| (k.resource.clone(), f.path.clone(), json!(f.known_by)))
        })
        .collect();
    assert_eq!(
        fields,
        [
            (
                "configmaps (v1)".to_owned(),
                "policy".to_owned(),
                json!(["new"])
            ),
            (
                "deployments.apps (v1)".to_owned(),
                "spec.template.spec.sidecarPolicy".to_owned(),
                json!(["new"])
            ),
            (
                "pods (v1)".to_owned(),
                "spec.sidecarPolicy".to_owned(),
                json!(["new"])
            ),
            (
                "pods (v1)".to_owned(),
                "status.resizeStatus".to_owned(),
                json!(["new"])
            ),
        ],
        "{as_json:#}"
    );
    let defaults: Vec<(String, String, Value)> = report
        .kinds
        .iter()
        .flat_map(|k| {
            k.defaults
                .iter()
                .map(|d| (k.resource.clone(), d.path.clone(), json!(d.by_version)))
        })
        .collect();
    assert_eq!(
        defaults,
        [
            (
                "deployments.apps (v1)".to_owned(),
                "spec.revisionHistoryLimit".to_owned(),
                json!({"new": 5, "old": 10})
            ),
            (
                "pods (v1)".to_owned(),
                "spec.terminationGracePeriodSeconds".to_owned(),
                json!({"new": 45, "old": 30})
            ),
        ]
    );
    let served: Vec<(String, Value)> = report
        .served_by_some
        .iter()
        .map(|s| (s.resource.clone(), json!(s.served_by)))
        .collect();
    assert_eq!(
        served,
        [
            ("deployments.apps (v1beta2)".to_owned(), json!(["old"])),
            ("gadgets.apps (v1)".to_owned(), json!(["new"])),
            ("widgets.sim.skewgate.io (v1)".to_owned(), json!(["new"])),
        ]
    );
    assert!(
        report
            .suggested_pins("old")
            .contains("resources: [configmaps, deployments.apps, pods]")
    );

    // The same from saved documents, as for a version no longer running.
    let dir = temp_dir("openapi");
    save(&sims.old.url(), &dir.join("old")).await;
    save(&sims.new.url(), &dir.join("new")).await;
    let offline = compare(&[
        ("old".to_owned(), from_dir(&dir.join("old")).expect("old")),
        ("new".to_owned(), from_dir(&dir.join("new")).expect("new")),
    ]);
    assert_eq!(offline, report, "offline and live agree");
}

fn skew_json(args: &[&str]) -> Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_skewgate"))
        .arg("skew")
        .args(args)
        .args(["-o", "json"])
        .output()
        .expect("skewgate skew");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skewgate_skew_live_offline_and_debug_skew_agree() {
    let sims = sims().await;
    let dir = temp_dir("skew-cli");
    let routes_file = dir.join("routes.yaml");
    std::fs::write(
        &routes_file,
        routes(&sims, "writes:\n  default: old\nreads:\n  default: old\n"),
    )
    .expect("routes");
    save(&sims.old.url(), &dir.join("old")).await;
    save(&sims.new.url(), &dir.join("new")).await;
    let routes_arg = routes_file.display().to_string();
    let (old_dir, new_dir) = (
        format!("old={}", dir.join("old").display()),
        format!("new={}", dir.join("new").display()),
    );
    let live = tokio::task::spawn_blocking(move || skew_json(&["--routes", &routes_arg]))
        .await
        .expect("live");
    let offline = tokio::task::spawn_blocking(move || {
        skew_json(&["--openapi-dir", &old_dir, "--openapi-dir", &new_dir])
    })
    .await
    .expect("offline");
    assert_eq!(live["report"], offline["report"]);
    assert_eq!(live["report"]["kinds"].as_array().map(Vec::len), Some(3));
    assert!(
        live["suggestedPins"]
            .as_str()
            .is_some_and(|p| p.contains("resources: [configmaps, deployments.apps, pods]"))
    );
    // The admin listener shows the same, from the running backends.
    let gate = gate_on(&routes_file, skewgate::proxy::ProxySettings::default()).await;
    let shown = eventually(10, || async {
        gate.debug_skew().await["report"] == live["report"]
    })
    .await;
    assert!(shown, "/debug/skew shows the report");
}
