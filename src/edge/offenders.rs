//! Clients held back after they misbehaved. Cutting off a connection does not stop a client that
//! reconnects at once and does it again: a rapid-reset attacker gets another 100 streams each time,
//! and a client sending malformed requests on fresh connections as fast as it is answered keeps a
//! core busy with its connections, which every other client then waits for. So a client (its
//! verified user, else its address) that
//!
//! - had a connection closed for resets, or
//! - made 20 requests within a second that failed by its own fault (a malformed head or body, a
//!   head over the bound)
//!
//! earns a strike, and its next connections wait before they are served: 1 s after the first
//! strike, doubling with each further strike up to 16 s, all forgotten a minute after the last hold
//! ended. A client known only by its address is many clients at once behind SNAT, an L4 balancer
//! or a node's host network: its connections, HTTP/1.1 and HTTP/2, are served at once, on
//! probation, and only a malformed head or a request failed by its fault waits out the hold for its
//! answer (`probation`), so that its neighbours keep their service while the offender's
//! requests still cost it the hold. Its connections already served and every other client go on as before; a client that
//! waits for its answers, as all do, then costs next to nothing. No well-behaved client comes near
//! either trigger.

use foldhash::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::Edge;

/// The hold after a client's first strike; it doubles with each further strike.
const FIRST_HOLD: Duration = Duration::from_secs(1);
/// The longest hold.
const MAX_HOLD: Duration = Duration::from_secs(16);
/// A client is forgotten this long after its hold ended (or its last fault).
const FORGET: Duration = Duration::from_secs(60);
/// Faults within `FAULT_WINDOW` that earn a strike.
const FAULTS_PER_STRIKE: u32 = 20;
const FAULT_WINDOW: Duration = Duration::from_secs(1);
const SHARDS: usize = 16;

/// What is known of one client.
#[derive(Debug, Clone, Copy)]
struct Record {
    strikes: u32,
    /// When its hold ends (in the past when it has none).
    until: Instant,
    /// Faults counted since `window`.
    faults: u32,
    window: Instant,
}

impl Record {
    fn new(now: Instant) -> Record {
        Record {
            strikes: 0,
            until: now,
            faults: 0,
            window: now,
        }
    }

    fn forgotten(&self, now: Instant) -> bool {
        self.until.max(self.window) + FORGET <= now
    }

    /// A strike: the hold starts, twice as long as the last one.
    fn strike(&mut self, now: Instant) -> Duration {
        self.strikes = self.strikes.saturating_add(1);
        let hold = FIRST_HOLD
            .saturating_mul(1 << (self.strikes - 1).min(8))
            .min(MAX_HOLD);
        self.until = now + hold;
        hold
    }
}

/// Clients that misbehaved, and how long their next connections wait.
#[derive(Debug)]
pub(crate) struct Offenders {
    /// Off: no one is held back.
    enabled: bool,
    /// Clients remembered: while there are none, a new connection looks nothing up.
    remembered: AtomicUsize,
    shards: Box<[Mutex<HashMap<u64, Record>>]>,
}

impl Default for Offenders {
    fn default() -> Self {
        Offenders::new(true)
    }
}

impl Offenders {
    /// Offenders held back when `enabled`; none otherwise.
    pub(crate) fn new(enabled: bool) -> Offenders {
        Offenders {
            enabled,
            remembered: AtomicUsize::new(0),
            shards: (0..SHARDS)
                .map(|_| Mutex::new(HashMap::default()))
                .collect(),
        }
    }

    /// How long a new connection of client `key` waits before it is served, if at all.
    pub(crate) fn hold(&self, key: u64, now: Instant) -> Option<Duration> {
        if self.remembered.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let until = self.lock(key).get(&key)?.until;
        until.checked_duration_since(now).filter(|d| !d.is_zero())
    }

    /// Client `key` had a connection closed for resets: a strike. Returns its hold, if any.
    pub(crate) fn strike(&self, key: u64, now: Instant) -> Option<Duration> {
        self.update(key, now, |r| Some(r.strike(now)))
    }

    /// A request of client `key` failed by the client's fault; at the 20th within a second, a
    /// strike. Returns the hold it started, if it did.
    pub(crate) fn fault(&self, key: u64, now: Instant) -> Option<Duration> {
        self.update(key, now, |r| {
            if now.duration_since(r.window) >= FAULT_WINDOW {
                (r.faults, r.window) = (0, now);
            }
            r.faults += 1;
            (r.faults == FAULTS_PER_STRIKE).then(|| r.strike(now))
        })
    }

    fn lock(&self, key: u64) -> std::sync::MutexGuard<'_, HashMap<u64, Record>> {
        self.shards[(key as usize) % SHARDS]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on client `key`'s record, forgetting the shard's old records first.
    fn update(
        &self,
        key: u64,
        now: Instant,
        f: impl FnOnce(&mut Record) -> Option<Duration>,
    ) -> Option<Duration> {
        if !self.enabled {
            return None;
        }
        let mut shard = self.lock(key);
        let before = shard.len();
        shard.retain(|_, r| !r.forgotten(now));
        let out = f(shard.entry(key).or_insert_with(|| Record::new(now)));
        let after = shard.len();
        drop(shard);
        if after >= before {
            self.remembered.fetch_add(after - before, Ordering::Relaxed);
        } else {
            self.remembered.fetch_sub(before - after, Ordering::Relaxed);
        }
        out
    }
}

// ===== What the listener does with a client's record =====

