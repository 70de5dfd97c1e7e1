//! Each worker's idle sweep: a tick count, and the connections to wake at the next tick. A worker
//! is one thread with its own runtime, so all of it is thread-local: no lock, no atomic.

use std::cell::{Cell, RefCell};
use std::task::Waker;

thread_local! {
    static TICK: Cell<u64> = const { Cell::new(0) };
    static WAITING: RefCell<Vec<Waker>> = const { RefCell::new(Vec::new()) };
    /// The runtime this thread's sweep runs on.
    static RUNNING_ON: Cell<Option<tokio::runtime::Id>> = const { Cell::new(None) };
    /// Connections that let their buffers go since the worker last released free memory.
    static GIVEN_BACK: Cell<u32> = const { Cell::new(0) };
}

/// After this many connections let their buffers go, the next tick returns the worker's free
/// memory to the system: mimalloc keeps freed pages for the thread, and a sweep frees many at
/// once.
const RELEASE_AFTER: u32 = 64;

/// A connection let its buffers go.
pub(super) fn gave_back() {
    GIVEN_BACK.with(|g| g.set(g.get().saturating_add(1)));
}

/// This worker's current tick.
pub(super) fn tick() -> u64 {
    TICK.with(Cell::get)
}

/// Wakes `waker` at the next tick; starts the worker's sweep if it is not running.
pub(super) fn wake_next_tick(waker: Waker) {
    WAITING.with(|w| w.borrow_mut().push(waker));
    let runtime = tokio::runtime::Handle::current();
    if RUNNING_ON.with(Cell::get) != Some(runtime.id()) {
        RUNNING_ON.with(|r| r.set(Some(runtime.id())));
        runtime.spawn(run());
    }
}

/// Ticks every `SWEEP` and wakes who asked, for as long as the worker's runtime runs.
async fn run() {
    let mut every = tokio::time::interval(super::SWEEP);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    every.tick().await;
    loop {
        every.tick().await;
        TICK.with(|t| t.set(t.get() + 1));
        if GIVEN_BACK.with(|g| g.replace(0)) >= RELEASE_AFTER {
            crate::edge::capacity::release_free_memory();
        }
        let waiting = WAITING.with(|w| std::mem::take(&mut *w.borrow_mut()));
        for waker in waiting {
            waker.wake();
        }
    }
}
