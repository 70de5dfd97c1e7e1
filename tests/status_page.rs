//! The status page on the admin listener: served by skewgate itself, with nothing fetched from
//! anywhere else, reading only this listener's JSON and /metrics; and the JSON still holds every
//! field the page reads. In headless Chromium (skipped, saying so, without it): a pin's move and a
//! rollout's abort show on the open page within 3 s, and replicas that stop agreeing (`live.rs`); so
//! do a scheduled flip before, in and after its fence, a schedule's next step, a guard's refusal
//! with its field, an error skewgate answered itself and a backend down since when; and the page
//! fits a phone's width (`scheduled.rs`).

mod common;

#[path = "status_page/browser.rs"]
mod browser;
#[path = "status_page/live.rs"]
mod live;
#[path = "status_page/scheduled.rs"]
mod scheduled;

use common::*;

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
        // Names and messages (an object's name, a client's user) are written as text, never
        // parsed as markup: nothing a client sends can run in the operator's browser.
        for markup in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
        ] {
            assert!(!page.contains(markup), "{path} writes markup with {markup}");
        }
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
        &["now", "name", "reload", "backends", "writes", "reads"],
    );
    has(&routes["reload"], "reload", &["loadedAt", "failing"]);
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
        "goesTo",
        "writes",
        "flipAt",
        "writesHeld",
        "superseded",
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
