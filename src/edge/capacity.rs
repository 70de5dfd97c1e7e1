//! How many client connections skewgate holds at once: fewer than its file descriptors allow, so
//! that when clients take all it will accept, upstream connections, health checks, the admin
//! listener and route reloads still find descriptors. Past the bound, skewgate stops accepting and
//! new connections wait in the kernel's listen backlog, as HAProxy's `maxconn` (derived from
//! `ulimit -n`) and nginx's `worker_connections` do, instead of meeting EMFILE on every accept.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// Descriptors kept back from clients: upstream connections, listeners, files.
fn reserve(nofile: usize) -> usize {
    (nofile / 8).max(64)
}

/// Raises the soft descriptor limit to the hard one, as Go programs (kube-apiserver among them) do
/// at start, and returns the soft limit then in force (`None` when unlimited or unknown).
pub(crate) fn raise_fd_limit() -> Option<usize> {
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            tracing::debug!(error = %e, "cannot raise the file descriptor limit");
        }
    }
    getrlimit(Resource::Nofile)
        .current
        .and_then(|n| usize::try_from(n).ok())
}

/// The default bound on client connections for a descriptor limit of `nofile`.
pub(crate) fn default_max_connections(nofile: Option<usize>) -> usize {
    match nofile {
        Some(n) => n.saturating_sub(reserve(n)).max(16),
        None => usize::MAX >> 4,
    }
}

/// Permits for client connections.
pub(crate) struct ConnectionSlots {
    slots: Arc<Semaphore>,
    max: usize,
    full: AtomicBool,
    /// The most connections held at once since memory was last given back.
    peak: AtomicUsize,
    /// Connections accepted since the trim last looked.
    opened: AtomicUsize,
    /// Bumped when memory is to be given back; every worker gives back its own.
    trim: tokio::sync::watch::Sender<u64>,
}

impl ConnectionSlots {
    /// At most `max` client connections at once.
    pub(crate) fn new(max: usize) -> ConnectionSlots {
        let max = max.clamp(1, Semaphore::MAX_PERMITS);
        ConnectionSlots {
            slots: Arc::new(Semaphore::new(max)),
            max,
            full: AtomicBool::new(false),
            peak: AtomicUsize::new(0),
            opened: AtomicUsize::new(0),
            trim: tokio::sync::watch::Sender::new(0),
        }
    }

    /// The bound.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// Connections held now.
    pub(crate) fn in_use(&self) -> usize {
        self.max - self.slots.available_permits()
    }

    /// A slot for the next connection, waiting while all are taken (logged once each time the bound
    /// is reached).
    pub(crate) async fn acquire(&self) -> OwnedSemaphorePermit {
        let permit = self.wait_for_slot().await;
        self.peak.fetch_max(self.in_use(), Ordering::Relaxed);
        self.opened.fetch_add(1, Ordering::Relaxed);
        permit
    }

    /// Whether, since the last look, many connections closed (counted from the peak) or many
    /// opened.
    fn many_came_or_went(&self) -> bool {
        let now = self.in_use();
        let peak = self.peak.swap(now, Ordering::Relaxed);
        let opened = self.opened.swap(0, Ordering::Relaxed);
        peak.saturating_sub(now) >= TRIM_AFTER || opened >= TRIM_AFTER
    }

    async fn wait_for_slot(&self) -> OwnedSemaphorePermit {
        if let Ok(permit) = self.slots.clone().try_acquire_owned() {
            if self.full.swap(false, Ordering::Relaxed) {
                tracing::info!(
                    max = self.max,
                    "client connections below the bound again; accepting"
                );
            }
            return permit;
        }
        if !self.full.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                max = self.max,
                "client connection bound reached (--max-client-connections, or the file descriptor \
                 limit); new connections wait in the listen backlog until one closes"
            );
        }
        loop {
            // The semaphore is never closed.
            if let Ok(permit) = self.slots.clone().acquire_owned().await {
                return permit;
            }
        }
    }
}

/// Connections that must have closed since the peak, or opened since the last look, or requests a
/// worker must have begun since its last look, before freed memory is given back.
const TRIM_AFTER: usize = 512;

/// How often the trim looks.
pub(crate) const TRIM_EVERY: Duration = Duration::from_secs(10);

thread_local! {
    /// Requests this worker began since its trim last looked: a count of its own, so that the
    /// request path shares nothing with the other workers.
    static BEGUN: Cell<usize> = const { Cell::new(0) };
}

/// Counts a request begun on this worker.
pub(crate) fn request_begun() {
    BEGUN.with(|b| b.set(b.get().wrapping_add(1)));
}

/// Whether this worker began many requests since it last looked.
fn many_requests_begun() -> bool {
    BEGUN.with(|b| b.replace(0)) >= TRIM_AFTER
}

