//! The fuzz target over the replicas' reports (`fuzz/fuzz_targets/fleet_reports.rs`): a Lease
//! list as any replica, or anyone allowed to write Leases in kube-system, may have left it. Read
//! into members, their timelines heard and their moves taken into this replica's gates, then the
//! pin's state asked at moments around them; and what this replica publishes heard back as it
//! published it.

use std::time::{Duration, SystemTime};

use serde_json::Value;

use super::gates::{FleetGates, MoveView};
use super::said::heard;

/// `input`: its first byte a clock offset (seconds, either way), the rest a Lease list as JSON.
pub(crate) fn drive(input: &[u8]) {
    let Some((offset, text)) = input.split_first() else {
        return;
    };
    let Ok(list) = serde_json::from_slice::<Value>(text) else {
        return;
    };
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let secs = f64::from(i8::from_ne_bytes([*offset]));
    let to_mine = |t: SystemTime| shifted(t, secs);
    let members = super::fleet::members(&list, now);
    let heard_all: Vec<_> = members
        .iter()
        .flat_map(|m| heard(&m.state, &to_mine))
        .collect();
    let gates = FleetGates::default();
    gates.enable(Duration::from_secs(10));
    let entries: Vec<Option<&Value>> = members
        .iter()
        .map(|m| m.state["pins"].as_array().and_then(|p| p.first()))
        .collect();
    let moves = [MoveView {
        key: "p|new|2027-01-15T08:00:00Z",
        pin: "p",
        to: "new",
        flip_at: now + Duration::from_secs(60),
        fence: Duration::from_secs(10),
        entries,
        lapsed: Vec::new(),
        remembered: offset % 2 == 0,
    }];
    gates.update(&moves, heard_all, now, to_mine);
    let backend = |name: &str| {
        ["old", "new"]
            .iter()
            .position(|b| *b == name)
            .map(crate::config::BackendId::new)
    };
    for ahead in [0u64, 5, 60, 3600, 1 << 40] {
        let at = now.checked_add(Duration::from_secs(ahead)).unwrap_or(now);
        let fleet = gates.pin_fleet("p", Some(moves[0].key), at, backend);
        assert!(fleet.held_until.is_none_or(|u| u > at), "{fleet:?}");
        let _ = gates.gate(moves[0].key);
    }
    // What this replica publishes, heard by another on the same clock, is the same timeline.
    let published = gates.said_json(&|t| t);
    let state = serde_json::json!({ "said": published });
    let again = heard(&state, &|t| t);
    assert_eq!(again.len(), published.len(), "{published:?}");
}

fn shifted(t: SystemTime, secs: f64) -> SystemTime {
    let by = Duration::from_secs_f64(secs.abs());
    let moved = if secs >= 0.0 {
        t.checked_add(by)
    } else {
        t.checked_sub(by)
    };
    moved.unwrap_or(t)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_fleet_of_reports_and_garbage_is_read_without_a_panic() {
        let list = serde_json::json!({"items": [{
            "metadata": {
                "labels": {"skewgate.io/endpoint": "true"},
                "annotations": {"skewgate.io/state": serde_json::json!({
                    "pins": [{"name": "p", "backend": "new", "flipAt": "2027-01-15T08:00:00Z",
                              "readySince": "2027-01-15T07:59:00Z", "flipsAt": "9999-12-31T23:59:59Z"}],
                    "said": [{"pin": "p", "move": "q", "backend": "old",
                              "at": "1970-01-01T00:00:00Z", "fenceMs": u64::MAX},
                             {"pin": "p", "move": "r", "backend": "x", "at": "not a time"}],
                }).to_string()},
            },
            "spec": {"holderIdentity": "10.0.0.1:6443", "renewTime": "2027-01-15T07:59:59.000000Z",
                     "leaseDurationSeconds": 15},
        }]});
        for first in [0u8, 1, 127, 128, 255] {
            let mut input = vec![first];
            input.extend(list.to_string().as_bytes());
            super::drive(&input);
        }
        super::drive(b"");
        super::drive(b"\x00{not json");
    }
}
