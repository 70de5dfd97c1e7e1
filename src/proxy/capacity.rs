//! How many client connections skewgate holds at once: fewer than its file descriptors allow, so
//! that when clients take all it will accept, upstream connections, health checks, the admin
//! listener and route reloads still find descriptors. Past the bound, skewgate stops accepting and
//! new connections wait in the kernel's listen backlog, as HAProxy's `maxconn` (derived from
//! `ulimit -n`) and nginx's `worker_connections` do, instead of meeting EMFILE on every accept.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Descriptors kept back from clients: upstream connections, listeners, files.
fn reserve(nofile: usize) -> usize {
    (nofile / 8).max(64)
}

/// Raises the soft descriptor limit to the hard one, as Go programs (kube-apiserver among them) do
/// at start, and returns the soft limit then in force (`None` when unlimited or unknown).
pub fn raise_fd_limit() -> Option<usize> {
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
pub fn default_max_connections(nofile: Option<usize>) -> usize {
    match nofile {
        Some(n) => n.saturating_sub(reserve(n)).max(16),
        None => usize::MAX >> 4,
    }
}

/// Permits for client connections.
pub struct ConnectionSlots {
    slots: Arc<Semaphore>,
    max: usize,
    full: AtomicBool,
}

impl ConnectionSlots {
    /// At most `max` client connections at once.
    pub fn new(max: usize) -> ConnectionSlots {
        let max = max.clamp(1, Semaphore::MAX_PERMITS);
        ConnectionSlots {
            slots: Arc::new(Semaphore::new(max)),
            max,
            full: AtomicBool::new(false),
        }
    }

    /// The bound.
    pub fn max(&self) -> usize {
        self.max
    }

    /// A slot for the next connection, waiting while all are taken (logged once each time the bound
    /// is reached).
    pub async fn acquire(&self) -> OwnedSemaphorePermit {
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
