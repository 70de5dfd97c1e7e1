//! How far this replica's clock is from the apiservers', from their answers' `Date` (whole
//! seconds). An answer sent at `t0` and received at `t1` (this replica's clock) with `Date: D` was
//! made when the apiserver's clock read between `D` and `D + 1 s`, at some moment between `t0` and
//! `t1`: so the offset (this clock minus theirs) lies in `(t0 - D - 1 s, t1 - D]`. Each round adds
//! such a bound; the intersection of the recent ones narrows to about a round trip, as answers fall
//! on either side of the apiserver's second.
//!
//! `flipAt` moves a pin on every replica at the same moment only if their clocks agree (the fence
//! keeps 2 s for it): the offsets published by each replica show whether they do.

use std::collections::VecDeque;
use std::time::SystemTime;

/// How many rounds' bounds are intersected (at 10 s a round: five minutes).
const SAMPLES: usize = 30;

/// The offset of this clock from the apiservers', in seconds, with its bounds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Offset {
    /// The middle of the bounds: this clock minus the apiservers'.
    pub(crate) seconds: f64,
    /// Half the width of the bounds.
    pub(crate) within: f64,
}

/// The recent bounds.
#[derive(Debug, Default)]
pub(crate) struct OffsetEstimate {
    bounds: VecDeque<(f64, f64)>,
}

fn secs(t: SystemTime) -> f64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

impl OffsetEstimate {
    /// Adds an answer sent at `sent`, received at `received`, dated `date` by the apiserver.
    pub(crate) fn sample(&mut self, sent: SystemTime, received: SystemTime, date: SystemTime) {
        let d = secs(date);
        let bound = (secs(sent) - d - 1.0, secs(received) - d);
        if self.bounds.len() == SAMPLES {
            self.bounds.pop_front();
        }
        self.bounds.push_back(bound);
        // A clock that was set meanwhile: the old bounds no longer hold with the new one.
        if self.intersection().is_none() {
            self.bounds.clear();
            self.bounds.push_back(bound);
        }
    }

    fn intersection(&self) -> Option<(f64, f64)> {
        let low = self.bounds.iter().map(|b| b.0).fold(f64::MIN, f64::max);
        let high = self.bounds.iter().map(|b| b.1).fold(f64::MAX, f64::min);
        (!self.bounds.is_empty() && low <= high).then_some((low, high))
    }

    /// The offset, once an answer has been dated.
    pub(crate) fn offset(&self) -> Option<Offset> {
        let (low, high) = self.intersection()?;
        Some(Offset {
            seconds: (low + high) / 2.0,
            within: (high - low) / 2.0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
    }

    /// The apiserver's `Date` for a moment of its clock: the whole second.
    fn date(ms: u64) -> SystemTime {
        at(ms / 1000 * 1000)
    }

    #[test]
    fn answers_on_either_side_of_a_second_narrow_the_offset_to_a_round_trip() {
        // This clock is 5.3 s ahead; each answer takes 4 ms, made halfway; a round every 10.037 s,
        // so the answers fall at every part of the apiserver's second.
        let mut e = OffsetEstimate::default();
        for i in 0..SAMPLES as u64 {
            let start = 1_000_000 + i * 10_037;
            let server = start + 2 - 5_300;
            e.sample(at(start), at(start + 4), date(server));
        }
        let o = e.offset().expect("an offset");
        assert!((o.seconds - 5.3).abs() < 0.05, "{o:?}");
        assert!(o.within < 0.05, "{o:?}");
    }

    #[test]
    fn one_answer_bounds_the_offset_within_a_second_and_a_clock_set_starts_again() {
        let mut e = OffsetEstimate::default();
        e.sample(at(10_000), at(10_010), date(10_500));
        let o = e.offset().expect("an offset");
        assert!(
            o.within <= 0.51 && (o.seconds - (-0.5)).abs() <= 0.51,
            "{o:?}"
        );
        // The clock jumps 60 s ahead: the bounds before it are dropped.
        e.sample(at(80_000), at(80_010), date(20_000));
        let o = e.offset().expect("an offset");
        assert!((o.seconds - 59.5).abs() <= 0.51, "{o:?}");
    }
}
