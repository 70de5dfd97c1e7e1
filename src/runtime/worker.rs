//! Which worker thread the current code runs on, so pools can keep per-thread connections.
//!
//! The proxy runs one single-threaded runtime per worker thread. Each worker registers its index
//! here at start; any other thread (the admin and health-check runtime, tests) counts as "off the
//! workers" and shares one extra shard.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

static WORKERS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static CURRENT: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Sets the number of worker threads; call before any pool is built.
pub(crate) fn set_count(n: usize) {
    WORKERS.fetch_max(n, Ordering::Relaxed);
}

/// The number of worker threads.
pub(crate) fn count() -> usize {
    WORKERS.load(Ordering::Relaxed)
}

/// Marks the current thread as worker `i`.
pub(crate) fn enter(i: usize) {
    CURRENT.with(|c| c.set(i));
}

/// The current worker's index, or `count()` off the workers.
pub(crate) fn current() -> usize {
    CURRENT.with(|c| c.get()).min(count())
}
