//! Route file parsing and validation: what loads, and the exact place and words of every error.

use std::path::Path;
use std::time::{Duration, SystemTime};

use super::schedule::Step;
use super::*;
use crate::config::table::{GuardAction, UnknownVersion};

pub(super) const BASE: &str = "\
apiVersion: skewgate.io/v1alpha1
kind: RouteTable
backends:
  - name: v1-29
    version: v1.29
    endpoints: [https://10.0.0.11:6443]
  - name: v1-30
    endpoints: [http://127.0.0.1:18080]
writes:
  default: v1-29
reads:
  default: v1-29
";

pub(super) fn parse(text: &str) -> Result<RouteTable, ConfigErrors> {
    parse_route_table(Path::new("r.yaml"), text)
}

/// The errors as `line:field: message` lines, without the file name.
fn errors(text: &str) -> Vec<String> {
    match parse(text) {
        Ok(_) => panic!("expected errors in:\n{text}"),
        Err(e) => {
            e.0.iter()
                .map(|e| format!("{}:{}: {}", e.line, e.field, e.message))
                .collect()
        }
    }
}

pub(super) fn one_error(text: &str) -> String {
    let e = errors(text);
    assert_eq!(e.len(), 1, "{e:#?}");
    e.into_iter().next().unwrap_or_default()
}

#[test]
fn minimal_file_loads_with_defaults() {
    let t = parse(BASE).unwrap();
    assert_eq!(t.backends.len(), 2);
    assert_eq!(t.backends[0].version, Some((1, 29)));
    assert_eq!(t.backends[0].endpoints[0].port, 6443);
    assert!(t.backends[0].endpoints[0].tls);
    assert!(!t.backends[1].endpoints[0].tls);
    assert_eq!(t.writes.fence, Duration::from_secs(10));
    assert!(t.writes.verbs.contains(crate::classify::Verb::Update));
    assert!(t.writes.verbs.contains(crate::classify::Verb::Patch));
    assert!(!t.writes.verbs.contains(crate::classify::Verb::Create));
}

#[test]
fn full_pin_and_rollout() {
    let text = format!(
        "{BASE}  rollouts:
    - name: r1
      match:
        clients: [kubelet, \"kubectl<1.29\"]
        resources: [pods, deployments.apps, pods/status, \"*.apps\"]
        verbs: [get, list, watch]
        users: [\"system:node:*\"]
        groups: [system:nodes]
        namespaces: [\"!kube-system\"]
      to: v1-30
      stickyBy: object
      startAt: 2026-11-22T10:00:00Z
      steps: [{{percent: 1, hold: 10m}}, {{percent: 10.25, hold: 30m}}, {{percent: 100}}]
      abort: {{errorRatio: 0.01, window: 5m, minRequests: 200}}
"
    )
    .replace(
        "writes:\n  default: v1-29\n",
        "writes:\n  verbs: [update, patch, create]\n  default: v1-29\n  fence: 20s\n  pins:\n    - name: team-a\n      namespaces: [team-a, \"/^canary-/\"]\n      resources: [pods]\n      backend: v1-30\n      reads: rollout\n      flipAt: 2026-11-22T10:00:00Z\n",
    );
    let t = parse(&text).unwrap();
    let pin = &t.writes.pins[0];
    assert_eq!(pin.name, "team-a");
    assert_eq!(pin.reads, PinReads::Rollout);
    assert!(pin.flip_at.is_some());
    let r = &t.reads.rollouts[0];
    assert_eq!(r.sticky_by, StickyBy::Object);
    assert!(r.abort.is_some());
    let Schedule::Steps { steps, .. } = &r.schedule else {
        panic!("expected steps");
    };
    assert_eq!(steps[1].percent, Percent(1025));
    assert_eq!(t.writes.fence, Duration::from_secs(20));
}

#[test]
fn unknown_fields_are_rejected_with_their_line() {
    let e = one_error(&BASE.replace(
        "  default: v1-29\nreads",
        "  default: v1-29\n  defualt: x\nreads",
    ));
    assert_eq!(
        e,
        "11:writes.defualt: unknown field `defualt`: did you mean `default`?"
    );
    let e = one_error(&BASE.replace(
        "writes:\n  default: v1-29\n",
        "writes:\n  default: v1-29\n  pins:\n    - backend: v1-30\n      users: [a]\n",
    ));
    assert!(e.contains("unknown field `users`"), "{e}");
}

#[test]
fn yaml_syntax_errors_have_a_line() {
    let e = one_error("apiVersion: skewgate.io/v1alpha1\nkind: [\n");
    assert!(!e.starts_with("0:"), "{e}");
    let e = one_error(&BASE.replace("kind: RouteTable\n", ""));
    assert!(e.contains("kind"), "{e}");
}

#[test]
fn unknown_backend_names_the_field_and_the_choices() {
    let text = BASE.replace(
        "writes:\n  default: v1-29\n",
        "writes:\n  default: v1-29\n  pins:\n    - namespaces: [a]\n      backend: v1-29\n    - namespaces: [b]\n      backend: v1-29\n    - namespaces: [c]\n      backend: v1-31\n",
    );
    assert_eq!(
        one_error(&text),
        "17:writes.pins[2].backend: unknown backend \"v1-31\": did you mean v1-30?"
    );
    let e = one_error(&BASE.replace("reads:\n  default: v1-29", "reads:\n  default: old"));
    assert!(
        e.starts_with("12:reads.default: unknown backend \"old\""),
        "{e}"
    );
}

#[test]
fn every_kind_of_problem_is_reported_at_once() {
    let text = "\
apiVersion: skewgate.io/v1
kind: RouteTable
backends:
  - name: V1_29
    version: latest
    endpoints: [ftp://x, \"https://\", http://a:1/path]
  - name: V1_29
    endpoints: []
writes:
  verbs: [get, update]
  default: nope
  fence: soon
  pins:
    - name: p
      namespaces: [\"/(/\", \"\"]
      resources: [Pods]
      backend: V1_29
      reads: sometimes
      flipAt: tomorrow
    - name: p
      namespaces: []
      backend: V1_29
reads:
  default: V1_29
  rollouts:
    - name: r
      to: V1_29
      percent: 101
    - name: r
      to: V1_29
      percent: 1.234
    - name: s
      to: V1_29
      steps: [{percent: 5}]
    - name: t
      to: V1_29
      startAt: 2026-11-22T10:00:00Z
      steps: [{percent: 5}, {percent: 50}]
      stickyBy: pod
      match: {verbs: [fly], clients: [\"kubectl<x\"]}
      abort: {errorRatio: 2, window: 0s, minRequests: 0}
    - name: u
      to: V1_29
";
    let e = errors(text);
    let expect = [
        "1:apiVersion: is \"skewgate.io/v1\"",
        "4:backends[0].name: \"V1_29\" is not a DNS-1123 label",
        "5:backends[0].version: \"latest\" is not a major.minor version",
        "6:backends[0].endpoints[0]: \"ftp://x\" has scheme \"ftp\"",
        "6:backends[0].endpoints[1]:",
        "6:backends[0].endpoints[2]: \"http://a:1/path\" has a path",
        "7:backends[1].name: \"V1_29\" is not a DNS-1123 label",
        "7:backends[1].name: duplicate backend name \"V1_29\"",
        "8:backends[1].endpoints: no endpoints",
        "10:writes.verbs[0]: \"get\" is not a write verb",
        "11:writes.default: unknown backend \"nope\"",
        "12:writes.fence: \"soon\" is not a duration",
        "15:writes.pins[0].namespaces[0]: invalid regular expression /(/: unclosed group;",
        "15:writes.pins[0].namespaces[1]: \"\" is not a namespace name",
        "16:writes.pins[0].resources[0]: invalid resource \"Pods\"",
        "18:writes.pins[0].reads: \"sometimes\" is neither follow nor rollout",
        "19:writes.pins[0].flipAt: \"tomorrow\" is not an RFC 3339 time",
        "20:writes.pins[1].name: duplicate pin name \"p\"",
        "21:writes.pins[1].namespaces: an empty list would match everything",
        "28:reads.rollouts[0].percent: 101 is not a percent from 0 to 100",
        "29:reads.rollouts[1].name: duplicate rollout name \"r\"",
        "31:reads.rollouts[1].percent: 1.234 is not a percent",
        "34:reads.rollouts[2].steps: steps need startAt",
        "40:reads.rollouts[3].match.verbs[0]: unknown verb \"fly\"",
        "40:reads.rollouts[3].match.clients[0]: invalid version in client \"kubectl<x\"",
        "39:reads.rollouts[3].stickyBy: \"pod\" is not one of namespace, user, object, client",
        "38:reads.rollouts[3].steps[0].hold: every step but the last needs a hold",
        "41:reads.rollouts[3].abort.errorRatio: 2 is not a ratio",
        "41:reads.rollouts[3].abort.window: \"0s\" is not a duration",
        "41:reads.rollouts[3].abort.minRequests: must be at least 1",
        "42:reads.rollouts[4]: a rollout needs a share",
    ];
    for want in expect {
        assert!(
            e.iter().any(|got| got.starts_with(want)),
            "missing {want:?} in\n{}",
            e.join("\n")
        );
    }
    assert_eq!(e.len(), expect.len(), "{}", e.join("\n"));
}

#[test]
fn fence_must_leave_time_for_writes() {
    let e = one_error(&BASE.replace(
        "writes:\n  default: v1-29\n",
        "writes:\n  default: v1-29\n  fence: 2s\n",
    ));
    assert!(e.starts_with("11:writes.fence: must be at least 3s"), "{e}");
}

#[test]
fn schedule_percent_is_a_function_of_the_clock() {
    let start = humantime::parse_rfc3339("2026-11-22T10:00:00Z").unwrap();
    let s = Schedule::Steps {
        start_at: start,
        steps: vec![
            Step {
                percent: Percent(100),
                hold: Some(Duration::from_secs(600)),
            },
            Step {
                percent: Percent(1000),
                hold: Some(Duration::from_secs(1800)),
            },
            Step {
                percent: Percent(10_000),
                hold: None,
            },
        ],
    };
    let at = |secs: i64| {
        let t = if secs >= 0 {
            start + Duration::from_secs(secs as u64)
        } else {
            start - Duration::from_secs((-secs) as u64)
        };
        let p = s.at(t);
        (p.percent.0, p.step)
    };
    assert_eq!(at(-1), (0, None));
    assert_eq!(at(0), (100, Some(0)));
    assert_eq!(at(599), (100, Some(0)));
    assert_eq!(at(600), (1000, Some(1)));
    assert_eq!(at(2399), (1000, Some(1)));
    assert_eq!(at(2400), (10_000, Some(2)));
    assert_eq!(at(10_000_000), (10_000, Some(2)));
    // The next step: when it begins and its share; none once the last is in force.
    let next = |secs: u64| s.next(start - Duration::from_secs(1) + Duration::from_secs(secs));
    assert_eq!(next(0), Some((start, Percent(100))));
    assert_eq!(
        next(1),
        Some((start + Duration::from_secs(600), Percent(1000)))
    );
    assert_eq!(
        next(600),
        Some((start + Duration::from_secs(600), Percent(1000)))
    );
    assert_eq!(
        next(601),
        Some((start + Duration::from_secs(2400), Percent(10_000)))
    );
    assert_eq!(next(2401), None);
    assert_eq!(Schedule::Fixed(Percent(5)).next(start), None);
    assert_eq!(
        Schedule::Fixed(Percent(5))
            .at(SystemTime::UNIX_EPOCH)
            .percent,
        Percent(5)
    );
}

#[test]
fn a_directory_must_hold_exactly_one_route_file() {
    let dir = std::env::temp_dir().join(format!("skewgate-cfg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("..data")).unwrap();
    let err = load_path(&dir).unwrap_err();
    assert!(err.to_string().contains("no *.yaml"), "{err}");
    std::fs::write(dir.join("a.yaml"), BASE).unwrap();
    std::fs::write(dir.join(".hidden.yaml"), "junk").unwrap();
    assert!(load_path(&dir).is_ok());
    std::fs::write(dir.join("b.yml"), BASE).unwrap();
    let err = load_path(&dir).unwrap_err();
    assert!(err.to_string().contains("holds 2 route files"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
    let err = load_path(Path::new("/nonexistent/routes.yaml")).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("/nonexistent/routes.yaml: cannot read the file"),
        "{err}"
    );
}

#[test]
fn from_names_a_backend_and_needs_flip_at() {
    let pin = |extra: &str| {
        BASE.replace(
            "writes:\n  default: v1-29\n",
            &format!("writes:\n  default: v1-29\n  pins:\n    - namespaces: [a]\n      backend: v1-30\n{extra}"),
        )
    };
    let t = parse(&pin(
        "      from: v1-29\n      flipAt: 2026-11-22T10:00:00Z\n",
    ))
    .unwrap();
    assert_eq!(t.writes.pins[0].flip_from, Some(BackendId::new(0)));
    assert_eq!(
        one_error(&pin("      from: v1-29\n")),
        "14:writes.pins[0].from: from names the backend a pin moves from at flipAt: add flipAt, or leave from out"
    );
    let e = one_error(&pin(
        "      from: v1-28\n      flipAt: 2026-11-22T10:00:00Z\n",
    ));
    assert!(
        e.starts_with("14:writes.pins[0].from: unknown backend \"v1-28\""),
        "{e}"
    );
}

#[test]
fn from_naming_the_pins_own_backend_is_refused() {
    let text = BASE.replace(
        "writes:\n  default: v1-29\n",
        "writes:\n  default: v1-29\n  pins:\n    - namespaces: [a]\n      backend: v1-30\n      from: v1-30\n      flipAt: 2026-11-22T10:00:00Z\n",
    );
    assert_eq!(
        one_error(&text),
        "14:writes.pins[0].from: from names the pin's own backend \"v1-30\": a pin moves from another backend; leave from out if it does not move"
    );
}

#[test]
fn guards_parse_with_their_defaults_and_bad_values_are_located() {
    let text = |guard: &str| {
        format!(
            "{BASE}guards:\n  - name: old-clients\n    match: {{resources: [configmaps], clients: [\"<1.30\"]}}\n{guard}"
        )
    };
    let t = parse(&text("")).unwrap();
    assert_eq!(t.guards.len(), 1);
    assert_eq!(t.guards[0].name, "old-clients");
    assert_eq!(t.guards[0].action, GuardAction::Reject, "reject by default");
    assert_eq!(t.guards[0].unknown_version, UnknownVersion::Guard);
    // v1-30 declares no version: the guard can guard nothing served there, and `check` says so.
    // (the skew policy's own warning of v1-30 is tested in skew_policy_tests)
    let warned: Vec<String> = (t.warnings.iter().map(|w| w.to_string()))
        .filter(|w| !w.contains("version-skew policy cannot tell"))
        .collect();
    assert!(
        warned.len() == 1 && warned[0].contains("guards[0]") && warned[0].contains("v1-30"),
        "{warned:?}"
    );
    let versioned = text("").replace("  - name: v1-30\n", "  - name: v1-30\n    version: v1.30\n");
    assert!(parse(&versioned).unwrap().warnings.is_empty());
    let t = parse(&text("    action: preserve\n    unknownVersion: pass\n")).unwrap();
    assert_eq!(t.guards[0].action, GuardAction::Preserve);
    assert_eq!(t.guards[0].unknown_version, UnknownVersion::Pass);
    let e = one_error(&text("    action: block\n"));
    assert!(
        e.ends_with("guards[0].action: \"block\" is not one of reject, warn, preserve"),
        "{e}"
    );
}

#[test]
fn a_rule_that_an_earlier_one_covers_entirely_is_warned_of() {
    let warned = |pins: &str, rollouts: &str| {
        let text = BASE
            .replace(
                "  default: v1-29\nreads:",
                &format!("  default: v1-29\n  pins:\n{pins}reads:"),
            )
            .replace(
                "reads:\n  default: v1-29\n",
                &format!("reads:\n  default: v1-29\n  rollouts:\n{rollouts}"),
            );
        let t = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        // (the reads and writes apart are another warning's: splits.rs)
        let said = t.warnings.iter().map(|w| w.to_string());
        said.filter(|w| !w.contains("reads and writes part"))
            .filter(|w| !w.contains("version-skew policy cannot tell"))
            .collect::<Vec<_>>()
    };
    // A pin of configmaps everywhere, pasted before a pin of team-a's configmaps: the second
    // never decides.
    let w = warned(
        "    - {name: skew, resources: [configmaps], backend: v1-30}\n    - {name: team-a, namespaces: [team-a], resources: [configmaps], backend: v1-29}\n",
        "    - {name: r, to: v1-30, percent: 5, match: {namespaces: [a]}}\n",
    );
    assert!(
        w.len() == 1
            && w[0].contains("writes.pins[1]")
            && w[0].contains("pin \"skew\" before it covers"),
        "{w:?}"
    );
    // Overlapping but not covering (team-a's other resources are its own): no warning.
    let w = warned(
        "    - {name: skew, resources: [configmaps], backend: v1-30}\n    - {name: team-a, namespaces: [team-a], backend: v1-29}\n",
        "    - {name: r, to: v1-30, percent: 5, match: {namespaces: [a, b]}}\n    - {name: s, to: v1-30, percent: 5, match: {namespaces: [b], users: [u]}}\n",
    );
    assert!(
        w.len() == 1
            && w[0].contains("reads.rollouts[1]")
            && w[0].contains("rollout \"r\" before it matches every read"),
        "{w:?}"
    );
}
