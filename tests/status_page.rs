//! The status page on the admin listener (issue 46, begun): served by skewgate itself, with
//! nothing fetched from anywhere else, reading only this listener's JSON and /metrics; and the
//! JSON still holds every field the page reads; and in headless Chromium, a pin's move and a
//! rollout's abort show on the open page within 3 s (skipped, saying so, without Chromium).

mod common;

#[path = "status_page/browser.rs"]
mod browser;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_is_served_whole_and_fetches_only_the_admin_listener() {
    let sims = sims().await;
    let gate = gate(&routes(
        &sims,
        "writes:\n  default: old\n  pins:\n    - {name: team-a, namespaces: [team-a], backend: new}\nreads:\n  default: old\n  rollouts:\n    - {name: canary, match: {namespaces: [canary]}, to: new, percent: 10}\n",
    ))
    .await;
    for path in ["/", "/status"] {
        let resp = reqwest::get(format!("{}{path}", gate.admin()))
            .await
            .expect("page");
        assert_eq!(resp.status(), 200, "{path}");
        assert_eq!(resp.headers()["content-type"], "text/html; charset=utf-8");
        let page = resp.text().await.expect("body");
        for section in ["Backends", "Pins", "Rollouts", "Guards", "Replicas"] {
            assert!(page.contains(&format!("<h2>{section}")), "{section}");
        }
        // Control planes are often offline: no script, style, font or image from elsewhere.
        for outside in ["src=", "href=", "@import", "url(", "//cdn", "fonts."] {
            assert!(!page.contains(outside), "{path} loads {outside}");
        }
        let urls: Vec<&str> = page
            .match_indices("http")
            .map(|(i, _)| &page[i..])
            .collect();
        assert!(
            urls.iter()
                .all(|u| u.starts_with("http://www.w3.org/2000/svg")),
            "only the SVG namespace names a URL"
        );
        for asked in [
            "fetch(\"/debug/routes\")",
            "fetch(\"/debug/fleet\")",
            "fetch(\"/metrics\")",
        ] {
            assert!(page.contains(asked), "{asked}");
        }
    }
    // What the page reads of /debug/routes.
    let routes = gate.debug_routes().await;
    let has = |v: &serde_json::Value, what: &str, fields: &[&str]| {
        for field in fields {
            assert!(v.get(field).is_some(), "{what}.{field}");
        }
    };
    let backend = &routes["backends"][0];
    has(backend, "backends[]", &["name", "version", "endpoints"]);
    let endpoint = &backend["endpoints"][0];
    has(
        endpoint,
        "endpoints[]",
        &["url", "state", "failure", "connections", "streams"],
    );
    let pin = &routes["writes"]["pins"][0];
    let pin_fields = [
        "name",
        "backend",
        "move",
        "movingFrom",
        "flipAt",
        "writesHeld",
        "selectors",
    ];
    has(pin, "pins[]", &pin_fields);
    let rollout = &routes["reads"]["rollouts"][0];
    let rollout_fields = [
        "name",
        "to",
        "percentInForce",
        "schedulePercent",
        "aborted",
        "abortWindow",
        "selectors",
    ];
    has(rollout, "rollouts[]", &rollout_fields);
    // The page sums skewgate_requests_total by its backend and code labels, line by line.
    let got = h1()
        .get(format!(
            "{}/api/v1/namespaces/default/configmaps",
            gate.url()
        ))
        .send()
        .await
        .expect("a request");
    assert_eq!(got.status(), 200);
    let metrics = gate.metrics().await;
    let line = metrics
        .lines()
        .find(|l| l.starts_with("skewgate_requests_total{"))
        .expect("a request counted");
    assert!(
        line.contains("backend=\"old\"") && line.contains("code=\"200\""),
        "{line}"
    );
    assert!(
        line.rsplit_once("} ")
            .is_some_and(|(_, n)| n.parse::<f64>().is_ok()),
        "{line}"
    );
}

/// The page open in headless Chromium shows a pin's move and a rollout's abort within 3 s of
/// skewgate making them (the page asks every 2 s). With `SKEWGATE_SCREENSHOT=FILE`, it saves a
/// PNG of the page at the end (docs/status-page.png is one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pin_move_and_a_rollout_abort_show_on_the_open_page() {
    let sims = sims().await;
    let table = |pin_to: &str| {
        routes(
            &sims,
            &format!(
                "writes:\n  default: old\n  pins:\n    - {{name: team-a, namespaces: [team-a], backend: {pin_to}}}\nreads:\n  default: old\n  rollouts:\n    - name: canary\n      to: new\n      stickyBy: namespace\n      percent: 100\n      match: {{namespaces: [canary-*]}}\n      abort: {{errorRatio: 0.1, window: 1m, minRequests: 50}}\n"
            ),
        )
    };
    let gate = gate(&table("old")).await;
    let Some(mut page) = browser::Browser::open(&format!("{}/", gate.admin())).await else {
        return;
    };
    let soon = Duration::from_secs(3);
    let loaded = page
        .shows("#pins", "team-a\told", Duration::from_secs(20))
        .await;
    assert!(
        loaded.is_some(),
        "the page rendered: {}",
        page.text("body").await
    );
    assert!(page.text("#rollouts").await.contains("canary\tnew\t100 %"));

    // The pin moves to new: once skewgate routes by the new table, the page says so.
    gate.rewrite(&table("new"));
    let moved = eventually(10, || async {
        gate.debug_routes().await["writes"]["pins"][0]["backend"] == "new"
    })
    .await;
    assert!(moved, "skewgate took the new table");
    let shown = page.shows("#pins", "team-a\tnew", soon).await;
    assert!(
        shown.is_some(),
        "the move shows: {}",
        page.text("#pins").await
    );

    // The new version fails one read in five: the rollout aborts, and the page says so.
    sims.new
        .controls
        .fail_reads_per_mille
        .store(200, Ordering::Relaxed);
    let c = h2();
    for i in 0..500 {
        let url = format!("{}/api/v1/namespaces/canary-{i}/configmaps", gate.url());
        let r = c.get(url).send().await.expect("read");
        if served_by(&r) == OLD {
            break;
        }
    }
    assert_eq!(
        gate.debug_routes().await["reads"]["rollouts"][0]["aborted"],
        true
    );
    let shown = page.shows("#rollouts", "ABORTED", soon).await;
    assert!(
        shown.is_some(),
        "the abort shows: {}",
        page.text("#rollouts").await
    );
    assert!(page.text("#rollouts").await.contains("canary\tnew\t0 %"));
    if let Ok(file) = std::env::var("SKEWGATE_SCREENSHOT")
        && let Some(png) = page.screenshot().await
    {
        let _ = std::fs::write(file, png);
    }
}
