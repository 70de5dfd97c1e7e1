//! The open page follows what skewgate does: a pin's move, a mistake in the route file, a rollout's
//! abort, the rates, replicas that stop agreeing.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::browser::Browser;
use crate::common::*;

/// How soon skewgate's state shows on the open page (it asks every 2 s).
const SOON: Duration = Duration::from_secs(3);

/// The table of the first test: pin team-a on `pin_to`, and a canary rollout of every `canary-*`
/// namespace to new that aborts above 10 % errors.
fn canary_table(sims: &Sims, pin_to: &str) -> String {
    routes(
        sims,
        &format!(
            "writes:\n  default: old\n  pins:\n    - {{name: team-a, namespaces: [team-a], backend: {pin_to}}}\nreads:\n  default: old\n  rollouts:\n    - name: canary\n      to: new\n      stickyBy: namespace\n      percent: 100\n      match: {{namespaces: [canary-*]}}\n      abort: {{errorRatio: 0.1, window: 1m, minRequests: 50}}\n"
        ),
    )
}

/// The page open in headless Chromium shows a pin's move, a mistake in the route file and a
/// rollout's abort within 3 s of skewgate making them (the page asks every 2 s), and the rates it
/// computes. With `SKEWGATE_SCREENSHOT=FILE`, it saves a PNG of the page at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pin_move_and_a_rollout_abort_show_on_the_open_page() {
    let sims = sims().await;
    let gate = gate(&canary_table(&sims, "old")).await;
    let Some(mut page) = Browser::open(&format!("{}/", gate.admin())).await else {
        return;
    };
    let loaded = page
        .shows("#pins", "team-a\told", Duration::from_secs(20))
        .await;
    assert!(loaded.is_some(), "rendered: {}", page.text("body").await);
    assert!(page.text("#rollouts").await.contains("canary\tnew\t100 %"));
    // The pin moves to new: once skewgate routes by the new table, the page says so.
    gate.rewrite(&canary_table(&sims, "new"));
    let moved = eventually(10, || async {
        gate.debug_routes().await["writes"]["pins"][0]["backend"] == "new"
    })
    .await;
    assert!(moved, "skewgate took the new table");
    let shown = page.shows("#pins", "team-a\tnew", SOON).await;
    assert!(
        shown.is_some(),
        "the move shows: {}",
        page.text("#pins").await
    );
    a_mistake_in_the_file_shows(&mut page, (&sims, &gate)).await;
    the_abort_shows(&mut page, (&sims, &gate)).await;
    the_rates_show(&mut page).await;
    if let Ok(file) = std::env::var("SKEWGATE_SCREENSHOT")
        && let Some(png) = page.screenshot().await
    {
        let _ = std::fs::write(file, png);
    }
    // skewgate stops: the page says it cannot reach it, and keeps what it showed.
    gate.server.shutdown().await;
    let gone = page
        .shows("#updated", "cannot reach skewgate's admin listener", SOON)
        .await;
    assert!(gone.is_some(), "{}", page.text("#updated").await);
    assert!(page.text("#pins").await.contains("team-a\tnew"));
}

/// A mistake in the file (a pin to a backend it does not define): the page says that the file does
/// not load and why, while the pins still show the table running; once fixed, it says nothing.
async fn a_mistake_in_the_file_shows(page: &mut Browser, (sims, gate): (&Sims, &Gate)) {
    gate.rewrite(&canary_table(sims, "newer"));
    let failing = |yes: bool| async move {
        let reload = &gate.debug_routes().await["reload"];
        reload["failing"].is_null() != yes
    };
    assert!(
        eventually(10, || failing(true)).await,
        "skewgate refused it"
    );
    let refused = page
        .shows("#reload", "The route file does not load", SOON)
        .await;
    let said = page.text("#reload").await;
    assert!(refused.is_some() && said.contains("newer"), "{said}");
    assert!(page.text("#pins").await.contains("team-a\tnew"));
    gate.rewrite(&canary_table(sims, "new"));
    assert!(eventually(10, || failing(false)).await, "skewgate took it");
    let fixed = page.until("#reload", SOON, str::is_empty).await;
    assert!(fixed.is_some(), "{}", page.text("#reload").await);
}

