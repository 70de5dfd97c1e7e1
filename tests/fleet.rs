//! skewgate replicas as one fleet (issue 43, first part): each publishes in its Lease what it runs
//! (its route table's digest, each pin's move, each rollout's abort, its clock), reads the others',
//! and shows on `/debug/fleet` and in metrics whether the live replicas run the same table, and
//! since when they have not. A replica that publishes nothing says it runs alone.

mod common;

use std::net::SocketAddr;

use common::*;
use serde_json::Value;
use skewgate::app::Server;

async fn fleet(server: &Server) -> Value {
    let url = format!("http://{}/debug/fleet", server.admin_addr);
    match reqwest::get(url).await {
        Ok(r) => r.json().await.unwrap_or(Value::Null),
        Err(_) => Value::Null,
    }
}

async fn metrics(server: &Server) -> String {
    let url = format!("http://{}/metrics", server.admin_addr);
    let r = reqwest::get(url).await.expect("metrics");
    r.text().await.unwrap_or_default()
}

/// A merge patch of configmap `default/{name}` through the replica at `server`: its code and body.
async fn patch(client: &reqwest::Client, server: SocketAddr, name: &str) -> (u16, String) {
    let url = format!("http://{server}/api/v1/namespaces/default/configmaps/{name}");
    let r = client
        .patch(url)
        .header("content-type", "application/merge-patch+json")
        .body(r#"{"data":{"k":"v"}}"#)
        .send()
        .await
        .expect("patch");
    (r.status().as_u16(), r.text().await.unwrap_or_default())
}

fn live(view: &Value) -> Vec<&Value> {
    view["replicas"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["live"] == true)
        .collect()
}

/// A pin to the new version that moves an hour from now, and `reads` the reads' default.
fn table(sims: &Sims, reads: &str) -> String {
    let flip_at = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
    let at = humantime::format_rfc3339_seconds(flip_at);
    routes(
        sims,
        &format!(
            "writes:\n  default: old\n  pins:\n    - {{name: team-a, namespaces: [team-a], backend: new, from: old, flipAt: {at}}}\nreads:\n  default: {reads}\n  rollouts:\n    - {{name: canary, match: {{namespaces: [canary]}}, to: new, percent: 5}}\n"
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replicas_publish_what_they_run_and_show_when_they_disagree() {
    let sims = sims().await;
    let text = table(&sims, "old");
    let files = route_files("fleet", 3, &text);
    let addr = node_addresses();
    let mut replicas = Vec::new();
    for (i, file) in files.iter().enumerate() {
        replicas.push(publishing_replica(file, addr(i)).await);
    }
    let (a, c) = (&replicas[0], &replicas[2]);

    // All three live, one table, each pin's move and rollout's abort as each replica says.
    // (A replica's first report, made before it has read the others', says its pin's writes wait
    // for them.)
    let agreed = eventually(10, || async {
        let view = fleet(a).await;
        let moves_known = live(&view)
            .iter()
            .all(|r| r["state"]["pins"][0]["move"] == "before flipAt");
        live(&view).len() == 3 && view["agreed"] == true && moves_known
    })
    .await;
    assert!(agreed, "{:#}", fleet(a).await);
    let view = fleet(a).await;
    let tables: Vec<&Value> = live(&view).iter().map(|r| &r["state"]["table"]).collect();
    assert!(
        tables.iter().all(|t| *t == tables[0] && t.is_string()),
        "{tables:?}"
    );
    for r in live(&view) {
        assert_eq!(r["state"]["pins"][0]["name"], "team-a");
        // Every replica ran the move in time: the fleet makes it at its flipAt (on the
        // apiservers' clock: this one's, less its offset, within a second here).
        let pin = &r["state"]["pins"][0];
        let at = |f: &str| humantime::parse_rfc3339_weak(pin[f].as_str().unwrap_or("")).ok();
        let (flips, flip) = (
            at("flipsAt").expect("flipsAt"),
            at("flipAt").expect("flipAt"),
        );
        let apart = flips
            .duration_since(flip)
            .or_else(|e| Ok::<_, ()>(e.duration()));
        assert!(apart.is_ok_and(|d| d.as_millis() <= 1000), "{r}");
        assert_eq!(
            r["state"]["rollouts"][0],
            serde_json::json!({"name": "canary", "aborted": false})
        );
        assert!(r["state"]["clock"].is_string());
    }
    assert_eq!(view["me"], addr(0).to_string());

    // One replica runs another table: every replica sees it, and for how long.
    std::fs::write(&files[2], table(&sims, "new")).expect("routes");
    let split = eventually(10, || async {
        let m = metrics(a).await;
        fleet(a).await["agreed"] == false
            && metric(&m, "skewgate_fleet_disagreement_seconds") >= 1.0
    })
    .await;
    assert!(split, "{:#}", fleet(a).await);
    let view = fleet(c).await;
    assert_eq!(view["agreed"], false);
    assert!(view["disagreeingSince"].is_string());
    let m = metrics(a).await;
    let c_table = live(&view)
        .into_iter()
        .find(|r| r["me"] == true)
        .map(|r| r["state"]["table"].as_str().unwrap_or_default().to_owned())
        .expect("c itself");
    let series = format!(
        "skewgate_fleet_replica_table{{replica=\"{}\",table=\"{c_table}\"}}",
        addr(2)
    );
    assert_eq!(metric(&m, &series), 1.0, "{m}");

    // Back to one table: agreed again, and the disagreement over.
    std::fs::write(&files[2], &text).expect("routes");
    let healed = eventually(10, || async {
        let m = metrics(a).await;
        fleet(a).await["agreed"] == true && metric(&m, "skewgate_fleet_disagreement_seconds") == 0.0
    })
    .await;
    assert!(healed, "{:#}", fleet(a).await);
    for r in replicas {
        r.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_publishes_nothing_says_it_runs_alone() {
    let sims = sims().await;
    let gate = gate(&table(&sims, "old")).await;
    let view: Value = reqwest::get(format!("{}/debug/fleet", gate.admin()))
        .await
        .expect("fleet")
        .json()
        .await
        .expect("JSON");
    assert_eq!(view["mode"], "single", "{view}");
    assert_eq!(view["state"]["pins"][0]["move"], "before flipAt");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_replica_publishes_how_far_its_clock_is_from_the_apiservers() {
    let sims = sims().await;
    let file = temp_dir("fleet-clock").join("routes.yaml");
    std::fs::write(&file, table(&sims, "old")).expect("routes");
    let addr = node_addresses();
    let on_time = publishing_replica(&file, addr(0)).await;
    // The test hook of issue 43: a replica whose clock is 5 s ahead.
    let ahead = std::sync::Arc::new(skewgate::steer::OffsetClock(
        std::time::Duration::from_secs(5),
    ));
    let settings = skewgate::proxy::ProxySettings {
        clock: ahead,
        ..Default::default()
    };
    let off = publishing_replica_with(&file, addr(1), settings).await;
    let offset_of = |view: &Value, i: usize| {
        live(view)
            .into_iter()
            .find(|r| r["address"] == addr(i).to_string())
            .and_then(|r| r["state"]["clockOffsetMs"].as_f64())
    };
    let measured = eventually(10, || async {
        let view = fleet(&on_time).await;
        offset_of(&view, 0).is_some() && offset_of(&view, 1).is_some()
    })
    .await;
    assert!(measured, "{:#}", fleet(&on_time).await);
    let view = fleet(&on_time).await;
    // Within a second of the truth: each answer's Date is whole seconds.
    let (a, b) = (
        offset_of(&view, 0).unwrap_or_default(),
        offset_of(&view, 1).unwrap_or_default(),
    );
    assert!(a.abs() <= 1000.0, "{a}");
    assert!((b - 5000.0).abs() <= 1000.0, "{b}");
    let spread = view["clockSpreadMs"].as_f64().unwrap_or_default();
    assert!((spread - 5000.0).abs() <= 2000.0, "{spread}");
    let m = metrics(&off).await;
    let own = metric(&m, "skewgate_clock_offset_seconds");
    assert!((own - 5.0).abs() <= 1.0, "{m}");
    on_time.shutdown().await;
    off.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_cannot_renew_its_lease_takes_no_writes_until_it_does() {
    // Self-fencing: the others stop waiting for a replica whose Lease lapsed, so it must stop
    // taking writes before its Lease can lapse in their eyes, and take them again once renewed.
    let sims = sims().await;
    let file = temp_dir("fleet-fence").join("routes.yaml");
    std::fs::write(&file, table(&sims, "old")).expect("routes");
    let addr = node_addresses();
    let a = publishing_replica(&file, addr(0)).await;
    let c = publishing_replica(&file, addr(1)).await;
    let c_lease = format!("skewgate-127-0-0-2-{}", addr(1).port());
    let client = h1();
    create_configmap(&format!("http://{}", a.addr), "default", "fenced").await;
    let patch = |server: &Server| patch(&client, server.addr, "fenced");
    assert!(eventually(10, || async { patch(&c).await.0 == 200 }).await);
    for sim in [&sims.old, &sims.new] {
        *sim.controls.fail_writes_containing.lock().expect("control") = Some(c_lease.clone());
    }
    let fenced = eventually(10, || async { patch(&c).await.0 == 429 }).await;
    assert!(fenced, "{:?}", patch(&c).await);
    let (_, said) = patch(&c).await;
    assert!(said.contains("Lease"), "{said}");
    assert_eq!(
        patch(&a).await.0,
        200,
        "the replica that renews takes writes"
    );
    for sim in [&sims.old, &sims.new] {
        *sim.controls.fail_writes_containing.lock().expect("control") = None;
    }
    assert!(eventually(10, || async { patch(&c).await.0 == 200 }).await);
    a.shutdown().await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_file_is_behind_a_move_the_others_made_takes_no_writes_until_it_catches_up()
{
    let sims = sims().await;
    let table = |pin: &str| {
        routes(
            &sims,
            &format!(
                "writes:\n  default: old\n  pins:\n    - name: team-a\n      namespaces: [team-a]\n{pin}reads:\n  default: old\n"
            ),
        )
    };
    let files = route_files("fleet-behind", 2, &table("      backend: old\n"));
    let addr = node_addresses();
    let a = publishing_replica(&files[0], addr(0)).await;
    let b = publishing_replica(&files[1], addr(1)).await;
    let client = h1();
    let patch = |server: &Server| patch(&client, server.addr, "cm");
    create_configmap(&format!("http://{}", a.addr), "default", "cm").await;
    assert!(eventually(10, || async { patch(&b).await.0 == 200 }).await);
    // A file whose move came a minute ago, of a pin new to the table, reaches one replica: no
    // replica ran it in time and none ran a table with the pin (none knows where its writes
    // are), so it was made at its flipAt, and that replica moves. The other, still on its old
    // file, would write the pin's objects through the old version: it takes no writes until its
    // file comes. (A replica that ran a table with the pin waits for the fleet instead:
    // fleet_superseded.rs, real/supersede.rs.)
    let past = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
    let moved = table(&format!(
        "      backend: old\n    - name: team-b\n      namespaces: [team-b]\n      backend: new\n      from: old\n      flipAt: {}\n",
        humantime::format_rfc3339_seconds(past)
    ));
    std::fs::write(&files[0], &moved).expect("routes");
    let held = eventually(10, || async { patch(&b).await.0 == 429 }).await;
    assert!(held, "{:?}", patch(&b).await);
    let (_, said) = patch(&b).await;
    assert!(said.contains("does not move yet"), "{said}");
    assert_eq!(patch(&a).await.0, 200);
    std::fs::write(&files[1], &moved).expect("routes");
    assert!(eventually(10, || async { patch(&b).await.0 == 200 }).await);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_one_replica_aborts_is_aborted_on_every_replica_running_its_table() {
    let sims = sims().await;
    let table = |percent: u32| {
        routes(
            &sims,
            &format!(
                "writes:\n  default: old\nreads:\n  default: old\n  rollouts:\n    - name: canary\n      match: {{namespaces: [canary]}}\n      to: new\n      percent: {percent}\n      abort: {{errorRatio: 0.5, window: 1m, minRequests: 10}}\n"
            ),
        )
    };
    let files = route_files("fleet-abort", 2, &table(100));
    let addr = node_addresses();
    let a = publishing_replica(&files[0], addr(0)).await;
    let b = publishing_replica(&files[1], addr(1)).await;
    let client = h1();
    let read = |server: &Server| {
        let url = format!("http://{}/api/v1/namespaces/canary/configmaps", server.addr);
        let client = client.clone();
        async move { client.get(url).send().await.expect("read") }
    };
    assert_eq!(served_by(&read(&b).await), NEW);
    // The new version fails every read: the replica that sees it aborts the rollout, and the
    // other, which saw none of those reads, aborts it too.
    sims.new
        .controls
        .fail_reads_per_mille
        .store(1000, std::sync::atomic::Ordering::Relaxed);
    for _ in 0..20 {
        let _ = read(&a).await;
    }
    let aborted = |server: &Server| {
        let server_addr = server.admin_addr;
        async move {
            let m = reqwest::get(format!("http://{server_addr}/metrics"))
                .await
                .expect("metrics");
            metric(
                &m.text().await.unwrap_or_default(),
                "skewgate_rollout_aborted{rollout=\"canary\"}",
            )
        }
    };
    assert_eq!(aborted(&a).await, 1.0);
    assert!(
        eventually(10, || async { aborted(&b).await == 1.0 }).await,
        "fleet-wide"
    );
    assert_eq!(
        served_by(&read(&b).await),
        OLD,
        "the other replica's reads are back on the old version"
    );
    // A new table clears it, on each replica as it loads it.
    sims.new
        .controls
        .fail_reads_per_mille
        .store(0, std::sync::atomic::Ordering::Relaxed);
    for f in &files {
        std::fs::write(f, table(99)).expect("routes");
    }
    let cleared = eventually(10, || async {
        aborted(&a).await == 0.0 && aborted(&b).await == 0.0
    })
    .await;
    assert!(cleared);
    a.shutdown().await;
    b.shutdown().await;
}
