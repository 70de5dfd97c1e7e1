//! The write ledger: which backend each object's in-flight writes are on, so that no write is sent to
//! one backend while a write for the same object is still in flight on another.
//!
//! This is what makes a pin move safe on one replica, whatever moved it (a reload, a `flipAt`): a
//! write whose object has writes in flight on another backend waits until they have finished, then
//! goes; writes to other objects never wait. The ledger is sharded by object so that writes to
//! different objects rarely share a lock, and reads never touch it.

use foldhash::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio::time::Instant;
use xxhash_rust::xxh3::Xxh3;

use crate::classify::RequestInfo;

const SHARDS: usize = 64;

struct Entry {
    backend: u64,
    inflight: u32,
    drained: Option<Arc<Notify>>,
}

/// Every object's in-flight writes.
pub(crate) struct WriteLedger {
    shards: Box<[Mutex<HashMap<u64, Entry>>]>,
}

/// One admitted write; dropping it (when the apiserver has answered, or the write failed) ends it.
pub(crate) struct WriteTicket {
    ledger: Arc<WriteLedger>,
    key: u64,
}

/// The write waited past its deadline for writes on another backend to finish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Held;

/// The identity of the object a write is for: namespace, group, resource and name (subresources
/// write the same object). Collection writes (create, deletecollection) key on the collection.
pub(crate) fn object_key(info: &RequestInfo<'_>) -> u64 {
    let mut h = Xxh3::new();
    for part in [&info.namespace, &info.api_group, &info.resource, &info.name] {
        h.update(part.as_bytes());
        h.update(&[0xff]);
    }
    h.digest()
}

/// The identity of a backend in the ledger.
pub(super) fn backend_key(name: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(name.as_bytes())
}

impl Default for WriteLedger {
    fn default() -> Self {
        WriteLedger {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(HashMap::default()))
                .collect(),
        }
    }
}

impl WriteLedger {
    fn shard(&self, key: u64) -> MutexGuard<'_, HashMap<u64, Entry>> {
        // Entries are plain counters; a panic elsewhere cannot leave one half-written.
        self.shards[(key as usize) % SHARDS]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Admits a write of object `key` to `backend`, waiting (until `deadline`) while writes of the
    /// same object are in flight on another backend. Returns whether it had to wait.
    pub(crate) async fn admit(
        self: &Arc<Self>,
        key: u64,
        backend: u64,
        deadline: Instant,
    ) -> Result<(WriteTicket, bool), Held> {
        let mut waited = false;
        loop {
            let drained = {
                let mut shard = self.shard(key);
                let entry = shard.entry(key).or_insert(Entry {
                    backend,
                    inflight: 0,
                    drained: None,
                });
                if entry.inflight == 0 || entry.backend == backend {
                    entry.backend = backend;
                    entry.inflight += 1;
                    let ticket = WriteTicket {
                        ledger: self.clone(),
                        key,
                    };
                    return Ok((ticket, waited));
                }
                entry
                    .drained
                    .get_or_insert_with(|| Arc::new(Notify::new()))
                    .clone()
            };
            waited = true;
            let notified = drained.notified();
            tokio::pin!(notified);
            // Registered before checking again, so a release between the check and the wait is seen.
            notified.as_mut().enable();
            if self.drained_now(key, backend) {
                continue;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(Held);
            }
        }
    }

    fn drained_now(&self, key: u64, backend: u64) -> bool {
        self.shard(key)
            .get(&key)
            .is_none_or(|e| e.inflight == 0 || e.backend == backend)
    }

    /// Writes in flight now, over all objects.
    pub(crate) fn inflight(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| {
                s.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .values()
                    .map(|e| u64::from(e.inflight))
                    .sum::<u64>()
            })
            .sum()
    }
}

impl Drop for WriteTicket {
    fn drop(&mut self) {
        let mut shard = self.ledger.shard(self.key);
        let Some(entry) = shard.get_mut(&self.key) else {
            return;
        };
        entry.inflight = entry.inflight.saturating_sub(1);
        if entry.inflight == 0
            && let Some(drained) = shard.remove(&self.key).and_then(|e| e.drained)
        {
            drained.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_write_to_another_backend_waits_for_the_in_flight_ones() {
        let ledger = Arc::new(WriteLedger::default());
        let far = Instant::now() + Duration::from_secs(60);
        let (old1, _) = ledger.admit(1, 100, far).await.expect("admitted");
        let (old2, _) = ledger
            .admit(1, 100, far)
            .await
            .expect("same backend, no wait");
        // Another object moves freely.
        let (other, waited) = ledger.admit(2, 200, far).await.expect("admitted");
        assert!(!waited);
        let l = ledger.clone();
        let moved = tokio::spawn(async move { l.admit(1, 200, far).await.map(|(_, w)| w) });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            !moved.is_finished(),
            "waits while writes are in flight on the old backend"
        );
        drop(old1);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!moved.is_finished(), "one write is still in flight");
        drop(old2);
        assert_eq!(moved.await.expect("join"), Ok(true));
        drop(other);
        assert_eq!(ledger.inflight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_held_past_its_deadline_is_refused() {
        let ledger = Arc::new(WriteLedger::default());
        let (_old, _) = ledger
            .admit(7, 1, Instant::now() + Duration::from_secs(60))
            .await
            .expect("admitted");
        let result = ledger
            .admit(7, 2, Instant::now() + Duration::from_secs(3))
            .await;
        assert!(matches!(result, Err(Held)));
    }
}
