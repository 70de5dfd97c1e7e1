//! One client's watch served from a shared one: the events its hub queued for it, until its own
//! timeout (`timeoutSeconds`, or the apiserver's default), shutdown, or its hub ends it.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::hub::{Hub, Joined};
use crate::metrics::Metrics;
use crate::upstream::ResponseBudget;

/// The apiserver's `--min-request-timeout` default: a watch that gives no `timeoutSeconds` lasts
/// between it and twice it, at random, as the apiserver makes it.
pub(crate) const MIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(1800);

/// How long before its timeout a watch that asked for bookmarks gets one (the watch cache's
/// `nextBookmarkTime`).
const PRE_TIMEOUT_BOOKMARK: Duration = Duration::from_secs(2);

pub(crate) struct SharedStream {
    hub: Arc<Hub>,
    joined: Joined,
    budget: Arc<ResponseBudget>,
    metrics: Arc<Metrics>,
    deadline: Pin<Box<tokio::time::Sleep>>,
    /// 2 s before the deadline, for a client that asked for bookmarks: its last one then, as the
    /// apiserver's watch cache sends one, so it resumes from there.
    pre_deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    stop: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
}

impl SharedStream {
    pub(crate) fn new(
        hub: Arc<Hub>,
        joined: Joined,
        (budget, metrics): (Arc<ResponseBudget>, Arc<Metrics>),
        (timeout, bookmarks): (Option<Duration>, bool),
        stop: Option<WaitForCancellationFutureOwned>,
    ) -> SharedStream {
        metrics.shared_watch_clients.inc();
        let lasts = timeout
            .filter(|t| !t.is_zero())
            .unwrap_or_else(|| default_timeout(joined.id));
        let pre_deadline = lasts
            .checked_sub(PRE_TIMEOUT_BOOKMARK)
            .filter(|_| bookmarks)
            .map(|at| Box::pin(tokio::time::sleep(at)));
        SharedStream {
            hub,
            joined,
            budget,
            metrics,
            deadline: Box::pin(tokio::time::sleep(lasts)),
            pre_deadline,
            stop: stop.map(Box::pin),
        }
    }
}

impl crate::proxy::body::Feed for SharedStream {
    /// The next bytes for the client, or its end.
    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        if self.deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        if let Some(pre) = &mut self.pre_deadline
            && pre.as_mut().poll(cx).is_ready()
        {
            self.pre_deadline = None;
            self.hub.bookmark_for(self.joined.id);
        }
        if let Some(stop) = &mut self.stop
            && stop.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(None);
        }
        match self.joined.rx.poll_recv(cx) {
            Poll::Ready(Some(bytes)) => {
                self.joined.queued.fetch_sub(bytes.len(), Ordering::Relaxed);
                self.budget.sub(bytes.len());
                Poll::Ready(Some(bytes))
            }
            other => other,
        }
    }
}

impl Drop for SharedStream {
    fn drop(&mut self) {
        self.hub.leave(self.joined.id);
        // The hub sends it nothing more: what waits is let go of, and out of the budget.
        self.joined.rx.close();
        while let Ok(bytes) = self.joined.rx.try_recv() {
            self.joined.queued.fetch_sub(bytes.len(), Ordering::Relaxed);
            self.budget.sub(bytes.len());
        }
        self.metrics.shared_watch_clients.dec();
    }
}

/// Between `MIN_REQUEST_TIMEOUT` and twice it, spread by `seed`.
fn default_timeout(seed: u64) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let spread =
        xxhash_rust::xxh3::xxh3_64(&[seed.to_le_bytes(), u64::from(nanos).to_le_bytes()].concat());
    let fraction = (spread % 10_000) as f64 / 10_000.0;
    MIN_REQUEST_TIMEOUT.mul_f64(1.0 + fraction)
}
