//! Every route file shipped in routes/ loads, and the example says what its comments say.

use std::path::Path;
use std::sync::Arc;

use skewgate::classify::{Client, classify};
use skewgate::config;
use skewgate::steer::{Quiet, SteerRequest, Steering};

#[test]
fn every_file_in_routes_loads() {
    for folder in ["routes", "deploy/routes"] {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(folder);
        let files = config::route_files_in(&dir).expect("the folder is readable");
        assert!(!files.is_empty(), "{folder} holds route files");
        for file in files {
            if let Err(e) = config::load_file(&file) {
                panic!("{} does not load:\n{e}", file.display());
            }
        }
    }
    // The deployment's route directory holds exactly one table, as --routes requires.
    assert!(
        config::load_path(&Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/routes")).is_ok()
    );
}

#[test]
fn the_example_moves_team_a_and_ramps_kubelets() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("routes/example.yaml");
    let steering = Steering::new(Arc::new(config::load_file(&file).expect("example loads")));
    let table = steering.table();
    let decide = |method: &str, path: &str, user: &str, ua: Option<&str>, at: &str| {
        let info = classify(method, path, None);
        let req = SteerRequest {
            info: &info,
            user,
            groups: &[],
            client: Client::from_user_agent(ua),
        };
        let now = humantime::parse_rfc3339(at).expect("time");
        let d = steering.decide(&req, now, &Quiet);
        (
            d.rule_name(table).to_owned(),
            table.backend_name(d.backend).to_owned(),
        )
    };
    let t = "2026-11-22T09:00:00Z";
    assert_eq!(
        decide("PUT", "/api/v1/namespaces/team-a/configmaps/c", "", None, t),
        ("team-a".into(), "v1-30".into())
    );
    assert_eq!(
        decide("GET", "/api/v1/namespaces/team-a/configmaps/c", "", None, t),
        ("team-a".into(), "v1-30".into())
    );
    assert_eq!(
        decide("PUT", "/api/v1/namespaces/team-b/configmaps/c", "", None, t),
        ("writes.default".into(), "v1-29".into())
    );
    // Before startAt the kubelet rollout is at 0 %; once at 100 % every kubelet reads from 1.30.
    let kubelet = Some("kubelet/v1.29.4 (linux/amd64) kubernetes/abc1234");
    assert_eq!(
        decide("GET", "/api/v1/nodes/n1", "system:node:n1", kubelet, t),
        ("kubelet-reads".into(), "v1-29".into())
    );
    assert_eq!(
        decide(
            "GET",
            "/api/v1/nodes/n1",
            "system:node:n1",
            kubelet,
            "2026-11-24T00:00:00Z"
        ),
        ("kubelet-reads".into(), "v1-30".into())
    );
}
