//! The routing in force, and each worker's own hold on it.
//!
//! Every request needs the routing for as long as it runs. A reference taken from the one shared
//! `Arc` per request (arc_swap's `load_full`) wrote the same reference count from every worker,
//! twice per request, and that cache line went back and forth between the cores. Instead each
//! worker holds the routing in force in a small allocation of its own (`Held`), which its requests
//! clone: the line they write is the worker's. A request checks a generation (read, not written,
//! per request) to see that its worker's hold is still the routing in force; a reload gives the
//! new table a new generation, and tells every worker to let go of the old one, so that a worker
//! with no requests does not keep an old table (and the connections of an endpoint it no longer
//! names) alive.

use std::cell::RefCell;
use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Routing;
use crate::runtime::worker;

/// The next generation of any routing in the process: two tables never share one, even of two
/// proxies (tests run several in one process).
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

fn next_generation() -> u64 {
    NEXT_GENERATION.fetch_add(1, Ordering::Relaxed)
}

/// The routing in force.
pub(crate) struct Current {
    routing: ArcSwap<Routing>,
    /// `routing`'s generation: set after it is stored.
    generation: AtomicU64,
    /// Told at each store, so that each worker lets go of the routing it held.
    changed: watch::Sender<()>,
}

/// A worker's hold on a routing.
pub(crate) struct Held {
    generation: u64,
    routing: Arc<Routing>,
}

thread_local! {
    /// The routing this worker's requests use, while it is in force.
    static HELD: RefCell<Option<Arc<Held>>> = const { RefCell::new(None) };
}

/// The routing a request uses, as long as it runs.
pub(crate) enum InForce {
    /// Its worker's hold.
    Worker(Arc<Held>),
    /// Off the workers (tests, the admin runtime): the shared reference.
    Shared(Arc<Routing>),
}

impl Deref for InForce {
    type Target = Routing;

    fn deref(&self) -> &Routing {
        match self {
            InForce::Worker(held) => &held.routing,
            InForce::Shared(routing) => routing,
        }
    }
}

impl Current {
    pub(crate) fn new(routing: Routing) -> Current {
        Current {
            routing: ArcSwap::from_pointee(routing),
            generation: AtomicU64::new(next_generation()),
            changed: watch::Sender::new(()),
        }
    }

    /// The routing in force now.
    pub(crate) fn load(&self) -> Arc<Routing> {
        self.routing.load_full()
    }

    /// Puts `routing` in force: requests that begin after this returns use it.
    pub(crate) fn store(&self, routing: Arc<Routing>) {
        self.routing.store(routing);
        // After the store: a worker that sees this generation loads the new routing (or a newer).
        self.generation.store(next_generation(), Ordering::Release);
        self.changed.send_replace(());
    }

    /// The routing in force, for one request: on a worker, its worker's hold, taken anew when the
    /// routing in force changed since.
    pub(crate) fn for_request(&self) -> InForce {
        if worker::current() >= worker::count() {
            return InForce::Shared(self.load());
        }
        let generation = self.generation.load(Ordering::Acquire);
        let (held, old) = HELD.with(|slot| {
            let mut slot = slot.borrow_mut();
            if let Some(held) = slot.as_ref().filter(|h| h.generation == generation) {
                return (held.clone(), None);
            }
            let held = Arc::new(Held {
                generation,
                routing: self.load(),
            });
            (held.clone(), slot.replace(held))
        });
        // The old hold (perhaps the last reference to an old table) is dropped outside the slot.
        drop(old);
        InForce::Worker(held)
    }

    /// On this worker, until `stop`: lets go of the worker's hold when the routing in force
    /// changes, whether or not a request comes.
    pub(crate) fn spawn_worker_release(&self, stop: CancellationToken) {
        let mut changed = self.changed.subscribe();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    r = changed.changed() => if r.is_err() { return },
                    () = stop.cancelled() => return,
                }
                let old = HELD.with(|slot| slot.borrow_mut().take());
                drop(old);
            }
        });
    }
}
