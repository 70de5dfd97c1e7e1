//! The HTTP/2 connections to one apiserver endpoint: as few as the streams need, each checked by PING.
//!
//! A request takes a stream slot on the first open connection with room under the peer's
//! SETTINGS_MAX_CONCURRENT_STREAMS (a compare-and-swap on that connection's counter, no lock). Only
//! when every connection is full does it take the endpoint's connect lock and open another, so a
//! watch never waits behind a full connection. A connection whose PING goes unanswered, that the
//! peer closes, or that received GOAWAY leaves the pool; its open streams finish or fail on their own.
//!
//! The pool is sharded by worker thread (see `worker`): each worker uses, and drives, only its own
//! connections, so a request and its upstream stream never hop between threads. Work off the
//! workers (health checks) uses one more shard.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};

use arc_swap::ArcSwap;
use prometheus::IntGauge;

use super::UpstreamError;
use super::dial::DialError;
use super::frames::Link;
use crate::config::Endpoint;

mod connect;
mod settings;
mod state;

use connect::ConnectRate;
pub use settings::PoolSettings;
pub(crate) use state::Failure;
use state::unix_now;

/// Health of an endpoint, as last seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum EndpointState {
    /// Not tried yet.
    Unknown = 0,
    /// Connected, or its health check passed.
    Ready = 1,
    /// Its last connect or health check failed.
    Down = 2,
}

/// Which credentials a connection presents to the apiserver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Credential {
    /// The front-proxy client certificate: for clients whose identity skewgate verified (and forwards
    /// in the identity headers) or who bring a bearer token, and for skewgate's own requests.
    FrontProxy,
    /// Nothing: for clients without a certificate or token, so that the apiserver's own anonymous
    /// policy decides about them. Over cleartext, the same connections as `FrontProxy`.
    Anonymous,
}

/// One upstream HTTP/2 connection.
pub(crate) struct Conn {
    link: Link,
    /// The shard (worker) whose connection it is.
    shard: usize,
    /// Its pool's streams, by shard (this connection's streams count in `streams[shard]`).
    streams: Arc<[StreamCount]>,
    active: AtomicUsize,
    closed: AtomicBool,
    /// Whether it joined the pool (and the connections gauge).
    counted: AtomicBool,
}

impl Conn {
    fn max_streams(&self) -> usize {
        self.link.max_streams()
    }

    /// Takes a stream slot if the connection is open and has room.
    fn try_reserve(&self) -> bool {
        if self.closed.load(Ordering::Acquire) {
            return false;
        }
        let max = self.max_streams();
        self.active
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
    }
}

/// The streams open on one shard's connections, on a cache line of its own: each worker counts
/// its own streams, and a request touches no line another worker's requests write.
#[repr(align(64))]
#[derive(Default)]
struct StreamCount(AtomicUsize);

/// A connection's task, driving its frames.
type ConnectionTask = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// The pool of one endpoint.
pub(crate) struct EndpointPool {
    /// The endpoint.
    pub endpoint: Endpoint,
    /// The endpoint's `host:port`, ready for request URIs.
    pub authority: http::uri::Authority,
    settings: PoolSettings,
    /// The front-proxy connections of each worker (and one shard off the workers), then the
    /// anonymous ones.
    shards: Box<[Shard]>,
    state: AtomicU8,
    /// When `state` last changed (or the pool was made), in seconds since the Unix epoch.
    state_since: AtomicU64,
    /// New connections in the current second.
    connect_rate: std::sync::Mutex<ConnectRate>,
    /// Why the endpoint was last found down, and since when.
    failure: arc_swap::ArcSwapOption<Failure>,
    /// The health check's own last failure, kept apart from `failure` (which a request's failed
    /// dial also writes, in other words), so that one repeated every check is logged once.
    health_failure: arc_swap::ArcSwapOption<String>,
    /// Streams open, by shard; summed when read. (One count for the pool, with the gauge beside
    /// it and a reference to the pool per stream, were three cache lines both workers wrote on
    /// every request.)
    streams: Arc<[StreamCount]>,
    connections_gauge: IntGauge,
    streams_gauge: IntGauge,
    ready_gauge: IntGauge,
}

