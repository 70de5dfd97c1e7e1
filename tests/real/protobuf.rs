//! Protobuf bodies, as kubelets and the control plane's components send them: skewgate's view of
//! what the real apiserver encodes is the JSON it writes; the guard judges a real v1.35 encoding
//! of a pod's status as it judges its JSON, in both directions, and passes one with nothing to
//! lose as it came.

use serde_json::Value;

use crate::fields::{healthy_pod_on_new, schemas_known};
use crate::harness::{Pair, admin_get, curl, curl_bytes, direct, gate};

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
const FIELD: &str = "allocatedResourcesStatus";

/// Every object of these lists (with an object for each Go embedded struct the view inlines,
/// tests/fixtures/protobuf/inline.yaml), read from either apiserver as protobuf, reads in skewgate
/// as the JSON that apiserver writes for it (zero values aside, which Go's JSON writes for fields without
/// omitempty and which the apiserver cannot tell from absent ones). Catches a Go embedded struct
/// (`json:",inline"`) a new release adds, which the `.proto` files do not mark.
pub fn skewgate_reads_protobuf_as_the_apiserver_writes_json(pair: &Pair) {
    let (ok, out) = direct(
        pair,
        "new",
        &["create", "deployment", "pb-view", "--image=busybox"],
    );
    assert!(ok, "{out}");
    let _ = direct(pair, "new", &["create", "serviceaccount", "default"]);
    let inline = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/protobuf/inline.yaml"
    );
    let (ok, out) = direct(pair, "new", &["apply", "-f", inline]);
    assert!(ok, "{out}");
    let lists = [
        "api/v1/pods",
        "api/v1/namespaces",
        "api/v1/serviceaccounts",
        "api/v1/configmaps",
        "api/v1/services",
        "apis/apps/v1/deployments",
        "apis/rbac.authorization.k8s.io/v1/clusterroles",
        "apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        "apis/flowcontrol.apiserver.k8s.io/v1/flowschemas",
        "apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations",
        "apis/scheduling.k8s.io/v1/priorityclasses",
        "apis/coordination.k8s.io/v1/leases",
        "apis/events.k8s.io/v1/events",
        // tests/fixtures/protobuf/inline.yaml: each of the view's embedded structs.
        "api/v1/persistentvolumes",
        "apis/networking.k8s.io/v1/ingresses",
        "apis/networking.k8s.io/v1/networkpolicies",
        "apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        "apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
        "apis/batch/v1/cronjobs",
        "apis/apps/v1/statefulsets",
        "apis/autoscaling/v2/horizontalpodautoscalers",
        "apis/resource.k8s.io/v1/resourceclaims",
    ];
    let mut objects = 0;
    // The old version's bytes too: the compiled-in schema is the new one's.
    let servers = [pair.var("NEW_URL"), pair.var("OLD_URL")];
    for (server, list) in servers
        .iter()
        .flat_map(|s| lists.iter().map(move |l| (s, l)))
    {
        let url = format!("{server}/{list}");
        let (code, json) = curl(pair, &["-H", "accept: application/json", &url]);
        assert_eq!(code, 200, "{list}");
        let json: Value = serde_json::from_str(&json).expect("JSON");
        // The same list at the same revision: the cluster writes on between the two reads.
        let version = json["metadata"]["resourceVersion"].as_str().unwrap_or("");
        let exact = format!("{url}?resourceVersion={version}&resourceVersionMatch=Exact");
        let (code, _, pb) = curl_bytes(pair, &["-H", &format!("accept: {PROTOBUF}"), &exact]);
        assert_eq!(code, 200, "{list}: {}", String::from_utf8_lossy(&pb));
        let view = skewgate::protobuf::decode_to_json(&pb).expect("decodes");
        let mut differences = Vec::new();
        diff(&normal(&json), &normal(&view), list, &mut differences);
        assert!(differences.is_empty(), "{url}: {differences:#?}");
        objects += json["items"].as_array().map_or(0, Vec::len);
    }
    println!(
        "protobuf view: {objects} objects of {} lists from both versions read as their JSON",
        lists.len()
    );
}

