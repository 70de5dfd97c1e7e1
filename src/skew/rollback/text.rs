//! The check as a person reads it at 2 a.m.: the verdict first, then what would be lost, where,
//! and what keeps it.

use std::fmt::{self, Write as _};

use super::{Finding, InNamespace, RollbackCheck, Stake};

impl fmt::Display for RollbackCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let to = match &self.to.version {
            Some(v) => format!("{} ({v})", self.to.name),
            None => self.to.name.clone(),
        };
        let from: Vec<&str> = self.from.iter().map(|b| b.name.as_str()).collect();
        let lost: u64 = self.findings.iter().map(Finding::lost).sum();
        let verdict = if self.loses {
            "LOSES DATA"
        } else {
            "nothing lost"
        };
        writeln!(f, "rollback to {to}: {verdict}")?;
        writeln!(
            f,
            "  read {} objects of {} resources through {} at {}; judged {}",
            self.objects,
            self.resources,
            from.join(", "),
            self.checked_at,
            match &self.plan {
                Some(p) => format!("the plan {p}"),
                None => "every write moved".to_owned(),
            }
        )?;
        if lost > 0 {
            writeln!(f, "  {lost} objects would be stranded or damaged")?;
        }
        for finding in &self.findings {
            write_finding(f, finding, &to)?;
        }
        write_storage(f, self)
    }
}

fn write_finding(f: &mut fmt::Formatter<'_>, finding: &Finding, to: &str) -> fmt::Result {
    let what = match &finding.stake {
        Stake::KindNotServed => format!("kind not served by {to}"),
        Stake::Field { field } => format!("field {field}: unknown to {to}"),
    };
    let kept = finding.count - finding.lost();
    writeln!(
        f,
        "\n{}  {what}\n  {} objects; {} lost, {kept} kept",
        finding.resource.selector(),
        finding.count,
        finding.lost()
    )?;
    for ns in &finding.namespaces {
        writeln!(f, "    {}", namespace_line(ns))?;
    }
    match &finding.dry_run {
        Some(d) if d.error.is_some() => writeln!(
            f,
            "  dry-run of {} through {to}: not told ({})",
            d.object,
            d.error.as_deref().unwrap_or_default()
        ),
        Some(d) if d.dropped.is_empty() => {
            writeln!(f, "  dry-run of {} through {to}: drops nothing", d.object)
        }
        Some(d) => writeln!(
            f,
            "  dry-run of {} through {to}: drops {}",
            d.object,
            d.dropped.join(", ")
        ),
        None => Ok(()),
    }
}

fn namespace_line(ns: &InNamespace) -> String {
    let place = match ns.namespace.as_str() {
        "" => "(cluster-scoped)".to_owned(),
        n => format!("namespace {n}"),
    };
    let mut names = ns.names.join(", ");
    if (ns.names.len() as u64) < ns.count {
        let _ = write!(names, ", … {} more", ns.count - ns.names.len() as u64);
    }
    let state = match &ns.kept {
        Some(k) => format!("kept on {} by {}", k.backend, k.by),
        None => "LOST".to_owned(),
    };
    format!("{place}: {} ({names})  {state}", ns.count)
}

fn write_storage(f: &mut fmt::Formatter<'_>, check: &RollbackCheck) -> fmt::Result {
    let s = &check.storage_versions;
    if !s.note.is_empty() {
        writeln!(f, "\n{}", s.note)?;
    }
    let lines = (s
        .unreadable
        .iter()
        .map(|u| (u, "is stored as", "UNREADABLE")))
    .chain(
        s.unknown
            .iter()
            .map(|u| (u, "may be stored as", "judge by hand")),
    );
    for (u, stored, verdict) in lines {
        writeln!(
            f,
            "  {}  {stored} {}; the older serves {}  {verdict}",
            u.resource,
            u.stored_as.join(", "),
            u.older_serves.join(", ")
        )?;
    }
    if !s.visible && s.unknown.is_empty() {
        writeln!(f, "  (none)")?;
    }
    if s.visible && s.unreadable.is_empty() {
        writeln!(f, "\nstorage versions: every one readable by the older")?;
    }
    Ok(())
}
