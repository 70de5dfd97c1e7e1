//! A kubelet of bench/kubelets.rs as the apiserver sees it: a node's client certificate on a few
//! HTTP/2 connections over TLS (one for its informers, one for its heartbeats, as kubelet makes a
//! transport per client), each dialled again when it is gone, as client-go's transport does; and
//! its informers' reflectors, which list at resourceVersion=0, watch from the list's version, and
//! after an error wait as client-go's reflector does (800 ms doubling to 30 s, jittered) and list
//! again. Lists and watches ask for protobuf, as kubelet does for built-in kinds.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::{self, SendRequest};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::task::JoinSet;

#[path = "kubelet_proto.rs"]
mod proto;

const AGENT: &str = "kubelet/v1.36.3 (linux/amd64) kubernetes/bench";
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf,application/json";

/// What every kubelet of a fleet counts.
#[derive(Default)]
pub struct Stats {
    /// Requests that failed in the steady window (reset when it starts).
    pub failed: AtomicU64,
    /// Watches streaming now.
    pub up: AtomicUsize,
    /// When each list was answered 200, for the herd after a restart.
    pub lists: Mutex<Vec<Instant>>,
    /// Answers of 429 and 5xx.
    pub refused: AtomicU64,
    /// Connections dialled.
    pub dials: AtomicU64,
    /// When a watch first saw each object, by name.
    pub seen: Mutex<HashMap<String, Instant>>,
    pub lease_ms: Mutex<Vec<f64>>,
}

pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The p-th quantile of `v`, NaN when empty.
pub fn percentile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

pub fn tls(pki: &Path, cert_pem: &str, key_pem: &str) -> Option<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    let ca = std::fs::read(pki.join("ca.crt")).ok()?;
    for c in CertificateDer::pem_slice_iter(&ca).flatten() {
        roots.add(c).ok()?;
    }
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .flatten()
        .collect();
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).ok()?;
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)
        .ok()?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Some(Arc::new(config))
}

/// One HTTP/2 connection of a client, dialled when first used and again after it ended.
pub struct Conn {
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    /// The connection now, and its number among those dialled.
    send: tokio::sync::Mutex<Option<(u64, SendRequest<Full<Bytes>>)>>,
    /// The connections' tasks, ended with the client.
    drivers: Mutex<JoinSet<()>>,
    stats: Arc<Stats>,
}

impl Conn {
    pub fn new(addr: SocketAddr, config: Arc<rustls::ClientConfig>, stats: Arc<Stats>) -> Conn {
        Conn {
            addr,
            config,
            send: tokio::sync::Mutex::default(),
            drivers: Mutex::default(),
            stats,
        }
    }

    async fn dial(&self) -> Option<SendRequest<Full<Bytes>>> {
        self.stats.dials.fetch_add(1, Ordering::Relaxed);
        let tcp = tokio::net::TcpStream::connect(self.addr).await.ok()?;
        // As Go's net package sets it on every TCP connection.
        tcp.set_nodelay(true).ok()?;
        let server = ServerName::try_from("localhost").ok()?;
        let tls = tokio_rustls::TlsConnector::from(self.config.clone())
            .connect(server, tcp)
            .await
            .ok()?;
        let (send, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .ok()?;
        let mut drivers = lock(&self.drivers);
        while drivers.try_join_next().is_some() {}
        drivers.spawn(async move {
            let _ = conn.await;
        });
        Some(send)
    }

    /// The open connection, dialled now if there is none.
    async fn sender(&self) -> Option<(u64, SendRequest<Full<Bytes>>)> {
        let mut slot = self.send.lock().await;
        if let Some(s) = slot.as_ref().filter(|s| !s.1.is_closed()) {
            return Some(s.clone());
        }
        let number = self.stats.dials.load(Ordering::Relaxed);
        *slot = None;
        let s = tokio::time::timeout(Duration::from_secs(10), self.dial())
            .await
            .ok()??;
        *slot = Some((number, s.clone()));
        Some((number, s))
    }

    /// Sends one request; its answer's head (`None` when the connection failed). A request the
    /// connection could not take (it had a GOAWAY, or it ended) goes once more on a new one, as Go's
    /// HTTP/2 transport retries a request the server did not process.
    async fn send_once(
        &self,
        req: &impl Fn() -> Option<http::Request<Full<Bytes>>>,
    ) -> Option<http::Response<hyper::body::Incoming>> {
        let (number, mut send) = self.sender().await?;
        match send.send_request(req()?).await {
            Ok(resp) => Some(resp),
            Err(_) => {
                {
                    let mut slot = self.send.lock().await;
                    if slot.as_ref().is_some_and(|s| s.0 == number) {
                        *slot = None;
                    }
                }
                let (_, mut send) = self.sender().await?;
                send.send_request(req()?).await.ok()
            }
        }
    }

    /// Sends a request as client-go's rest client does: a 429 or 5xx answer with `Retry-After` is
    /// tried again after that many seconds, up to 10 tries in all.
    pub async fn send(
        &self,
        req: impl Fn() -> Option<http::Request<Full<Bytes>>>,
    ) -> Option<http::Response<hyper::body::Incoming>> {
        let mut tries = 0;
        loop {
            let resp = self.send_once(&req).await?;
            let code = resp.status().as_u16();
            if code != 429 && code < 500 {
                return Some(resp);
            }
            self.stats.refused.fetch_add(1, Ordering::Relaxed);
            tries += 1;
            let wait = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
            match wait {
                Some(secs) if tries < 10 => {
                    drop(resp);
                    tokio::time::sleep(Duration::from_secs(secs)).await;
                }
                _ => return Some(resp),
            }
        }
    }

    /// One request: its status and body (`None` when the connection failed or 30 s passed).
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        kind: &str,
        accept: &str,
        body: String,
    ) -> Option<(u16, Bytes)> {
        let body = Bytes::from(body);
        let req = || {
            http::Request::builder()
                .method(method)
                .uri(path)
                .header("content-type", kind)
                .header("accept", accept)
                .header("user-agent", AGENT)
                .body(Full::new(body.clone()))
                .ok()
        };
        let got = async {
            let resp = self.send(req).await?;
            let code = resp.status().as_u16();
            let body = resp.into_body().collect().await.ok()?.to_bytes();
            Some((code, body))
        };
        tokio::time::timeout(Duration::from_secs(30), got)
            .await
            .ok()?
    }
}

