//! What makes the response budget (`budget.rs`) a bound for the process that clients who read can
//! still live under: streams that find it spent wait for room instead of being given more
//! (`Waiting`), and while some wait, the client connection that has taken nothing for longest is
//! cut (`Stalls`), so that what it held goes back to the budget.
//!
//! A client connection is *stalled* while it holds response data unwritten and its socket takes
//! no more (an HTTP/2 client that does not read: `edge::http2`); its stall begins at the last
//! frame it took. It is cut only when it has been stalled for `MIN_STALL`, the budget is spent and
//! a stream is waiting for room, one connection each `EVICT_EVERY` at most, oldest first. A client
//! that reads, however slowly, takes a frame now and then and is never the oldest for long.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::{Duration, Instant};

use slab::Slab;

/// How long a connection must have taken nothing before it may be cut.
pub(crate) const MIN_STALL: Duration = Duration::from_millis(500);

/// At most one connection cut in this long: each frees all its streams held.
const EVICT_EVERY: Duration = Duration::from_millis(50);

/// One stalled client connection, as the budget sees it.
#[derive(Debug)]
pub(crate) struct Stall {
    /// Its last progress, in milliseconds since the budget's `epoch`.
    since: AtomicU64,
    cut: AtomicBool,
    waker: Mutex<Waker>,
}

impl Stall {
    /// Whether the budget cut it: the connection is to end now.
    pub(crate) fn is_cut(&self) -> bool {
        self.cut.load(Ordering::Acquire)
    }
}

/// The stalled connections, and the streams waiting for room.
#[derive(Debug)]
pub(crate) struct Stalls {
    epoch: Instant,
    stalled: Mutex<Slab<Arc<Stall>>>,
    /// Upstream streams whose client asked for more while the budget was spent: woken when it
    /// has room again.
    waiting: Mutex<Vec<Waker>>,
    any_waiting: AtomicBool,
    last_cut: AtomicU64,
    /// A timer is set to wake the waiters when a cut may be made.
    timer: Arc<AtomicBool>,
}