/// Every `every`, when many connections closed since the peak or many opened, asks every worker to
/// give the memory their buffers freed back to the operating system: the allocator keeps freed
/// memory for reuse, so without this the resident memory after a burst of clients stays at its
/// peak. Closes: a restart storm of kubelets, gone. Opens: thousands connecting at once (a storm's
/// return, a cluster starting), each holding read and write buffers for its first request, which
/// it frees once idle.
pub(crate) fn spawn_memory_trim(
    slots: Arc<ConnectionSlots>,
    every: Duration,
    stop: CancellationToken,
) {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = stop.cancelled() => return,
            }
            if slots.many_came_or_went() {
                slots.trim.send_modify(|n| *n += 1);
                release_free_memory();
            }
        }
    });
}

/// On a worker: gives back this thread's freed memory whenever `spawn_memory_trim` asks, and
/// after it began many requests. mimalloc keeps free pages per thread, and only the thread that
/// owns them can release them at once. Requests: a burst of them (every kubelet's watches coming
/// back after an apiserver restarted) allocates request futures, headers and buffers for a moment.
/// Left to itself, mimalloc gives that back only when the worker next allocates in a way that
/// makes it purge: seconds or minutes later, and the resident memory stays at the burst's peak
/// until then.
pub(crate) fn spawn_worker_trim(slots: &ConnectionSlots, stop: CancellationToken) {
    let mut asked = slots.trim.subscribe();
    tokio::spawn(async move {
        let mut look = tokio::time::interval(TRIM_EVERY);
        look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Whether the last look found many requests: the next look gives back what the burst's
        // tail used, begun after the look that saw the burst.
        let mut busy = false;
        loop {
            tokio::select! {
                r = asked.changed() => if r.is_err() { return },
                _ = look.tick() => {
                    let was_busy = std::mem::replace(&mut busy, many_requests_begun());
                    if !busy && !was_busy {
                        continue;
                    }
                }
                () = stop.cancelled() => return,
            }
            release_free_memory();
        }
    });
}

/// Returns this thread's free heap pages, and abandoned ones, to the operating system.
pub(crate) fn release_free_memory() {
    // SAFETY: mi_collect takes no arguments but a flag and only walks mimalloc's own heaps; the
    // process's global allocator is mimalloc (main.rs). In the library's tests, where it is not,
    // mimalloc's heaps are empty and this does nothing.
    unsafe {
        libmimalloc_sys::mi_collect(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_keeps_descriptors_back_for_everything_else() {
        assert_eq!(default_max_connections(Some(1024)), 1024 - 128);
        assert_eq!(default_max_connections(Some(256)), 256 - 64);
        assert_eq!(
            default_max_connections(Some(1_048_576)),
            1_048_576 - 131_072
        );
        assert_eq!(default_max_connections(Some(10)), 16);
    }

    #[tokio::test]
    async fn memory_is_given_back_after_many_connections_opened_or_closed() {
        let slots = ConnectionSlots::new(4 * TRIM_AFTER);
        let mut held = Vec::new();
        for _ in 0..TRIM_AFTER - 1 {
            held.push(slots.acquire().await);
        }
        assert!(
            !slots.many_came_or_went(),
            "fewer than the threshold opened"
        );
        held.push(slots.acquire().await);
        assert!(!slots.many_came_or_went(), "counted since the last look");
        for _ in 0..TRIM_AFTER {
            held.push(slots.acquire().await);
        }
        assert!(slots.many_came_or_went(), "a burst of opens");
        assert!(!slots.many_came_or_went(), "nothing since");
        held.truncate(1);
        assert!(slots.many_came_or_went(), "a burst of closes");
        assert!(!slots.many_came_or_went(), "nothing since");
    }

    #[test]
    fn memory_is_given_back_after_a_worker_began_many_requests() {
        // A thread of its own: the count is per worker thread.
        std::thread::spawn(|| {
            assert!(!many_requests_begun(), "nothing begun");
            for _ in 0..TRIM_AFTER - 1 {
                request_begun();
            }
            assert!(!many_requests_begun(), "fewer than the threshold");
            for _ in 0..TRIM_AFTER {
                request_begun();
            }
            assert!(many_requests_begun(), "a burst of requests");
            assert!(!many_requests_begun(), "nothing since");
        })
        .join()
        .expect("the counting thread");
    }

    #[tokio::test]
    async fn a_full_bound_waits_until_a_connection_closes() {
        let slots = Arc::new(ConnectionSlots::new(2));
        let a = slots.acquire().await;
        let _b = slots.acquire().await;
        let waiting = tokio::spawn({
            let slots = slots.clone();
            async move { slots.acquire().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(a);
        assert!(waiting.await.is_ok());
    }
}
