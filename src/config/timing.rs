//! What `check` can say of a table's pin moves against the clock and the table in force: a
//! `flipAt` closer than a fleet can make the move, and a move of the running table still to come
//! that this table would supersede. Warnings only: whether a move was made is the fleet's to know
//! (`/debug/routes`), not the file's.

use std::time::{Duration, SystemTime};

use super::{Pin, RouteTable};

/// Whether skewgate takes `t` as a moment at all: from the year 2000 to the year 8900 or so. A
/// time near either end of what RFC 3339 writes (1970, 9999), moved by a fence or a clock's
/// offset, could no longer be written, and a move said for then is no move anyway.
pub fn within_horizon(t: SystemTime) -> bool {
    let since = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    (946_684_800..220_000_000_000).contains(&since.as_secs())
}

/// How long after its last replica runs a move a fleet makes it, at the soonest: four Lease
/// rounds (`cluster::FleetGates`).
pub fn fleet_settle(round: Duration) -> Duration {
    round * 4
}

/// The warnings of `next`'s moves at `now`: each `flipAt` less than `settle` ahead
/// ([`close_flips`]), and each pin whose move in `running` (the table in force) may still be
/// pending and that `next` changes.
pub fn move_warnings(
    next: &RouteTable,
    running: Option<&RouteTable>,
    now: SystemTime,
    settle: Duration,
) -> Vec<String> {
    let mut warnings = close_flips(next, running, now, settle);
    if let Some(running) = running {
        warnings.extend(superseded(next, running, now));
    }
    warnings
}

/// Each move of `next` that `running` does not make already, with its `flipAt` less than `settle`
/// ahead of `now`.
pub fn close_flips(
    next: &RouteTable,
    running: Option<&RouteTable>,
    now: SystemTime,
    settle: Duration,
) -> Vec<String> {
    let mut warnings = Vec::new();
    for pin in &next.writes.pins {
        let Some(flip_at) = pin.flip_at else {
            continue;
        };
        let same_move = running.is_some_and(|r| makes_the_move(r, next, pin));
        if let Ok(ago) = now.duration_since(flip_at)
            && !same_move
        {
            warnings.push(format!(
                "pin {}: flipAt is {} in the past: the move is taken as made already, and the pin's writes go to {} as soon as the table loads, with no fence; set a flipAt ahead if the move is still to come",
                pin.name,
                humantime::format_duration(Duration::from_secs(ago.as_secs())),
                next.backend_name(pin.backend)
            ));
            continue;
        }
        if let Ok(ahead) = flip_at.duration_since(now)
            && ahead < settle
            && !same_move
        {
            warnings.push(format!(
                "pin {}: flipAt is {} from now; a fleet of replicas (--advertise-address) makes a move no sooner than {} (four Lease rounds) after its last replica runs it, so the move comes later than flipAt",
                pin.name,
                humantime::format_duration(Duration::from_secs(ahead.as_secs())),
                humantime::format_duration(settle)
            ));
        }
    }
    warnings
}

/// Whether `t` makes the move pin `pin` of `of` makes: a pin of its name, to a backend of the same
/// name, at the same `flipAt`.
fn makes_the_move(t: &RouteTable, of: &RouteTable, pin: &Pin) -> bool {
    t.writes.pins.iter().any(|p| {
        p.name == pin.name
            && p.flip_at == pin.flip_at
            && t.backend_name(p.backend) == of.backend_name(pin.backend)
    })
}

