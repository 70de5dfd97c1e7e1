//! A pin moved by `flipAt` while its writes keep coming: every write answered, none of them
//! overlapping across the versions, as the apiservers' own audit logs tell.

use std::time::{Duration, SystemTime};

use crate::h2client::H2;
use crate::harness::{Pair, direct, gate_with, table};

/// As many as a busy controller keeps in flight, so that many writes are held through the fence.
const WRITERS: usize = 32;
/// Writers of configmaps no pin covers, all the while: other traffic, as in a cluster.
const OTHERS: usize = 8;

fn routes(pin: &str) -> String {
    format!(
        "writes:\n  default: old\n  fence: 4s\n  pins:\n    - name: flip\n      namespaces: [flip]\n      resources: [configmaps]\n{pin}reads:\n  default: old\n"
    )
}

/// Configmaps in namespace `flip` are pinned to the old version; 32 writers patch them through
/// skewgate without pause, on one HTTP/2 connection, while the pin moves to the new version at a
/// `flipAt`, and 8 more write configmaps no pin covers. Writes that come in the fence (4 s) are held through it, longer than the 2 s a write
/// is given upstream: every one is answered 200 (a write decided in the last moments before
/// `flipAt` whose last look comes after it is refused unsent, 429 with `Retry-After`, and retried
/// as client-go retries it). Issue 42 (1): before, held writes were sent with
/// that time already spent and cut off (504) after the apiserver took them, at the deadline
/// ticker's next round; the other writers keep that ticker running, as a cluster's traffic does
/// (skewgate at 6f3ab60: 15 of the 32 held writes answered 504 here).
pub fn a_pin_moved_by_flip_at_answers_every_write_in_flight(pair: &Pair) {
    for ns in ["flip", "steady"] {
        let _ = direct(pair, "new", &["create", "namespace", ns]);
    }
    // No GOAWAY chance: the writers share one connection and count every write, where client-go
    // would open another and retry what was never sent.
    let more = ["--goaway-chance", "0"];
    let (gate, file) = gate_with(pair, &routes("      backend: old\n"), &more);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let (codes, held, retried) = runtime.block_on(async {
        let client = H2::connect(pair, &gate.addr).await;
        create_configmaps(&client, "flip", WRITERS).await;
        create_configmaps(&client, "steady", OTHERS).await;
        let until = tokio::time::Instant::now() + Duration::from_secs(60);
        let (stop_tx, stop) = tokio::sync::watch::channel(false);
        let write = |ns: &'static str, w| write_until(client.clone(), ns, w, stop.clone(), until);
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| tokio::spawn(write("flip", w)))
            .chain((0..OTHERS).map(|w| tokio::spawn(write("steady", w))))
            .collect();
        tokio::time::sleep(Duration::from_secs(1)).await;
        // Whole seconds, at least 3 s ahead.
        let flip_at = SystemTime::now() + Duration::from_secs(4);
        let pin = format!(
            "      backend: new\n      from: old\n      flipAt: {}\n",
            humantime::format_rfc3339_seconds(flip_at)
        );
        std::fs::write(&file, table(pair, &routes(&pin))).expect("routes");
        // In the fence, every writer's write is held; then 2 s beyond.
        sleep_until(flip_at + Duration::from_secs(2)).await;
        let held = writes_held(&gate);
        sleep_until(flip_at + Duration::from_secs(6)).await;
        let _ = stop_tx.send(true);
        let (mut codes, mut retried) = (Vec::new(), 0);
        for w in writers {
            let (answered, refused) = w.await.expect("writer");
            codes.extend(answered);
            retried += refused;
        }
        (codes, held, retried)
    });
    let failed: Vec<&(u16, String)> = codes.iter().filter(|(c, _)| *c != 200).collect();
    println!(
        "flipAt: {} writes, not 200: {}; 429 with Retry-After, retried: {retried}",
        codes.len(),
        failed.len()
    );
    assert!(failed.is_empty(), "every write answered 200: {failed:?}");
    println!("flipAt: {held} writes held in the fence");
    assert!(held >= WRITERS as f64 / 2.0, "writes were held: {held}");
    no_overlap_in_the_audit_logs(pair, "flip");
}

pub async fn create_configmaps(client: &H2, ns: &str, n: usize) {
    let mut client = client.clone();
    for w in 0..n {
        let body =
            format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"cm-{w}"}}}}"#);
        let path = format!("/api/v1/namespaces/{ns}/configmaps");
        let (code, text) = client.call("POST", &path, "application/json", body).await;
        assert!(code == 201 || code == 409, "{code} {text}");
    }
}

/// Patches configmap `cm-{w}` in `ns` until `stop` (or `until`): each answer's code and, when not
/// 200, its body. A 429 with `Retry-After` is retried after 100 ms, as client-go retries it, and
/// counted apart (the second of the pair): a write decided in the last moments before `flipAt`
/// whose last look before it is sent comes after it is refused so, unsent.
async fn write_until(
    mut client: H2,
    ns: &str,
    w: usize,
    stop: tokio::sync::watch::Receiver<bool>,
    until: tokio::time::Instant,
) -> (Vec<(u16, String)>, u64) {
    let path = format!("/api/v1/namespaces/{ns}/configmaps/cm-{w}");
    let (mut codes, mut retried) = (Vec::new(), 0);
    let mut n = 0u64;
    while !*stop.borrow() && tokio::time::Instant::now() < until {
        n += 1;
        let body = format!(r#"{{"data":{{"n":"{n}"}}}}"#);
        let (code, headers, text) = client
            .call_with_headers("PATCH", &path, "application/merge-patch+json", body)
            .await;
        if code == 429 && headers.contains_key("retry-after") {
            retried += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        codes.push((code, if code == 200 { String::new() } else { text }));
        if code == 0 {
            break;
        }
    }
    (codes, retried)
}

/// How many writes wait now, from skewgate's metrics.
fn writes_held(gate: &crate::process::Serving) -> f64 {
    let (_, text) = crate::harness::admin_get(gate, "/metrics");
    text.lines()
        .find(|l| l.starts_with("skewgate_writes_held{pin=\"flip\"}"))
        .and_then(|l| l.split_whitespace().last()?.parse().ok())
        .unwrap_or(0.0)
}

pub async fn sleep_until(at: SystemTime) {
    tokio::time::sleep(at.duration_since(SystemTime::now()).unwrap_or_default()).await;
}

/// The old version answered its last patch of the configmaps in `ns` before the new one received
/// its first: no two versions wrote them at once.
pub fn no_overlap_in_the_audit_logs(pair: &Pair, ns: &str) {
    let patches = |role: &str| {
        pair.audit(role)
            .into_iter()
            .filter(|e| {
                e["verb"] == "patch"
                    && e["objectRef"]["namespace"] == ns
                    && e["objectRef"]["resource"] == "configmaps"
            })
            .map(|e| {
                let at = |f: &str| e[f].as_str().unwrap_or_default().to_owned();
                (at("requestReceivedTimestamp"), at("stageTimestamp"))
            })
            .collect::<Vec<_>>()
    };
    let (old, new) = (patches("old"), patches("new"));
    println!(
        "audit: {} patches reached the old version, {} the new",
        old.len(),
        new.len()
    );
    assert!(!old.is_empty() && !new.is_empty(), "both versions wrote");
    // RFC 3339 with microseconds, in UTC, both from this host's clock: ordered as text.
    let old_last = old.iter().map(|(_, done)| done).max();
    let new_first = new.iter().map(|(received, _)| received).min();
    assert!(
        old_last < new_first,
        "the old version answered a write at {old_last:?}, after the new one received one at {new_first:?}"
    );
}
