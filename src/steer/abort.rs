//! A rollout's abort window: requests sent to its `to` backend and their failures over a sliding
//! window. Once the window holds at least `minRequests` and the failure ratio passes `errorRatio`,
//! the rollout is aborted and holds at 0 % for as long as this state lives (until the file changes).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::config::Abort;

/// Buckets per window: the window slides in steps of a tenth of its length.
const BUCKETS: u64 = 10;

#[derive(Default)]
struct Bucket {
    epoch: AtomicU64,
    requests: AtomicU64,
    failures: AtomicU64,
}

/// The live abort state of one rollout.
pub(crate) struct AbortWindow {
    limits: Abort,
    step_ms: u64,
    buckets: [Bucket; BUCKETS as usize],
    aborted: AtomicBool,
    /// How the abort came, once it has (read by the status page).
    tripped: OnceLock<Tripped>,
}

/// How a rollout aborted: when, and the counts that tripped it here, or the replica that did.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Tripped {
    /// When this replica aborted it.
    pub at: SystemTime,
    /// The window's counts when they tripped it here.
    pub counts: Option<WindowCounts>,
    /// The replica whose abort this one adopted.
    pub by: Option<String>,
}

/// What the window holds now.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct WindowCounts {
    /// Requests sent to `to` within the window.
    pub requests: u64,
    /// Those that failed (5xx or no response).
    pub failures: u64,
}

impl WindowCounts {
    /// failures / requests (0 when there were none).
    pub(crate) fn ratio(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.failures as f64 / self.requests as f64
        }
    }
}

fn millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis() as u64
}

impl AbortWindow {
    /// An empty window for these limits.
    pub(crate) fn new(limits: Abort) -> AbortWindow {
        let step_ms = (limits.window.as_millis() as u64 / BUCKETS).max(1);
        AbortWindow {
            limits,
            step_ms,
            buckets: Default::default(),
            aborted: AtomicBool::new(false),
            tripped: OnceLock::new(),
        }
    }

    /// Whether the rollout has aborted.
    pub(crate) fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::Relaxed)
    }

    /// Aborts the rollout because replica `by` aborted it; whether it was not aborted before.
    pub(crate) fn abort(&self, by: &str) -> bool {
        let first = !self.aborted.swap(true, Ordering::AcqRel);
        if first {
            let _ = self.tripped.set(Tripped {
                at: SystemTime::now(),
                counts: None,
                by: Some(by.to_owned()),
            });
        }
        first
    }

    /// How the rollout aborted, once it has.
    pub(crate) fn tripped(&self) -> Option<&Tripped> {
        self.tripped.get()
    }

    /// The limits the window trips at.
    pub(crate) fn limits(&self) -> &Abort {
        &self.limits
    }

    /// Records one request sent to `to`. Returns the counts when this request trips the abort.
    pub(crate) fn record(&self, now: SystemTime, failed: bool) -> Option<WindowCounts> {
        let epoch = millis(now) / self.step_ms;
        let bucket = &self.buckets[(epoch % BUCKETS) as usize];
        let seen = bucket.epoch.load(Ordering::Acquire);
        if seen != epoch
            && bucket
                .epoch
                .compare_exchange(seen, epoch, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            // This bucket last held a step that has slid out of the window.
            bucket.requests.store(0, Ordering::Relaxed);
            bucket.failures.store(0, Ordering::Relaxed);
        }
        bucket.requests.fetch_add(1, Ordering::Relaxed);
        if !failed {
            return None;
        }
        bucket.failures.fetch_add(1, Ordering::Relaxed);
        let counts = self.counts(now);
        let tripped =
            counts.requests >= self.limits.min_requests && counts.ratio() > self.limits.error_ratio;
        // Trips once: the first request past the limits finds it not aborted yet.
        if !tripped || self.aborted.swap(true, Ordering::AcqRel) {
            return None;
        }
        let _ = self.tripped.set(Tripped {
            at: now,
            counts: Some(counts),
            by: None,
        });
        Some(counts)
    }

    /// The counts within the window ending at `now`.
    pub(crate) fn counts(&self, now: SystemTime) -> WindowCounts {
        let epoch = millis(now) / self.step_ms;
        let mut c = WindowCounts {
            requests: 0,
            failures: 0,
        };
        for b in &self.buckets {
            let e = b.epoch.load(Ordering::Acquire);
            if e <= epoch && epoch - e < BUCKETS {
                c.requests += b.requests.load(Ordering::Relaxed);
                c.failures += b.failures.load(Ordering::Relaxed);
            }
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window() -> AbortWindow {
        AbortWindow::new(Abort {
            error_ratio: 0.1,
            window: Duration::from_secs(60),
            min_requests: 100,
        })
    }

    #[test]
    fn trips_past_min_requests_and_ratio_only() {
        let w = window();
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000_000);
        // 20 % failures, but fewer than minRequests: no abort yet.
        for i in 0..99 {
            assert_eq!(w.record(t0, i % 5 == 0), None);
        }
        assert!(!w.is_aborted());
        let mut tripped = None;
        for i in 0..10 {
            tripped = tripped.or(w.record(t0 + Duration::from_secs(1), i % 5 == 0));
        }
        let counts = tripped.expect("the abort trips once past 100 requests");
        assert!(counts.requests >= 100 && counts.ratio() > 0.1);
        assert!(w.is_aborted());
        let how = w.tripped().expect("how it tripped is kept");
        assert_eq!(
            (how.at, how.counts, how.by.as_deref()),
            (t0 + Duration::from_secs(1), Some(counts), None)
        );
        // It trips once.
        assert_eq!(w.record(t0 + Duration::from_secs(2), true), None);
    }

    #[test]
    fn old_failures_slide_out_of_the_window() {
        let w = window();
        let t0 = UNIX_EPOCH + Duration::from_secs(2_000_000);
        for _ in 0..50 {
            w.record(t0, true);
        }
        // Two minutes later the failures are out of the window: healthy traffic does not trip.
        let later = t0 + Duration::from_secs(120);
        for _ in 0..200 {
            assert_eq!(w.record(later, false), None);
        }
        assert_eq!(w.counts(later).failures, 0);
        assert!(!w.is_aborted());
        // Below the ratio never trips.
        for i in 0..1000 {
            w.record(later, i % 20 == 0);
        }
        assert!(!w.is_aborted(), "5 % failures stay under a 10 % ratio");
    }
}
