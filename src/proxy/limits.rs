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
//! first use and gone with its last connection. A connection looks its client up once (a small
//! sharded map, under a lock); its requests then count on the client's own atomics, so a request
//! touches nothing another client's requests touch, and takes no lock unless its client is at the
//! limit. (With a lock per request on a map all clients share, two workers taking turns at it,
//! a GET cost 0.2–0.4 µs more user time, the bench's client alone, three rounds.)

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

// foldhash: the keys are hashes already (a client's), and std's SipHash of one cost more than the
// rest of the lookup.
use foldhash::HashMap;

use tokio::sync::oneshot;

const SHARDS: usize = 64;

/// One shard of the map: a client's key to its limit, while a connection or request holds it.
type Shard = HashMap<u64, Weak<Places>>;

/// The in-flight counts and queues of every client.
#[derive(Debug)]
pub(crate) struct ClientLimits {
    limit: usize,
    wait: Duration,
    shards: Box<[Mutex<Shard>]>,
}

/// One client's requests: in flight, and waiting for a place (each is handed a place in turn).
/// Held by the client's connections (through their `ClientLimit`); leaves the map with the last.
#[derive(Debug)]
struct Places {
    limits: Arc<ClientLimits>,
    key: u64,
    in_flight: AtomicUsize,
    /// How many wait in `queue` (read without its lock, so that a request of a client with none
    /// waiting takes no lock).
    waiters: AtomicUsize,
    queue: Mutex<VecDeque<oneshot::Sender<()>>>,
}

/// One connection's hold on its client's places. Each request's permit holds the connection's
/// hold, not the client's: a client's connections on different workers would otherwise write the
/// same reference count (beside the count of places) on every request.
#[derive(Debug)]
pub(crate) struct ClientLimit {
    places: Arc<Places>,
}

/// A client's place among its requests in flight; freed when dropped (when the response ends).
#[derive(Debug)]
pub(crate) struct ClientPermit {
    client: Arc<ClientLimit>,
}

impl Drop for ClientPermit {
    fn drop(&mut self) {
        self.client.places.release();
    }
}

/// A client is at its limit.
#[derive(Debug)]
pub(crate) struct Refused;

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

    fn shard(&self, key: u64) -> std::sync::MutexGuard<'_, Shard> {
        lock(&self.shards[(key as usize) % SHARDS])
    }

    /// A connection's own hold on the places of the client with key `key` (`ClientKey::hash`),
    /// which its requests count on; `None` when there is no limit.
    pub(crate) fn client(self: &Arc<Self>, key: u64) -> Option<Arc<ClientLimit>> {
        if self.limit == 0 {
            return None;
        }
        let mut shard = self.shard(key);
        if let Some(places) = shard.get(&key).and_then(Weak::upgrade) {
            return Some(Arc::new(ClientLimit { places }));
        }
        let places = Arc::new(Places {
            limits: self.clone(),
            key,
            in_flight: AtomicUsize::new(0),
            waiters: AtomicUsize::new(0),
            queue: Mutex::new(VecDeque::new()),
        });
        shard.insert(key, Arc::downgrade(&places));
        Some(Arc::new(ClientLimit { places }))
    }

    #[cfg(test)]
    fn clients(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ClientLimit {
    /// A place for one more request: at once when the client has fewer than the limit in flight
    /// and none waiting, else after waiting its turn; `Err` when its queue is full or the wait ran
    /// out.
    pub(crate) async fn acquire(self: &Arc<Self>) -> Result<ClientPermit, Refused> {
        let places = &*self.places;
        // SeqCst on `waiters` and `in_flight`, here and in `release`: a request that queues
        // announces itself before it looks at `in_flight`, and a release gives its place back
        // before it looks for waiters, so one of the two always sees the other.
        if places.waiters.load(Ordering::SeqCst) == 0 && places.try_take() {
            return Ok(self.permit());
        }
        let mut turn = {
            let mut queue = lock(&places.queue);
            places.waiters.store(queue.len() + 1, Ordering::SeqCst);
            if queue.is_empty() && places.try_take() {
                places.waiters.store(0, Ordering::SeqCst);
                return Ok(self.permit());
            }
            if queue.len() >= places.limits.limit {
                places.waiters.store(queue.len(), Ordering::SeqCst);
                return Err(Refused);
            }
            let (tx, rx) = oneshot::channel();
            queue.push_back(tx);
            rx
        };
        // A waiter that gives up closes its receiver: the place goes to the next one. One handed
        // over as the wait ran out is still this request's.
        match tokio::time::timeout(places.limits.wait, &mut turn).await {
            Ok(Ok(())) => Ok(self.permit()),
            Ok(Err(_)) => Err(Refused),
            Err(_) => {
                turn.close();
                match turn.try_recv() {
                    Ok(()) => Ok(self.permit()),
                    Err(_) => Err(Refused),
                }
            }
        }
    }

    fn permit(self: &Arc<Self>) -> ClientPermit {
        ClientPermit {
            client: self.clone(),
        }
    }
}

impl Places {
    /// Takes a place if one is free.
    fn try_take(&self) -> bool {
        let limit = self.limits.limit;
        let mut n = self.in_flight.load(Ordering::SeqCst);
        while n < limit {
            match self
                .in_flight
                .compare_exchange_weak(n, n + 1, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return true,
                Err(now) => n = now,
            }
        }
        false
    }

    /// A request's place is free: given back, and handed to the first request still waiting if
    /// any waits. (A newcomer cannot take it first: with requests waiting it queues behind them.)
    fn release(&self) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            self.hand_free_places();
        }
    }

    /// Hands free places to the requests waiting, first come first.
    fn hand_free_places(&self) {
        let mut queue = lock(&self.queue);
        while !queue.is_empty() && self.try_take() {
            if let Some(next) = queue.pop_front() {
                self.waiters.store(queue.len(), Ordering::SeqCst);
                if next.send(()).is_err() {
                    // It gave up: the place is free again.
                    self.in_flight.fetch_sub(1, Ordering::SeqCst);
                }
            }
        }
    }
}

