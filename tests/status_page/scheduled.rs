//! The open page tells what comes next and what went wrong: a scheduled flip and its fence, a
//! schedule's next step, a guard's refusal, an error skewgate answered itself, a backend down; and
//! it fits a phone's screen.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use skewgate::proxy::ProxySettings;
use skewgate::steer::ManualClock;

use crate::browser::Browser;
use crate::common::*;

/// How soon skewgate's state shows on the open page (it asks every 2 s).
const SOON: Duration = Duration::from_secs(3);

/// The table of the second browser test: pin `team-b` as `team_b` says; pin `team-c` to new at
/// `flip_at`, with no backend it moves from (a replica that starts with this file cannot know it);
/// pin `lost` on a backend whose only endpoint refuses connections; a rollout by schedule begun at
/// `started`; and a guard over configmaps.
fn scheduled_table(
    sims: &Sims,
    dead: &str,
    team_b: &str,
    (started, flip_at): (SystemTime, SystemTime),
) -> String {
    let started = humantime::format_rfc3339_seconds(started);
    let flip_at = humantime::format_rfc3339_seconds(flip_at);
    routes(
        sims,
        &format!(
            "writes:\n  default: old\n  fence: 30s\n  pins:\n    - {{name: team-b, namespaces: [team-b], {team_b}}}\n    - {{name: team-c, namespaces: [team-c], backend: new, flipAt: \"{flip_at}\"}}\n    - {{name: lost, namespaces: [lost], backend: spare}}\nreads:\n  default: old\n  rollouts:\n    - name: staged\n      to: new\n      stickyBy: namespace\n      match: {{namespaces: [staged-*]}}\n      startAt: \"{started}\"\n      steps:\n        - {{percent: 10, hold: 1h}}\n        - {{percent: 50}}\nguards:\n  - name: skew\n    match: {{resources: [configmaps]}}\n    action: reject\n"
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
    let file = temp_dir("status-page").join("routes.yaml");
    let flip_at = start + Duration::from_secs(120);
    let table = |team_b: &str| scheduled_table(&sims, &dead_url, team_b, (started, flip_at));
    std::fs::write(&file, table("backend: old")).expect("routes");
    let settings = ProxySettings {
        clock: clock.clone(),
        ..ProxySettings::default()
    };
    let gate = gate_on(&file, settings).await;
    gate.knows_schemas().await;
    let Some(mut page) = Browser::open(&format!("{}/", gate.admin())).await else {
        return;
    };
    let loaded = page
        .shows("#pins", "team-b\told\tsettled", Duration::from_secs(20))
        .await;
    assert!(loaded.is_some(), "rendered: {}", page.text("body").await);
    the_next_step_and_a_backend_down_show(&mut page).await;
    let none = page.text("#rollback-cost").await;
    assert!(none.contains("a rollback strands nothing yet"), "{none}");
    let shares = page.text("#shares-line").await;
    assert!(shares.contains("No shared watch is open"), "{shares}");
    let pin = format!(
        "backend: new, flipAt: \"{}\"",
        humantime::format_rfc3339_seconds(flip_at)
    );
    gate.rewrite(&table(&pin));
    a_flip_shows_before_in_and_after_its_fence(&mut page, (&sims, &gate), &clock, flip_at).await;
    an_error_skewgate_answered_shows(&mut page, &gate).await;
    a_guards_refusal_shows(&mut page, (&sims, &gate)).await;
    a_rollbacks_cost_shows(&mut page, (&sims, &gate)).await;
    let moves = |back_at: SystemTime| {
        let at = humantime::format_rfc3339_seconds(back_at);
        table(&format!("backend: old, from: new, flipAt: \"{at}\""))
    };
    // An hour past the flip, far ahead of the clock moved by hand.
    let later = flip_at + Duration::from_secs(3600);
    a_superseded_move_shows(&mut page, &gate, (moves, later)).await;
    the_page_fits_a_phone(&mut page).await;
}

/// Pin team-b moves back to old a minute after `now`; a table that moves it a minute later comes
/// before that: the first move, pending, shows as superseded, abandoned with the writes on new.
async fn a_superseded_move_shows(
    page: &mut Browser,
    gate: &Gate,
    (moves, now): (impl Fn(SystemTime) -> String, SystemTime),
) {
    gate.rewrite(&moves(now + Duration::from_secs(60)));
    let pending = eventually(10, || async {
        gate.debug_routes().await["writes"]["pins"][0]["move"] == "before flipAt"
    })
    .await;
    assert!(pending, "skewgate took the move back");
    gate.rewrite(&moves(now + Duration::from_secs(120)));
    let superseded = "the move to old at ";
    let shown = page
        .shows("#pins", superseded, Duration::from_secs(20))
        .await;
    let pins = page.text("#pins").await;
    assert!(shown.is_some(), "{pins}");
    assert!(pins.contains("was abandoned, writes kept on new"), "{pins}");
}

/// What comes next: the schedule's next step, 59 min 50 s on (it began 10 s ago and holds an
/// hour); and the backend whose endpoint refuses connections, down since when.
async fn the_next_step_and_a_backend_down_show(page: &mut Browser) {
    let rollouts = page.text("#rollouts").await;
    assert!(
        rollouts.contains("staged\tnew\t10 %\tstep 1 of 2 (10 %); next 50 % in 59 min 50 s"),
        "{rollouts}"
    );
    let backends = page.shows("#backends", "spare\tany", SOON).await;
    assert!(backends.is_some(), "{}", page.text("#backends").await);
    let down = page
        .shows("#backends", "\tdown for ", Duration::from_secs(10))
        .await;
    assert!(down.is_some(), "{}", page.text("#backends").await);
}

/// Pin team-b moves to new at `flip_at`, two minutes on: until then its writes still go to old,
/// the page counting down; at `flip_at` its writes are held for the fence (a patch sent then is
/// one write held); after it, they go to new, and the held patch with them.
async fn a_flip_shows_before_in_and_after_its_fence(
    page: &mut Browser,
    (sims, gate): (&Sims, &Gate),
    clock: &ManualClock,
    flip_at: SystemTime,
) {
    let loaded = eventually(10, || async {
        gate.debug_routes().await["writes"]["pins"][0]["move"] == "before flipAt"
    })
    .await;
    assert!(loaded, "skewgate took the table with flipAt");
    let before = "team-b\told (then new)\tbefore flipAt; flips in 2 min 0 s";
    let shown = page.shows("#pins", before, SOON).await;
    let pins = page.text("#pins").await;
    assert!(shown.is_some(), "{pins}");
    // team-c's writes are held until flipAt + fence: the backend it moves from is not known.
    let waiting = "team-c\theld, then new\twaiting for flipAt + fence: previous backend unknown; flips in 2 min 0 s";
    assert!(pins.contains(waiting), "{pins}");
    let cm = serde_json::json!({"metadata": {"name": "held"}, "data": {"a": "1"}});
    let url = format!("{}/api/v1/namespaces/team-b/configmaps", sims.old.url());
    let created = h1().post(url).json(&cm).send().await.expect("create");
    assert_eq!(created.status(), 201);
    clock.set(flip_at);
    let url = format!("{}/api/v1/namespaces/team-b/configmaps/held", gate.url());
    let patch = tokio::spawn(
        h1().patch(url)
            .header("content-type", "application/merge-patch+json")
            .body(r#"{"data":{"a":"2"}}"#)
            .send(),
    );
    let fenced = "team-b\theld, then new\tin fence: writes held\t1\t";
    let shown = page.shows("#pins", fenced, SOON).await;
    let pins = page.text("#pins").await;
    assert!(shown.is_some(), "{pins}");
    assert!(
        pins.contains("team-c\theld, then new\tin fence: writes held\t0\t"),
        "{pins}"
    );
    clock.set(flip_at + Duration::from_secs(31));
    let settled = page.shows("#pins", "team-b\tnew\tsettled\t0\t", SOON).await;
    let pins = page.text("#pins").await;
    assert!(settled.is_some(), "{pins}");
    assert!(pins.contains("team-c\tnew\tsettled"), "{pins}");
    let patched = patch.await.expect("join").expect("the held patch answered");
    assert_eq!(patched.status(), 200, "sent once the fence ended");
    assert_eq!(served_by(&patched), NEW, "to the pin's new backend");
}

/// A read of a namespace pinned to the dead backend: skewgate answers 503 itself, and the page
/// lists it with the request, the backend and the client.
async fn an_error_skewgate_answered_shows(page: &mut Browser, gate: &Gate) {
    let url = format!("{}/api/v1/namespaces/lost/configmaps", gate.url());
    let lost = h1().get(url).send().await.expect("answer");
    assert_eq!(lost.status(), 503);
    let row = "503 ServiceUnavailable\t1\tlist configmaps\tspare\taddress 127.0.0.1";
    let error = page.shows("#errors", row, SOON).await;
    assert!(error.is_some(), "{}", page.text("#errors").await);
}

/// An update through 1.29 of a configmap 1.30 stored with its field `policy`: refused, and the page
/// names the object, the field and the body's encoding, and counts it in the hour and by encoding.
async fn a_guards_refusal_shows(page: &mut Browser, (sims, gate): (&Sims, &Gate)) {
    let cm = serde_json::json!({"metadata": {"name": "cm"}, "data": {"a": "1"}, "policy": "keep"});
    let url = format!("{}/api/v1/namespaces/default/configmaps", sims.new.url());
    let created = h1().post(url).json(&cm).send().await.expect("create");
    assert_eq!(created.status(), 201);
    let url = format!("{}/api/v1/namespaces/default/configmaps/cm", gate.url());
    let put = h1().put(url).json(&cm).send().await.expect("put");
    assert_eq!(put.status(), 422);
    let guarded = page
        .shows("#guarded", "skew\treject\tconfigmaps default/cm\t", SOON)
        .await;
    assert!(guarded.is_some(), "{}", page.text("#guarded").await);
    assert!(page.text("#guarded").await.contains("\tpolicy\tjson"));
    let hour = page.text("#guard-hour").await;
    assert!(hour.contains("1 rejected, 0 warned, 0 preserved"), "{hour}");
    let counted = page
        .shows("#guards", "skew\treject\tconfigmaps\t1\tjson 1", SOON)
        .await;
    assert!(counted.is_some(), "{}", page.text("#guards").await);
}

/// A patch through 1.30 (team-b's pin, moved there) of a configmap that holds 1.30's `policy`: the
/// page counts it as what a rollback to 1.29 would strand.
async fn a_rollbacks_cost_shows(page: &mut Browser, (sims, gate): (&Sims, &Gate)) {
    let cm =
        serde_json::json!({"metadata": {"name": "kept"}, "data": {"a": "1"}, "policy": "keep"});
    let url = format!("{}/api/v1/namespaces/team-b/configmaps", sims.new.url());
    let created = h1().post(url).json(&cm).send().await.expect("create");
    assert_eq!(created.status(), 201);
    let url = format!("{}/api/v1/namespaces/team-b/configmaps/kept", gate.url());
    let patched = h1()
        .patch(url)
        .header("content-type", "application/merge-patch+json")
        .body(r#"{"data":{"a":"2"}}"#)
        .send()
        .await
        .expect("patch");
    assert_eq!(patched.status(), 200);
    let shown = page
        .shows(
            "#rollback-cost",
            "to old: writes that stored fields it cannot store: configmaps 1",
            SOON,
        )
        .await;
    assert!(shown.is_some(), "{}", page.text("#rollback-cost").await);
}

/// On a phone's screen, nothing is wider than the screen: wide tables scroll in their box. With
/// `SKEWGATE_SCREENSHOT_PHONE=FILE`, a PNG of it.
async fn the_page_fits_a_phone(page: &mut Browser) {
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