/// The pins of `running` with a move that may still be pending at `now` (its `flipAt` and fence
/// not both past: a fleet may make it later still) which `next` changes.
fn superseded(next: &RouteTable, running: &RouteTable, now: SystemTime) -> Vec<String> {
    running
        .writes
        .pins
        .iter()
        .filter_map(|old| {
            let flip_at = old.flip_at?;
            let moves = old.flip_from != Some(old.backend);
            if !moves || flip_at + running.writes.fence <= now {
                return None;
            }
            if makes_the_move(next, running, old) {
                return None;
            }
            let to = running.backend_name(old.backend);
            let at = humantime::format_rfc3339_seconds(flip_at);
            Some(format!(
                "pin {}: the running table moves it to {to} at flipAt {at}, which may not have been made yet; this table changes it, and where a replica loads it first the pending move is superseded: abandoned if the fleet had not said its time, made first at that time if it had. This table's move then starts from where the pin's writes are, whatever its `from` says (/debug/routes: superseded, movingFrom)",
                old.name
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(pin: &str) -> RouteTable {
        let text = format!(
            "apiVersion: skewgate.io/v1alpha1\nkind: RouteTable\nbackends:\n  - {{name: old, endpoints: [\"http://127.0.0.1:1\"]}}\n  - {{name: new, endpoints: [\"http://127.0.0.1:2\"]}}\nwrites:\n  default: old\n  pins:\n    - name: team-a\n      namespaces: [team-a]\n{pin}reads:\n  default: old\n"
        );
        crate::config::parse_route_table(std::path::Path::new("t.yaml"), &text).expect("table")
    }

    fn moving(to: &str, from: &str, at: &str) -> RouteTable {
        table(&format!(
            "      backend: {to}\n      from: {from}\n      flipAt: \"{at}\"\n"
        ))
    }

    fn at(s: &str) -> SystemTime {
        humantime::parse_rfc3339(s).expect("time")
    }

    #[test]
    fn a_flip_at_closer_than_the_fleet_can_make_it_is_said() {
        let next = moving("new", "old", "2026-11-28T12:00:30Z");
        let settle = fleet_settle(Duration::from_secs(10));
        let w = move_warnings(&next, None, at("2026-11-28T12:00:00Z"), settle);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("flipAt is 30s from now") && w[0].contains("40s"),
            "{w:?}"
        );
        assert!(move_warnings(&next, None, at("2026-11-28T11:59:00Z"), settle).is_empty());
        // The table in force with that same move: nothing new.
        let w = move_warnings(&next, Some(&next), at("2026-11-28T12:00:00Z"), settle);
        assert!(w.is_empty(), "{w:?}");
    }

    #[test]
    fn a_table_that_changes_a_pending_move_of_the_running_one_is_warned_of() {
        let running = moving("new", "old", "2026-11-28T12:01:00Z");
        let back = moving("old", "new", "2026-11-28T12:05:00Z");
        let now = at("2026-11-28T12:00:50Z");
        let settle = Duration::from_secs(40);
        let w = move_warnings(&back, Some(&running), now, settle);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("moves it to new at flipAt 2026-11-28T12:01:00Z"),
            "{w:?}"
        );
        // Long past its flipAt and fence: made or not, the fleet knows; the file says nothing.
        let later = at("2026-11-28T12:03:00Z");
        assert!(move_warnings(&back, Some(&running), later, settle).is_empty());
    }

    #[test]
    fn a_flip_at_near_the_end_of_what_rfc_3339_writes_is_refused() {
        let text = "apiVersion: skewgate.io/v1alpha1\nkind: RouteTable\nbackends:\n  - {name: old, endpoints: [\"http://127.0.0.1:1\"]}\n  - {name: new, endpoints: [\"http://127.0.0.1:2\"]}\nwrites:\n  default: old\n  pins:\n    - {name: a, namespaces: [a], backend: new, flipAt: \"9999-12-31T23:59:59Z\"}\nreads:\n  default: old\n";
        let errors = crate::config::parse_route_table(std::path::Path::new("t.yaml"), text)
            .expect_err("refused")
            .to_string();
        assert!(
            errors.contains("flipAt") && errors.contains("out of range"),
            "{errors}"
        );
        assert!(within_horizon(at("2026-11-28T12:00:00Z")));
        assert!(!within_horizon(SystemTime::UNIX_EPOCH));
    }
}
