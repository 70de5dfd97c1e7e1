//! What the rehearsal (`rehearsal.rs`) is judged by: the apiservers' audit logs (no object written
//! by two versions at once, no component served by an apiserver older than itself), the stored
//! objects (no field lost, every acknowledged write there), and what skewgate and the writers were
//! answered (no 5xx).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::harness::{admin_get, curl, direct};
use crate::protobuf::metric;
use crate::rehearsal::{NS, Rehearsal, SENTINEL};

/// A v1.36 controller-manager's Lease write while writes still go to v1.35: refused (429), with
/// the reason, sent nowhere (what the real one meets when it tries to take a free lead).
pub fn a_newer_lease_write_is_held(r: &Rehearsal<'_>) {
    let (ok, lease) = direct(
        r.pair,
        "new",
        &[
            "-n",
            "kube-system",
            "get",
            "lease",
            "kube-controller-manager",
            "-o",
            "json",
        ],
    );
    assert!(ok, "{lease}");
    let file = std::env::temp_dir().join(format!("rehearsal-lease-{}.json", std::process::id()));
    std::fs::write(&file, &lease).expect("lease");
    let url = format!(
        "https://{}/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-controller-manager",
        r.gate.addr
    );
    let ua = format!(
        "kube-controller-manager/{} (linux/amd64) kubernetes/rehearsal",
        r.new
    );
    let data = format!("@{}", file.display());
    let (code, body) = curl(
        r.pair,
        &[
            "-X",
            "PUT",
            "-A",
            &ua,
            "-H",
            "content-type: application/json",
            "--data-binary",
            &data,
            &url,
        ],
    );
    assert_eq!(code, 429, "{body}");
    assert!(
        body.contains("elects a leader") && body.contains("v1.35"),
        "{body}"
    );
}

/// Everything the rehearsal is judged by, in turn.
pub fn judge(r: &Rehearsal<'_>) {
    writers_answered(r);
    acknowledged_writes_stored(r);
    no_object_written_by_two_versions_at_once(r);
    no_component_served_by_an_older_apiserver(r);
    skewgate_answered_no_5xx(r);
    let handovers = r.handovers.borrow();
    println!("rehearsal: handovers of the lead {handovers:?}");
}

/// Every write answered, none 5xx: 200, a conflict (409), a guard's refusal (422) or a hold
/// (429, with Retry-After) while a pin moves.
fn writers_answered(r: &Rehearsal<'_>) {
    let answers = r.answers.lock().expect("answers");
    let mut by_step: BTreeMap<(String, u16), usize> = BTreeMap::new();
    for (step, _, code) in answers.iter() {
        *by_step.entry((step.clone(), *code)).or_default() += 1;
    }
    println!("rehearsal: writers answered (step, code): count {by_step:?}");
    let wrong: Vec<_> = (answers.iter())
        .filter(|(_, _, code)| ![200, 409, 422, 429].contains(code))
        .collect();
    assert!(wrong.is_empty(), "writes answered otherwise: {wrong:?}");
    let ok = answers.iter().filter(|(_, _, c)| *c == 200).count();
    assert!(
        ok * 2 > answers.len(),
        "most writes went through: {by_step:?}"
    );
    let status: Vec<u16> = (answers.iter())
        .filter(|(_, what, _)| what == "update pod status")
        .map(|(_, _, c)| *c)
        .collect();
    assert!(status.contains(&200), "the status writer wrote: {status:?}");
}

/// The last value each configmap's writer was answered 200 for is what is stored.
fn acknowledged_writes_stored(r: &Rehearsal<'_>) {
    let acknowledged = r.acknowledged.lock().expect("acks");
    for (name, n) in acknowledged.iter() {
        let (ok, text) = direct(
            r.pair,
            "new",
            &["-n", NS, "get", "configmap", name, "-o", "json"],
        );
        assert!(ok, "{text}");
        let cm: Value = serde_json::from_str(&text).expect("configmap JSON");
        let stored = [&cm["data"]["n"], &cm["data"]["seen"]]
            .iter()
            .filter_map(|v| v.as_str()?.parse::<u64>().ok())
            .max();
        assert_eq!(stored, Some(*n), "{name}: {}", cm["data"]);
    }
    println!("rehearsal: every acknowledged write stored ({acknowledged:?})");
}

