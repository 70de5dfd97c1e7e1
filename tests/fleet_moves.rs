//! Pin moves made by a fleet of replicas (issue 43), judged from the apiservers' side: no object
//! is written by two versions at once, nor by the old one after the new one, while replicas get
//! their route file late, run a clock 5 s off, or are frozen (SIGSTOP) in the middle of a move.
//! The same moves by replicas that do not publish themselves show the overlaps.

mod common;
#[path = "common/process.rs"]
mod process;

use std::time::{Duration, SystemTime};

use common::*;

/// The route table with pin `team-a` as `pin` says (its lines below `namespaces`).
fn pin_table(sims: &Sims, pin: &str) -> String {
    routes(
        sims,
        &format!(
            "writes:\n  default: old\n  fence: 3s\n  pins:\n    - name: team-a\n      namespaces: [team-a]\n{pin}reads:\n  default: old\n"
        ),
    )
}

/// Pin `team-a` moving from `from` to `to` at `flip_at`.
fn moving(sims: &Sims, from: &str, to: &str, flip_at: SystemTime) -> String {
    let at = humantime::format_rfc3339_seconds(flip_at);
    pin_table(
        sims,
        &format!("      backend: {to}\n      from: {from}\n      flipAt: {at}\n"),
    )
}

/// When the test binary began: what the failures' times count from.
fn base() -> std::time::Instant {
    static BASE: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    *BASE.get_or_init(std::time::Instant::now)
}

/// Says what the test does, and when (seconds since `base`).
fn step(what: &str) {
    println!("{:8.3} {what}", base().elapsed().as_secs_f64());
}

/// Sleeps until `t` (by the system clock).
async fn until(t: SystemTime) {
    let left = t.duration_since(SystemTime::now()).unwrap_or_default();
    tokio::time::sleep(left).await;
}

/// Objects `cm-0`..`cm-{n-1}` in namespace team-a.
async fn create_objects(sims: &Sims, n: usize) {
    for i in 0..n {
        create_configmap(&sims.old.url(), "team-a", &format!("cm-{i}")).await;
    }
}

/// What a run of moves came to: the writes' final codes, the 429s retried, and per object what
/// the apiservers saw.
struct Outcome {
    codes: std::collections::BTreeMap<u16, u64>,
    retried: u64,
    objects: std::collections::BTreeMap<String, ObjectWrites>,
    /// The first changes of version per object (`common::switches`).
    switches: String,
}

impl Outcome {
    fn judge(sims: &Sims, (codes, retried): (std::collections::BTreeMap<u16, u64>, u64)) -> Self {
        let records = patches(sims);
        Outcome {
            codes,
            retried,
            objects: writes_per_object(&records),
            switches: switches(&records, 6, base()),
        }
    }

    fn overlaps(&self) -> usize {
        self.objects.values().map(|o| o.overlaps).sum()
    }
}

