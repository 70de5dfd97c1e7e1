//! Moving a pin on one replica: no object is ever written by two versions at once, no write is lost,
//! and the watches a moved pin sent to the old version end so clients re-list from the new one.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use futures_util::StreamExt;
use serde_json::json;

fn pinned_to(backend: &str) -> String {
    format!(
        "writes:\n  default: old\n  pins:\n    - name: team-a\n      namespaces: [team-a]\n      backend: {backend}\nreads:\n  default: old\n"
    )
}

const OBJECTS: usize = 12;
const WRITERS: usize = 8;
const MOVES: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moving_a_pin_back_and_forth_never_overlaps_writes_of_one_object() {
    let sims = sims().await;
    let gate = gate(&routes(&sims, &pinned_to("old"))).await;
    let c = h1();
    let base = gate.url();
    let r = c
        .post(format!("{base}/api/v1/namespaces"))
        .json(&json!({"metadata": {"name": "team-a"}}))
        .send()
        .await
        .expect("ns");
    assert_eq!(r.status(), 201);
    for i in 0..OBJECTS {
        let r = c
            .post(format!("{base}/api/v1/namespaces/team-a/configmaps"))
            .json(&json!({"metadata": {"name": format!("cm-{i}")}, "data": {"n": "0"}}))
            .send()
            .await
            .expect("create");
        assert_eq!(r.status(), 201);
    }
    // Writes take a while at both versions, so some are always in flight when the pin moves.
    sims.old.controls.write_delay.store(8, Ordering::Relaxed);
    sims.new.controls.write_delay.store(8, Ordering::Relaxed);

    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let stop = stop.clone();
        let client = if w % 2 == 0 { h1() } else { h2() };
        let base = base.clone();
        writers.push(tokio::spawn(async move {
            let (mut sent, mut ok, mut refused) = (0u64, 0u64, 0u64);
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let name = format!("cm-{}", (n * 7 + w) % OBJECTS);
                let url = format!("{base}/api/v1/namespaces/team-a/configmaps/{name}");
                let req = if n.is_multiple_of(2) {
                    client.put(&url).json(&json!({"metadata": {"name": name}, "data": {"n": n.to_string(), "w": w.to_string()}}))
                } else {
                    client
                        .patch(&url)
                        .header("content-type", "application/merge-patch+json")
                        .body(format!(r#"{{"data":{{"n":"{n}"}}}}"#))
                };
                sent += 1;
                match req.send().await {
                    Ok(r) if r.status().is_success() => ok += 1,
                    Ok(r) if r.status() == 429 => refused += 1,
                    Ok(r) => panic!("writer {w}: unexpected {}", r.status()),
                    Err(e) => panic!("writer {w}: no answer: {e}"),
                }
            }
            (sent, ok, refused)
        }));
    }

    for m in 0..MOVES {
        let to = if m % 2 == 0 { "new" } else { "old" };
        gate.rewrite(&routes(&sims, &pinned_to(to)));
        let moved = eventually(10, || async {
            metric(
                &gate.metrics().await,
                "skewgate_pin_moves_total{pin=\"team-a\"}",
            ) >= (m + 1) as f64
        })
        .await;
        assert!(moved, "move {m} took effect");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let (mut sent, mut ok, mut refused) = (0, 0, 0);
    for w in writers {
        let (s, o, r) = w.await.expect("writer");
        sent += s;
        ok += o;
        refused += r;
    }

    // Every write was answered once: the simulators served exactly the successful ones.
    let records: Vec<_> = sims
        .store
        .writes()
        .into_iter()
        .filter(|r| {
            r.key.namespace == "team-a" && r.key.resource == "configmaps" && r.verb != "create"
        })
        .collect();
    let served_ok = records
        .iter()
        .filter(|r| (200..300).contains(&r.status))
        .count() as u64;
    assert_eq!(sent, ok + refused);
    assert_eq!(
        served_ok, ok,
        "every acknowledged write was served once, and only those"
    );
    let versions: std::collections::HashSet<&str> =
        records.iter().map(|r| r.version.as_str()).collect();
    assert_eq!(versions.len(), 2, "both versions served writes");

    // No write arrived at one version while a write of the same object was in flight at the other.
    let mut by_object: HashMap<&str, Vec<_>> = HashMap::new();
    for r in &records {
        by_object.entry(r.key.name.as_str()).or_default().push(r);
    }
    let mut violations = 0;
    for writes in by_object.values() {
        for a in writes {
            for b in writes {
                if a.version != b.version && a.arrived <= b.arrived && b.arrived < a.completed {
                    violations += 1;
                }
            }
        }
    }
    println!(
        "{MOVES} moves, {sent} writes ({ok} ok, {refused} refused with 429), {} served; {violations} overlaps",
        records.len()
    );
    assert_eq!(violations, 0);
}

#[tokio::test]
async fn watches_of_a_moved_pin_end_so_clients_relist_from_the_new_version() {
    let sims = sims().await;
    let gate = gate(&routes(&sims, &pinned_to("old"))).await;
    let client = h2();
    let base = gate.url();
    let watch = |ns: &'static str| watch_configmaps(&client, &base, ns);
    let moved = watch("team-a").await.expect("watch");
    let other = watch("team-b").await.expect("watch");
    assert_eq!(served_by(&moved), OLD);
    let (mut moved, mut other) = (moved.bytes_stream(), other.bytes_stream());
    gate.rewrite(&routes(&sims, &pinned_to("new")));
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(chunk) = moved.next().await {
            assert!(chunk.is_ok(), "ended cleanly");
        }
    })
    .await;
    assert!(ended.is_ok(), "the watch of the moved pin ended");
    // A watch that the move does not concern stays open.
    assert!(
        tokio::time::timeout(Duration::from_millis(500), other.next())
            .await
            .is_err()
    );
    // Watching again goes to the new version.
    let again = watch("team-a").await.expect("watch");
    assert_eq!(served_by(&again), NEW);
}
