//! The fleet's gates of the pins' moves, by what the replicas say.

use super::*;
use serde_json::json;

const ROUND: Duration = Duration::from_secs(10);
const FENCE: Duration = Duration::from_secs(10);

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
}

fn stamp(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

fn gates() -> FleetGates {
    let g = FleetGates::default();
    g.enable(ROUND);
    g
}

/// Move `k` at `flip` as replicas say it: each `Some(readySince)` runs it, `None` does not.
fn update(g: &FleetGates, flip: u64, entries: &[Option<Value>], lapsed: &[Value], now: u64) {
    let moves = [MoveView {
        key: "k",
        pin: "p",
        to: "new",
        flip_at: at(flip),
        fence: FENCE,
        entries: entries.iter().map(Option::as_ref).collect(),
        lapsed: lapsed.iter().collect(),
        remembered: false,
    }];
    g.update(&moves, Vec::new(), at(now), |t| t);
}

fn ready(since: u64) -> Option<Value> {
    Some(json!({"readySince": stamp(at(since))}))
}

#[test]
fn a_move_every_replica_ran_in_time_is_made_at_flip_at() {
    let g = gates();
    update(&g, 600, &[ready(0), ready(5), ready(9)], &[], 20);
    assert_eq!(g.gate("k"), PinGate::At(at(600)));
}

#[test]
fn a_move_waits_for_the_late_replica_then_for_every_replica_to_read_the_time() {
    let g = gates();
    // flipAt 100; the third replica does not run it yet at 105.
    update(&g, 100, &[ready(0), ready(1), None], &[], 105);
    let PinGate::NotYet { safe_until } = g.gate("k") else {
        panic!("{:?}", g.gate("k"))
    };
    // Said after this read, a time is at least 40 s after it: 20 s are safe.
    assert_eq!(safe_until, at(105 + 20));
    // It runs it from 130, read at 135: 40 s after the latest of now and its readySince.
    update(&g, 100, &[ready(0), ready(1), ready(130)], &[], 135);
    assert_eq!(g.gate("k"), PinGate::At(at(175)));
    // Once known, kept: a replica that stops running it does not move it back.
    update(&g, 100, &[ready(0), None, ready(130)], &[], 145);
    assert_eq!(g.gate("k"), PinGate::At(at(175)));
}

#[test]
fn the_earliest_time_said_is_the_one_even_by_a_replica_whose_lease_lapsed() {
    let g = gates();
    let said = |t: u64| json!({"readySince": stamp(at(0)), "flipsAt": stamp(at(t))});
    update(&g, 100, &[Some(said(190)), None], &[said(180)], 150);
    assert_eq!(g.gate("k"), PinGate::At(at(180)));
}

#[test]
fn a_move_no_replica_ran_in_time_was_made_at_flip_at() {
    // The fleet started long after flipAt with the file as it is: the pin stays where it went.
    let g = gates();
    update(&g, 100, &[ready(5000), None], &[], 5010);
    assert_eq!(g.gate("k"), PinGate::At(at(100)));
}

#[test]
fn without_a_read_or_the_fleet_a_move_is_not_known() {
    let g = gates();
    assert_eq!(
        g.gate("k"),
        PinGate::NotYet {
            safe_until: SystemTime::UNIX_EPOCH
        }
    );
    assert_eq!(FleetGates::default().gate("k"), PinGate::AsWritten);
}

#[test]
fn a_replica_whose_clock_is_ahead_judges_flip_at_on_the_apiservers_clock() {
    // 5 s ahead: the apiservers' time t is t + 5 here.
    let ahead = |t: SystemTime| t + Duration::from_secs(5);
    let g = gates();
    fn moves(entries: &[Option<Value>]) -> [MoveView<'_>; 1] {
        [MoveView {
            key: "k",
            pin: "p",
            to: "new",
            flip_at: at(100),
            fence: FENCE,
            entries: entries.iter().map(Option::as_ref).collect(),
            lapsed: Vec::new(),
            remembered: false,
        }]
    }
    // Ran at 107 (their clock), within flipAt + fence: in time, so the move waits for the
    // replica that does not run it, though this clock reads 117 > 110.
    g.update(&moves(&[ready(107), None]), Vec::new(), at(117), ahead);
    assert!(
        matches!(g.gate("k"), PinGate::NotYet { .. }),
        "{:?}",
        g.gate("k")
    );
    // All ran it in time: the move comes at flipAt on their clock, 105 on this one.
    let g = gates();
    g.update(&moves(&[ready(0), ready(1)]), Vec::new(), at(20), ahead);
    assert_eq!(g.gate("k"), PinGate::At(at(105)));
}

fn heard_move(key: &str, to: &str, secs: u64) -> (String, Said) {
    let said = Said {
        key: key.into(),
        to: to.into(),
        at: at(secs),
        fence: FENCE,
    };
    ("p".to_owned(), said)
}

fn backend(name: &str) -> Option<crate::config::BackendId> {
    ["old", "new"]
        .iter()
        .position(|b| *b == name)
        .map(crate::config::BackendId::new)
}

/// This table's move `k` of pin `p` back to `old` at `flip`, the one other replica's entry `entry`.
fn back_to_old(flip: u64, entry: Option<&Value>) -> MoveView<'_> {
    MoveView {
        key: "k",
        pin: "p",
        to: "old",
        flip_at: at(flip),
        fence: FENCE,
        entries: vec![entry],
        lapsed: Vec::new(),
        remembered: false,
    }
}

