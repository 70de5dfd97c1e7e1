//! Pin moves superseded before the fleet made them (issue 57), judged from the apiservers' side.
//! Two replicas publish themselves; the second gets each route table 3 s after the first, so each
//! move is still waiting for it when the next table comes. A table that changes a pin whose move
//! is pending must not send the pin's writes anywhere the other replica does not: the new table's
//! `from` is where the operator believed the writes were, and it was wrong.

mod common;

use std::time::{Duration, SystemTime};

use common::*;

/// Pin `team-a` moving to `to` from `from` at `flip_at`.
fn moving(sims: &Sims, (from, to): (&str, &str), flip_at: SystemTime) -> String {
    let at = humantime::format_rfc3339_seconds(flip_at);
    routes(
        sims,
        &format!(
            "writes:\n  default: old\n  fence: 3s\n  pins:\n    - name: team-a\n      namespaces: [team-a]\n      backend: {to}\n      from: {from}\n      flipAt: {at}\n{}",
            "reads:\n  default: old\n"
        ),
    )
}

async fn until(t: SystemTime) {
    tokio::time::sleep(t.duration_since(SystemTime::now()).unwrap_or_default()).await;
}

/// Two replicas, writers through both on three objects; the pin moved to the new version, back
/// before that move was made, and to the new version again before that one was made, each table
/// 2 s after the one before with `flipAt` 2 s ahead; the second replica gets each 3 s late. The
/// last move is left to be made.
async fn superseded_moves() -> (Outcome, Vec<serde_json::Value>) {
    let sims = sims().await;
    let start = routes(
        &sims,
        "writes:\n  default: old\n  pins:\n    - name: team-a\n      namespaces: [team-a]\n      backend: old\nreads:\n  default: old\n",
    );
    let files = route_files("superseded", 2, &start);
    let addr = node_addresses();
    let a = publishing_replica(&files[0], addr(0)).await;
    let b = publishing_replica(&files[1], addr(1)).await;
    for i in 0..3 {
        create_configmap(&sims.old.url(), "team-a", &format!("cm-{i}")).await;
    }
    let urls = [a.addr, b.addr].map(|a| format!("http://{a}"));
    let writers = Writers::through_each(&urls, 3);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let begun = SystemTime::now();
    let steps = [("old", "new"), ("new", "old"), ("old", "new")];
    let tables: Vec<(SystemTime, String)> = steps
        .iter()
        .enumerate()
        .map(|(k, step)| {
            let at = begun + Duration::from_secs(2 * k as u64);
            (at, moving(&sims, *step, at + Duration::from_secs(2)))
        })
        .collect();
    let mut events: Vec<(SystemTime, usize, &str)> = Vec::new();
    for (at, text) in &tables {
        events.push((*at, 0, text));
        events.push((*at + Duration::from_secs(3), 1, text));
    }
    events.sort_by_key(|e| e.0);
    for (at, replica, text) in events {
        until(at).await;
        std::fs::write(&files[replica], text).expect("routes");
    }
    // The last move: both run it from its 3 s lateness, then four rounds and the fence.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let routes_now = [a.admin_addr, b.admin_addr];
    let mut seen = Vec::new();
    for admin in routes_now {
        let view: serde_json::Value = reqwest::get(format!("http://{admin}/debug/routes"))
            .await
            .expect("debug/routes")
            .json()
            .await
            .expect("json");
        seen.push(view);
    }
    let (codes, retried) = writers.stop().await;
    let records = patches(&sims);
    let outcome = Outcome {
        codes,
        retried,
        objects: writes_per_object(&records),
    };
    a.shutdown().await;
    b.shutdown().await;
    (outcome, seen)
}

struct Outcome {
    codes: std::collections::BTreeMap<u16, u64>,
    retried: u64,
    objects: std::collections::BTreeMap<String, ObjectWrites>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moves_superseded_before_the_fleet_made_them_never_overlap() {
    let (o, routes) = superseded_moves().await;
    println!(
        "superseded: {:?}, {} retried; {:?}",
        o.codes, o.retried, o.objects
    );
    let overlaps: usize = o.objects.values().map(|w| w.overlaps).sum();
    assert_eq!(overlaps, 0, "{:?}", o.objects);
    assert!(
        o.objects.values().all(|w| w.switches == 1),
        "the two superseded moves were never made, the last one was, once: {:?}",
        o.objects
    );
    assert_eq!(
        o.codes.keys().copied().collect::<Vec<_>>(),
        vec![200],
        "every write answered"
    );
    // The first move was pending when the second table came, and abandoned; the second table's
    // pin was already where its writes were (old), so it had no move to supersede.
    for view in routes {
        let superseded = &view["writes"]["pins"][0]["superseded"];
        println!("superseded on a replica: {superseded}");
        assert_eq!(superseded["count"], 1, "{view}");
        assert_eq!(superseded["last"]["outcome"], "abandoned", "{view}");
        assert_eq!(superseded["last"]["writesAt"], "old", "{view}");
    }
}