/// The connections of one worker thread.
struct Shard {
    conns: ArcSwap<Vec<Arc<Conn>>>,
    connecting: tokio::sync::Mutex<()>,
}

/// A stream slot on one connection; freeing it is dropping it.
pub(crate) struct StreamSlot {
    conn: Arc<Conn>,
}

impl StreamSlot {
    /// The slot's connection, to send one request on.
    pub(crate) fn link(&self) -> &Link {
        &self.conn.link
    }

    /// The largest header list the slot's connection accepts (`u32::MAX` until the peer says).
    pub(crate) fn header_list_limit(&self) -> usize {
        self.conn.link.header_list_limit()
    }

    /// Marks the slot's connection, one of `pool`'s, as unusable for new streams (after GOAWAY or
    /// a send failure).
    pub(crate) fn retire_connection(&self, pool: &EndpointPool) {
        pool.retire(&self.conn);
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.conn.active.fetch_sub(1, Ordering::AcqRel);
        self.conn.streams[self.conn.shard]
            .0
            .fetch_sub(1, Ordering::Relaxed);
    }
}

impl EndpointPool {
    /// An empty pool; connections are opened on demand.
    pub(crate) fn new(
        endpoint: Endpoint,
        settings: PoolSettings,
        gauges: [IntGauge; 3],
    ) -> EndpointPool {
        let [connections_gauge, streams_gauge, ready_gauge] = gauges;
        // Validation parsed the URL, so its authority parses; a placeholder keeps this infallible.
        let authority = super::interned::static_authority(&endpoint.authority())
            .unwrap_or_else(|_| http::uri::Authority::from_static("invalid.invalid"));
        let shards = 2 * (crate::runtime::worker::count() + 1);
        EndpointPool {
            authority,
            endpoint,
            settings,
            failure: arc_swap::ArcSwapOption::empty(),
            health_failure: arc_swap::ArcSwapOption::empty(),
            connect_rate: std::sync::Mutex::new(ConnectRate::default()),
            shards: (0..shards)
                .map(|_| Shard {
                    conns: ArcSwap::from_pointee(Vec::new()),
                    connecting: tokio::sync::Mutex::new(()),
                })
                .collect(),
            state: AtomicU8::new(EndpointState::Unknown as u8),
            state_since: AtomicU64::new(unix_now()),
            streams: (0..shards).map(|_| StreamCount::default()).collect(),
            connections_gauge,
            streams_gauge,
            ready_gauge,
        }
    }

    /// Streams open now.
    pub(crate) fn active_streams(&self) -> usize {
        self.streams
            .iter()
            .map(|s| s.0.load(Ordering::Relaxed))
            .sum()
    }

    /// Sets the gauges counted when read (before /metrics is rendered): the streams open.
    pub(crate) fn refresh_gauges(&self) {
        self.streams_gauge
            .set(i64::try_from(self.active_streams()).unwrap_or(i64::MAX));
    }

    /// The pool's settings.
    pub(crate) fn settings(&self) -> &PoolSettings {
        &self.settings
    }

    /// The user skewgate's own requests name, if any.
    pub(crate) fn own_user(&self) -> Option<&http::HeaderValue> {
        self.settings.own_user.as_ref().map(|(_, v)| v)
    }

    fn slot(conn: Arc<Conn>) -> StreamSlot {
        conn.streams[conn.shard].0.fetch_add(1, Ordering::Relaxed);
        StreamSlot { conn }
    }

    /// This thread's shard of connections presenting `credential`, by index.
    fn shard_index(&self, credential: Credential) -> usize {
        let per_class = self.shards.len() / 2;
        let i = crate::runtime::worker::current().min(per_class - 1);
        // Over cleartext there is no certificate to leave out: one set of connections serves both.
        let anonymous = credential == Credential::Anonymous && self.endpoint.tls;
        if anonymous { per_class + i } else { i }
    }

