//! What an endpoint is in: ready, down or not tried, since when, and why it was last found down.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{EndpointPool, EndpointState};

/// Now, in whole seconds since the Unix epoch (what the status page shows "since" in).
pub(super) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Why an endpoint was last found down (what the apiserver answered, or the connect error), and
/// since when it has been, in those words.
#[derive(Debug)]
pub(crate) struct Failure {
    pub why: String,
    pub since: SystemTime,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

impl EndpointPool {
    /// Why the endpoint was last found down, and since when, if it was.
    pub(crate) fn failure(&self) -> Option<Arc<Failure>> {
        self.failure.load_full()
    }

    /// Records why the endpoint is down (`None` once it is up); new words are a new failure.
    pub(crate) fn set_failure(&self, why: Option<String>) {
        let same = self.failure.load().as_ref().map(|f| &f.why) == why.as_ref();
        if !same {
            let since = SystemTime::now();
            self.failure
                .store(why.map(|why| Arc::new(Failure { why, since })));
        }
    }

    /// Since when the endpoint has been in its present state (ready, down or unknown).
    pub(crate) fn state_since(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(self.state_since.load(Ordering::Relaxed))
    }

    /// Records the health check's finding (`None`: ready); returns whether it differs from the
    /// check before, so that a failure repeated every check is logged once.
    pub(crate) fn set_health_failure(&self, why: Option<String>) -> bool {
        let changed = self.health_failure.load().as_deref() != why.as_ref();
        if changed {
            self.health_failure.store(why.clone().map(Arc::new));
        }
        self.set_failure(why);
        changed
    }

    /// Connections open now.
    pub(crate) fn connections(&self) -> usize {
        self.shards.iter().map(|s| s.conns.load().len()).sum()
    }

    /// The endpoint's health as last seen.
    pub(crate) fn state(&self) -> EndpointState {
        match self.state.load(Ordering::Relaxed) {
            1 => EndpointState::Ready,
            2 => EndpointState::Down,
            _ => EndpointState::Unknown,
        }
    }

    /// Records the endpoint's health.
    pub(crate) fn set_state(&self, s: EndpointState) {
        if self.state.swap(s as u8, Ordering::Relaxed) != s as u8 {
            self.state_since.store(unix_now(), Ordering::Relaxed);
        }
        self.ready_gauge.set(i64::from(s == EndpointState::Ready));
    }
}
