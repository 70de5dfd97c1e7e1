//! Requests in flight per client, in the spirit of kube-apiserver's `--max-requests-inflight` but per
//! client, so that one tenant or a restart storm cannot take all of an apiserver's capacity: a client
//! is its verified user, or its address when skewgate does not know its user (anonymous and
//! bearer-token clients). Long-running requests (watches, exec, logs) are not counted, as the
//! apiserver does not count them.
//!
//! Past its limit, a client's request waits in the client's own queue (as many places as the limit)
//! for a place to free, at most `wait`, as kube-apiserver's API Priority and Fairness queues a flow's
//! requests; only a full queue or a wait that runs out gets 429. A client that ignores Retry-After
//! and asks again at once would otherwise spin on fast 429s and take CPU from everyone else.
//!
//! tower's `ConcurrencyLimit` is one semaphore per service; this needs one per client, created on
//! first use and gone with its last request, so it is a small sharded map of counters and queues.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

// foldhash: the keys are hashes already (a client's), and std's SipHash of one cost more than the
// rest of the lookup, twice per request.
use foldhash::HashMap;

use tokio::sync::oneshot;

const SHARDS: usize = 64;

/// One client's requests: in flight, and waiting for a place (each is handed a place in turn).
#[derive(Debug, Default)]
struct Entry {
    in_flight: usize,
    waiting: VecDeque<oneshot::Sender<()>>,
}

/// The in-flight counts and queues of every client.
#[derive(Debug)]
pub(crate) struct ClientLimits {
    limit: usize,
    wait: Duration,
    shards: Box<[Mutex<HashMap<u64, Entry>>]>,
}

/// A client's place among its requests in flight; freed when dropped (when the response ends).
#[derive(Debug)]
pub(crate) struct ClientPermit {
    limits: Arc<ClientLimits>,
    key: u64,
}

impl Drop for ClientPermit {
    fn drop(&mut self) {
        let mut shard = self.limits.shard(self.key);
        let Some(entry) = shard.get_mut(&self.key) else {
            return;
        };
        // The place goes to the first waiter still waiting; else it is freed.
        while let Some(next) = entry.waiting.pop_front() {
            if next.send(()).is_ok() {
                return;
            }
        }
        entry.in_flight -= 1;
        if entry.in_flight == 0 {
            shard.remove(&self.key);
        }
    }
}

/// A client is at its limit.
#[derive(Debug)]
pub(crate) struct Refused;

/// Who a client is, for the limit.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ClientKey<'a> {
    /// A user whose certificate skewgate verified.
    User(&'a str),
    /// Anyone else, by address.
    Address(IpAddr),
}

impl ClientKey<'_> {
    /// The client of a connection: its verified user, else its address.
    pub(crate) fn of(
        identity: Option<&crate::identity::Identity>,
        remote: std::net::SocketAddr,
    ) -> ClientKey<'_> {
        match identity {
            Some(id) => ClientKey::User(&id.user),
            None => ClientKey::Address(remote.ip()),
        }
    }

    /// A hash of the client, the key of its entries.
    pub(super) fn hash(&self) -> u64 {
        match self {
            ClientKey::User(u) => xxhash_rust::xxh3::xxh3_64_with_seed(u.as_bytes(), 1),
            ClientKey::Address(IpAddr::V4(a)) => {
                xxhash_rust::xxh3::xxh3_64_with_seed(&a.octets(), 4)
            }
            ClientKey::Address(IpAddr::V6(a)) => {
                xxhash_rust::xxh3::xxh3_64_with_seed(&a.octets(), 6)
            }
        }
    }
}

impl std::fmt::Display for ClientKey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientKey::User(u) => write!(f, "user {u:?}"),
            ClientKey::Address(a) => write!(f, "address {a}"),
        }
    }
}

impl ClientLimits {
    /// At most `limit` requests in flight per client (0: no limit), and as many more waiting, each
    /// at most `wait`.
    pub(crate) fn new(limit: usize, wait: Duration) -> Arc<ClientLimits> {
        Arc::new(ClientLimits {
            limit,
            wait,
            shards: (0..SHARDS)
                .map(|_| Mutex::new(HashMap::default()))
                .collect(),
        })
    }

    /// The limit per client.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    fn shard(&self, key: u64) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.shards[(key as usize) % SHARDS]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// A permit for one more request of `client` (`None` when there is no limit), at once when it
    /// has fewer than `limit` in flight, else after waiting its turn; `Err` when its queue is full
    /// or the wait ran out.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        client: ClientKey<'_>,
    ) -> Result<Option<ClientPermit>, Refused> {
        if self.limit == 0 {
            return Ok(None);
        }
        let key = client.hash();
        let turn = {
            let mut shard = self.shard(key);
            let entry = shard.entry(key).or_default();
            if entry.in_flight < self.limit {
                entry.in_flight += 1;
                None
            } else if entry.waiting.len() < self.limit {
                let (tx, rx) = oneshot::channel();
                entry.waiting.push_back(tx);
                Some(rx)
            } else {
                return Err(Refused);
            }
        };
        if let Some(turn) = turn {
            // A waiter that gives up drops its receiver: the place goes to the next one.
            match tokio::time::timeout(self.wait, turn).await {
                Ok(Ok(())) => {}
                _ => return Err(Refused),
            }
        }
        Ok(Some(ClientPermit {
            limits: self.clone(),
            key,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now<T>(f: impl std::future::Future<Output = T>) -> T {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(f)
    }

    #[test]
    fn each_client_has_its_own_limit_and_permits_free_their_place() {
        now(async {
            let limits = ClientLimits::new(2, Duration::ZERO);
            let alice = ClientKey::User("alice");
            let a1 = limits.acquire(alice).await.unwrap();
            let a2 = limits.acquire(alice).await.unwrap();
            assert!(limits.acquire(alice).await.is_err());
            let bob = limits.acquire(ClientKey::User("bob")).await.unwrap();
            let addr = ClientKey::Address("10.0.0.1".parse().unwrap());
            let ip = limits.acquire(addr).await.unwrap();
            drop(a1);
            let a3 = limits.acquire(alice).await.unwrap();
            assert!(a3.is_some());
            drop((a2, a3, bob, ip));
            assert!(limits.shards.iter().all(|s| s.lock().unwrap().is_empty()));
            let unlimited = ClientLimits::new(0, Duration::ZERO);
            assert!(unlimited.acquire(alice).await.unwrap().is_none());
        });
    }

    #[test]
    fn past_the_limit_requests_wait_their_turn_and_a_full_queue_is_refused() {
        now(async {
            let limits = ClientLimits::new(1, Duration::from_secs(5));
            let alice = ClientKey::User("alice");
            let first = limits.acquire(alice).await.unwrap();
            let waiting = tokio::spawn({
                let limits = limits.clone();
                async move {
                    limits
                        .acquire(ClientKey::User("alice"))
                        .await
                        .map(|p| p.is_some())
                }
            });
            tokio::task::yield_now().await;
            // One in flight, one waiting: the queue (as long as the limit) is full.
            assert!(limits.acquire(alice).await.is_err());
            drop(first);
            assert!(matches!(waiting.await, Ok(Ok(true))));
            // A waiter whose wait runs out is refused, and its place is not lost.
            let held = limits.acquire(alice).await.unwrap();
            assert!(limits.acquire(alice).await.is_err());
            drop(held);
            assert!(limits.acquire(alice).await.unwrap().is_some());
            assert!(limits.shards.iter().all(|s| s.lock().unwrap().is_empty()));
        });
    }
}