/// The late-table test: three replicas, writers through all of them, a pin moved at a `flipAt`
/// that one replica's file reaches 3 s after it.
async fn move_with_one_replica_late(fleet_mode: bool) -> Outcome {
    let sims = sims().await;
    let files = route_files("fleet-late", 3, &pin_table(&sims, "      backend: old\n"));
    let addr = node_addresses();
    let mut replicas = Vec::new();
    for (i, file) in files.iter().enumerate() {
        let r = if fleet_mode {
            publishing_replica(file, addr(i)).await
        } else {
            gate_on(file, skewgate::proxy::ProxySettings::default())
                .await
                .server
        };
        replicas.push(r);
    }
    let urls: Vec<String> = replicas
        .iter()
        .map(|r| format!("http://{}", r.addr))
        .collect();
    create_objects(&sims, 3).await;
    // Each object through two replicas.
    let writers = Writers::start(
        (0..6)
            .map(|i| {
                let (object, replica) = (i % 3, (i / 3 + i) % 3);
                format!(
                    "{}/api/v1/namespaces/team-a/configmaps/cm-{object}",
                    urls[replica]
                )
            })
            .collect(),
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let flip_at = SystemTime::now() + Duration::from_secs(3);
    let moved = moving(&sims, "old", "new", flip_at);
    std::fs::write(&files[0], &moved).expect("routes");
    std::fs::write(&files[1], &moved).expect("routes");
    // The third replica's file comes 3 s after flipAt.
    until(flip_at + Duration::from_secs(1)).await;
    // Past flipAt, with the move held back: a watch of what the pin covers still goes to the old
    // version, and ends when the fleet makes the move.
    let watch = watch_configmaps(&h2(), &urls[0], "team-a")
        .await
        .expect("watch");
    let watched_on = served_by(&watch);
    let mut stream = watch.bytes_stream();
    let watch = tokio::spawn(async move {
        while let Some(chunk) = futures_util::StreamExt::next(&mut stream).await {
            if chunk.is_err() {
                return false;
            }
        }
        true
    });
    until(flip_at + Duration::from_secs(3)).await;
    let open_while_held = !watch.is_finished();
    std::fs::write(&files[2], &moved).expect("routes");
    // Through the fleet's wait and the fence, and 2 s on the new version.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let outcome = Outcome::judge(&sims, writers.stop().await);
    assert!(
        outcome.objects.values().all(|o| o.switches >= 1),
        "the pin moved: {:?}",
        outcome.objects
    );
    let watch_ended = tokio::time::timeout(Duration::from_secs(1), watch).await;
    if fleet_mode {
        assert_eq!(
            watched_on, OLD,
            "reads follow the pin while its move is held back"
        );
        assert!(
            open_while_held,
            "the watch stays open while the move is held back"
        );
        assert!(
            matches!(watch_ended, Ok(Ok(true))),
            "the watch ended cleanly when the fleet moved the pin"
        );
    }
    for r in replicas {
        r.shutdown().await;
    }
    outcome
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pin_moves_when_every_replica_runs_its_move_not_at_flip_at_alone() {
    let o = move_with_one_replica_late(true).await;
    println!(
        "fleet: {:?}, {} retried; {:?}",
        o.codes, o.retried, o.objects
    );
    assert_eq!(o.overlaps(), 0, "{:?}", o.objects);
    assert!(
        o.objects.values().all(|w| w.switches == 1),
        "{:?}",
        o.objects
    );
    assert_eq!(
        o.codes.keys().copied().collect::<Vec<_>>(),
        vec![200],
        "every write answered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_fleet_a_replica_late_with_its_file_writes_through_the_old_version() {
    // The same move by replicas that do not publish themselves: two move at flipAt, the late one
    // writes the same objects through the old version for 3 s more.
    let o = move_with_one_replica_late(false).await;
    println!("no fleet: {:?}; {:?}", o.codes, o.objects);
    let excess: usize = o.objects.values().map(|w| w.switches - 1).sum();
    assert!(o.overlaps() + excess > 0, "{:?}", o.objects);
}

/// Replica C's freeze within a move: SIGSTOP this long after the move's file, SIGCONT that long.
type Freeze = (Duration, Duration);

/// The replicas of the three-replica test: A (its clock 5 s ahead) and B (each table 30 s late)
/// in this process, C a process of its own, to be frozen.
struct Three {
    a: skewgate::app::Server,
    b: skewgate::app::Server,
    c: process::Serving,
}

impl Three {
    async fn start(files: &[std::path::PathBuf], fleet_mode: bool) -> Three {
        let addr = node_addresses();
        let ahead = skewgate::proxy::ProxySettings {
            clock: std::sync::Arc::new(skewgate::steer::OffsetClock(Duration::from_secs(5))),
            ..Default::default()
        };
        let (a, b) = if fleet_mode {
            let a = publishing_replica_with(&files[0], addr(0), ahead).await;
            (a, publishing_replica(&files[1], addr(1)).await)
        } else {
            let b = gate_on(&files[1], skewgate::proxy::ProxySettings::default())
                .await
                .server;
            (gate_on(&files[0], ahead).await.server, b)
        };
        let mut args = vec!["--reload-poll", "200ms", "--no-access-log"];
        if fleet_mode {
            args.extend(["--advertise-address", "192.0.2.12"]);
            args.extend(["--lease-duration", "1s", "--lease-renew-interval", "100ms"]);
        }
        let c = process::serve(&files[2], &args, None);
        Three { a, b, c }
    }

    fn urls(&self) -> Vec<String> {
        let c = self.c.addr.clone();
        [self.a.addr.to_string(), self.b.addr.to_string(), c]
            .iter()
            .map(|a| format!("http://{a}"))
            .collect()
    }

    /// Sends `signal` (`STOP`, `CONT`) to C.
    fn signal_c(&self, signal: &str) {
        let pid = self.c.child.id().to_string();
        let sent = std::process::Command::new("kill")
            .args([&format!("-{signal}"), pid.as_str()])
            .status()
            .expect("kill");
        assert!(sent.success(), "kill -{signal} {pid}");
    }

    /// Moves pin team-a from `from` to `to` at 3 s from now: A's and C's files at once, B's 30 s
    /// later, C frozen for `freeze`; returns 36 s after it began.
    async fn move_pin(
        &self,
        sims: &Sims,
        files: &[std::path::PathBuf],
        to: (&str, &str),
        freeze: Freeze,
    ) {
        let begun = SystemTime::now();
        let text = moving(sims, to.0, to.1, begun + Duration::from_secs(3));
        std::fs::write(&files[0], &text).expect("routes");
        std::fs::write(&files[2], &text).expect("routes");
        step(&format!(
            "{} -> {}: A's and C's files, flipAt in 3 s",
            to.0, to.1
        ));
        let (stop_at, cont_at) = (begun + freeze.0, begun + freeze.0 + freeze.1);
        let late_at = begun + Duration::from_secs(30);
        let mut events: Vec<(SystemTime, Option<&str>)> = vec![
            (stop_at, Some("STOP")),
            (cont_at, Some("CONT")),
            (late_at, None),
        ];
        events.sort_by_key(|e| e.0);
        for (at, signal) in events {
            until(at).await;
            match signal {
                Some(s) => self.signal_c(s),
                None => std::fs::write(&files[1], &text).expect("routes"),
            }
            step(&format!(
                "{} -> {}: {}",
                to.0,
                to.1,
                signal.unwrap_or("B's file")
            ));
        }
        until(begun + Duration::from_secs(36)).await;
    }
}

/// The three-replica test of issue 43: writers through all three replicas (each object through
/// each), the pin moved to the new version and back; B gets each table 30 s late, A's clock is
/// 5 s ahead, C is frozen past its Lease's expiry: at the fleet's move in the first, before
/// `flipAt` in the second.
async fn back_and_forth(fleet_mode: bool) -> Outcome {
    base();
    let sims = sims().await;
    let tag = if fleet_mode { "fleet-3" } else { "alone-3" };
    let files = route_files(tag, 3, &pin_table(&sims, "      backend: old\n"));
    let three = Three::start(&files, fleet_mode).await;
    if fleet_mode {
        let admin = format!("http://{}/debug/fleet", three.a.admin_addr);
        let formed = eventually(10, || async {
            let view: serde_json::Value = match reqwest::get(&admin).await {
                Ok(r) => r.json().await.unwrap_or_default(),
                Err(_) => serde_json::Value::Null,
            };
            let live = view["replicas"].as_array().into_iter().flatten();
            live.filter(|r| r["live"] == true).count() == 3
        })
        .await;
        assert!(formed, "the three replicas see each other");
    }
    create_objects(&sims, 3).await;
    let urls = three.urls();
    let writers = Writers::through_each(&urls, 3);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let secs = Duration::from_secs;
    three
        .move_pin(&sims, &files, ("old", "new"), (secs(28), secs(5)))
        .await;
    three
        .move_pin(&sims, &files, ("new", "old"), (secs(1), secs(4)))
        .await;
    let outcome = Outcome::judge(&sims, writers.stop().await);
    three.a.shutdown().await;
    three.b.shutdown().await;
    outcome
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_late_off_and_frozen_move_a_pin_there_and_back_without_overlap() {
    let o = back_and_forth(true).await;
    println!(
        "fleet: {:?}, {} retried; {:?}",
        o.codes, o.retried, o.objects
    );
    assert_eq!(o.overlaps(), 0, "{:?}\n{}", o.objects, o.switches);
    assert!(
        o.objects.values().all(|w| w.switches == 2),
        "each object moved to the new version and back, once each: {:?}",
        o.objects
    );
    assert_eq!(
        o.codes.keys().copied().collect::<Vec<_>>(),
        vec![200],
        "every write answered, none with 5xx"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_fleet_the_same_moves_write_objects_through_both_versions() {
    let o = back_and_forth(false).await;
    println!("no fleet: {:?}; {:?}", o.codes, o.objects);
    let excess: usize = o
        .objects
        .values()
        .map(|w| w.switches.saturating_sub(2))
        .sum();
    assert!(o.overlaps() + excess > 0, "{:?}", o.objects);
}