/// A client held back (cut off for resets, or sending malformed requests) waits before this
/// connection of its is served; one known only by its address on HTTP/1.1 (`by_address`) is
/// served at once, on probation: its hold's end is returned, for its malformed heads to wait out.
pub(crate) async fn hold_if_held_back(
    edge: &Edge,
    client: u64,
    remote: SocketAddr,
    by_address: bool,
) -> Option<std::time::Instant> {
    let now = Instant::now();
    let hold = edge.offenders.hold(client, now)?;
    if by_address {
        tracing::debug!(%remote, ?hold, "serving a held-back address on probation");
        return Some(now + hold);
    }
    tracing::debug!(%remote, ?hold, "holding back a client that misbehaved");
    edge.metrics.client_connections_delayed.inc();
    tokio::time::sleep(hold).await;
    None
}

/// A request of a client known only by its address failed by its fault: while the address is held
/// back, its answer waits out the hold (its connections are served on probation, not made to wait
/// before they are: `hold_if_held_back`). How long, if at all.
pub(crate) fn probation(edge: &Edge, client: u64) -> Option<Duration> {
    edge.offenders.hold(client, Instant::now())
}

/// A connection that reset most of its streams as soon as it opened them is closed (by the caller),
/// and its client held back.
pub(crate) fn cut_off_for_resets(edge: &Edge, client: u64, remote: SocketAddr) {
    let hold = edge.offenders.strike(client, Instant::now());
    tracing::warn!(%remote, ?hold, "closing a client connection that reset most of its streams as soon as it opened them (HTTP/2 rapid reset); its next connections wait");
    let metrics = &edge.metrics;
    metrics
        .client_connections_closed
        .with_label_values(&["premature_resets"])
        .inc();
    if hold.is_some() {
        metrics
            .clients_held_back
            .with_label_values(&["premature_resets"])
            .inc();
    }
}

/// A request or connection failed by its client's fault: counted towards holding the client back.
pub(crate) fn note_client_fault(edge: &Edge, client: u64, remote: SocketAddr) {
    if let Some(hold) = edge.offenders.fault(client, Instant::now()) {
        tracing::warn!(%remote, ?hold, "a client keeps sending malformed requests; its next connections wait");
        edge.metrics
            .clients_held_back
            .with_label_values(&["malformed_requests"])
            .inc();
    }
}

/// `n` requests (HTTP/2 streams reset for the client's fault, told by a turn of their connection)
/// failed by their client's fault; no more than a strike's worth is counted at once.
pub(crate) fn note_client_faults(edge: &Edge, client: u64, remote: SocketAddr, n: usize) {
    for _ in 0..n.min(FAULTS_PER_STRIKE as usize) {
        note_client_fault(edge, client, remote);
    }
}

/// Whether a connection ended by its client's fault: a malformed or oversized head, or one not sent
/// in time (hyper's errors); an HTTP/2 connection error of the client's (the GOAWAY skewgate sent
/// it: PROTOCOL_ERROR, FLOW_CONTROL_ERROR, STREAM_CLOSED, ENHANCE_YOUR_CALM, a codec's error).
pub(crate) fn is_client_fault(e: &(dyn std::error::Error + 'static)) -> bool {
    if let Some(e) = e.downcast_ref::<h2::Error>() {
        return e
            .reason()
            .is_some_and(|r| r != h2::Reason::NO_ERROR && r != h2::Reason::INTERNAL_ERROR);
    }
    e.downcast_ref::<hyper::Error>()
        .is_some_and(|e| e.is_parse() || e.is_parse_too_large() || e.is_timeout())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_offenders_next_connections_wait_longer_with_each_strike_and_are_forgiven() {
        let offenders = Offenders::default();
        let t0 = Instant::now();
        assert_eq!(offenders.hold(7, t0), None);
        assert_eq!(offenders.strike(7, t0), Some(Duration::from_secs(1)));
        assert_eq!(offenders.hold(7, t0), Some(Duration::from_secs(1)));
        assert_eq!(offenders.hold(8, t0), None, "other clients are not held");
        let t1 = t0 + Duration::from_secs(2);
        assert_eq!(offenders.hold(7, t1), None, "the hold has ended");
        let holds: Vec<u64> = (0..6)
            .filter_map(|_| offenders.strike(7, t1))
            .map(|d| d.as_secs())
            .collect();
        assert_eq!(holds, [2, 4, 8, 16, 16, 16]);
        // A minute after its hold ended, a client is forgotten (its record goes with the next
        // update in its shard) and starts over.
        let later = t1 + MAX_HOLD + FORGET;
        let same_shard = 7 + SHARDS as u64;
        assert_eq!(
            offenders.strike(same_shard, later),
            Some(Duration::from_secs(1))
        );
        assert_eq!(offenders.remembered.load(Ordering::Relaxed), 1);
        assert_eq!(offenders.strike(7, later), Some(Duration::from_secs(1)));
        assert_eq!(offenders.remembered.load(Ordering::Relaxed), 2);
        let off = Offenders::new(false);
        assert_eq!(off.strike(7, t0), None);
        assert_eq!(off.hold(7, t0), None);
    }

    #[test]
    fn twenty_faults_within_a_second_are_a_strike_and_fewer_are_not() {
        let offenders = Offenders::default();
        let t0 = Instant::now();
        // Nineteen a second, second after second: never held.
        for second in 0..3 {
            let t = t0 + Duration::from_secs(second);
            for _ in 0..19 {
                assert_eq!(offenders.fault(1, t), None);
            }
        }
        assert_eq!(offenders.hold(1, t0 + Duration::from_secs(3)), None);
        let t = t0 + Duration::from_secs(4);
        let holds: Vec<Option<Duration>> = (0..25).map(|_| offenders.fault(1, t)).collect();
        assert_eq!(holds.iter().flatten().count(), 1);
        assert_eq!(holds[19], Some(Duration::from_secs(1)));
        assert_eq!(offenders.hold(1, t), Some(Duration::from_secs(1)));
        assert_eq!(offenders.hold(2, t), None);
    }
}
