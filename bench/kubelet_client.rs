//! The kubelets of bench/kubelets.rs: each a node's client certificate on one HTTP/2 connection
//! over TLS, registering its Node and Lease, watching its pods and its Node, renewing its Lease and
//! patching its Node's status every 10 s.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::{self, SendRequest};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::task::JoinSet;

/// One client: a name and its connection.
pub struct Kubelet {
    pub name: String,
    send: SendRequest<Full<Bytes>>,
}

/// The p-th quantile of `v` (ms), NaN when empty.
pub fn percentile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn tls(pki: &Path, cert_pem: &str, key_pem: &str) -> Option<Arc<rustls::ClientConfig>> {
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

impl Kubelet {
    async fn connect(
        name: String,
        addr: SocketAddr,
        config: Arc<rustls::ClientConfig>,
    ) -> Option<(Kubelet, JoinSet<()>)> {
        let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
        // As Go's net package sets it on every TCP connection.
        tcp.set_nodelay(true).ok()?;
        let server = ServerName::try_from("localhost").ok()?;
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(server, tcp)
            .await
            .ok()?;
        let (send, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .ok()?;
        let mut tasks = JoinSet::new();
        tasks.spawn(async move {
            let _ = conn.await;
        });
        Some((Kubelet { name, send }, tasks))
    }

    /// The cluster admin (system:masters), for what the bench itself does.
    pub async fn admin(pki: &Path, addr: SocketAddr) -> Option<Kubelet> {
        let cert = std::fs::read_to_string(pki.join("admin.crt")).ok()?;
        let key = std::fs::read_to_string(pki.join("admin.key")).ok()?;
        let (k, mut tasks) = Kubelet::connect("admin".into(), addr, tls(pki, &cert, &key)?).await?;
        // The connection lives as long as the process: the bench's admin is made once a phase.
        tasks.detach_all();
        Some(k)
    }

    /// One request: its status and body (`None` when the connection failed).
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        kind: &str,
        body: String,
    ) -> Option<(u16, Bytes)> {
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", kind)
            .header("accept", "application/json")
            .header(
                "user-agent",
                "kubelet/v1.36.3 (linux/amd64) kubernetes/bench",
            )
            .body(Full::new(Bytes::from(body)))
            .ok()?;
        let mut send = self.send.clone();
        let resp = tokio::time::timeout(Duration::from_secs(30), send.send_request(req))
            .await
            .ok()?
            .ok()?;
        let code = resp.status().as_u16();
        let body = resp.into_body().collect().await.ok()?.to_bytes();
        Some((code, body))
    }

    /// The apiserver's `go_goroutines`.
    pub async fn goroutines(&self) -> Option<f64> {
        let (_, body) = self
            .call("GET", "/metrics", "text/plain", String::new())
            .await?;
        let text = String::from_utf8_lossy(&body);
        text.lines()
            .find_map(|l| l.strip_prefix("go_goroutines "))
            .and_then(|v| v.trim().parse().ok())
    }

    /// Lists `list` (a path with its selector), then watches from the list's resourceVersion for
    /// as long as the connection lives, as an informer does, noting when each pod it names is seen.
    /// (A watch with no resourceVersion is a watch list to kube-apiserver 1.36, and a list with none
    /// a consistent read from its cache: both need etcd's progress notifications, which the etcd
    /// 3.4 here lacks: the watch ends in an ERROR event, the list waits.)
    async fn watch(&self, list: String, seen: Arc<Mutex<HashMap<String, Instant>>>) {
        // resourceVersion=0, as client-go's reflector lists first: from the watch cache.
        let first = format!("{list}&resourceVersion=0");
        if std::env::var("KUBELETS_DEBUG").is_ok() {
            eprintln!("{}: listing {first}", self.name);
        }
        let Some((200, body)) = self
            .call("GET", &first, "application/json", String::new())
            .await
        else {
            eprintln!("{}: the list before a watch failed", self.name);
            return;
        };
        let listed: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let Some(rv) = listed["metadata"]["resourceVersion"].as_str() else {
            return;
        };
        let path = format!("{list}&watch=true&allowWatchBookmarks=true&resourceVersion={rv}");
        let Ok(req) = http::Request::builder()
            .uri(path)
            .header("accept", "application/json")
            .header(
                "user-agent",
                "kubelet/v1.36.3 (linux/amd64) kubernetes/bench",
            )
            .body(Full::new(Bytes::new()))
        else {
            return;
        };
        let mut send = self.send.clone();
        let Ok(resp) = send.send_request(req).await else {
            return;
        };
        if resp.status() != 200 {
            eprintln!("{}: a watch answered {}", self.name, resp.status());
            return;
        }
        let debug = std::env::var("KUBELETS_DEBUG").is_ok();
        if debug {
            eprintln!("{}: watching {}", self.name, resp.status());
        }
        let mut body = resp.into_body();
        let mut line = Vec::new();
        while let Some(Ok(frame)) = body.frame().await {
            let Ok(data) = frame.into_data() else {
                continue;
            };
            for b in data {
                if b != b'\n' {
                    line.push(b);
                    continue;
                }
                let event: serde_json::Value = serde_json::from_slice(&line).unwrap_or_default();
                if std::env::var("KUBELETS_DEBUG").is_ok() {
                    eprintln!(
                        "{}: {} {} {}",
                        self.name,
                        event["type"],
                        event["object"]["metadata"]["name"],
                        event["object"]["message"]
                    );
                }
                if event["type"] == "ADDED"
                    && let Some(name) = event["object"]["metadata"]["name"].as_str()
                {
                    let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                    seen.insert(name.to_owned(), Instant::now());
                }
                line.clear();
            }
        }
        if debug {
            eprintln!("{}: the watch ended", self.name);
        }
    }
}

/// An RFC 3339 time in UTC with microseconds, as a Lease's renewTime is written.
fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_micros()
    )
}

