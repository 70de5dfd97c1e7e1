//! Premature resets per client connection (HTTP/2 rapid reset, CVE-2023-44487). Each request a
//! client opens is sent upstream on a connection shared with other clients; one that it resets at
//! once costs the apiserver a request and the shared connection a reset, and an apiserver that sees
//! too many resets closes that connection for everyone on it. So, as Envoy does, a stream the client
//! gives up on before its response ended and within a second of opening it counts as premature, and a
//! connection that has opened at least 100 streams, more than half of them premature, is closed.
//! Closing alone does not stop an attacker that reconnects at once, so the client is also held back
//! (`offenders`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::proxy::wire::{StreamEnd, StreamGuard};

/// Streams opened before the ratio is judged.
const MIN_STREAMS: u32 = 100;
/// A stream given up on later than this is a client changing its mind, not an attack.
const PREMATURE: Duration = Duration::from_secs(1);

/// One client connection's streams and premature resets.
#[derive(Debug, Default)]
pub(super) struct ResetBudget {
    streams: AtomicU32,
    premature: AtomicU32,
    exceeded: CancellationToken,
}

impl ResetBudget {
    /// A budget for a new connection.
    pub(super) fn new() -> Arc<ResetBudget> {
        Arc::new(ResetBudget::default())
    }

    /// Counts a new stream; the guard says at its drop whether it ended prematurely.
    pub(super) fn open(self: &Arc<Self>) -> StreamGuard {
        self.streams.fetch_add(1, Ordering::Relaxed);
        StreamGuard::new(self.clone(), crate::runtime::turn::now())
    }

    /// Resolves when the connection has used up its budget.
    pub(super) async fn exceeded(&self) {
        self.exceeded.cancelled().await
    }

    fn premature(&self) {
        let premature = self.premature.fetch_add(1, Ordering::Relaxed) + 1;
        let streams = self.streams.load(Ordering::Relaxed);
        if streams >= MIN_STREAMS && premature * 2 > streams {
            self.exceeded.cancel();
        }
    }
}

impl StreamEnd for ResetBudget {
    /// A stream let go of before its response ended, within a second of opening, is premature.
    fn stream_dropped(&self, started: Instant, done: bool) {
        if !done && crate::runtime::turn::now().saturating_duration_since(started) < PREMATURE {
            self.premature();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_that_resets_most_of_its_streams_is_over_budget() {
        let budget = ResetBudget::new();
        for i in 0..200 {
            let mut g = budget.open();
            if i % 3 == 0 {
                g.done();
            }
        }
        assert!(budget.exceeded.is_cancelled());
        let polite = ResetBudget::new();
        for i in 0..200 {
            let mut g = polite.open();
            if i % 3 != 0 {
                g.done();
            }
        }
        assert!(!polite.exceeded.is_cancelled());
    }
}
