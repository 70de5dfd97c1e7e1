//! Discovery across versions: kubectl through skewgate sees every kind that some backend serves, in
//! the legacy and the aggregated forms, and each group/version's documents come from the backend its
//! requests go to.

mod common;

use common::*;
use serde_json::Value;

/// Writes and reads default to v1.29, which does not serve `widgets.sim.skewgate.io` (new in 1.30)
/// but still serves `apps/v1beta2`.
const OLD_DEFAULT: &str = "writes:\n  default: old\nreads:\n  default: old\n";

async fn discovered(gate: &Gate) -> bool {
    eventually(10, || async {
        let body: Value = match reqwest::get(format!("{}/apis", gate.url())).await {
            Ok(r) => r.json().await.unwrap_or(Value::Null),
            Err(_) => return false,
        };
        // Both backends discovered: the group only v1.30 serves, the version only v1.29 serves.
        versions_of(&body, "sim.skewgate.io") == ["v1"] && versions_of(&body, "apps").len() == 2
    })
    .await
}

async fn get_json(client: &reqwest::Client, url: String) -> Value {
    client
        .get(url)
        .send()
        .await
        .expect("GET")
        .json()
        .await
        .expect("JSON")
}

fn versions_of(apis: &Value, group: &str) -> Vec<String> {
    apis["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| g["name"] == group)
        .flat_map(|g| g["versions"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v["version"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_is_the_union_of_the_backends_in_both_forms() {
    let sims = sims().await;
    let gate = gate(&routes(&sims, OLD_DEFAULT)).await;
    assert!(
        discovered(&gate).await,
        "the merged /apis lists what only one version serves"
    );
    let client = h2();

    let apis = get_json(&client, format!("{}/apis", gate.url())).await;
    assert_eq!(apis["kind"], "APIGroupList");
    assert_eq!(versions_of(&apis, "apps"), ["v1", "v1beta2"]);
    assert_eq!(versions_of(&apis, "sim.skewgate.io"), ["v1"]);

    // The aggregated form, as kubectl asks for it first.
    let accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
    let resp = client
        .get(format!("{}/apis", gate.url()))
        .header("accept", accept)
        .send()
        .await
        .expect("aggregated");
    assert_eq!(
        resp.headers()["content-type"],
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    let etag = resp.headers()["etag"].clone();
    let list: Value = resp.json().await.expect("JSON");
    assert_eq!(list["kind"], "APIGroupDiscoveryList");
    let widgets = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|g| g["metadata"]["name"] == "sim.skewgate.io")
        .expect("sim.skewgate.io listed");
    let resource = &widgets["versions"][0]["resources"][0];
    assert_eq!(resource["resource"], "widgets");
    assert_eq!(resource["scope"], "Namespaced");
    assert_eq!(resource["responseKind"]["kind"], "Widget");
    // A client that has the document already gets 304.
    let resp = client
        .get(format!("{}/apis", gate.url()))
        .header("accept", accept)
        .header("if-none-match", etag)
        .send()
        .await
        .expect("conditional");
    assert_eq!(resp.status(), 304);

    // Each group/version's document, and its OpenAPI, from a backend that serves it.
    for (path, served_by_version) in [
        ("/apis/sim.skewgate.io/v1", NEW),
        ("/apis/apps/v1beta2", OLD),
        ("/apis/apps/v1", OLD),
        ("/api/v1", OLD),
    ] {
        let resp = client
            .get(format!("{}{path}", gate.url()))
            .send()
            .await
            .expect("gv");
        assert_eq!(
            (resp.status().as_u16(), served_by(&resp)),
            (200, served_by_version.to_owned()),
            "{path}"
        );
    }
    let index = get_json(&client, format!("{}/openapi/v3", gate.url())).await;
    for gv in ["apis/sim.skewgate.io/v1", "apis/apps/v1beta2", "api/v1"] {
        let url = index["paths"][gv]["serverRelativeURL"]
            .as_str()
            .unwrap_or_else(|| panic!("{gv} in {index}"));
        let resp = client
            .get(format!("{}{url}", gate.url()))
            .send()
            .await
            .expect("doc");
        assert_eq!(resp.status(), 200, "{url}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_version_comes_from_the_backend_its_reads_go_to() {
    let sims = sims().await;
    let gate = gate(&routes(
        &sims,
        "writes:\n  default: old\nreads:\n  default: new\n",
    ))
    .await;
    assert!(discovered(&gate).await);
    let resp = h1()
        .get(format!("{}/apis/apps/v1", gate.url()))
        .send()
        .await
        .expect("gv");
    assert_eq!(served_by(&resp), NEW);
    // apps/v1beta2 only v1.29 serves: it stays listed, from v1.29.
    let apis = get_json(&h1(), format!("{}/apis", gate.url())).await;
    assert_eq!(versions_of(&apis, "apps"), ["v1", "v1beta2"]);
    let resp = h1()
        .get(format!("{}/apis/apps/v1beta2", gate.url()))
        .send()
        .await
        .expect("gv");
    assert_eq!(
        (resp.status().as_u16(), served_by(&resp)),
        (200, OLD.to_owned())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_lists_creates_and_explains_a_kind_only_the_other_version_serves() {
    if !kubectl_available() {
        println!("SKIPPED: kubectl is not on PATH");
        return;
    }
    let sims = sims().await;
    let gate = gate(&routes(&sims, OLD_DEFAULT)).await;
    assert!(discovered(&gate).await);
    let dir = temp_dir("discovery");
    let kc = kubeconfig(&dir, &gate.url());

    let out = ok(&kubectl(&kc, &["api-resources"]).await);
    let widgets = out
        .lines()
        .find(|l| l.starts_with("widgets"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        widgets.contains("sim.skewgate.io/v1") && widgets.contains("Widget"),
        "{widgets}"
    );
    assert!(out.lines().any(|l| l.starts_with("deployments")), "{out}");

    let manifest = dir.join("widget.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: sim.skewgate.io/v1\nkind: Widget\nmetadata:\n  name: w1\n  namespace: default\nspec:\n  size: 3\n",
    )
    .expect("manifest");
    let m = manifest.to_string_lossy().into_owned();
    let out = ok(&kubectl(&kc, &["create", "--validate=false", "-f", &m]).await);
    assert!(out.contains("widget.sim.skewgate.io/w1 created"), "{out}");
    let out = ok(&kubectl(&kc, &["get", "widgets", "-n", "default"]).await);
    assert!(out.contains("w1"), "{out}");
    let writes = sims.store.writes();
    assert!(
        writes
            .iter()
            .any(|w| w.version == NEW && w.verb == "create"),
        "{writes:?}"
    );

    let out = ok(&kubectl(&kc, &["explain", "widgets"]).await);
    assert!(out.contains("KIND:") && out.contains("Widget"), "{out}");
}
