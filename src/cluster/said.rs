//! Each pin's timeline: the moves of it that a replica has said a time for, whatever table made
//! them. A time said is never taken back: every replica that knows it makes the move then, even
//! when a newer table no longer has it, and a replica's own move of the pin comes after the fence
//! of every move said before it. So the pin's writes at a moment are where the latest move that
//! has come put them, on every replica alike, and a table that supersedes a move starts from there.
//!
//! Each replica publishes the timelines it knows (`said` in its report) and takes in everyone's,
//! live or lapsed: a replica frozen or started while the others moved a pin learns where they put
//! it.

use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

/// A move of a pin with its time said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Said {
    /// The move (`move_key`).
    pub(crate) key: String,
    /// The backend it moves the pin's writes to (by name).
    pub(crate) to: String,
    /// When it comes, by this replica's clock.
    pub(crate) at: SystemTime,
    /// Its fence: writes are held until `at + fence`.
    pub(crate) fence: Duration,
}

/// The longest fence a report is taken to say: a report is another process's word, and a time
/// past what `SystemTime` holds must not end this one.
const MAX_FENCE: Duration = Duration::from_secs(24 * 3600);

impl Said {
    /// When its fence ends.
    pub(crate) fn fence_ends(&self) -> SystemTime {
        self.at.checked_add(self.fence).unwrap_or(self.at)
    }
}

/// A pin's moves with their times said, in time order.
#[derive(Clone, Debug, Default)]
pub(crate) struct Timeline {
    said: Vec<Said>,
}

impl Timeline {
    /// Adds a move; a move known already keeps the earliest time said for it.
    pub(crate) fn add(&mut self, s: Said) {
        match self.said.iter_mut().find(|k| k.key == s.key) {
            Some(known) if s.at < known.at => known.at = s.at,
            Some(_) => {}
            None => self.said.push(s),
        }
        self.said.sort_by_key(|s| s.at);
    }

    /// Forgets what no longer matters at `now`: of the moves that have come, all but the last two
    /// (where the pin is, and where it was).
    pub(crate) fn trim(&mut self, now: SystemTime) {
        let came = self.said.iter().filter(|s| s.at <= now).count();
        self.said.drain(..came.saturating_sub(2));
    }

    /// The latest move that has come at `now`, and the one before it.
    pub(crate) fn came(&self, now: SystemTime) -> (Option<&Said>, Option<&Said>) {
        let mut came = self.said.iter().rev().filter(|s| s.at <= now);
        (came.next(), came.next())
    }

    /// The next move to come after `now`.
    pub(crate) fn next(&self, now: SystemTime) -> Option<&Said> {
        self.said.iter().find(|s| s.at > now)
    }

    /// The time of move `key`, if said.
    pub(crate) fn time_of(&self, key: &str) -> Option<SystemTime> {
        self.said.iter().find(|s| s.key == key).map(|s| s.at)
    }

    /// The earliest a move `key` may come: after the fence of every other move said.
    pub(crate) fn not_before(&self, key: &str) -> Option<SystemTime> {
        self.said
            .iter()
            .filter(|s| s.key != key)
            .map(Said::fence_ends)
            .max()
    }

    /// The timeline as published (`pin` its name): times on the apiservers' clock by `to_theirs`.
    pub(crate) fn to_json(
        &self,
        pin: &str,
        to_theirs: &dyn Fn(SystemTime) -> SystemTime,
    ) -> Vec<Value> {
        self.said
            .iter()
            .map(|s| {
                json!({
                    "pin": pin,
                    "move": s.key,
                    "backend": s.to,
                    "at": humantime::format_rfc3339_millis(to_theirs(s.at)).to_string(),
                    "fenceMs": u64::try_from(s.fence.as_millis()).unwrap_or(u64::MAX),
                })
            })
            .collect()
    }
}

/// The moves a replica's report says were timed (`said`), as `(pin, move)` with times on this
/// replica's clock by `to_mine`; malformed entries are skipped.
pub(crate) fn heard(
    state: &Value,
    to_mine: &dyn Fn(SystemTime) -> SystemTime,
) -> Vec<(String, Said)> {
    let entries = state["said"].as_array().into_iter().flatten();
    entries
        .filter_map(|e| {
            let at = humantime::parse_rfc3339_weak(e["at"].as_str()?).ok()?;
            let at = Some(at).filter(|t| crate::config::within_horizon(*t))?;
            Some((
                e["pin"].as_str()?.to_owned(),
                Said {
                    key: e["move"].as_str()?.to_owned(),
                    to: e["backend"].as_str()?.to_owned(),
                    at: to_mine(at),
                    fence: Duration::from_millis(e["fenceMs"].as_u64()?).min(MAX_FENCE),
                },
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn said(key: &str, to: &str, secs: u64) -> Said {
        Said {
            key: key.into(),
            to: to.into(),
            at: at(secs),
            fence: Duration::from_secs(10),
        }
    }

    #[test]
    fn the_pin_is_where_the_latest_move_that_came_put_it() {
        let mut line = Timeline::default();
        line.add(said("b", "old", 200));
        line.add(said("a", "new", 100));
        // The same move said later by another replica keeps the earliest time.
        line.add(said("a", "new", 150));
        let (came, before) = line.came(at(120));
        assert_eq!((came.map(|s| s.to.as_str()), before), (Some("new"), None));
        assert_eq!(line.next(at(120)).map(|s| s.key.as_str()), Some("b"));
        let (came, before) = line.came(at(200));
        assert_eq!(came.map(|s| s.to.as_str()), Some("old"));
        assert_eq!(before.map(|s| s.to.as_str()), Some("new"));
        // A third move comes only after the fences of both.
        assert_eq!(line.not_before("c"), Some(at(210)));
        assert_eq!(line.not_before("b"), Some(at(110)));
    }

    #[test]
    fn trimming_keeps_where_the_pin_is_and_was_and_what_is_to_come() {
        let mut line = Timeline::default();
        for (i, k) in ["a", "b", "c", "d"].iter().enumerate() {
            line.add(said(k, "x", 100 * (i as u64 + 1)));
        }
        line.trim(at(350));
        let keys: Vec<&str> = line.said.iter().map(|s| s.key.as_str()).collect();
        assert_eq!(keys, ["b", "c", "d"]);
    }

    #[test]
    fn what_a_replica_publishes_is_what_another_hears() {
        let mut line = Timeline::default();
        line.add(said("a", "new", 100));
        let ahead = |t: SystemTime| t + Duration::from_secs(5);
        let behind = |t: SystemTime| t - Duration::from_secs(5);
        let state = json!({"said": line.to_json("team-a", &ahead), "pins": []});
        let got = heard(&state, &behind);
        assert_eq!(got, vec![("team-a".to_owned(), said("a", "new", 100))]);
        assert!(heard(&json!({"said": [{"pin": 1}]}), &behind).is_empty());
    }

    #[test]
    fn a_report_saying_the_end_of_time_ends_nothing() {
        let state = json!({"said": [{
            "pin": "p", "move": "m", "backend": "new",
            "at": "9999-12-31T23:59:59Z", "fenceMs": u64::MAX,
        }]});
        // Not a moment skewgate takes: published again, it could not be written.
        assert!(heard(&state, &|t| t).is_empty());
        let mut line = Timeline::default();
        line.add(Said {
            fence: Duration::MAX,
            ..said("a", "new", 100)
        });
        assert_eq!(line.not_before("other"), Some(at(100)));
    }
}
