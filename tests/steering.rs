//! Through the real proxy: writes follow pins, reads follow them or roll out, and pinning prevents the
//! cross-version damage the simulators reproduce.

mod common;

use common::*;
use serde_json::{Value, json};

const PINNED: &str = "writes:
  default: old
  pins:
    - name: team-a
      namespaces: [team-a]
      backend: new
reads:
  default: old
";

/// GETs the object, sets `data.n` to `i`, and PUTs the whole object back, as a client that reads
/// and writes full objects does.
async fn read_modify_write(c: &reqwest::Client, url: &str, i: usize) {
    let mut obj: Value = c
        .get(url)
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    obj["data"]["n"] = json!(i.to_string());
    assert_eq!(
        c.put(url).json(&obj).send().await.expect("put").status(),
        200
    );
}

async fn create_ns(client: &reqwest::Client, base: &str, ns: &str) {
    let r = client
        .post(format!("{base}/api/v1/namespaces"))
        .json(&json!({"metadata": {"name": ns}}))
        .send()
        .await
        .expect("create namespace");
    assert!(
        r.status().is_success() || r.status() == 409,
        "{}",
        r.status()
    );
}

async fn create_cm(
    client: &reqwest::Client,
    base: &str,
    ns: &str,
    name: &str,
    body: Value,
) -> reqwest::Response {
    let mut obj = body;
    obj["metadata"] = json!({"name": name});
    client
        .post(format!("{base}/api/v1/namespaces/{ns}/configmaps"))
        .json(&obj)
        .send()
        .await
        .expect("create")
}

#[tokio::test]
async fn writes_follow_pins_and_the_default() {
    let sims = sims().await;
    let gate = gate(&routes(&sims, PINNED)).await;
    let c = h1();
    let base = gate.url();
    for ns in ["team-a", "team-b"] {
        create_ns(&c, &base, ns).await;
        assert_eq!(
            create_cm(&c, &base, ns, "cm", json!({"data": {"v": "0"}}))
                .await
                .status(),
            201
        );
    }
    for i in 1..=3 {
        for ns in ["team-a", "team-b"] {
            let r = c
                .patch(format!("{base}/api/v1/namespaces/{ns}/configmaps/cm"))
                .header("content-type", "application/merge-patch+json")
                .body(format!(r#"{{"data":{{"v":"{i}"}}}}"#))
                .send()
                .await
                .expect("patch");
            assert_eq!(r.status(), 200);
            assert_eq!(
                served_by(&r),
                if ns == "team-a" { NEW } else { OLD },
                "patch in {ns}"
            );
        }
    }
    let writes = sims.store.writes();
    let by = |ns: &str, verb: &str| -> Vec<String> {
        writes
            .iter()
            .filter(|w| w.key.namespace == ns && w.key.resource == "configmaps" && w.verb == verb)
            .map(|w| w.version.clone())
            .collect()
    };
    assert_eq!(by("team-a", "patch"), vec![NEW; 3]);
    assert_eq!(by("team-b", "patch"), vec![OLD; 3]);
    // Reads of a pinned namespace follow the pin; others go to reads.default.
    let r = c
        .get(format!("{base}/api/v1/namespaces/team-a/configmaps/cm"))
        .send()
        .await
        .expect("get");
    assert_eq!(served_by(&r), NEW);
    let r = c
        .get(format!("{base}/api/v1/namespaces/team-b/configmaps/cm"))
        .send()
        .await
        .expect("get");
    assert_eq!(served_by(&r), OLD);
}

/// Read through one version, write the whole object back through the other: the field that only the
/// newer version knows is lost. Through skewgate with a pin, reads and writes meet one version.
#[tokio::test]
async fn the_damage_and_the_cure() {
    let sims = sims().await;
    let c = h1();
    // Directly, alternating between the two apiservers as a load balancer would.
    let (old, new) = (sims.old.url(), sims.new.url());
    create_ns(&c, &new, "direct").await;
    let r = create_cm(
        &c,
        &new,
        "direct",
        "cm",
        json!({"data": {"n": "0"}, "policy": "keep-me"}),
    )
    .await;
    assert_eq!(r.status(), 201);
    for i in 1..=4 {
        let via = if i % 2 == 0 { &new } else { &old };
        read_modify_write(
            &c,
            &format!("{via}/api/v1/namespaces/direct/configmaps/cm"),
            i,
        )
        .await;
    }
    let stored = sims.store.get(&skewgate_sim::ObjectKey {
        resource: "configmaps".into(),
        namespace: "direct".into(),
        name: "cm".into(),
    });
    assert!(
        stored.is_some_and(|o| o.get("policy").is_none()),
        "alternating versions lose the new field"
    );

    // Through skewgate, with the namespace pinned to the new version.
    let gate = gate(&routes(&sims, &PINNED.replace("team-a", "cured"))).await;
    let base = gate.url();
    create_ns(&c, &base, "cured").await;
    assert_eq!(
        create_cm(
            &c,
            &base,
            "cured",
            "cm",
            json!({"data": {"n": "0"}, "policy": "keep-me"})
        )
        .await
        .status(),
        201
    );
    for i in 1..=4 {
        read_modify_write(
            &c,
            &format!("{base}/api/v1/namespaces/cured/configmaps/cm"),
            i,
        )
        .await;
    }
    let obj: Value = c
        .get(format!("{base}/api/v1/namespaces/cured/configmaps/cm"))
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert_eq!(obj["policy"], "keep-me", "the pin keeps the field");
    assert_eq!(obj["data"]["n"], "4");
}

#[tokio::test]
async fn a_rollout_at_30_percent_is_sticky_by_namespace() {
    let sims = sims().await;
    let gate = gate(&routes(
        &sims,
        "writes:
  default: old
reads:
  default: old
  rollouts:
    - name: thirty
      to: new
      stickyBy: namespace
      percent: 30
",
    ))
    .await;
    let c = h2();
    let base = gate.url();
    let mut first = Vec::new();
    for i in 0..1000 {
        let r = c
            .get(format!("{base}/api/v1/namespaces/ns-{i}/configmaps"))
            .send()
            .await
            .expect("list");
        assert_eq!(r.status(), 200);
        first.push(served_by(&r));
    }
    let to_new = first.iter().filter(|v| *v == NEW).count();
    assert!(
        (250..=350).contains(&to_new),
        "{to_new} of 1000 namespaces went to the new version"
    );
    for i in (0..1000).step_by(7) {
        let r = c
            .get(format!("{base}/api/v1/namespaces/ns-{i}/pods"))
            .send()
            .await
            .expect("list");
        assert_eq!(served_by(&r), first[i], "namespace ns-{i} changed sides");
    }
}
