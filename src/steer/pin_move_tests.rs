//! A pin's stages, its move's `from`, and the fleet's moves before the table's own.

use std::time::UNIX_EPOCH;

use super::*;
use crate::config::{PinReads, Selectors};

fn pin(backend: usize, from: Option<usize>, flip_at: Option<u64>) -> Pin {
    Pin {
        name: "p".into(),
        selectors: Selectors::default(),
        backend: BackendId::new(backend),
        reads: PinReads::Follow,
        flip_at: flip_at.map(|s| UNIX_EPOCH + Duration::from_secs(s)),
        flip_from: from.map(BackendId::new),
    }
}

fn at(p: &Pin, previous: Option<usize>, secs: u64) -> PinMove {
    PinMove::at(
        p,
        previous.map(BackendId::new),
        Duration::from_secs(10),
        UNIX_EPOCH + Duration::from_secs(secs),
    )
}

#[test]
fn the_fleet_gate_keeps_a_move_back_then_makes_it_at_its_own_time() {
    let t = |secs: u64| UNIX_EPOCH + Duration::from_secs(secs);
    let fence = Duration::from_secs(10);
    let p = pin(1, Some(0), Some(100));
    let not_yet = PinGate::NotYet { safe_until: t(150) };
    // Past flipAt, not known: the old backend while that is safe, refused after.
    let m = PinMove::gated(&p, not_yet, None, fence, t(120));
    assert_eq!(
        (m.stage, m.backend),
        (
            Stage::BeforeFlip {
                from: BackendId::new(0),
                at: t(100)
            },
            BackendId::new(0)
        )
    );
    let m = PinMove::gated(&p, not_yet, None, fence, t(150));
    assert_eq!((m.stage, m.backend), (Stage::Unsure, BackendId::new(0)));
    // Known: the fleet's time, with the fence after it.
    let m = PinMove::gated(&p, PinGate::At(t(200)), None, fence, t(150));
    assert!(matches!(m.stage, Stage::BeforeFlip { .. }));
    let m = PinMove::gated(&p, PinGate::At(t(200)), None, fence, t(205));
    assert_eq!(m.stage, Stage::Fenced { until: t(210) });
    let m = PinMove::gated(&p, PinGate::At(t(200)), None, fence, t(210));
    assert_eq!((m.stage, m.backend), (Stage::Settled, BackendId::new(1)));
    // Without a backend it moves from, nothing can be kept back: refused until known.
    let m = PinMove::gated(&pin(1, None, Some(100)), not_yet, None, fence, t(50));
    assert_eq!(m.stage, Stage::Unsure);
}

#[test]
fn a_pin_moves_through_its_stages_at_flip_at_and_the_fence() {
    let p = pin(1, Some(0), Some(100));
    let t = |s| UNIX_EPOCH + Duration::from_secs(s);
    assert_eq!(
        at(&p, None, 50).stage,
        Stage::BeforeFlip {
            from: BackendId::new(0),
            at: t(100)
        }
    );
    assert_eq!(at(&p, None, 50).backend, BackendId::new(0));
    assert_eq!(at(&p, None, 100).stage, Stage::Fenced { until: t(110) });
    assert_eq!(at(&p, None, 100).backend, BackendId::new(1));
    assert_eq!(at(&p, None, 110).stage, Stage::Settled);
    // With no `from`, the previous table's backend is where it moves from.
    let q = pin(1, None, Some(100));
    assert_eq!(at(&q, Some(0), 50).backend, BackendId::new(0));
    // Neither known: writes wait for the fence to end, from before flipAt on.
    assert_eq!(at(&q, None, 50).stage, Stage::Waiting { until: t(110) });
}

#[test]
fn a_pin_that_does_not_move_is_settled_however_it_is_seen() {
    // The case that steering and /debug/routes once disagreed on.
    let own = pin(1, Some(1), Some(100));
    let m = at(&own, None, 50);
    assert_eq!(
        (m.stage, m.from, m.backend),
        (Stage::Settled, None, BackendId::new(1))
    );
    assert_eq!(m.stage.describe(), "settled");
    let unchanged = pin(1, None, Some(100));
    assert_eq!(at(&unchanged, Some(1), 50).stage, Stage::Settled);
    assert_eq!(at(&pin(1, None, None), Some(0), 50).stage, Stage::Settled);
}

#[test]
fn a_table_moves_a_pin_from_where_its_writes_are_not_from_its_from() {
    // The move before was never made: the writes are on 0, the new table says from 1 to 0.
    let back = pin(0, Some(1), Some(100));
    let m = at(&back, Some(0), 50);
    assert_eq!((m.stage, m.backend), (Stage::Settled, BackendId::new(0)));
    // Without a table before (a replica starting), the file's `from` is all there is.
    assert_eq!(at(&back, None, 50).backend, BackendId::new(1));
}

#[test]
fn the_fleets_moves_come_before_the_tables_own() {
    let t = |secs: u64| UNIX_EPOCH + Duration::from_secs(secs);
    let p = pin(0, Some(1), Some(100));
    // Another table's move, timed for 80, is to come: the writes stay where they are.
    let next = FleetPin {
        next: Some(t(80)),
        ..FleetPin::default()
    };
    let m = PinMove::fleet_first(&p, &next, Some(BackendId::new(0)), t(50));
    assert_eq!(
        m.map(|m| (m.stage, m.backend)),
        Some((
            Stage::BeforeFlip {
                from: BackendId::new(0),
                at: t(80)
            },
            BackendId::new(0)
        ))
    );
    // It came: held in its fence, then where it put the pin, for the table's move to start.
    let came = FleetPin {
        at: Some(BackendId::new(1)),
        held_until: Some(t(90)),
        ..FleetPin::default()
    };
    let m = PinMove::fleet_first(&p, &came, Some(BackendId::new(0)), t(85));
    assert_eq!(m.map(|m| m.stage), Some(Stage::Fenced { until: t(90) }));
    assert_eq!(PinMove::fleet_first(&p, &came, None, t(90)), None);
    // To a backend this table lacks: refused.
    let lost = FleetPin {
        elsewhere: true,
        ..FleetPin::default()
    };
    let m = PinMove::fleet_first(&p, &lost, None, t(90));
    assert_eq!(m.map(|m| m.stage), Some(Stage::Unsure));
    // After this table's own move, another's came: the pin stays there.
    let after = FleetPin {
        at: Some(BackendId::new(1)),
        after_own: true,
        ..FleetPin::default()
    };
    let m = PinMove::fleet_first(&p, &after, None, t(300));
    assert_eq!(
        m.map(|m| (m.stage, m.backend)),
        Some((Stage::Settled, BackendId::new(1)))
    );
}