    /// This thread's shard of connections presenting `credential`.
    fn shard(&self, credential: Credential) -> &Shard {
        &self.shards[self.shard_index(credential)]
    }

    fn reserve_existing(self: &Arc<Self>, credential: Credential) -> Option<StreamSlot> {
        let conns = self.shard(credential).conns.load();
        conns
            .iter()
            .find(|c| c.try_reserve())
            .map(|c| Self::slot(c.clone()))
    }

    /// A stream slot on a connection presenting `credential`: on an open connection with room, or
    /// on a new connection. A failed connect marks the endpoint down; only a passing health check
    /// marks it ready.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        credential: Credential,
    ) -> Result<StreamSlot, UpstreamError> {
        if let Some(slot) = self.reserve_existing(credential) {
            return Ok(slot);
        }
        // Boxed: opening a connection (dial, TLS, the h2 handshake) is a future of kilobytes that
        // few requests await. Inline, every request's future would carry its size, and hyper moves
        // that future several times per request (memmove was 15 % of the proxy's CPU).
        Box::pin(self.acquire_new(credential)).await
    }

    /// The slow way of `acquire`: a new connection, opened once per shard at a time.
    async fn acquire_new(
        self: &Arc<Self>,
        credential: Credential,
    ) -> Result<StreamSlot, UpstreamError> {
        let _connecting = self.shard(credential).connecting.lock().await;
        // Another request may have opened a connection while this one waited for the lock.
        if let Some(slot) = self.reserve_existing(credential) {
            return Ok(slot);
        }
        loop {
            let wait = self
                .connect_rate
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .admit(
                    std::time::Instant::now(),
                    self.settings.max_new_connections_per_second,
                );
            let Some(wait) = wait else { break };
            tokio::time::sleep(wait).await;
            if let Some(slot) = self.reserve_existing(credential) {
                return Ok(slot);
            }
        }
        let conn = self.connect(credential).await?;
        if conn.closed.load(Ordering::Acquire) {
            return Err(self.connect_failed(DialError::ClosedAtOnce { url: self.url() }));
        }
        conn.counted.store(true, Ordering::Release);
        self.connections_gauge.inc();
        conn.active.fetch_add(1, Ordering::AcqRel);
        self.shard(credential).conns.rcu(|list| {
            let mut list = Vec::clone(list);
            list.push(conn.clone());
            list
        });
        Ok(Self::slot(conn))
    }

    /// Frames its connections open now have received: changes while any of them answers.
    pub(crate) fn heard(&self) -> u64 {
        self.shards
            .iter()
            .flat_map(|shard| {
                shard
                    .conns
                    .load()
                    .iter()
                    .map(|c| c.link.pinger().heard())
                    .collect::<Vec<_>>()
            })
            .fold(0, u64::wrapping_add)
    }

    /// Takes every connection out of the pool (their open streams finish): new requests connect
    /// again, with the TLS configuration in force now.
    pub(crate) fn retire_all(&self) {
        let all: Vec<Arc<Conn>> = self
            .shards
            .iter()
            .flat_map(|shard| shard.conns.load().iter().cloned().collect::<Vec<_>>())
            .collect();
        for conn in &all {
            self.retire(conn);
        }
    }

    /// Takes a connection out of the pool; its open streams are left to finish.
    fn retire(&self, conn: &Arc<Conn>) {
        if conn.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        for shard in self.shards.iter() {
            shard.conns.rcu(|list| {
                list.iter()
                    .filter(|c| !Arc::ptr_eq(c, conn))
                    .cloned()
                    .collect::<Vec<_>>()
            });
        }
        if conn.counted.load(Ordering::Acquire) {
            self.connections_gauge.dec();
        }
    }
}

#[cfg(test)]
mod tests;