/// client-go reflector's backoff: 800 ms doubling to 30 s, each wait jittered up to twice as long,
/// started over after 2 minutes without one.
pub struct Backoff {
    next: Duration,
    last: Instant,
    seed: u64,
}

impl Backoff {
    pub fn new(seed: u64) -> Backoff {
        Backoff {
            next: Duration::from_millis(800),
            last: Instant::now(),
            seed: seed | 1,
        }
    }

    pub fn wait(&mut self) -> Duration {
        if self.last.elapsed() > Duration::from_secs(120) {
            self.next = Duration::from_millis(800);
        }
        self.last = Instant::now();
        // xorshift: each reflector its own sequence.
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let jitter = (self.seed % 1000) as f64 / 1000.0;
        let d = self.next.mul_f64(1.0 + jitter);
        self.next = (self.next * 2).min(Duration::from_secs(30));
        d
    }
}

/// How a watch ended.
enum Ended {
    /// The server ended it cleanly (its timeout): watch again from the last version.
    Cleanly(String),
    /// Failed: wait, then list again.
    Failed,
}

/// One informer: a list, then a watch, again and again, as client-go's reflector runs.
pub struct Reflector {
    pub who: String,
    pub conn: Arc<Conn>,
    pub list: String,
    pub stats: Arc<Stats>,
}

impl Reflector {
    pub async fn run(self, seed: u64) {
        let mut backoff = Backoff::new(seed);
        loop {
            if let Some(mut rv) = self.list().await {
                while let Ended::Cleanly(next) = self.watch(&rv).await {
                    rv = next;
                }
            }
            tokio::time::sleep(backoff.wait()).await;
        }
    }

    fn debug(&self, what: std::fmt::Arguments) {
        if std::env::var("KUBELETS_DEBUG").is_ok() {
            eprintln!("{}: {what}", self.who);
        }
    }

    /// Lists at resourceVersion=0 (from the watch cache), as the reflector does first: the list's
    /// version. (With no resourceVersion, kube-apiserver 1.36 makes a list a consistent read from
    /// its cache and a watch a watch list; both need etcd's progress notifications, which the etcd
    /// 3.4 here lacks: the list waits and the watch ends in an ERROR event.)
    async fn list(&self) -> Option<String> {
        let path = format!("{}&resourceVersion=0", self.list);
        let got = self
            .conn
            .call("GET", &path, "", PROTOBUF, String::new())
            .await;
        let Some((200, body)) = got else {
            self.debug(format_args!("the list failed: {:?}", got.map(|g| g.0)));
            return None;
        };
        lock(&self.stats.lists).push(Instant::now());
        proto::list_version(&body)
            .or_else(|| {
                let listed: serde_json::Value = serde_json::from_slice(&body).ok()?;
                Some(listed["metadata"]["resourceVersion"].as_str()?.to_owned())
            })
            .filter(|rv| !rv.is_empty())
    }

    async fn watch(&self, rv: &str) -> Ended {
        let path = format!(
            "{}&watch=true&allowWatchBookmarks=true&resourceVersion={rv}",
            self.list
        );
        let req = || {
            http::Request::builder()
                .uri(&path)
                .header("accept", PROTOBUF)
                .header("user-agent", AGENT)
                .body(Full::new(Bytes::new()))
                .ok()
        };
        let Some(resp) = self.conn.send(req).await else {
            return Ended::Failed;
        };
        if resp.status() != 200 {
            self.debug(format_args!("a watch answered {}", resp.status()));
            return Ended::Failed;
        }
        let protobuf = resp.headers().get("content-type").is_some_and(|v| {
            v.as_bytes()
                .starts_with(b"application/vnd.kubernetes.protobuf")
        });
        self.stats.up.fetch_add(1, Ordering::Relaxed);
        let mut events = proto::Events::new(protobuf);
        let mut rv = rv.to_owned();
        let mut body = resp.into_body();
        let mut errored = false;
        let end = loop {
            match body.frame().await {
                None if errored => break Ended::Failed,
                None => break Ended::Cleanly(rv),
                Some(Err(_)) => break Ended::Failed,
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    for e in events.feed(&data) {
                        self.debug(format_args!("{} {} {}", e.kind, e.name, e.version));
                        // An expired version (410) and the like: list again.
                        errored |= e.kind == "ERROR";
                        if e.kind == "ADDED" {
                            lock(&self.stats.seen).insert(e.name, Instant::now());
                        }
                        if !e.version.is_empty() {
                            rv = e.version;
                        }
                    }
                }
            }
        };
        self.stats.up.fetch_sub(1, Ordering::Relaxed);
        end
    }
}
