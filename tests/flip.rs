//! Moving a pin across replicas with `flipAt` and `fence`: two skewgate instances read one route
//! file and share a hand-moved clock; writers spread over both never overlap writes of one object,
//! and the watches a pin sent to the old version before `flipAt` end at `flipAt`.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use futures_util::StreamExt;
use serde_json::{Value, json};
use skewgate::proxy::ProxySettings;
use skewgate::steer::ManualClock;

const OBJECTS: usize = 8;

fn table(sims: &Sims, pin: &str) -> String {
    routes(
        sims,
        &format!(
            "writes:\n  default: old\n  fence: 10s\n  pins:\n    - name: team-a\n      namespaces: [team-a]\n{pin}reads:\n  default: old\n"
        ),
    )
}

async fn in_flight(gate: &Gate) -> u64 {
    let debug: Value = gate.debug_routes().await;
    debug["writes"]["inFlight"].as_u64().unwrap_or(u64::MAX)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_flip_a_pin_at_flip_at_without_overlap() {
    let sims = sims().await;
    let t0 = humantime::parse_rfc3339("2030-01-01T00:00:00Z").expect("time");
    let clock = Arc::new(ManualClock::new(t0));
    let dir = temp_dir("flip");
    let file = dir.join("routes.yaml");
    std::fs::write(&file, table(&sims, "      backend: old\n")).expect("routes");
    let settings = || ProxySettings {
        clock: clock.clone(),
        ..ProxySettings::default()
    };
    let a = gate_on(&file, settings()).await;
    let b = gate_on(&file, settings()).await;
    let c = h1();
    c.post(format!("{}/api/v1/namespaces", a.url()))
        .json(&json!({"metadata": {"name": "team-a"}}))
        .send()
        .await
        .expect("ns");
    for i in 0..OBJECTS {
        let r = c
            .post(format!("{}/api/v1/namespaces/team-a/configmaps", a.url()))
            .json(&json!({"metadata": {"name": format!("cm-{i}")}}))
            .send()
            .await
            .expect("create");
        assert_eq!(r.status(), 201);
    }
    sims.old.controls.write_delay.store(20, Ordering::Relaxed);
    sims.new.controls.write_delay.store(20, Ordering::Relaxed);

    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..8 {
        let base = if w % 2 == 0 { a.url() } else { b.url() };
        let stop = stop.clone();
        writers.push(tokio::spawn(async move {
            let client = h2();
            let mut codes: HashMap<u16, u64> = HashMap::new();
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let url = format!(
                    "{base}/api/v1/namespaces/team-a/configmaps/cm-{}",
                    (n + w) % OBJECTS
                );
                let r = client
                    .patch(&url)
                    .header("content-type", "application/merge-patch+json")
                    .body(format!(r#"{{"data":{{"w{w}":"{n}"}}}}"#))
                    .send()
                    .await
                    .expect("an answer");
                *codes.entry(r.status().as_u16()).or_default() += 1;
            }
            codes
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The move: to the new version at t0 + 60s. Both replicas load it and keep writing to old.
    let flip_at = t0 + Duration::from_secs(60);
    let pin = format!(
        "      backend: new\n      flipAt: {}\n",
        humantime::format_rfc3339_seconds(flip_at)
    );
    a.rewrite(&table(&sims, &pin));
    for g in [&a, &b] {
        let loaded = eventually(10, || async {
            metric(
                &g.metrics().await,
                "skewgate_config_reloads_total{result=\"success\"}",
            ) >= 2.0
        })
        .await;
        assert!(loaded);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let counted = |g: &Gate, name: &'static str| {
        let name = format!("{name}{{pin=\"team-a\"}}");
        let g = g.admin();
        async move {
            let m = reqwest::get(format!("{g}/metrics")).await.expect("metrics");
            metric(&m.text().await.unwrap_or_default(), &name)
        }
    };
    for g in [&a, &b] {
        assert_eq!(
            counted(g, "skewgate_pin_moves_total").await,
            0.0,
            "a pin with flipAt is counted when it flips, not when its file loads"
        );
    }
    let before_flip = sims.store.writes().len();
    assert!(
        sims.store
            .writes()
            .iter()
            .all(|w| w.version == OLD || w.verb == "create"),
        "nothing moved before flipAt"
    );

    // flipAt: both replicas hold the pin's writes. The fence outlasts every write in flight.
    clock.set(flip_at);
    let drained = eventually(10, || async {
        in_flight(&a).await == 0 && in_flight(&b).await == 0
    })
    .await;
    assert!(drained, "writes in flight finished during the fence");
    let held = metric(&a.metrics().await, "skewgate_writes_held{pin=\"team-a\"}")
        + metric(&b.metrics().await, "skewgate_writes_held{pin=\"team-a\"}");
    assert!(held > 0.0, "writes are held in the fence");
    let debug: Value = b.debug_routes().await;
    let pin = &debug["writes"]["pins"][0];
    assert_eq!(pin["move"], "in fence: writes held", "{pin}");
    assert_eq!(pin["movingFrom"], "old", "{pin}");
    for g in [&a, &b] {
        let flipped = eventually(10, || async {
            counted(g, "skewgate_pin_moves_total").await == 1.0
        })
        .await;
        assert!(flipped, "each replica counts the flip once");
        assert_eq!(counted(g, "skewgate_pin_fence_ends_total").await, 0.0);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;

    // The fence ends: both replicas write to the new version.
    clock.set(flip_at + Duration::from_secs(10));
    tokio::time::sleep(Duration::from_millis(400)).await;
    for g in [&a, &b] {
        let ended = eventually(10, || async {
            counted(g, "skewgate_pin_fence_ends_total").await == 1.0
        })
        .await;
        assert!(ended, "each replica counts the fence's end once");
        assert_eq!(counted(g, "skewgate_pin_moves_total").await, 1.0);
    }
    stop.store(true, Ordering::Relaxed);
    let mut codes: HashMap<u16, u64> = HashMap::new();
    for w in writers {
        for (code, n) in w.await.expect("writer") {
            *codes.entry(code).or_default() += n;
        }
    }
    assert_eq!(
        codes.keys().copied().filter(|c| *c != 200).count(),
        0,
        "every write succeeded: {codes:?}"
    );

    let records = patches(&sims);
    assert_eq!(
        records.len() as u64,
        codes.get(&200).copied().unwrap_or(0),
        "each acknowledged write served once"
    );
    assert!(
        records.iter().any(|r| r.version == NEW),
        "writes moved to the new version"
    );
    assert!(records.len() > before_flip);
    let violations: usize = writes_per_object(&records)
        .values()
        .map(|o| o.overlaps)
        .sum();
    println!(
        "{} writes over two replicas, {codes:?}; {violations} overlaps",
        records.len()
    );
    assert_eq!(violations, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_sent_to_the_old_version_before_flip_at_end_at_flip_at() {
    let sims = sims().await;
    let t0 = humantime::parse_rfc3339("2030-01-01T00:00:00Z").expect("time");
    let clock = Arc::new(ManualClock::new(t0));
    let file = temp_dir("flip-watch").join("routes.yaml");
    let flip_at = t0 + Duration::from_secs(60);
    let pin = format!(
        "      backend: new\n      from: old\n      flipAt: {}\n",
        humantime::format_rfc3339_seconds(flip_at)
    );
    std::fs::write(&file, table(&sims, &pin)).expect("routes");
    let gate = gate_on(
        &file,
        ProxySettings {
            clock: clock.clone(),
            ..ProxySettings::default()
        },
    )
    .await;
    let client = h2();
    let base = gate.url();
    let watch = |ns: &'static str| watch_configmaps(&client, &base, ns);
    // Before flipAt the pin's reads follow its writes to the old version.
    let pinned = watch("team-a").await.expect("watch");
    assert_eq!(served_by(&pinned), OLD);
    let other = watch("team-b").await.expect("watch");
    let (mut pinned, mut other) = (pinned.bytes_stream(), other.bytes_stream());
    assert!(
        tokio::time::timeout(Duration::from_millis(500), pinned.next())
            .await
            .is_err(),
        "open until flipAt"
    );
    clock.set(flip_at + Duration::from_secs(1));
    assert!(
        ends_cleanly_within(&mut pinned, 5).await,
        "the pin's watch on the old version ended at flipAt"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(500), other.next())
            .await
            .is_err(),
        "a watch the pin does not cover stays open"
    );
    let again = watch("team-a").await.expect("watch");
    assert_eq!(
        served_by(&again),
        NEW,
        "watching again goes to the new version"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_held_through_a_fence_are_given_their_whole_time_once_sent() {
    let sims = sims().await;
    let t0 = humantime::parse_rfc3339("2030-01-01T00:00:00Z").expect("time");
    let clock = Arc::new(ManualClock::new(t0));
    let settings = ProxySettings {
        clock: clock.clone(),
        ..ProxySettings::default()
    };
    // The shortest fence: a write sent gets 1 s upstream.
    let fenced = |pin: &str| table(&sims, pin).replace("fence: 10s", "fence: 3s");
    let gate = gate_with(&fenced("      backend: old\n"), settings).await;
    let c = h1();
    let base = format!("{}/api/v1/namespaces", gate.url());
    c.post(&base)
        .json(&json!({"metadata": {"name": "team-a"}}))
        .send()
        .await
        .expect("ns");
    let created = c
        .post(format!("{base}/team-a/configmaps"))
        .json(&json!({"metadata": {"name": "held"}}))
        .send()
        .await
        .expect("create");
    assert_eq!(created.status(), 201);
    let flip_at = t0 + Duration::from_secs(60);
    let pin = format!(
        "      backend: new\n      flipAt: {}\n",
        humantime::format_rfc3339_seconds(flip_at)
    );
    gate.rewrite(&fenced(&pin));
    let loaded = eventually(10, || async {
        let m = gate.metrics().await;
        metric(&m, "skewgate_config_reloads_total{result=\"success\"}") >= 2.0
    })
    .await;
    assert!(loaded);
    // flipAt: writes that come now are held until the fence ends, longer than the 1 s a write is
    // given upstream. Before, that second counted from the write's arrival, hold included: each was
    // sent with its time spent and answered 504 after the apiserver took it.
    clock.set(flip_at);
    let url = format!("{base}/team-a/configmaps/held");
    let writes: Vec<_> = (0..4)
        .map(|n| {
            let (c, url) = (c.clone(), url.clone());
            tokio::spawn(async move {
                let r = c
                    .patch(&url)
                    .header("content-type", "application/merge-patch+json")
                    .body(format!(r#"{{"data":{{"n":"{n}"}}}}"#))
                    .send()
                    .await
                    .expect("an answer");
                r.status().as_u16()
            })
        })
        .collect();
    let held = eventually(10, || async {
        metric(
            &gate.metrics().await,
            "skewgate_writes_held{pin=\"team-a\"}",
        ) >= 4.0
    })
    .await;
    assert!(held, "the writes are held in the fence");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // The new version takes its time, as a real apiserver does (well within the 1 s).
    sims.new.controls.write_delay.store(300, Ordering::Relaxed);
    clock.set(flip_at + Duration::from_secs(3));
    let mut codes = Vec::new();
    for w in writes {
        codes.push(w.await.expect("writer"));
    }
    assert_eq!(
        codes, [200; 4],
        "every held write answered by the new version"
    );
    let patched = sims
        .store
        .writes()
        .into_iter()
        .filter(|r| r.verb == "patch");
    assert!(patched.into_iter().all(|r| r.version == NEW));
}

/// A reload that moves a pin at a `flipAt` to come leaves the pin's watches on the version it moves
/// from open until then: its reads go there until the move (`/debug/routes` says "before
/// flipAt"), and a watch ended at the reload only made its client list again from the same
/// version. They end at `flipAt`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_with_a_flip_at_to_come_ends_the_pins_watches_at_flip_at_not_at_the_reload() {
    let sims = sims().await;
    let t0 = humantime::parse_rfc3339("2030-01-01T00:00:00Z").expect("time");
    let clock = Arc::new(ManualClock::new(t0));
    let file = temp_dir("flip-reload-watch").join("routes.yaml");
    std::fs::write(&file, table(&sims, "      backend: old\n")).expect("routes");
    let gate = gate_on(
        &file,
        ProxySettings {
            clock: clock.clone(),
            ..ProxySettings::default()
        },
    )
    .await;
    let client = h2();
    let base = gate.url();
    let pinned = watch_configmaps(&client, &base, "team-a")
        .await
        .expect("watch");
    assert_eq!(served_by(&pinned), OLD);
    let mut pinned = pinned.bytes_stream();
    let flip_at = t0 + Duration::from_secs(60);
    let pin = format!(
        "      backend: new\n      flipAt: {}\n",
        humantime::format_rfc3339_seconds(flip_at)
    );
    gate.rewrite(&table(&sims, &pin));
    let loaded = eventually(10, || async {
        metric(
            &gate.metrics().await,
            "skewgate_config_reloads_total{result=\"success\"}",
        ) >= 2.0
    })
    .await;
    assert!(loaded);
    assert!(
        tokio::time::timeout(Duration::from_millis(800), pinned.next())
            .await
            .is_err(),
        "the pin's watch ended at the reload, before its flipAt"
    );
    clock.set(flip_at + Duration::from_secs(1));
    assert!(
        ends_cleanly_within(&mut pinned, 5).await,
        "the pin's watch on the old version ended at flipAt"
    );
}

/// Whether a watch's body ends within `secs`, each chunk before its end whole.
async fn ends_cleanly_within(
    body: &mut (impl futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin),
    secs: u64,
) -> bool {
    let drained = async {
        while let Some(chunk) = body.next().await {
            assert!(chunk.is_ok(), "ended cleanly");
        }
    };
    tokio::time::timeout(Duration::from_secs(secs), drained)
        .await
        .is_ok()
}