impl Drop for Places {
    fn drop(&mut self) {
        // The map's entry goes with the client's last connection and request, unless a new
        // connection of the same client already put a new one in its place.
        let mut shard = self.limits.shard(self.key);
        if shard.get(&self.key).is_some_and(|w| w.strong_count() == 0) {
            shard.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::ClientKey;

    fn now<T>(f: impl std::future::Future<Output = T>) -> T {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(f)
    }

    fn client(limits: &Arc<ClientLimits>, key: ClientKey<'_>) -> Arc<ClientLimit> {
        limits.client(key.hash()).unwrap()
    }

    #[test]
    fn each_client_has_its_own_limit_and_permits_free_their_place() {
        now(async {
            let limits = ClientLimits::new(2, Duration::ZERO);
            let alice = client(&limits, ClientKey::User("alice"));
            // A second connection of the same client counts on the same places.
            let alice_again = client(&limits, ClientKey::User("alice"));
            let a1 = alice.acquire().await.unwrap();
            let a2 = alice_again.acquire().await.unwrap();
            assert!(alice.acquire().await.is_err());
            let bob = client(&limits, ClientKey::User("bob"))
                .acquire()
                .await
                .unwrap();
            let addr = ClientKey::Address("10.0.0.1".parse().unwrap());
            let ip = client(&limits, addr).acquire().await.unwrap();
            drop(a1);
            let a3 = alice.acquire().await.unwrap();
            assert_eq!(limits.clients(), 3);
            drop((a2, a3, bob, ip));
            // Alice's connections still hold her entry; the others' went with their last permit.
            assert_eq!(limits.clients(), 1);
            drop((alice, alice_again));
            assert_eq!(limits.clients(), 0);
            let unlimited = ClientLimits::new(0, Duration::ZERO);
            assert!(unlimited.client(ClientKey::User("alice").hash()).is_none());
        });
    }

    #[test]
    fn past_the_limit_requests_wait_their_turn_and_a_full_queue_is_refused() {
        now(async {
            let limits = ClientLimits::new(1, Duration::from_secs(5));
            let alice = client(&limits, ClientKey::User("alice"));
            let first = alice.acquire().await.unwrap();
            let waiting = tokio::spawn({
                let alice = alice.clone();
                async move { alice.acquire().await.is_ok() }
            });
            tokio::task::yield_now().await;
            // One in flight, one waiting: the queue (as long as the limit) is full.
            assert!(alice.acquire().await.is_err());
            drop(first);
            assert!(matches!(waiting.await, Ok(true)));
            // A waiter whose wait runs out is refused, and its place is not lost.
            let held = alice.acquire().await.unwrap();
            assert!(alice.acquire().await.is_err());
            drop(held);
            assert!(alice.acquire().await.is_ok());
            drop(alice);
            assert_eq!(limits.clients(), 0);
        });
    }

    #[test]
    fn places_go_to_waiters_first_come_first_and_none_is_lost() {
        now(async {
            let limits = ClientLimits::new(2, Duration::from_secs(5));
            let alice = client(&limits, ClientKey::User("alice"));
            let held = [
                alice.acquire().await.unwrap(),
                alice.acquire().await.unwrap(),
            ];
            let order = Arc::new(Mutex::new(Vec::new()));
            let mut waiters = Vec::new();
            for i in 0..2 {
                let (alice, order) = (alice.clone(), order.clone());
                waiters.push(tokio::spawn(async move {
                    let permit = alice.acquire().await.unwrap();
                    lock(&order).push(i);
                    permit
                }));
                tokio::task::yield_now().await;
            }
            // The queue is full; a newcomer does not jump it when a place frees.
            assert!(alice.acquire().await.is_err());
            drop(held);
            let mut permits = Vec::new();
            for w in waiters {
                permits.push(w.await.unwrap());
            }
            assert_eq!(*lock(&order), [0, 1]);
            drop(permits);
            assert_eq!(alice.places.in_flight.load(Ordering::SeqCst), 0);
            assert_eq!(alice.places.waiters.load(Ordering::SeqCst), 0);
        });
    }

    #[test]
    fn two_threads_taking_and_freeing_places_leave_none_taken() {
        // Each thread asks holding at most one place and gives one back right after it gets
        // one, so with three places one of the two can always go on, and they often wait.
        let limits = ClientLimits::new(3, Duration::from_secs(10));
        let alice = client(&limits, ClientKey::User("alice"));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let alice = alice.clone();
                std::thread::spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_time()
                        .build()
                        .unwrap();
                    rt.block_on(async {
                        let mut held = VecDeque::new();
                        for i in 0..20_000 {
                            held.push_back(alice.acquire().await.unwrap());
                            if held.len() > 1 {
                                held.pop_front();
                            }
                            if i % 3 == 0 {
                                held.clear();
                            }
                        }
                    });
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(alice.places.in_flight.load(Ordering::SeqCst), 0);
        assert_eq!(alice.places.waiters.load(Ordering::SeqCst), 0);
    }
}
