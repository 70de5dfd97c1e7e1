//! `skewgate check` on pin moves against the clock and the table in force (issue 57): a `flipAt`
//! closer than a fleet can make the move, and a table that would supersede a move still pending.

use std::process::Command;
use std::time::{Duration, SystemTime};

fn table(to: &str, from: &str, flip_at: SystemTime) -> String {
    format!(
        "apiVersion: skewgate.io/v1alpha1\nkind: RouteTable\nbackends:\n  - {{name: old, version: v1.35, endpoints: [\"https://10.0.0.1:6443\"]}}\n  - {{name: new, version: v1.36, endpoints: [\"https://10.0.0.2:6443\"]}}\nwrites:\n  default: old\n  pins:\n    - name: team-a\n      namespaces: [team-a]\n      backend: {to}\n      from: {from}\n      flipAt: \"{}\"\nreads:\n  default: old\n",
        humantime::format_rfc3339_seconds(flip_at)
    )
}

fn check(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_skewgate"))
        .arg("check")
        .args(args)
        .output()
        .expect("the binary runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_warns_of_a_close_flip_at_and_of_a_pending_move_it_would_supersede() {
    let dir = std::env::temp_dir().join(format!("skewgate-check-moves-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let now = SystemTime::now();
    let running = dir.join("running.yaml");
    let next = dir.join("next.yaml");
    std::fs::write(
        &running,
        table("new", "old", now + Duration::from_secs(120)),
    )
    .expect("write");
    std::fs::write(&next, table("old", "new", now + Duration::from_secs(20))).expect("write");
    let (next_s, running_s) = (next.to_string_lossy(), running.to_string_lossy());
    // Alone: its flipAt, 20 s ahead, is closer than four rounds of 10 s.
    let (ok, err) = check(&[&next_s]);
    assert!(ok, "warnings do not fail a check: {err}");
    assert!(err.contains("flipAt is 1") && err.contains("40s"), "{err}");
    assert!(!err.contains("superseded"), "{err}");
    // With rounds of 2 s, 20 s is enough.
    let (_, err) = check(&[&next_s, "--lease-renew-interval", "2s"]);
    assert!(!err.contains("flipAt is"), "{err}");
    // Against the table in force, whose move to new is still to come: superseded.
    let (ok, err) = check(&[
        &next_s,
        "--running",
        &running_s,
        "--lease-renew-interval",
        "2s",
    ]);
    assert!(ok, "{err}");
    assert!(
        err.contains("pin team-a: the running table moves it to new") && err.contains("superseded"),
        "{err}"
    );
    // The table in force checked against itself: nothing.
    let (_, err) = check(&[&running_s, "--running", &running_s]);
    assert!(!err.contains("warning"), "{err}");
    // An unreadable table in force is an error.
    let (ok, err) = check(&[&next_s, "--running", "/nonexistent/routes.yaml"]);
    assert!(!ok && err.contains("--running"), "{err}");
}

/// A `flipAt` already past is a move taken as made: its writes go at once, with no fence. A newcomer
/// who meant a move to come is told so; a table in force re-applied (the same move) is not.
#[test]
fn check_warns_of_a_flip_at_in_the_past() {
    let dir = std::env::temp_dir().join(format!("skewgate-check-past-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("past.yaml");
    let past = SystemTime::now() - Duration::from_secs(3600);
    std::fs::write(&file, table("new", "old", past)).expect("write");
    let path = file.to_string_lossy();
    let (ok, err) = check(&[&path]);
    assert!(ok, "a warning does not fail a check: {err}");
    assert!(
        err.contains("pin team-a: flipAt is 1h") && err.contains("in the past"),
        "{err}"
    );
    let (_, err) = check(&[&path, "--running", &path]);
    assert!(!err.contains("in the past"), "{err}");
}

/// A pin with no selector takes every write: said, not passed in silence.
#[test]
fn check_warns_of_a_pin_with_no_selector() {
    let dir = std::env::temp_dir().join(format!("skewgate-check-all-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("all.yaml");
    let text = "apiVersion: skewgate.io/v1alpha1\nkind: RouteTable\nbackends:\n  - {name: old, endpoints: [\"https://10.0.0.1:6443\"]}\n  - {name: new, endpoints: [\"https://10.0.0.2:6443\"]}\nwrites:\n  default: old\n  pins:\n    - {name: everything, backend: new}\nreads:\n  default: old\n";
    std::fs::write(&file, text).expect("write");
    let (ok, err) = check(&[&file.to_string_lossy()]);
    assert!(ok, "{err}");
    assert!(
        err.contains("pin \"everything\" has no selector") && err.contains("takes every write"),
        "{err}"
    );
    // With flipAt it is the way a fleet moves every write at once (writes.default has none).
    let moving = text.replace(
        "{name: everything, backend: new}",
        "{name: everything, backend: new, from: old, flipAt: \"2030-01-01T00:00:00Z\"}",
    );
    std::fs::write(&file, moving).expect("write");
    let (ok, err) = check(&[&file.to_string_lossy()]);
    assert!(ok && !err.contains("has no selector"), "{err}");
}
