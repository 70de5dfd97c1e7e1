//! How `rollback-check` and `check` meet without the cluster: the check's JSON (`--record FILE`) is
//! read by `check --rollback-record FILE`, which judges its findings against the table checked: an
//! object at stake whose writes that table sends to the older backend is a loss to warn of. A table
//! that moves writes back with no record given is warned of too.

use std::time::{Duration, SystemTime};

use super::plan::Plan;
use super::{BackendRef, RollbackCheck, Stake};
use crate::config::{BackendId, RouteTable};

/// The `format` of a record this build writes and reads.
pub const RECORD_FORMAT: &str = "skewgate.io/rollback-check/v1";

/// A record older than this may miss what was written since.
const FRESH: Duration = Duration::from_secs(3600);

/// The warnings of `table` (with `running`, the table the replicas run now) about moving writes
/// back: `record` is the rollback-check read, if one was given.
pub fn record_warnings(
    table: &RouteTable,
    running: Option<&RouteTable>,
    record: Option<&RollbackCheck>,
    now: SystemTime,
) -> Vec<String> {
    let moves = moves_back(table, running);
    let Some(record) = record else {
        return moves
            .iter()
            .map(|m| {
                format!(
                    "{m}, and no rollback-check says what that strands: run `skewgate rollback-check --routes RUNNING --to OLDER --plan THIS --record FILE` and give `check --rollback-record FILE`"
                )
            })
            .collect();
    };
    let mut out = Vec::new();
    if record.format != RECORD_FORMAT {
        out.push(format!(
            "the rollback-check record is of format {:?}, not {RECORD_FORMAT:?}: run rollback-check again",
            record.format
        ));
        return out;
    }
    if let Some(age) = age(record, now).filter(|a| *a > FRESH) {
        out.push(format!(
            "the rollback-check record is {} old (checked at {}): objects written since are not in it; run it again",
            humantime::format_duration(Duration::from_secs(age.as_secs() / 60 * 60)),
            record.checked_at
        ));
    }
    if !table.backends.iter().any(|b| b.name == record.to.name) {
        out.push(format!(
            "the rollback-check record judged moving writes to backend {:?}, which this table does not name",
            record.to.name
        ));
    }
    out.extend(losses(table, record, now));
    out
}

/// The record's findings this table loses.
fn losses(table: &RouteTable, record: &RollbackCheck, now: SystemTime) -> Vec<String> {
    let plan = Plan::new(table.clone(), now);
    let mut findings = record.findings.clone();
    plan.mark(&mut findings, &record.to);
    let to = show(&record.to);
    let mut out = Vec::new();
    for f in findings.iter().filter(|f| f.lost() > 0) {
        let what = match &f.stake {
            Stake::KindNotServed => format!("are of a kind {to} does not serve"),
            Stake::Field { field } => format!("hold {field}, which {to} cannot store"),
        };
        let mut places: Vec<String> = (f.namespaces.iter())
            .filter(|n| n.kept.is_none())
            .take(5)
            .map(|n| match n.namespace.as_str() {
                "" => format!("{} cluster-scoped", n.count),
                ns => format!("{} in {ns}", n.count),
            })
            .collect();
        let shown: usize = places.len();
        let more = f.namespaces.iter().filter(|n| n.kept.is_none()).count() - shown;
        if more > 0 {
            places.push(format!("{more} more namespaces"));
        }
        out.push(format!(
            "{} {} objects {what}, and this table sends their writes there ({}): rollback-check suggests the pins that keep them",
            f.lost(),
            f.resource.selector(),
            places.join(", ")
        ));
    }
    for s in &record.storage_versions.unreadable {
        out.push(format!(
            "{} is stored as {}, which {to} does not serve (it serves {})",
            s.resource,
            s.stored_as.join(", "),
            s.older_serves.join(", ")
        ));
    }
    out
}

fn show(b: &BackendRef) -> String {
    match &b.version {
        Some(v) => format!("backend {:?} ({v})", b.name),
        None => format!("backend {:?}", b.name),
    }
}

fn age(record: &RollbackCheck, now: SystemTime) -> Option<Duration> {
    let at = humantime::parse_rfc3339(&record.checked_at).ok()?;
    now.duration_since(at).ok()
}

/// Each rule of `table` that sends writes back to an older backend: a pin that moves from a newer
/// one, or (against `running`) a `writes.default` older than the running table's.
fn moves_back(table: &RouteTable, running: Option<&RouteTable>) -> Vec<String> {
    let version = |t: &RouteTable, b: BackendId| t.backends[b.index()].version;
    let mut out = Vec::new();
    for pin in &table.writes.pins {
        let Some(from) = pin.flip_from else {
            continue;
        };
        if let (Some(old), Some(new)) = (version(table, pin.backend), version(table, from))
            && old < new
        {
            out.push(format!(
                "pin {:?} moves writes back from {:?} to {:?}",
                pin.name,
                table.backend_name(from),
                table.backend_name(pin.backend)
            ));
        }
    }
    if let Some(running) = running {
        let now = version(table, table.writes.default);
        let before = version(running, running.writes.default);
        if let (Some(now), Some(before)) = (now, before)
            && now < before
        {
            out.push(format!(
                "writes.default goes back from {:?} (v{}.{}) in the running table to {:?} (v{}.{})",
                running.backend_name(running.writes.default),
                before.0,
                before.1,
                table.backend_name(table.writes.default),
                now.0,
                now.1
            ));
        }
    }
    out
}
