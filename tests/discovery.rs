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

/// A GET of `path` through the gate, over HTTP/1.1.
async fn get(gate: &Gate, path: &str) -> reqwest::Response {
    let url = format!("{}{path}", gate.url());
    h1().get(url).send().await.expect("GET")
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
        // v1.30 adds gadgets to apps/v1: v1.29's list is answered merged, by skewgate.
        ("/apis/apps/v1", ""),
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
    let resp = get(&gate, "/apis/apps/v1").await;
    assert_eq!(served_by(&resp), NEW);
    // apps/v1beta2 only v1.29 serves: it stays listed, from v1.29.
    let apis = get_json(&h1(), format!("{}/apis", gate.url())).await;
    assert_eq!(versions_of(&apis, "apps"), ["v1", "v1beta2"]);
    let resp = get(&gate, "/apis/apps/v1beta2").await;
    assert_eq!(
        (resp.status().as_u16(), served_by(&resp)),
        (200, OLD.to_owned())
    );
}

/// The resource names a group/version's list (an `APIResourceList`, or one version of an
/// aggregated group) gives.
fn names(resources: &Value) -> Vec<String> {
    resources
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| {
            r["name"]
                .as_str()
                .or(r["resource"].as_str())
                .map(str::to_owned)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_one_version_adds_to_a_group_version_both_serve_is_listed_with_the_others() {
    let sims = sims().await;
    // Reads default to v1.29, whose apps/v1 has no gadgets (v1.30 adds them, as kube-apiserver
    // v1.36 adds mutatingadmissionpolicies to admissionregistration.k8s.io/v1). Before, the group
    // version's list was v1.29's alone, and kubectl did not know the kind.
    let gate = gate(&routes(&sims, OLD_DEFAULT)).await;
    assert!(discovered(&gate).await);
    let resp = get(&gate, "/apis/apps/v1").await;
    // Answered merged (by skewgate, so without the simulator's header).
    assert_eq!(
        (resp.status().as_u16(), served_by(&resp)),
        (200, String::new())
    );
    let list: Value = resp.json().await.expect("JSON");
    let listed = names(&list["resources"]);
    assert!(
        listed.contains(&"deployments".to_owned()) && listed.contains(&"gadgets".to_owned()),
        "{listed:?}"
    );
    let aggregated = h1()
        .get(format!("{}/apis", gate.url()))
        .header(
            "accept",
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        )
        .send()
        .await
        .expect("apis")
        .json::<Value>()
        .await
        .expect("JSON");
    let apps = aggregated["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|g| g["metadata"]["name"] == "apps")
        .expect("apps");
    let v1 = apps["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["version"] == "v1")
        .expect("apps/v1");
    assert!(
        names(&v1["resources"]).contains(&"gadgets".to_owned()),
        "{v1}"
    );
    // A request for it falls back to the version that serves it.
    let resp = h1()
        .get(format!(
            "{}/apis/apps/v1/namespaces/default/gadgets",
            gate.url()
        ))
        .send()
        .await
        .expect("list");
    assert_eq!(
        (resp.status().as_u16(), served_by(&resp)),
        (200, NEW.to_owned())
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
    assert!(out.lines().any(|l| l.starts_with("gadgets")), "{out}");
    ok(&kubectl(&kc, &["get", "gadgets", "-n", "default"]).await);

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

/// The `serverRelativeURL` of `apps/v1` in the `/openapi/v3` at `base`.
async fn apps_v1_openapi_url(base: &str) -> String {
    let index = get_json(&h1(), format!("{base}/openapi/v3")).await;
    index["paths"]["apis/apps/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The schema of `kind` in an OpenAPI document, by its `x-kubernetes-group-version-kind`.
fn schema_of<'a>(doc: &'a Value, kind: &str) -> Option<&'a Value> {
    doc["components"]["schemas"]
        .as_object()?
        .values()
        .find(|s| s["x-kubernetes-group-version-kind"][0]["kind"] == kind)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_of_a_shared_group_version_describes_the_kind_the_other_adds() {
    let sims = sims().await;
    // Reads on v1.29: apps/v1's OpenAPI document is v1.29's, which has no Gadget. Before, `kubectl
    // explain gadgets` found no schema; now the document is v1.29's with v1.30's Gadget added.
    let gate = gate(&routes(&sims, OLD_DEFAULT)).await;
    assert!(discovered(&gate).await);
    let old_url = apps_v1_openapi_url(&sims.old.url()).await;
    let merged_url = std::sync::Mutex::new(String::new());
    let merged = eventually(10, || async {
        let url = apps_v1_openapi_url(&gate.url()).await;
        let differs = !url.is_empty() && url != old_url;
        *merged_url.lock().expect("url") = url;
        differs
    })
    .await;
    assert!(merged, "the index names a merged document");
    let url = merged_url.lock().expect("url").clone();
    assert!(url.starts_with("/openapi/v3/apis/apps/v1?hash="), "{url}");
    let resp = get(&gate, &url).await;
    // Answered by skewgate (the simulator, asked for it without the hash, answered 200 first).
    assert_eq!(
        (resp.status().as_u16(), served_by(&resp)),
        (200, String::new())
    );
    let doc: Value = resp.json().await.expect("JSON");
    let old_doc = get_json(&h1(), format!("{}{old_url}", sims.old.url())).await;
    assert!(schema_of(&doc, "Gadget").is_some(), "Gadget added");
    assert!(
        doc["paths"]
            .as_object()
            .is_some_and(|p| p.keys().any(|k| k.contains("/gadgets"))),
        "gadgets' paths added"
    );
    assert_eq!(
        schema_of(&doc, "Deployment"),
        schema_of(&old_doc, "Deployment"),
        "the kinds both serve are described as the source version does"
    );
    // Asked for by the source backend's own hash (an index read before), it is the merged one too.
    let resp = get(&gate, &old_url).await;
    assert_eq!(
        (resp.status().as_u16(), served_by(&resp)),
        (200, String::new())
    );
    let doc: Value = resp.json().await.expect("JSON");
    assert!(schema_of(&doc, "Gadget").is_some(), "Gadget added");
    if kubectl_available() {
        let kc = kubeconfig(&temp_dir("discovery"), &gate.url());
        let out = ok(&kubectl(&kc, &["explain", "gadgets"]).await);
        assert!(out.contains("KIND:") && out.contains("Gadget"), "{out}");
    }
}