impl Default for Stalls {
    fn default() -> Stalls {
        Stalls {
            epoch: Instant::now(),
            stalled: Mutex::new(Slab::new()),
            waiting: Mutex::new(Vec::new()),
            any_waiting: AtomicBool::new(false),
            last_cut: AtomicU64::new(0),
            timer: Arc::new(AtomicBool::new(false)),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Stalls {
    fn millis(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX)
    }

    /// A connection stalls, its last progress at `since`; `waker` wakes its task if it is cut.
    pub(crate) fn enter(&self, since: Instant, waker: &Waker) -> (usize, Arc<Stall>) {
        let stall = Arc::new(Stall {
            since: AtomicU64::new(self.millis(since)),
            cut: AtomicBool::new(false),
            waker: Mutex::new(waker.clone()),
        });
        let key = lock(&self.stalled).insert(stall.clone());
        (key, stall)
    }

    /// The stalled connection `key` took a frame at `at` (it stays listed, its stall begun anew).
    pub(crate) fn progress(&self, stall: &Stall, at: Instant) {
        stall.since.store(self.millis(at), Ordering::Relaxed);
    }

    /// Connection `key` is no longer stalled (it wrote all it could, or it ended).
    pub(crate) fn leave(&self, key: usize) {
        let mut stalled = lock(&self.stalled);
        if stalled.contains(key) {
            stalled.remove(key);
        }
    }

    /// An upstream stream's client asked for more while the budget was spent: `waker` is woken
    /// once there is room, and the connection stalled longest is cut if it is time. Whether one
    /// was cut.
    pub(crate) fn wait(&self, waker: &Waker, now: Instant) -> bool {
        {
            let mut waiting = lock(&self.waiting);
            if !waiting.iter().any(|w| w.will_wake(waker)) {
                waiting.push(waker.clone());
            }
            self.any_waiting.store(true, Ordering::Release);
        }
        self.cut_oldest(now)
    }

    /// Cuts the connection stalled longest, if it has been for `MIN_STALL` and none was cut in
    /// the last `EVICT_EVERY`; when it is not time yet, the waiters are woken to ask again when
    /// it is (nothing else may wake them: room comes only from a cut).
    fn cut_oldest(&self, now: Instant) -> bool {
        let now_ms = self.millis(now);
        let last = self.last_cut.load(Ordering::Relaxed);
        let since_cut = now_ms.saturating_sub(last);
        if last != 0 && since_cut < EVICT_EVERY.as_millis() as u64 {
            self.ask_again_in(Duration::from_millis(
                EVICT_EVERY.as_millis() as u64 - since_cut,
            ));
            return false;
        }
        let oldest = {
            let stalled = lock(&self.stalled);
            stalled
                .iter()
                .filter(|(_, s)| !s.is_cut())
                .min_by_key(|(_, s)| s.since.load(Ordering::Relaxed))
                .map(|(_, s)| s.clone())
        };
        let Some(stall) = oldest else {
            return false;
        };
        let since = stall.since.load(Ordering::Relaxed);
        let stalled = now_ms.saturating_sub(since);
        if stalled < MIN_STALL.as_millis() as u64 {
            self.ask_again_in(Duration::from_millis(
                MIN_STALL.as_millis() as u64 - stalled,
            ));
            return false;
        }
        self.last_cut.store(now_ms.max(1), Ordering::Relaxed);
        stall.cut.store(true, Ordering::Release);
        lock(&stall.waker).wake_by_ref();
        true
    }

    /// The streams waiting are woken after `after`, once (a timer already set does it).
    fn ask_again_in(&self, after: Duration) {
        if self.timer.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.timer.store(false, Ordering::Release);
            return;
        };
        let woken = lock(&self.waiting).clone();
        let timer = self.timer.clone();
        runtime.spawn(async move {
            tokio::time::sleep(after).await;
            timer.store(false, Ordering::Release);
            for w in woken {
                w.wake();
            }
        });
    }

    /// Room came back: every stream waiting is woken to ask again.
    pub(crate) fn room(&self) {
        if !self.any_waiting.swap(false, Ordering::AcqRel) {
            return;
        }
        let woken = std::mem::take(&mut *lock(&self.waiting));
        for w in woken {
            w.wake();
        }
    }

    /// Whether a stream waits for room (the fast path of every `sub`).
    pub(crate) fn any_waiting(&self) -> bool {
        self.any_waiting.load(Ordering::Relaxed)
    }

    /// Connections stalled now.
    #[cfg(test)]
    pub(crate) fn stalled(&self) -> usize {
        lock(&self.stalled).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_stalled_longest_is_cut_once_it_has_been_for_long_enough() {
        let stalls = Stalls::default();
        let t0 = stalls.epoch + Duration::from_secs(10);
        let noop = Waker::noop();
        let (_, old) = stalls.enter(t0, noop);
        let (young_key, young) = stalls.enter(t0 + Duration::from_millis(300), noop);
        // Nobody stalled for long enough yet.
        assert!(!stalls.wait(noop, t0 + Duration::from_millis(400)));
        assert!(stalls.any_waiting());
        // The oldest goes first.
        assert!(stalls.wait(noop, t0 + Duration::from_millis(600)));
        assert!(old.is_cut() && !young.is_cut());
        // One at a time.
        assert!(!stalls.wait(noop, t0 + Duration::from_millis(620)));
        // A connection that took a frame begins its stall anew.
        stalls.progress(&young, t0 + Duration::from_millis(700));
        assert!(!stalls.wait(noop, t0 + Duration::from_millis(900)));
        assert!(stalls.wait(noop, t0 + Duration::from_millis(1300)));
        assert!(young.is_cut());
        stalls.leave(young_key);
        assert_eq!(stalls.stalled(), 1);
        stalls.room();
        assert!(!stalls.any_waiting());
    }
}
