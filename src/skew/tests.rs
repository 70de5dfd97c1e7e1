use serde_json::{Value, json};

use super::*;

fn version(spec_fields: Value) -> VersionFields {
    let doc = json!({
        "paths": {"/api/v1/namespaces/{namespace}/pods": {"get": {"x-kubernetes-group-version-kind": {"group": "", "version": "v1", "kind": "Pod"}}}},
        "components": {"schemas": {
            "Pod": {
                "x-kubernetes-group-version-kind": [{"group": "", "version": "v1", "kind": "Pod"}],
                "properties": {"spec": {"allOf": [{"$ref": "#/components/schemas/PodSpec"}]}},
            },
            "PodSpec": {"properties": spec_fields},
        }},
    });
    VersionFields::from_documents([&doc])
}

#[test]
fn fields_only_one_version_knows_and_changed_defaults_are_reported() {
    let old = version(json!({
        "grace": {"type": "integer", "default": 30},
        "containers": {"type": "array", "items": {"properties": {"image": {"type": "string"}}}},
    }));
    let new = version(json!({
        "grace": {"type": "integer", "default": 45},
        "containers": {"type": "array", "items": {"properties": {
            "image": {"type": "string"},
            "startupProbe": {"properties": {"period": {"type": "integer"}}},
        }}},
    }));
    let report = compare(&[("v1.29".into(), old), ("v1.30".into(), new)]);
    assert_eq!(report.kinds.len(), 1);
    let pods = &report.kinds[0];
    assert_eq!(pods.resource, "pods (v1)");
    // Only the outermost new field; its children go with it.
    assert_eq!(pods.fields.len(), 1, "{:?}", pods.fields);
    assert_eq!(pods.fields[0].path, "spec.containers[].startupProbe");
    assert_eq!(pods.fields[0].known_by, ["v1.30"]);
    assert_eq!(pods.fields[0].unknown_to, ["v1.29"]);
    assert!(pods.fields[0].container_hash_risk);
    assert_eq!(pods.defaults.len(), 1);
    assert_eq!(pods.defaults[0].path, "spec.grace");
    assert!(!pods.defaults[0].container_hash_risk);
    assert!(
        report
            .suggested_pins("v1-29")
            .contains("resources: [pods]\n      backend: v1-29")
    );
    let text = report.to_string();
    assert!(text.contains("field    spec.containers[].startupProbe  known by v1.30; dropped by v1.29  [container hash"), "{text}");
    assert!(
        text.contains("default  spec.grace  v1.29: 30, v1.30: 45"),
        "{text}"
    );
}

#[test]
fn equal_versions_have_no_skew_and_a_kind_one_version_lacks_is_listed() {
    let a = version(json!({"grace": {"type": "integer"}}));
    let report = compare(&[
        ("a".into(), a.clone()),
        ("b".into(), a),
        ("c".into(), VersionFields::default()),
    ]);
    assert!(report.kinds.is_empty());
    assert_eq!(report.served_by_some.len(), 1);
    assert_eq!(report.served_by_some[0].not_by, ["c"]);
    assert!(report.suggested_pins("a").starts_with("# No resource"));
}

#[test]
fn the_suggested_pin_says_where_it_goes_and_what_it_takes_from_the_rollouts() {
    let old = version(json!({"grace": {"type": "integer"}}));
    let new = version(json!({"grace": {"type": "integer"}, "sidecar": {"type": "string"}}));
    let report = compare(&[("v1.29".into(), old), ("v1.30".into(), new)]);
    let table = |pins: &str, rollouts: &str| {
        let text = format!(
            "apiVersion: skewgate.io/v1alpha1\nkind: RouteTable\nbackends:\n  - {{name: a, endpoints: [http://127.0.0.1:1]}}\n  - {{name: b, endpoints: [http://127.0.0.1:2]}}\nwrites:\n  default: a\n  pins:\n{pins}reads:\n  default: a\n  rollouts:\n{rollouts}"
        );
        crate::config::parse_route_table(std::path::Path::new("r.yaml"), &text)
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let t = table(
        "    - {name: team-a, namespaces: [team-a], backend: b}\n    - {name: cms, resources: [configmaps], backend: b}\n",
        "    - {name: half, to: b, percent: 50, match: {namespaces: [\"!kube-system\"]}}\n    - {name: crds, to: b, percent: 50, match: {resources: [widgets.example.com]}}\n",
    );
    let said = report.placement(&t);
    assert!(
        said.contains("at the end of writes.pins of r.yaml, after \"team-a\". The first pin"),
        "{said}"
    );
    assert!(
        said.contains("the rollouts\n# \"half\" no longer decide them"),
        "{said}"
    );
    // A pin of other resources is not in its way, nor a rollout of other resources.
    assert!(
        !said.contains("\"cms\"") && !said.contains("\"crds\""),
        "{said}"
    );
}
