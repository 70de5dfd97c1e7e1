//! Requests in flight per client, in the spirit of kube-apiserver's `--max-requests-inflight` but per
//! client, so that one tenant or a restart storm cannot take all of an apiserver's capacity: a client
//! is its verified user, or its address when skewgate does not know its user (anonymous and
//! bearer-token clients). Long-running requests (watches, exec, logs) are not counted, as the
//! apiserver does not count them.
//!
//! tower's `ConcurrencyLimit` is one semaphore per service; this needs one per client, created on
//! first use and gone with its last request, so it is a small sharded map of counters.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

const SHARDS: usize = 64;

/// The in-flight counts of every client.
#[derive(Debug)]
pub struct ClientLimits {
    limit: usize,
    shards: Box<[Mutex<HashMap<u64, usize>>]>,
}

/// A client's place among its requests in flight; freed when dropped (when the response ends).
#[derive(Debug)]
pub struct ClientPermit {
    limits: Arc<ClientLimits>,
    key: u64,
}

impl Drop for ClientPermit {
    fn drop(&mut self) {
        let mut shard = self.limits.shard(self.key);
        if let Some(n) = shard.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                shard.remove(&self.key);
            }
        }
    }
}

/// A client is at its limit.
#[derive(Debug)]
pub struct Refused;

/// Who a client is, for the limit.
#[derive(Clone, Copy, Debug)]
pub enum ClientKey<'a> {
    /// A user whose certificate skewgate verified.
    User(&'a str),
    /// Anyone else, by address.
    Address(IpAddr),
}

impl ClientKey<'_> {
    fn hash(&self) -> u64 {
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
    /// At most `limit` requests in flight per client (0: no limit).
    pub fn new(limit: usize) -> Arc<ClientLimits> {
        Arc::new(ClientLimits {
            limit,
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        })
    }

    /// The limit per client.
    pub fn limit(&self) -> usize {
        self.limit
    }

    fn shard(&self, key: u64) -> std::sync::MutexGuard<'_, HashMap<u64, usize>> {
        self.shards[(key as usize) % SHARDS]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// A permit for one more request of `client` (`None` when there is no limit), or `Err` when
    /// it has `limit` requests in flight already.
    pub fn try_acquire(
        self: &Arc<Self>,
        client: ClientKey<'_>,
    ) -> Result<Option<ClientPermit>, Refused> {
        if self.limit == 0 {
            return Ok(None);
        }
        let key = client.hash();
        let mut shard = self.shard(key);
        let n = shard.entry(key).or_insert(0);
        if *n >= self.limit {
            return Err(Refused);
        }
        *n += 1;
        drop(shard);
        Ok(Some(ClientPermit {
            limits: self.clone(),
            key,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_client_has_its_own_limit_and_permits_free_their_place() {
        let limits = ClientLimits::new(2);
        let alice = ClientKey::User("alice");
        let a1 = limits.try_acquire(alice).unwrap();
        let a2 = limits.try_acquire(alice).unwrap();
        assert!(limits.try_acquire(alice).is_err());
        let bob = limits.try_acquire(ClientKey::User("bob")).unwrap();
        let addr = ClientKey::Address("10.0.0.1".parse().unwrap());
        let ip = limits.try_acquire(addr).unwrap();
        drop(a1);
        let a3 = limits.try_acquire(alice).unwrap();
        assert!(a3.is_some());
        drop((a2, a3, bob, ip));
        assert!(limits.shards.iter().all(|s| s.lock().unwrap().is_empty()));
        assert!(ClientLimits::new(0).try_acquire(alice).unwrap().is_none());
    }
}
