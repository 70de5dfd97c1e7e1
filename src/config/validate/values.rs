//! Scalar values of a route file: percents, durations, times, schedules and abort limits.

use std::time::{Duration, SystemTime};

use serde_saphyr::{Location, Spanned};

use super::Validator;
use crate::config::raw::{FileAbort, FileRollout, FileStep, Text};
use crate::config::schedule::{Percent, Schedule, Step};
use crate::config::table::Abort;

impl Validator<'_> {
    pub(super) fn schedule(&mut self, r: &FileRollout, at: Location, path: &str) -> Schedule {
        match (&r.percent, &r.start_at, &r.steps) {
            (Some(p), None, None) => Schedule::Fixed(
                self.percent(p, &format!("{path}.percent"))
                    .unwrap_or_default(),
            ),
            (None, Some(start), Some(steps)) => {
                let start_at = self.timestamp(start, &format!("{path}.startAt"));
                let steps = self.steps(steps, path);
                Schedule::Steps {
                    start_at: start_at.unwrap_or(SystemTime::UNIX_EPOCH),
                    steps,
                }
            }
            (None, None, Some(steps)) => {
                self.error(
                    steps.referenced,
                    format!("{path}.steps"),
                    "steps need startAt: add startAt (e.g. 2026-11-22T10:00:00Z) to say when the first step begins",
                );
                Schedule::Fixed(Percent(0))
            }
            (None, Some(start), None) => {
                self.error(
                    start.referenced,
                    format!("{path}.startAt"),
                    "startAt without steps: add steps, e.g. [{percent: 1, hold: 10m}, {percent: 100}]",
                );
                Schedule::Fixed(Percent(0))
            }
            (Some(p), _, _) => {
                self.error(
                    p.referenced,
                    format!("{path}.percent"),
                    "give either percent or startAt with steps, not both",
                );
                Schedule::Fixed(Percent(0))
            }
            (None, None, None) => {
                self.error(
                    at,
                    path,
                    "a rollout needs a share: add percent (0 to 100), or startAt with steps",
                );
                Schedule::Fixed(Percent(0))
            }
        }
    }

    pub(super) fn steps(&mut self, raw: &Spanned<Vec<Spanned<FileStep>>>, path: &str) -> Vec<Step> {
        if raw.value.is_empty() {
            self.error(
                raw.referenced,
                format!("{path}.steps"),
                "no steps; list at least one",
            );
        }
        let last = raw.value.len().saturating_sub(1);
        let mut out = Vec::new();
        for (i, s) in raw.value.iter().enumerate() {
            let field = format!("{path}.steps[{i}]");
            let FileStep { percent, hold } = &s.value;
            let percent = self.percent(percent, &format!("{field}.percent"));
            let hold = match hold {
                Some(h) => self.duration(h, &format!("{field}.hold")),
                None if i == last => None,
                None => {
                    self.error(
                        s.referenced,
                        format!("{field}.hold"),
                        "every step but the last needs a hold (e.g. hold: 30m); the last holds forever",
                    );
                    None
                }
            };
            out.push(Step {
                percent: percent.unwrap_or_default(),
                hold,
            });
        }
        out
    }

    pub(super) fn abort(&mut self, a: &FileAbort, path: &str) -> Option<Abort> {
        let ratio = a.error_ratio.value;
        let ratio_ok = ratio > 0.0 && ratio <= 1.0;
        if !ratio_ok {
            self.error(
                a.error_ratio.referenced,
                format!("{path}.abort.errorRatio"),
                format!("{ratio} is not a ratio above 0 and at most 1 (e.g. 0.01 for 1 %)"),
            );
        }
        let window = self.duration(&a.window, &format!("{path}.abort.window"));
        if a.min_requests.value == 0 {
            self.error(
                a.min_requests.referenced,
                format!("{path}.abort.minRequests"),
                "must be at least 1, or a single failure would abort",
            );
        }
        Some(Abort {
            error_ratio: ratio,
            window: window?,
            min_requests: a.min_requests.value,
        })
        .filter(|_| ratio_ok)
    }

    pub(super) fn percent(&mut self, raw: &Spanned<f64>, field: &str) -> Option<Percent> {
        let p = raw.value;
        let hundredths = (p * 100.0).round();
        if !(0.0..=100.0).contains(&p) || (p * 100.0 - hundredths).abs() > 1e-6 {
            self.error(
                raw.referenced,
                field,
                format!("{p} is not a percent from 0 to 100 with at most two decimals"),
            );
            return None;
        }
        Some(Percent(hundredths as u16))
    }

    pub(super) fn duration(&mut self, raw: &Text, field: &str) -> Option<Duration> {
        match humantime::parse_duration(&raw.value) {
            Ok(d) if !d.is_zero() => Some(d),
            _ => {
                self.error(
                    raw.referenced,
                    field,
                    format!(
                        "{:?} is not a duration; write e.g. 10s, 5m, 1h30m",
                        raw.value
                    ),
                );
                None
            }
        }
    }

    pub(super) fn timestamp(&mut self, raw: &Text, field: &str) -> Option<SystemTime> {
        match humantime::parse_rfc3339(&raw.value) {
            Ok(t) if super::super::within_horizon(t) => Some(t),
            Ok(_) => {
                self.error(
                    raw.referenced,
                    field,
                    format!(
                        "{:?} is out of range: write a time between the years 2000 and 8900",
                        raw.value
                    ),
                );
                None
            }
            Err(_) => {
                self.error(
                    raw.referenced,
                    field,
                    format!(
                        "{:?} is not an RFC 3339 time in UTC; write e.g. 2026-11-22T10:00:00Z",
                        raw.value
                    ),
                );
                None
            }
        }
    }
}