/// Counts a failed request, and says what it was for the first few.
fn note(failed: &AtomicU64, who: &str, what: &str, got: Option<(u16, Bytes)>) {
    if failed.fetch_add(1, Ordering::Relaxed) < 5 {
        match got {
            Some((code, body)) => eprintln!(
                "{who}: {what}: {code} {}",
                String::from_utf8_lossy(&body)
                    .chars()
                    .take(200)
                    .collect::<String>()
            ),
            None => eprintln!("{who}: {what}: no answer"),
        }
    }
}

/// The kubelets of one phase, stopped when dropped.
pub struct Fleet {
    pub kubelets: Vec<Arc<Kubelet>>,
    tasks: JoinSet<()>,
    lease_ms: Arc<Mutex<Vec<f64>>>,
    seen: Arc<Mutex<HashMap<String, Instant>>>,
    failed: Arc<AtomicU64>,
}

impl Fleet {
    /// `n` kubelets against `addr`, with certificates issued by the cluster CA in `pki`.
    pub async fn start(pki: &Path, addr: SocketAddr, n: usize) -> Option<Fleet> {
        let ca_key = KeyPair::from_pem(&std::fs::read_to_string(pki.join("ca.key")).ok()?).ok()?;
        let mut ca = CertificateParams::default();
        ca.distinguished_name
            .push(DnType::CommonName, "kubernetes-ca");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let issuer = Issuer::new(ca, ca_key);
        let mut fleet = Fleet {
            kubelets: Vec::new(),
            tasks: JoinSet::new(),
            lease_ms: Arc::default(),
            seen: Arc::default(),
            failed: Arc::default(),
        };
        let mut starting = JoinSet::new();
        for i in 0..n {
            let name = format!("node-{i}");
            let mut params = CertificateParams::default();
            params
                .distinguished_name
                .push(DnType::CommonName, format!("system:node:{name}"));
            params
                .distinguished_name
                .push(DnType::OrganizationName, "system:nodes");
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            let key = KeyPair::generate().ok()?;
            let cert = params.signed_by(&key, &issuer).ok()?;
            let config = tls(pki, &cert.pem(), &key.serialize_pem())?;
            starting.spawn(async move { (Kubelet::connect(name, addr, config).await, i) });
            if starting.len() >= 32 || i + 1 == n {
                while let Some(Ok((k, i))) = starting.join_next().await {
                    match k {
                        Some((k, tasks)) => {
                            fleet.tasks.spawn(async move {
                                let _tasks = tasks;
                                std::future::pending::<()>().await
                            });
                            fleet.run(Arc::new(k), i).await
                        }
                        None => {
                            fleet.failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
        }
        Some(fleet)
    }

    /// Registers the kubelet's Node and Lease, starts its watches and its heartbeats.
    async fn run(&mut self, k: Arc<Kubelet>, i: usize) {
        let now = rfc3339(SystemTime::now());
        let node = format!(r#"{{"metadata":{{"name":"{}"}}}}"#, k.name);
        let lease = format!(
            r#"{{"metadata":{{"name":"{0}"}},"spec":{{"holderIdentity":"{0}","leaseDurationSeconds":40,"renewTime":"{now}"}}}}"#,
            k.name
        );
        let json = "application/json";
        let leases = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
        for (path, body) in [("/api/v1/nodes", node), (leases, lease)] {
            match k.call("POST", path, json, body).await {
                Some((201 | 409, _)) => {}
                other => {
                    note(&self.failed, &k.name, path, other);
                }
            }
        }
        for path in [
            format!("/api/v1/pods?fieldSelector=spec.nodeName%3D{}", k.name),
            format!("/api/v1/nodes?fieldSelector=metadata.name%3D{}", k.name),
        ] {
            let (k, seen) = (k.clone(), self.seen.clone());
            self.tasks.spawn(async move { k.watch(path, seen).await });
        }
        let (beat, lease_ms, failed) = (k.clone(), self.lease_ms.clone(), self.failed.clone());
        self.tasks.spawn(async move {
            // Spread over the 10 s, as kubelets started at different times are.
            tokio::time::sleep(Duration::from_millis((i as u64 * 7919) % 10_000)).await;
            let mut tick = tokio::time::interval(Duration::from_secs(10));
            loop {
                tick.tick().await;
                let now = rfc3339(SystemTime::now());
                let renew = format!(r#"{{"spec":{{"renewTime":"{now}"}}}}"#);
                let started = Instant::now();
                let path = format!("{leases}/{}", beat.name);
                let merge = "application/merge-patch+json";
                match beat.call("PATCH", &path, merge, renew).await {
                    Some((200, _)) => {
                        let ms = started.elapsed().as_secs_f64() * 1000.0;
                        lease_ms.lock().unwrap_or_else(|e| e.into_inner()).push(ms);
                    }
                    other => note(&failed, &beat.name, "lease", other),
                }
                let status = format!(
                    r#"{{"status":{{"conditions":[{{"type":"Ready","status":"True","reason":"KubeletReady","message":"kubelet is posting ready status","lastHeartbeatTime":"{now}","lastTransitionTime":"{now}"}}]}}}}"#
                );
                let path = format!("/api/v1/nodes/{}/status", beat.name);
                let strategic = "application/strategic-merge-patch+json";
                match beat.call("PATCH", &path, strategic, status).await {
                    Some((200, _)) => {}
                    other => note(&failed, &beat.name, "node status", other),
                }
            }
        });
        self.kubelets.push(k);
    }

    pub fn reset_latencies(&self) {
        self.lease_ms
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    pub fn lease_percentiles(&self) -> (f64, f64) {
        let v = self.lease_ms.lock().unwrap_or_else(|e| e.into_inner());
        (percentile(&v, 0.5), percentile(&v, 0.99))
    }

    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    /// Creates pod `name` bound to kubelet `node` (as the admin), and the ms until that kubelet's
    /// watch saw it.
    pub async fn deliver_pod(&self, admin: &Kubelet, node: usize, name: &str) -> Option<f64> {
        let node = &self.kubelets.get(node)?.name;
        let _ = admin
            .call(
                "POST",
                "/api/v1/namespaces/default/serviceaccounts",
                "application/json",
                r#"{"metadata":{"name":"default"}}"#.into(),
            )
            .await;
        let pod = format!(
            r#"{{"metadata":{{"name":"{name}"}},"spec":{{"nodeName":"{node}","automountServiceAccountToken":false,"containers":[{{"name":"c","image":"busybox"}}]}}}}"#
        );
        let started = Instant::now();
        let (code, body) = admin
            .call(
                "POST",
                "/api/v1/namespaces/default/pods",
                "application/json",
                pod,
            )
            .await?;
        if code != 201 {
            eprintln!("pod {name}: {code} {}", String::from_utf8_lossy(&body));
            return None;
        }
        if std::env::var("KUBELETS_DEBUG").is_ok() {
            eprintln!("created {name} on {node}: {code}");
        }
        for _ in 0..2000 {
            if let Some(at) = self
                .seen
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(name)
            {
                return Some(at.duration_since(started).as_secs_f64() * 1000.0);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        None
    }
}
