//! A rollout's percentage over time: a share of keys (`Percent`), and the schedule that sets it,
//! fixed or in steps, read at a given time.

use std::time::{Duration, SystemTime};

/// A share of keys in hundredths of a percent: 0 to 10,000.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Percent(pub u16);

impl Percent {
    /// All keys.
    pub const ALL: Percent = Percent(10_000);

    /// The share as a number from 0 to 100.
    pub fn as_f64(self) -> f64 {
        f64::from(self.0) / 100.0
    }
}

impl std::fmt::Display for Percent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_multiple_of(100) {
            write!(f, "{}%", self.0 / 100)
        } else {
            write!(f, "{:.2}%", self.as_f64())
        }
    }
}

/// A rollout's percent over time.
#[derive(Clone, Debug, PartialEq)]
pub enum Schedule {
    /// The same share at all times.
    Fixed(Percent),
    /// Steps from `start_at`: each holds for its `hold`, the last forever; 0 % before `start_at`.
    Steps {
        /// When the first step begins.
        start_at: SystemTime,
        /// The steps in order; every step but the last has a hold.
        steps: Vec<Step>,
    },
}

/// One step of a schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The share during the step.
    pub percent: Percent,
    /// How long the step lasts; `None` only for the last step.
    pub hold: Option<Duration>,
}

/// Where a schedule stands at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedulePoint {
    /// The share in force.
    pub percent: Percent,
    /// The step in force (0-based), or `None` before `startAt` and for fixed percents.
    pub step: Option<usize>,
}

impl Schedule {
    /// The share in force at `now`: a function of the file and the clock only, so every replica agrees
    /// and a restart changes nothing.
    pub fn at(&self, now: SystemTime) -> SchedulePoint {
        let (start_at, steps) = match self {
            Schedule::Fixed(p) => {
                return SchedulePoint {
                    percent: *p,
                    step: None,
                };
            }
            Schedule::Steps { start_at, steps } => (start_at, steps),
        };
        let Ok(mut elapsed) = now.duration_since(*start_at) else {
            return SchedulePoint {
                percent: Percent(0),
                step: None,
            };
        };
        for (i, step) in steps.iter().enumerate() {
            match step.hold {
                Some(hold) if elapsed >= hold => elapsed -= hold,
                _ => {
                    return SchedulePoint {
                        percent: step.percent,
                        step: Some(i),
                    };
                }
            }
        }
        // Validation guarantees the last step has no hold; a last hold that passed still holds.
        SchedulePoint {
            percent: steps.last().map(|s| s.percent).unwrap_or_default(),
            step: steps.len().checked_sub(1),
        }
    }

    /// The schedule's next step after `now`: when it begins and its share (`None` for a fixed
    /// percent, and once the last step is in force).
    pub fn next(&self, now: SystemTime) -> Option<(SystemTime, Percent)> {
        let Schedule::Steps { start_at, steps } = self else {
            return None;
        };
        let mut begins = *start_at;
        for step in steps {
            if begins > now {
                return Some((begins, step.percent));
            }
            begins = begins.checked_add(step.hold?)?;
        }
        None
    }
}
