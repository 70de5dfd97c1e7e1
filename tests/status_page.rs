//! The status page on the admin listener: served by skewgate itself, with nothing fetched from
//! anywhere else, reading only this listener's JSON and /metrics; and the JSON still holds every
//! field the page reads. In headless Chromium (skipped, saying so, without it): a pin's move and a
//! rollout's abort show on the open page within 3 s; so do a scheduled flip before, in and after its
//! fence, a schedule's next step, a guard's refusal with its field, an error skewgate answered
//! itself and a backend down since when; and the page fits a phone's width.

mod common;

#[path = "status_page/browser.rs"]
mod browser;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use common::*;
use skewgate::proxy::ProxySettings;
use skewgate::steer::ManualClock;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_is_served_whole_and_fetches_only_the_admin_listener() {
    let sims = sims().await;
    let gate = gate(&routes(
        &sims,
        "writes:\n  default: old\n  pins:\n    - {name: team-a, namespaces: [team-a], backend: new}\nreads:\n  default: old\n  rollouts:\n    - {name: canary, match: {namespaces: [canary]}, to: new, percent: 10, abort: {errorRatio: 0.1, window: 1m, minRequests: 50}}\n",
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
            "fetch(\"/debug/recent\")",
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
    has(
        &routes,
        "routes",
        &["now", "name", "backends", "writes", "reads"],
    );
    let backend = &routes["backends"][0];
    has(backend, "backends[]", &["name", "version", "endpoints"]);
    let endpoint = &backend["endpoints"][0];
    has(
        endpoint,
        "endpoints[]",
        &[
            "url",
            "state",
            "since",
            "failure",
            "failureSince",
            "connections",
            "streams",
        ],
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
        "step",
        "steps",
        "next",
        "aborted",
        "abortWindow",
        "selectors",
    ];
    has(rollout, "rollouts[]", &rollout_fields);
    let window_fields = [
        "requests",
        "failures",
        "errorRatio",
        "threshold",
        "minRequests",
        "window",
        "tripped",
    ];
    has(&rollout["abortWindow"], "abortWindow", &window_fields);
    // What the page reads of /debug/recent.
    let recent = gate.debug_recent().await;
    assert!(recent["errors"].is_array(), "{recent}");
    assert!(recent["guards"]["recent"].is_array(), "{recent}");
    has(
        &recent["guards"]["lastHour"],
        "guards.lastHour",
        &["reject", "warn", "preserve"],
    );
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
    let rollouts = page.text("#rollouts").await;
    assert!(rollouts.contains("canary\tnew\t0 %"), "{rollouts}");
    // With the error ratio that tripped it, against its threshold.
    let tripped = &gate.debug_routes().await["reads"]["rollouts"][0]["abortWindow"]["tripped"];
    let said = format!(
        "{} of {} failed (",
        tripped["failures"], tripped["requests"]
    );
    assert!(
        rollouts.contains(&said) && rollouts.contains("aborts above 10.0 % once 50 requests in 1m"),
        "{rollouts}"
    );
    if let Ok(file) = std::env::var("SKEWGATE_SCREENSHOT")
        && let Some(png) = page.screenshot().await
    {
        let _ = std::fs::write(file, png);
    }
}

/// The table of the second browser test: pin `team-b` as `team_b` says, pin `lost` on a backend
/// whose only endpoint refuses connections, a rollout by schedule begun at `started`, and a guard
/// over configmaps.
fn scheduled_table(sims: &Sims, dead: &str, team_b: &str, started: SystemTime) -> String {
    let started = humantime::format_rfc3339_seconds(started);
    routes(
        sims,
        &format!(
            "writes:\n  default: old\n  fence: 30s\n  pins:\n    - {{name: team-b, namespaces: [team-b], {team_b}}}\n    - {{name: lost, namespaces: [lost], backend: spare}}\nreads:\n  default: old\n  rollouts:\n    - name: staged\n      to: new\n      stickyBy: namespace\n      match: {{namespaces: [staged-*]}}\n      startAt: \"{started}\"\n      steps:\n        - {{percent: 10, hold: 1h}}\n        - {{percent: 50}}\nguards:\n  - name: skew\n    match: {{resources: [configmaps]}}\n    action: reject\n"
        ),
    )
    .replace(
        "backends:\n",
        &format!("backends:\n  - {{name: spare, endpoints: [\"{dead}\"]}}\n"),
    )
}

/// On skewgate's clock (moved by hand): a pin's scheduled flip shows before it with its countdown,
/// in its fence with its writes held, and after; a schedule shows its next step; a guard's refusal
/// shows with the field it named; an error skewgate answered itself shows with its reason; and a
/// backend down shows since when. Then the page is shown on a phone's screen: nothing is wider.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flip_its_fence_a_schedule_a_guard_and_errors_show_on_the_open_page() {
    let sims = sims().await;
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead_url = format!("http://{}", dead.local_addr().expect("addr"));
    drop(dead);
    let start = SystemTime::now();
    let clock = Arc::new(ManualClock::new(start));
    let started = start - Duration::from_secs(10);
    let dir = temp_dir("status-page");
    let file = dir.join("routes.yaml");
    let table = |team_b: &str| scheduled_table(&sims, &dead_url, team_b, started);
    std::fs::write(&file, table("backend: old")).expect("routes");
    let settings = ProxySettings {
        clock: clock.clone(),
        ..ProxySettings::default()
    };
    let gate = gate_on(&file, settings).await;
    gate.knows_schemas().await;
    let Some(mut page) = browser::Browser::open(&format!("{}/", gate.admin())).await else {
        return;
    };
    let soon = Duration::from_secs(3);
    let loaded = page
        .shows("#pins", "team-b\told\tsettled", Duration::from_secs(20))
        .await;
    assert!(loaded.is_some(), "rendered: {}", page.text("body").await);
    let rollouts = page.text("#rollouts").await;
    assert!(
        rollouts.contains("staged\tnew\t10 %\tstep 1 of 2 (10 %); next 50 % in 59 min 50 s"),
        "{rollouts}"
    );
    let backends = page.shows("#backends", "spare\tany", soon).await;
    assert!(backends.is_some(), "{}", page.text("#backends").await);
    let down = page
        .shows("#backends", "\tdown for ", Duration::from_secs(10))
        .await;
    assert!(down.is_some(), "{}", page.text("#backends").await);

    // The pin is to move at flipAt, two minutes on: until then its writes still go to old.
    let flip_at = start + Duration::from_secs(120);
    let pin = format!(
        "backend: new, flipAt: \"{}\"",
        humantime::format_rfc3339_seconds(flip_at)
    );
    gate.rewrite(&table(&pin));
    let loaded = eventually(10, || async {
        gate.debug_routes().await["writes"]["pins"][0]["move"] == "before flipAt"
    })
    .await;
    assert!(loaded, "skewgate took the table with flipAt");
    let before = page
        .shows(
            "#pins",
            "team-b\told (then new)\tbefore flipAt; flips in 2 min 0 s",
            soon,
        )
        .await;
    assert!(before.is_some(), "{}", page.text("#pins").await);
    // At flipAt its writes are held for the fence; after it, they go to new.
    clock.set(flip_at);
    let fenced = page
        .shows(
            "#pins",
            "team-b\theld, then new\tin fence: writes held",
            soon,
        )
        .await;
    assert!(fenced.is_some(), "{}", page.text("#pins").await);
    clock.set(flip_at + Duration::from_secs(31));
    let settled = page.shows("#pins", "team-b\tnew\tsettled", soon).await;
    assert!(settled.is_some(), "{}", page.text("#pins").await);

    // A read of a namespace pinned to the dead backend: skewgate answers 503 itself.
    let lost = h1()
        .get(format!("{}/api/v1/namespaces/lost/configmaps", gate.url()))
        .send()
        .await
        .expect("answer");
    assert_eq!(lost.status(), 503);
    let error = page
        .shows(
            "#errors",
            "503 ServiceUnavailable\t1\tlist configmaps\tspare\taddress 127.0.0.1",
            soon,
        )
        .await;
    assert!(error.is_some(), "{}", page.text("#errors").await);

    // An update through 1.29 of a configmap 1.30 stored with its field `policy`: refused.
    let cm = serde_json::json!({"metadata": {"name": "cm"}, "data": {"a": "1"}, "policy": "keep"});
    let url = format!("{}/api/v1/namespaces/default/configmaps", sims.new.url());
    let created = h1().post(url).json(&cm).send().await.expect("create");
    assert_eq!(created.status(), 201);
    let put = h1()
        .put(format!(
            "{}/api/v1/namespaces/default/configmaps/cm",
            gate.url()
        ))
        .json(&cm)
        .send()
        .await
        .expect("put");
    assert_eq!(put.status(), 422);
    let guarded = page
        .shows("#guarded", "skew\treject\tconfigmaps default/cm\t", soon)
        .await;
    assert!(guarded.is_some(), "{}", page.text("#guarded").await);
    assert!(page.text("#guarded").await.contains("\tpolicy"));
    assert!(
        page.text("#guard-hour")
            .await
            .contains("1 rejected, 0 warned, 0 preserved")
    );

    // On a phone's screen, nothing is wider than the screen: wide tables scroll in their box.
    page.as_phone().await.expect("phone metrics");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let fits = page
        .eval("document.documentElement.scrollWidth <= window.innerWidth")
        .await;
    let widths = page
        .eval("[document.documentElement.scrollWidth, window.innerWidth]")
        .await;
    assert_eq!(fits, true, "page width against the screen's: {widths}");
    if let Ok(file) = std::env::var("SKEWGATE_SCREENSHOT_PHONE")
        && let Some(png) = page.screenshot().await
    {
        let _ = std::fs::write(file, png);
    }
}