/// The new version fails one read in five: the rollout aborts, and the page says so, with the
/// error ratio that tripped it against its threshold.
async fn the_abort_shows(page: &mut Browser, (sims, gate): (&Sims, &Gate)) {
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
    let rollout = gate.debug_routes().await["reads"]["rollouts"][0].clone();
    assert_eq!(rollout["aborted"], true);
    let shown = page.shows("#rollouts", "ABORTED", SOON).await;
    let rollouts = page.text("#rollouts").await;
    assert!(shown.is_some(), "the abort shows: {rollouts}");
    assert!(rollouts.contains("canary\tnew\t0 %"), "{rollouts}");
    let tripped = &rollout["abortWindow"]["tripped"];
    let said = format!(
        "{} of {} failed (",
        tripped["failures"], tripped["requests"]
    );
    let rule = "aborts above 10.0 % once 50 requests in 1m";
    assert!(
        rollouts.contains(&said) && rollouts.contains(rule),
        "{rollouts}"
    );
}

/// The page's own rates, from /metrics: the canary's reads went to new, and one in five failed.
async fn the_rates_show(page: &mut Browser) {
    let rates = "[...document.querySelectorAll('#backends tbody tr')].map((r) => [...r.cells].map((c) => c.innerText))";
    let new_rates = |rows: &serde_json::Value| {
        let row = rows.as_array()?.iter().find(|r| r[0] == "new")?;
        let number = |i: usize| row[i].as_str()?.trim_end_matches(" %").parse::<f64>().ok();
        Some((number(6)?, number(7)?))
    };
    let mut seen = None;
    for _ in 0..30 {
        seen = new_rates(&page.eval(rates).await).filter(|(rps, _)| *rps > 0.0);
        if seen.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, errors) = seen.expect("new's requests per second shown");
    assert!(errors > 0.0 && errors < 100.0, "5xx share of new: {errors}");
}

/// Two replicas that publish themselves: the page of one shows both, which is itself, and that
/// they run one table; once one runs another table, that they disagree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replicas_and_whether_they_agree_show_on_the_open_page() {
    let sims = sims().await;
    let table = |reads: &str| {
        routes(
            &sims,
            &format!("writes:\n  default: old\nreads:\n  default: {reads}\n"),
        )
    };
    let files = route_files("page-fleet", 2, &table("old"));
    let addr = node_addresses();
    let a = publishing_replica(&files[0], addr(0)).await;
    let _b = publishing_replica(&files[1], addr(1)).await;
    let Some(mut page) = Browser::open(&format!("http://{}/", a.admin_addr)).await else {
        return;
    };
    let agreed = page
        .shows(
            "#fleet",
            "the replicas run one table",
            Duration::from_secs(20),
        )
        .await;
    assert!(agreed.is_some(), "{}", page.text("body").await);
    let both = page
        .shows("#replicas", &format!("{}\tlive", addr(1)), SOON)
        .await;
    let replicas = page.text("#replicas").await;
    assert!(both.is_some(), "{replicas}");
    assert!(
        replicas.contains(&format!("{} (this one)\tlive", addr(0))),
        "{replicas}"
    );
    std::fs::write(&files[1], table("new")).expect("routes");
    let admin = format!("http://{}/debug/fleet", a.admin_addr);
    let split = eventually(10, || async {
        let view: serde_json::Value = match reqwest::get(&admin).await {
            Ok(r) => r.json().await.unwrap_or_default(),
            Err(_) => serde_json::Value::Null,
        };
        view["agreed"] == false
    })
    .await;
    assert!(split, "the replicas see that they disagree");
    let shown = page.shows("#fleet", "the replicas DISAGREE", SOON).await;
    assert!(shown.is_some(), "{}", page.text("#fleet").await);
}
