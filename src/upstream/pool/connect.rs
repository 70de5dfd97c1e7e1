//! Opening a connection of the pool: dialed (`upstream::dial`), handshaken, adopted into the pool
//! with its task driving its frames, and retired when it has idled; new connections counted per
//! second.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use super::{Conn, ConnectionTask, Credential, EndpointPool, EndpointState, UpstreamError};
use crate::identity::Alpn;
use crate::upstream::dial::{DialError, Dialed};
use crate::upstream::frames;
use crate::upstream::frames::Link;

impl EndpointPool {
    /// Opens a connection for `credential`'s requests offering `alpn`, within the connect timeout.
    /// A failure marks the endpoint down.
    pub(crate) async fn dial(
        &self,
        credential: Credential,
        alpn: Alpn,
    ) -> Result<Dialed, UpstreamError> {
        let settings = self.settings();
        let anonymous = credential == Credential::Anonymous;
        crate::upstream::dial::dial(
            &self.endpoint,
            settings.tls.as_deref(),
            anonymous,
            alpn,
            settings.connect_timeout,
        )
        .await
        .map_err(|e| self.connect_failed(e))
    }

    /// Marks the endpoint down for a failed connect, and makes the error a request's.
    pub(crate) fn connect_failed(&self, e: DialError) -> UpstreamError {
        self.set_state(EndpointState::Down);
        self.set_failure(Some(e.to_string()));
        UpstreamError::Connect(e)
    }

    /// The endpoint's URL, for errors.
    pub(crate) fn url(&self) -> Arc<str> {
        Arc::from(self.endpoint.url.as_str())
    }

    /// Opens an HTTP/2 connection: dialed, handshaken, and open once the apiserver's SETTINGS (its
    /// stream limit) have arrived, all within the connect timeout; a frozen apiserver that accepted
    /// the TCP connection never gets there.
    pub(super) async fn connect(
        self: &Arc<Self>,
        credential: Credential,
    ) -> Result<Arc<Conn>, UpstreamError> {
        let connect = async {
            let settled = Arc::new(tokio::sync::Notify::new());
            // The connection, once adopted: a GOAWAY takes it out of the pool at once.
            let adopted = Arc::new(OnceLock::<Weak<Conn>>::new());
            let hooks = frames::Hooks {
                settled: settled.clone(),
                on_go_away: {
                    let (pool, adopted) = (Arc::downgrade(self), adopted.clone());
                    Box::new(move || {
                        let conn = adopted.get().and_then(Weak::upgrade);
                        if let (Some(pool), Some(conn)) = (pool.upgrade(), conn) {
                            pool.retire(&conn);
                        }
                    })
                },
            };
            let (link, connection) = match self.dial(credential, Alpn::H2).await? {
                Dialed::Plain(tcp) => self.h2_handshake(tcp, hooks).await?,
                Dialed::Tls(tls) => self.h2_handshake(*tls, hooks).await?,
            };
            let conn = self.adopt(link, connection, credential, settled.clone());
            let _ = adopted.set(Arc::downgrade(&conn));
            settled.notified().await;
            Ok(conn)
        };
        let within = self.settings.connect_timeout;
        match tokio::time::timeout(within, connect).await {
            Ok(r) => r,
            Err(_) => Err(self.connect_failed(DialError::TimedOut {
                url: self.url(),
                what: "no HTTP/2 connection (TCP, TLS and the apiserver's SETTINGS)",
                within,
            })),
        }
    }

