//! Pin moves that supersede pending ones (issue 57), on the real pair. Two replicas as a fleet,
//! eight writers patching six configmaps through both, and the pin moved four times with `from`
//! and `flipAt`. The second replica gets each table 3 s after the first, and is frozen (SIGSTOP)
//! from one second before the `flipAt` of the second and fourth moves. The apiservers' audit logs
//! judge it: no object written through both versions at once, and every write answered (200, or
//! 429 with `Retry-After`, retried as client-go retries it).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::h2client::H2;
use crate::harness::{Pair, admin_get, direct, gate_with, table};
use crate::moves::{create_configmaps, sleep_until};

/// How a run moves the pin.
struct Plan {
    /// The pin's name and its namespace: one per run, so that one run's Leases say nothing of
    /// another's pin.
    name: &'static str,
    /// The replicas' addresses (`--advertise-address`).
    addresses: [&'static str; 2],
    /// Between one table and the next, and from a table to its `flipAt`.
    spacing: Duration,
    ahead: Duration,
    /// After the last table: long enough for what was timed to be made.
    tail: Duration,
}

/// Lease rounds of 2 s, valid 3 s, the defaults' proportions (10 s, 15 s) at a fifth: the fleet
/// makes a move no sooner than 8 s after its last replica runs it.
const LEASE: [&str; 4] = ["--lease-renew-interval", "2s", "--lease-duration", "3s"];
const WRITERS: usize = 8;
const OBJECTS: usize = 6;
/// How late the second replica's tables are, and how long it is frozen.
const LATE: Duration = Duration::from_secs(3);
const FROZEN: Duration = Duration::from_secs(6);

fn routes(plan: &Plan, pin: &str) -> String {
    format!(
        "writes:\n  default: old\n  fence: 3s\n  pins:\n    - name: {0}\n      namespaces: [{0}]\n{pin}reads:\n  default: old\n",
        plan.name
    )
}

/// Each table 4 s after the one before, `flipAt` 3 s ahead: every move is still waiting for the
/// late replica (and the fleet's 8 s) when the next table comes. Before issue 57, each replica
/// sent the pin's writes to the new table's `from` the moment it loaded it, 3 s apart.
pub fn moves_that_supersede_pending_ones_never_overlap(pair: &Pair) {
    let plan = Plan {
        name: "supersede",
        addresses: ["192.0.2.31", "192.0.2.32"],
        spacing: Duration::from_secs(4),
        ahead: Duration::from_secs(3),
        tail: Duration::from_secs(30),
    };
    let judged = run(pair, &plan);
    assert!(
        judged
            .values()
            .all(|o| o.switches == judged["cm-0"].switches),
        "every object moved alike: {judged:?}"
    );
}

/// The same moves 16 s apart, `flipAt` 12 s ahead: each is made before the next table comes,
/// once per object, at its `flipAt`.
pub fn spaced_moves_never_overlap(pair: &Pair) {
    let plan = Plan {
        name: "spaced",
        addresses: ["192.0.2.41", "192.0.2.42"],
        spacing: Duration::from_secs(16),
        ahead: Duration::from_secs(12),
        tail: Duration::from_secs(16),
    };
    let judged = run(pair, &plan);
    assert!(
        judged.values().all(|o| o.switches == 4),
        "each of the four moves made once per object: {judged:?}"
    );
}

/// One run of `plan`: the writes' answers checked, the audit logs judged per object.
fn run(pair: &Pair, plan: &Plan) -> BTreeMap<String, Judged> {
    let rbac = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubeadm/rbac.yaml");
    let (ok, text) = direct(pair, "new", &["apply", "-f", &rbac.to_string_lossy()]);
    assert!(ok, "{text}");
    let _ = direct(pair, "new", &["create", "namespace", plan.name]);
    let replica = |ip: &str| {
        let mut more = vec!["--advertise-address", ip, "--goaway-chance", "0"];
        more.extend(LEASE);
        gate_with(pair, &routes(plan, "      backend: old\n"), &more)
    };
    let (a, a_file) = replica(plan.addresses[0]);
    let (b, b_file) = replica(plan.addresses[1]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let answers = runtime.block_on(async {
        let (ca, cb) = (
            H2::connect(pair, &a.addr).await,
            H2::connect(pair, &b.addr).await,
        );
        create_configmaps(&ca, plan.name, OBJECTS).await;
        let (stop_tx, stop) = tokio::sync::watch::channel(false);
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let client = if w < WRITERS / 2 { &ca } else { &cb };
                let path = format!(
                    "/api/v1/namespaces/{}/configmaps/cm-{}",
                    plan.name,
                    w % OBJECTS
                );
                tokio::spawn(write(client.clone(), path, stop.clone()))
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let end = move_four_times(pair, plan, (&a_file, &b_file), b.child.id()).await;
        sleep_until(end + plan.tail).await;
        let _ = stop_tx.send(true);
        let mut answers = Answers::default();
        for w in writers {
            answers.add(&w.await.expect("writer"));
        }
        answers
    });
    print_moves(plan, [("A", &a), ("B", &b)]);
    println!("{}: answers {answers:?}", plan.name);
    assert_eq!(answers.refused_without_retry_after, 0, "{answers:?}");
    assert_eq!(
        answers.codes.keys().copied().collect::<Vec<_>>(),
        vec![200],
        "every write answered 200 in the end: {answers:?}"
    );
    let judged = judge(pair, plan.name);
    println!("{}: audit {judged:?}", plan.name);
    if judged.values().any(|o| o.overlaps > 0) {
        print_logs([("A", &a), ("B", &b)]);
    }
    let overlaps: usize = judged.values().map(|o| o.overlaps).sum();
    let firsts: Vec<_> = judged.values().filter_map(|o| o.first.as_ref()).collect();
    assert_eq!(
        overlaps, 0,
        "cross-version overlaps, the first of each object {firsts:?}: {judged:?}"
    );
    assert!(
        judged.len() == OBJECTS && judged.values().all(|o| o.writes > 0),
        "every object written: {judged:?}"
    );
    judged
}

/// Each replica's counts of the pin's moves, flips and fence ends.
fn print_moves(plan: &Plan, replicas: [(&str, &crate::process::Serving); 2]) {
    for (who, gate) in replicas {
        let (_, metrics) = admin_get(gate, "/metrics");
        let moves = metrics.lines().filter(|l| {
            l.contains(plan.name)
                && (l.starts_with("skewgate_pin_moves") || l.starts_with("skewgate_pin_fence"))
        });
        println!("{}: {who}: {:?}", plan.name, moves.collect::<Vec<_>>());
    }
}

/// What each replica logged of pins, Leases and the fleet: for a run that overlapped.
fn print_logs(replicas: [(&str, &crate::process::Serving); 2]) {
    for (who, gate) in replicas {
        for line in crate::harness::logged(gate) {
            if line.contains("pin") || line.contains("Lease") || line.contains("fleet") {
                println!("{who}: {line}");
            }
        }
    }
}

/// The pin moved four times, there and back twice: A's file at each step, B's `LATE` after, B
/// (process `b`) frozen from a second before the second and fourth `flipAt`s. Returns when the
/// last table was written.
async fn move_four_times(
    pair: &Pair,
    plan: &Plan,
    (a_file, b_file): (&Path, &Path),
    b: u32,
) -> SystemTime {
    let begun = SystemTime::now();
    let mut events: Vec<(SystemTime, Event)> = Vec::new();
    for k in 0..4u32 {
        let at = begun + plan.spacing * k;
        let flip_at = at + plan.ahead;
        let (from, to) = if k % 2 == 0 {
            ("old", "new")
        } else {
            ("new", "old")
        };
        let pin = format!(
            "      backend: {to}\n      from: {from}\n      flipAt: {}\n",
            humantime::format_rfc3339_seconds(flip_at)
        );
        let text = table(pair, &routes(plan, &pin));
        events.push((at, Event::Table(a_file.to_path_buf(), text.clone())));
        events.push((at + LATE, Event::Table(b_file.to_path_buf(), text)));
        if k % 2 == 1 {
            let stop = flip_at - Duration::from_secs(1);
            events.push((stop, Event::Signal("STOP")));
            events.push((stop + FROZEN, Event::Signal("CONT")));
        }
    }
    events.sort_by_key(|e| e.0);
    let mut last = begun;
    for (at, event) in events {
        sleep_until(at).await;
        match event {
            Event::Table(file, text) => {
                std::fs::write(file, text).expect("routes");
                last = at;
            }
            Event::Signal(signal) => {
                let sent = std::process::Command::new("kill")
                    .args([&format!("-{signal}"), &b.to_string()])
                    .status()
                    .expect("kill");
                assert!(sent.success(), "kill -{signal} {b}");
            }
        }
    }
    last
}

enum Event {
    Table(std::path::PathBuf, String),
    Signal(&'static str),
}

/// The writes' final answers.
#[derive(Debug, Default)]
struct Answers {
    codes: BTreeMap<u16, u64>,
    /// 429s retried.
    retried: u64,
    refused_without_retry_after: u64,
}

impl Answers {
    fn add(&mut self, other: &Answers) {
        for (code, n) in &other.codes {
            *self.codes.entry(*code).or_insert(0) += n;
        }
        self.retried += other.retried;
        self.refused_without_retry_after += other.refused_without_retry_after;
    }
}

/// Patches `path` until `stop`; a 429 is retried after 100 ms.
async fn write(mut client: H2, path: String, stop: tokio::sync::watch::Receiver<bool>) -> Answers {
    let mut answers = Answers::default();
    let mut n = 0u64;
    while !*stop.borrow() {
        n += 1;
        let body = format!(r#"{{"data":{{"n":"{n}"}}}}"#);
        let (code, headers, _) = client
            .call_with_headers("PATCH", &path, "application/merge-patch+json", body)
            .await;
        if code == 429 {
            answers.retried += 1;
            if !headers.contains_key("retry-after") {
                answers.refused_without_retry_after += 1;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        *answers.codes.entry(code).or_insert(0) += 1;
        if code == 0 {
            break;
        }
    }
    answers
}

/// What the audit logs say of one object's patches.
#[derive(Debug)]
pub struct Judged {
    pub writes: usize,
    /// Patches received by one version before the other had answered its last one before them.
    pub overlaps: usize,
    /// Changes of version from one patch to the next, in the order received.
    pub switches: usize,
    /// The first overlap: when the patch was received, and the other version's patch it met
    /// (received, answered).
    pub first: Option<(String, (String, String))>,
}

/// Per configmap of namespace `ns`, its patches as both apiservers' audit logs tell.
pub fn judge(pair: &Pair, ns: &str) -> BTreeMap<String, Judged> {
    judge_by(pair, |e| {
        let patch = e["verb"] == "patch"
            && e["objectRef"]["namespace"] == ns
            && e["objectRef"]["resource"] == "configmaps";
        patch.then(|| {
            e["objectRef"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
    })
}

/// Per object of namespace `ns` (`resource/name`, its subresources with it), its updates and
/// patches as both apiservers' audit logs tell.
pub fn judge_writes(pair: &Pair, ns: &str) -> BTreeMap<String, Judged> {
    judge_by(pair, |e| {
        let write =
            (e["verb"] == "update" || e["verb"] == "patch") && e["objectRef"]["namespace"] == ns;
        let r = &e["objectRef"];
        let key = format!("{}/{}", r["resource"].as_str()?, r["name"].as_str()?);
        write.then_some(key)
    })
}

/// Per object that `key` names an audit event's object for (`None`: not judged), its writes.
pub fn judge_by(
    pair: &Pair,
    key: impl Fn(&serde_json::Value) -> Option<String>,
) -> BTreeMap<String, Judged> {
    let mut per_object: BTreeMap<String, Vec<(String, String, usize)>> = BTreeMap::new();
    for (version, role) in ["old", "new"].iter().enumerate() {
        for e in pair.audit(role) {
            let Some(name) = key(&e) else { continue };
            let field = |f: &str| e[f].as_str().unwrap_or_default().to_owned();
            per_object.entry(name).or_default().push((
                field("requestReceivedTimestamp"),
                field("stageTimestamp"),
                version,
            ));
        }
    }
    per_object
        .into_iter()
        .map(|(name, mut patches)| {
            // RFC 3339 with microseconds, in UTC, both from this host's clock: ordered as text.
            patches.sort();
            let mut last_done: [Option<(&str, &str)>; 2] = [None, None];
            let (mut overlaps, mut switches, mut previous) = (0, 0, None);
            let mut first = None;
            for (received, done, version) in &patches {
                let other = last_done[1 - version];
                if let Some((d, r)) = other.filter(|(d, _)| received.as_str() < *d) {
                    overlaps += 1;
                    first.get_or_insert_with(|| (received.clone(), (r.to_owned(), d.to_owned())));
                }
                if previous.is_some_and(|p| p != *version) {
                    switches += 1;
                }
                previous = Some(*version);
                let mine = &mut last_done[*version];
                if mine.is_none_or(|(d, _)| d < done.as_str()) {
                    *mine = Some((done, received));
                }
            }
            let judged = Judged {
                writes: patches.len(),
                overlaps,
                switches,
                first,
            };
            (name, judged)
        })
        .collect()
}