/// JSON without the values Go's protobuf and JSON encoders may disagree on writing: zeros, empty
/// lists, nulls; `apiVersion` and `kind` (the envelope's, in protobuf).
fn normal(v: &Value) -> Value {
    fn zero(v: &Value) -> bool {
        match v {
            Value::Null | Value::Bool(false) => true,
            Value::Number(n) => n.as_f64() == Some(0.0),
            Value::String(s) => s.is_empty(),
            Value::Array(a) => a.is_empty(),
            _ => false,
        }
    }
    match v {
        Value::Array(a) => Value::Array(a.iter().map(normal).collect()),
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, v)| *k != "apiVersion" && *k != "kind" && !zero(v))
                .map(|(k, v)| (k.clone(), normal(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn diff(json: &Value, view: &Value, at: &str, out: &mut Vec<String>) {
    match (json, view) {
        (Value::Object(a), Value::Object(b)) => {
            for key in a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))) {
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => diff(x, y, &format!("{at}.{key}"), out),
                    (x, y) => out.push(format!("{at}.{key}: JSON {x:?}, view {y:?}")),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                diff(x, y, &format!("{at}[{i}]"), out);
            }
        }
        (a, b) if a != b => out.push(format!("{at}: JSON {a}, view {b}")),
        _ => {}
    }
}

/// A PUT of `body` (`content_type`) to `url` by `agent`, asking for answers in the same encoding:
/// the code, the answer's headers and its body.
fn put(
    pair: &Pair,
    url: &str,
    agent: &str,
    content_type: &str,
    body: &[u8],
) -> (u16, String, Vec<u8>) {
    let file = crate::common::temp_dir("put").join("body");
    std::fs::write(&file, body).expect("body");
    let data = format!("@{}", file.display());
    let accept = format!("accept: {content_type}");
    let (agent, content_type) = (
        format!("user-agent: {agent}"),
        format!("content-type: {content_type}"),
    );
    curl_bytes(
        pair,
        &[
            "-X",
            "PUT",
            "-H",
            &agent,
            "-H",
            &content_type,
            "-H",
            &accept,
            "--data-binary",
            &data,
            url,
        ],
    )
}

/// A pod as `role`'s apiserver encodes it, in `content_type`.
fn read(pair: &Pair, role: &str, name: &str, content_type: &str) -> Vec<u8> {
    let url = format!(
        "{}/api/v1/namespaces/default/pods/{name}",
        pair.var(if role == "new" { "NEW_URL" } else { "OLD_URL" })
    );
    let (code, _, body) = curl_bytes(pair, &["-H", &format!("accept: {content_type}"), &url]);
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    body
}

/// The pod's `message` under `allocatedResourcesStatus`, as stored (read from the new version).
fn stored_message(pair: &Pair, name: &str) -> Value {
    let (ok, text) = direct(pair, "new", &["get", "pod", name, "-o", "json"]);
    assert!(ok, "{text}");
    let pod: Value = serde_json::from_str(&text).expect("pod JSON");
    pod["status"]["containerStatuses"][0][FIELD][0]["resources"][0]["message"].clone()
}

pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The up direction: a pod's status written by a new kubelet holds a field only 1.36 knows; the
/// same pod as the real v1.35 encodes it (read through the old apiserver, which drops the
/// field), PUT to `/status` through skewgate by a kubelet-like and a controller-manager-like
/// client of v1.35, in protobuf and in JSON: rejected naming the field, preserved (the stored
/// object keeps it, the answer in the protobuf the client asked for), or sent with a warning.
pub fn the_guard_judges_a_v1_35_protobuf_update_as_its_json(pair: &Pair) {
    let old = pair.var("OLD_VERSION").to_owned();
    let agents = [
        format!("kubelet/{old} (linux/amd64) kubernetes/abc1234"),
        format!(
            "kube-controller-manager/{old} (linux/amd64) kubernetes/abc1234/generic-garbage-collector"
        ),
    ];
    // Without a controller-manager, a pod's ServiceAccount is made by hand.
    let _ = direct(pair, "new", &["create", "serviceaccount", "default"]);
    for action in ["reject", "preserve", "warn"] {
        let routes = format!(
            "writes:\n  default: new\nreads:\n  default: new\nguards:\n  - name: olds\n    match: {{resources: [pods, pods/status]}}\n    action: {action}\n"
        );
        let (gate, file) = gate(pair, &routes);
        schemas_known(&gate);
        let cases = [
            (&agents[0], PROTOBUF),
            (&agents[1], PROTOBUF),
            (&agents[0], "application/json"),
        ];
        for (n, (agent, content_type)) in cases.into_iter().enumerate() {
            let name = format!("pb-{action}-{n}");
            healthy_pod_on_new(pair, &file, &name);
            let body = read(pair, "old", &name, content_type);
            let url = format!(
                "https://{}/api/v1/namespaces/default/pods/{name}/status",
                gate.addr
            );
            let answer = put(pair, &url, agent, content_type, &body);
            as_the_action_says(pair, action, &name, content_type, answer);
        }
        counted_by_encoding(&gate);
    }
}

/// What `action` makes of a v1.35 status update of pod `name` in `content_type`, answered
/// `(code, headers, body)`.
fn as_the_action_says(
    pair: &Pair,
    action: &str,
    name: &str,
    content_type: &str,
    (code, headers, answer): (u16, String, Vec<u8>),
) {
    let answer = String::from_utf8_lossy(&answer);
    let said = format!("{action} {content_type}: {code} {headers}{answer}");
    let headers = headers.to_ascii_lowercase();
    let warned = headers.contains("\nwarning: 299");
    match action {
        "reject" => {
            assert_eq!(code, 422, "{said}");
            assert!(answer.contains(FIELD), "{said}");
            assert_eq!(stored_message(pair, name), "ok", "{said}");
        }
        "preserve" => {
            assert_eq!(code, 200, "{said}");
            assert!(warned, "{said}");
            assert_eq!(stored_message(pair, name), "ok", "kept: {said}");
            // The answer in the encoding the client asked for.
            let wanted = format!("content-type: {content_type}");
            assert!(headers.contains(&wanted), "{said}");
        }
        _ => {
            assert_eq!(code, 200, "{said}");
            assert!(
                warned && headers.contains(&FIELD.to_ascii_lowercase()),
                "{said}"
            );
            let stored = stored_message(pair, name);
            assert_eq!(stored, Value::Null, "dropped, as warned: {said}");
        }
    }
}