    /// Starts HTTP/2 on `io`: the pool's handle, and the connection's task (boxed: one type for
    /// cleartext and TLS, allocated once per connection).
    async fn h2_handshake<T>(
        &self,
        io: T,
        hooks: frames::Hooks,
    ) -> Result<(Link, ConnectionTask), UpstreamError>
    where
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let max_streams = self.settings.initial_max_streams;
        let budget = self.settings.response_buffer.clone();
        match frames::handshake(io, &self.authority, max_streams, hooks, budget).await {
            Ok((link, task)) => Ok((link, Box::pin(task))),
            Err(e) => Err(self.connect_failed(DialError::Handshake {
                url: self.url(),
                source: h2::Error::from(e),
            })),
        }
    }

    /// Takes a new connection into the pool and drives it on this thread, PINGing it, until it
    /// closes or stops answering.
    fn adopt(
        self: &Arc<Self>,
        link: Link,
        mut connection: ConnectionTask,
        credential: Credential,
        settled: Arc<tokio::sync::Notify>,
    ) -> Arc<Conn> {
        let pinger = link.pinger();
        let conn = Arc::new(Conn {
            link,
            shard: self.shard_index(credential),
            streams: self.streams.clone(),
            active: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            counted: AtomicBool::new(false),
        });
        let pool = Arc::downgrade(self);
        // Weak, so that a pool dropped on reload drops its connections' links and they close.
        let me = Arc::downgrade(&conn);
        let (interval, timeout) = (self.settings.ping_interval, self.settings.ping_timeout);
        let idle = idle_watch(pool.clone(), me.clone(), self.settings.idle_timeout);
        tokio::spawn(async move {
            let health = async move {
                loop {
                    tokio::time::sleep(interval).await;
                    if !answers(&pinger, timeout).await {
                        return;
                    }
                }
            };
            let dead_by_ping = tokio::select! {
                () = &mut connection => false,
                () = health => true,
                // Retired already: dropping the connection closes it.
                () = idle => return,
            };
            if let (Some(pool), Some(conn)) = (pool.upgrade(), me.upgrade()) {
                if dead_by_ping {
                    tracing::warn!(endpoint = %pool.endpoint.url, "upstream connection sent nothing, not even its PING's answer; dropping it");
                    pool.set_failure(Some(format!(
                        "a connection sent nothing for {timeout:?}, not even the answer to a PING"
                    )));
                    pool.set_state(EndpointState::Down);
                }
                pool.retire(&conn);
            }
            // A connection that ends before the apiserver's SETTINGS came (the apiserver refused
            // the TLS client certificate, or closed at once) ends its connect now, not at the
            // connect timeout.
            settled.notify_one();
        });
        conn
    }
}

/// Resolves once the connection has had no stream for `timeout` and has been retired; never for its
/// worker's last connection to the endpoint, which is kept warm.
async fn idle_watch(
    pool: std::sync::Weak<EndpointPool>,
    conn: std::sync::Weak<Conn>,
    timeout: Duration,
) {
    let mut idle_since: Option<tokio::time::Instant> = None;
    loop {
        tokio::time::sleep(timeout / 4).await;
        let (Some(pool), Some(conn)) = (pool.upgrade(), conn.upgrade()) else {
            return std::future::pending().await;
        };
        if conn.active.load(Ordering::Acquire) > 0 {
            idle_since = None;
            continue;
        }
        let since = *idle_since.get_or_insert_with(tokio::time::Instant::now);
        let others = pool.shards[conn.shard].conns.load().len() > 1;
        // Checked and retired with no await between: on this worker no request can take a slot in
        // between, and once retired none will.
        if others && since.elapsed() >= timeout {
            pool.retire(&conn);
            return;
        }
    }
}

/// New connections in the current one-second window.
#[derive(Debug, Default)]
pub(super) struct ConnectRate {
    window: Option<std::time::Instant>,
    count: u32,
}

impl ConnectRate {
    /// Counts a new connection at `now` if fewer than `max` were opened this second; else how long
    /// to wait for the next second.
    pub(super) fn admit(&mut self, now: std::time::Instant, max: u32) -> Option<Duration> {
        let start = *self.window.get_or_insert(now);
        let elapsed = now.saturating_duration_since(start);
        if elapsed >= Duration::from_secs(1) {
            self.window = Some(now);
            self.count = 0;
        }
        if max == 0 || self.count < max {
            self.count += 1;
            return None;
        }
        Some(Duration::from_secs(1).saturating_sub(elapsed))
    }
}

/// PINGs a connection: whether it answers, or, while the answer is late, sends anything else. A
/// busy apiserver's PING answer waits behind its responses (1,600 large LISTs: seconds); a
/// connection that still delivers frames is alive, and dropping it would add load when the
/// apiserver can least take it. Only `timeout` of silence is death.
async fn answers(pinger: &frames::Pinger, timeout: Duration) -> bool {
    loop {
        let before = pinger.heard();
        if tokio::time::timeout(timeout, pinger.ping()).await.is_ok() {
            return true;
        }
        if pinger.heard() == before {
            return false;
        }
    }
}