#[test]
fn a_move_another_table_timed_is_followed_and_this_tables_move_comes_after_its_fence() {
    use crate::config::BackendId;
    let g = gates();
    // Another replica, still on the table before, timed its move to `new` at 150 before this
    // replica ran its own move (back to `old`).
    let ready = json!({"readySince": stamp(at(0))});
    let moves = [back_to_old(100, Some(&ready))];
    g.update(
        &moves,
        vec![heard_move("other", "new", 150)],
        at(120),
        |t| t,
    );
    // Its own move waits for the other's fence: 150 + 10, not 120 + 40.
    assert_eq!(g.gate("k"), PinGate::At(at(160)));
    let fleet = g.pin_fleet("p", Some("k"), at(140), backend);
    assert_eq!((fleet.at, fleet.next), (None, Some(at(150))));
    let fleet = g.pin_fleet("p", Some("k"), at(155), backend);
    assert_eq!(
        (fleet.at, fleet.held_until),
        (Some(BackendId::new(1)), Some(at(160)))
    );
    // Its own move came: the pin is where it put it, held in its fence.
    let fleet = g.pin_fleet("p", Some("k"), at(165), backend);
    assert_eq!(
        (fleet.at, fleet.from, fleet.held_until, fleet.after_own),
        (
            Some(BackendId::new(0)),
            Some(BackendId::new(1)),
            Some(at(170)),
            false
        )
    );
    // A backend this table does not name: refused.
    let g = gates();
    g.update(
        &moves,
        vec![heard_move("other", "third", 150)],
        at(120),
        |t| t,
    );
    assert!(g.pin_fleet("p", Some("k"), at(155), backend).elsewhere);
    // Without the fleet, nothing.
    let alone = FleetGates::default();
    assert_eq!(
        alone.pin_fleet("p", Some("k"), at(155), backend),
        crate::steer::FleetPin::default()
    );
}

#[test]
fn what_a_replica_heard_it_publishes_and_keeps_across_reads() {
    let g = gates();
    let moves = [back_to_old(1000, None)];
    g.update(
        &moves,
        vec![heard_move("other", "new", 150)],
        at(120),
        |t| t,
    );
    // The replica that said it loaded another table: the time still stands.
    g.update(&moves, Vec::new(), at(125), |t| t);
    let published = g.said_json(&|t| t);
    assert_eq!(published.len(), 1, "{published:?}");
    assert_eq!(published[0]["move"], "other");
    assert_eq!(published[0]["at"], stamp(at(150)));
}

#[test]
fn a_replica_that_knows_where_the_writes_are_never_makes_a_late_move_at_flip_at_alone() {
    // Its file came after flipAt + fence; the replica that ran the move in time has left it
    // since (a newer table) and no longer says so. Made at flipAt, the writes would jump here
    // alone: it waits for the fleet instead.
    let g = gates();
    let late = MoveView {
        remembered: true,
        ..back_to_old(100, None)
    };
    let mine = json!({"readySince": stamp(at(115))});
    let moves = [MoveView {
        entries: vec![Some(&mine), None],
        ..late
    }];
    g.update(&moves, Vec::new(), at(120), |t| t);
    assert!(
        matches!(g.gate("k"), PinGate::NotYet { .. }),
        "{:?}",
        g.gate("k")
    );
}