/// The three updates a gate judged, newest first on `/debug/recent` by their encoding, and in
/// `skewgate_guard_checks_total`.
fn counted_by_encoding(gate: &crate::process::Serving) {
    let (_, recent) = admin_get(gate, "/debug/recent");
    let recent: Value = serde_json::from_str(&recent).expect("recent JSON");
    let encodings: Vec<&str> = recent["guards"]["recent"]
        .as_array()
        .map(|d| d.iter().filter_map(|d| d["encoding"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(encodings, ["json", "protobuf", "protobuf"], "{recent}");
    let (_, m) = admin_get(gate, "/metrics");
    let lost = |e: &str| {
        let name = format!(
            "skewgate_guard_checks_total{{encoding=\"{e}\",guard=\"olds\",outcome=\"lost\"}}"
        );
        metric(&m, &name)
    };
    assert_eq!((lost("protobuf"), lost("json")), (2.0, 1.0), "{m}");
}

/// A protobuf update with nothing to lose: a pod without the field, as v1.35 encodes it, PUT
/// through skewgate by a v1.35 kubelet under a rejecting guard, passes as it came: judged, no
/// warning, and a no-op for the apiserver (its resourceVersion does not move, as it would for any
/// change of the body).
pub fn a_protobuf_update_with_nothing_to_lose_passes_as_it_came(pair: &Pair) {
    let routes = "writes:\n  default: new\nreads:\n  default: new\nguards:\n  - name: olds\n    match: {resources: [pods, pods/status]}\n";
    let (gate, file) = gate(pair, routes);
    schemas_known(&gate);
    let pod = file.with_file_name("plain.yaml");
    let yaml = "apiVersion: v1\nkind: Pod\nmetadata: {name: pb-plain, namespace: default}\nspec:\n  schedulingGates: [{name: example.com/hold}]\n  containers: [{name: c, image: busybox}]\n";
    std::fs::write(&pod, yaml).expect("pod");
    let _ = direct(pair, "new", &["create", "serviceaccount", "default"]);
    let (ok, text) = direct(pair, "new", &["apply", "-f", &pod.to_string_lossy()]);
    assert!(ok, "{text}");
    let version = |pair: &Pair| {
        let (_, v) = direct(
            pair,
            "new",
            &[
                "get",
                "pod",
                "pb-plain",
                "-o",
                "jsonpath={.metadata.resourceVersion}",
            ],
        );
        v
    };
    let before = version(pair);
    let body = read(pair, "old", "pb-plain", PROTOBUF);
    let url = format!(
        "https://{}/api/v1/namespaces/default/pods/pb-plain/status",
        gate.addr
    );
    let agent = format!(
        "kubelet/{} (linux/amd64) kubernetes/abc1234",
        pair.var("OLD_VERSION")
    );
    let (code, headers, answer) = put(pair, &url, &agent, PROTOBUF, &body);
    assert_eq!(code, 200, "{headers}{}", String::from_utf8_lossy(&answer));
    assert!(
        !headers.to_ascii_lowercase().contains("\nwarning:"),
        "{headers}"
    );
    assert_eq!(
        version(pair),
        before,
        "a no-op: the bytes the apiserver got are what it stores"
    );
    let (_, m) = admin_get(&gate, "/metrics");
    let judged = "skewgate_guard_checks_total{encoding=\"protobuf\",guard=\"olds\",outcome=\"nothing_lost\"}";
    assert_eq!(metric(&m, judged), 1.0, "{m}");
}

/// The down direction: writes through the old version, the pod read (by a v1.36 kubelet) from
/// the new one in protobuf, with the field the old version cannot store: rejected naming it, or
/// sent with a warning.
pub fn the_guard_refuses_a_newer_protobuf_update_the_older_version_would_strip(pair: &Pair) {
    let agent = format!(
        "kubelet/{} (linux/amd64) kubernetes/abc1234",
        pair.var("NEW_VERSION")
    );
    for (action, code) in [("reject", 422), ("warn", 200)] {
        // A v1.36 kubelet writing through v1.35 breaks the version-skew policy: the table says so
        // in so many words (else skewgate refuses it, 429, before any guard).
        let routes = format!(
            "writes:\n  default: old\nreads:\n  default: new\nguards:\n  - name: down\n    match: {{resources: [pods, pods/status]}}\n    action: {action}\nskewPolicy:\n  allowOlderApiserver: [kubelet]\n"
        );
        let (gate, file) = gate(pair, &routes);
        schemas_known(&gate);
        let name = format!("pb-down-{action}");
        healthy_pod_on_new(pair, &file, &name);
        let body = read(pair, "new", &name, PROTOBUF);
        let url = format!(
            "https://{}/api/v1/namespaces/default/pods/{name}/status",
            gate.addr
        );
        let (got, headers, answer) = put(pair, &url, &agent, PROTOBUF, &body);
        let said = format!(
            "{action}: {got} {headers}{}",
            String::from_utf8_lossy(&answer)
        );
        assert_eq!(got, code, "{said}");
        let named = if action == "reject" {
            String::from_utf8_lossy(&answer).into_owned()
        } else {
            headers
        };
        assert!(named.contains(FIELD), "{said}");
        let (_, recent) = admin_get(&gate, "/debug/recent");
        let recent: Value = serde_json::from_str(&recent).expect("recent JSON");
        assert_eq!(
            recent["guards"]["recent"][0]["encoding"], "protobuf",
            "{recent}"
        );
    }
}