/// Per object, its updates and patches since the rehearsal began, as both audit logs tell: none
/// received by one version before the other had answered its last one before it.
fn no_object_written_by_two_versions_at_once(r: &Rehearsal<'_>) {
    let since = r.since.clone();
    let judged = crate::supersede::judge_by(r.pair, |e| {
        let received = e["requestReceivedTimestamp"].as_str()?;
        let write = e["verb"] == "update" || e["verb"] == "patch";
        let o = &e["objectRef"];
        let key = format!(
            "{}/{}/{}",
            o["namespace"].as_str().unwrap_or(""),
            o["resource"].as_str()?,
            o["name"].as_str()?
        );
        (write && received >= since.as_str()).then_some(key)
    });
    let writes: usize = judged.values().map(|j| j.writes).sum();
    let switched: Vec<&String> = (judged.iter())
        .filter(|(_, j)| j.switches > 0)
        .map(|(k, _)| k)
        .collect();
    let overlapping: Vec<_> = judged.iter().filter(|(_, j)| j.overlaps > 0).collect();
    println!(
        "rehearsal: audit: {writes} updates and patches of {} objects; written through both versions in turn: {switched:?}",
        judged.len()
    );
    assert!(
        overlapping.is_empty(),
        "written by two versions at once: {overlapping:?}"
    );
    assert!(
        !switched.is_empty(),
        "the writes moved between the versions"
    );
}

/// No request of a v1.36 component reached the v1.35 apiserver; its requests reached v1.36.
fn no_component_served_by_an_older_apiserver(r: &Rehearsal<'_>) {
    let newer = |e: &Value| {
        let ua = e["userAgent"].as_str().unwrap_or_default();
        let received = e["requestReceivedTimestamp"].as_str().unwrap_or_default();
        received >= r.since.as_str()
            && ["kube-controller-manager/", "kube-scheduler/"]
                .iter()
                .any(|c| ua.starts_with(&format!("{c}{}", r.new)))
    };
    let on_old: Vec<Value> = r
        .pair
        .audit("old")
        .into_iter()
        .filter(|e| newer(e))
        .collect();
    let on_new = r.pair.audit("new").into_iter().filter(|e| newer(e)).count();
    println!(
        "rehearsal: requests of the {} components: {on_new} reached v1.36, {} v1.35",
        r.new,
        on_old.len()
    );
    let first: Vec<String> = (on_old.iter().take(3))
        .map(|e| format!("{} {} {}", e["verb"], e["requestURI"], e["userAgent"]))
        .collect();
    assert!(
        on_old.is_empty(),
        "served by the older apiserver: {first:?}"
    );
    assert!(on_new > 0, "the new components were served");
}

/// The v1.36-only field of the sentinel pod's status is stored still, after the rollback moved
/// its writes to v1.35, which drops it on every write: the guard refused the status writer's
/// updates through v1.35 (422).
pub fn the_new_only_field_kept(r: &Rehearsal<'_>) {
    let (ok, text) = direct(r.pair, "new", &["get", "pod", SENTINEL, "-o", "json"]);
    assert!(ok, "{text}");
    let pod: Value = serde_json::from_str(&text).expect("pod JSON");
    let health = &pod["status"]["containerStatuses"][0]["allocatedResourcesStatus"];
    assert!(
        !health.is_null(),
        "allocatedResourcesStatus was lost: {}",
        pod["status"]
    );
    let answers = r.answers.lock().expect("answers");
    let refused = (answers.iter())
        .filter(|(step, what, code)| {
            what == "update pod status" && *code == 422 && step.starts_with("rollback/")
        })
        .count();
    assert!(
        refused > 0,
        "the guard refused the status writer through v1.35: {answers:?}"
    );
    println!(
        "rehearsal: {SENTINEL}'s allocatedResourcesStatus kept ({refused} updates through v1.35 refused)"
    );
}

/// skewgate answered nothing 5xx (its own or an apiserver's), refused no component for want of a
/// backend, and said why it held the v1.36 leaders back.
fn skewgate_answered_no_5xx(r: &Rehearsal<'_>) {
    let (_, m) = admin_get(&r.gate, "/metrics");
    let five: Vec<&str> = (m.lines())
        .filter(|l| l.starts_with("skewgate_requests_total{") && l.contains("code=\"5"))
        .collect();
    let policy: Vec<&str> = m
        .lines()
        .filter(|l| l.starts_with("skewgate_skew_policy_total{"))
        .collect();
    println!("rehearsal: skew policy {policy:?}");
    assert!(five.is_empty(), "5xx answered: {five:?}");
    for component in ["kube-controller-manager", "kube-scheduler"] {
        let none = format!(
            "skewgate_skew_policy_total{{component=\"{component}\",outcome=\"no_backend\"}}"
        );
        assert_eq!(metric(&m, &none), 0.0, "{policy:?}");
        let raised =
            format!("skewgate_skew_policy_total{{component=\"{component}\",outcome=\"raised\"}}");
        assert!(
            metric(&m, &raised) > 0.0,
            "its reads were raised to v1.36: {policy:?}"
        );
    }
}
