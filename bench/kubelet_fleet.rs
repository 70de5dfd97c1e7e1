//! The kubelets of one phase of bench/kubelets.rs: each registers its Node and Lease, runs four
//! informers (its pods, its Node, and the ConfigMap and Secret its pod mounts) on one connection,
//! and renews its Lease and patches its Node's status every 10 s on another.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use tokio::task::JoinSet;

use crate::client::{Conn, Reflector, Stats, lock, percentile, tls};

/// The watches each kubelet keeps.
pub const WATCHES: usize = 4;
const JSON: &str = "application/json";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";

/// The bench's own client: the cluster admin (system:masters).
pub async fn admin(pki: &Path, addr: SocketAddr) -> Option<Conn> {
    let cert = std::fs::read_to_string(pki.join("admin.crt")).ok()?;
    let key = std::fs::read_to_string(pki.join("admin.key")).ok()?;
    Some(Conn::new(addr, tls(pki, &cert, &key)?, Arc::default()))
}

/// What the apiserver's /metrics says of the load: its goroutines, the watches it serves now
/// (`apiserver_longrunning_requests` of verb WATCH, summed), and the SubjectAccessReviews it has
/// answered (`apiserver_request_total` of that resource).
pub async fn apiserver_metrics(admin: &Conn) -> Option<(f64, f64, f64)> {
    let (_, body) = admin
        .call("GET", "/metrics", "", "text/plain", String::new())
        .await?;
    let text = String::from_utf8_lossy(&body);
    let goroutines = text
        .lines()
        .find_map(|l| l.strip_prefix("go_goroutines "))
        .and_then(|v| v.trim().parse().ok())?;
    let sum = |prefix: &str, has: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(prefix) && l.contains(has))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum()
    };
    let watches = sum("apiserver_longrunning_requests{", "verb=\"WATCH\"");
    let reviews = sum(
        "apiserver_request_total{",
        "resource=\"subjectaccessreviews\"",
    );
    Some((goroutines, watches, reviews))
}

/// What skewgate's own user needs for shared watches (deploy/kubeadm/share-watches-rbac.yaml):
/// made by the admin for every phase (only skewgate-shared uses it).
const SHARE_RBAC: [(&str, &str); 2] = [
    (
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        r#"{"metadata":{"name":"skewgate-shared-watches"},"rules":[{"apiGroups":["authorization.k8s.io"],"resources":["subjectaccessreviews"],"verbs":["create"]},{"apiGroups":[""],"resources":["configmaps","secrets"],"verbs":["watch"]}]}"#,
    ),
    (
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        r#"{"metadata":{"name":"skewgate-shared-watches"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"skewgate-shared-watches"},"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"skewgate"}]}"#,
    ),
];

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
fn note(stats: &Stats, who: &str, what: &str, got: Option<(u16, bytes::Bytes)>) {
    if stats.failed.fetch_add(1, Ordering::Relaxed) < 5 {
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

/// What every node's pod mounts, and one pod per node mounting them, so that the Node authorizer
/// lets each kubelet watch them: made by the admin before the kubelets start.
pub async fn prepare(admin: &Arc<Conn>, n: usize) -> bool {
    let ns = "/api/v1/namespaces/default";
    for (path, body) in SHARE_RBAC {
        let got = admin.call("POST", path, JSON, JSON, body.into()).await;
        if !matches!(got, Some((201 | 409, _))) {
            eprintln!("cannot create {path}");
            return false;
        }
    }
    for (path, body) in [
        ("serviceaccounts", r#"{"metadata":{"name":"default"}}"#),
        (
            "configmaps",
            r#"{"metadata":{"name":"node-config"},"data":{"a":"b"}}"#,
        ),
        (
            "secrets",
            r#"{"metadata":{"name":"node-secret"},"data":{"a":"Yg=="}}"#,
        ),
    ] {
        let url = format!("{ns}/{path}");
        let got = admin.call("POST", &url, JSON, JSON, body.into()).await;
        if !matches!(got, Some((201 | 409, _))) {
            eprintln!("cannot create {path}");
            return false;
        }
    }
    let mut making = JoinSet::new();
    for i in 0..n {
        let admin = admin.clone();
        making.spawn(async move {
            let pod = format!(
                r#"{{"metadata":{{"name":"app-{i}"}},"spec":{{"nodeName":"node-{i}","automountServiceAccountToken":false,"containers":[{{"name":"c","image":"busybox"}}],"volumes":[{{"name":"c","configMap":{{"name":"node-config"}}}},{{"name":"s","secret":{{"secretName":"node-secret"}}}}]}}}}"#
            );
            let got = admin.call("POST", &format!("{ns}/pods"), JSON, JSON, pod).await;
            matches!(got, Some((201 | 409, _)))
        });
        if making.len() >= 32 || i + 1 == n {
            while let Some(made) = making.join_next().await {
                if !matches!(made, Ok(true)) {
                    eprintln!("cannot create the nodes' pods");
                    return false;
                }
            }
        }
    }
    true
}

/// The kubelets of one phase, stopped when dropped.
pub struct Fleet {
    pub n: usize,
    names: Vec<String>,
    tasks: JoinSet<()>,
    pub stats: Arc<Stats>,
}

fn node_cert(name: &str, issuer: &Issuer<'_, KeyPair>) -> Option<(String, String)> {
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, format!("system:node:{name}"));
    params
        .distinguished_name
        .push(DnType::OrganizationName, "system:nodes");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().ok()?;
    let cert = params.signed_by(&key, issuer).ok()?;
    Some((cert.pem(), key.serialize_pem()))
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
            n,
            names: Vec::new(),
            tasks: JoinSet::new(),
            stats: Arc::default(),
        };
        let mut starting = JoinSet::new();
        for i in 0..n {
            let name = format!("node-{i}");
            let (cert, key) = node_cert(&name, &issuer)?;
            let config = tls(pki, &cert, &key)?;
            let stats = fleet.stats.clone();
            let conns = [
                Arc::new(Conn::new(addr, config.clone(), stats.clone())),
                Arc::new(Conn::new(addr, config, stats)),
            ];
            let registering = register(name.clone(), conns[0].clone());
            starting.spawn(async move { (registering.await, name, conns, i) });
            if starting.len() >= 32 || i + 1 == n {
                while let Some(Ok((ok, name, conns, i))) = starting.join_next().await {
                    if !ok {
                        fleet.stats.failed.fetch_add(1, Ordering::Relaxed);
                    }
                    fleet.run(name, conns, i);
                }
            }
        }
        Some(fleet)
    }

    /// Starts a kubelet's informers and its heartbeats.
    fn run(&mut self, name: String, [informers, heartbeats]: [Arc<Conn>; 2], i: usize) {
        let lists = [
            format!("/api/v1/pods?fieldSelector=spec.nodeName%3D{name}"),
            format!("/api/v1/nodes?fieldSelector=metadata.name%3D{name}"),
            "/api/v1/namespaces/default/configmaps?fieldSelector=metadata.name%3Dnode-config"
                .to_owned(),
            "/api/v1/namespaces/default/secrets?fieldSelector=metadata.name%3Dnode-secret"
                .to_owned(),
        ];
        for (w, list) in lists.into_iter().enumerate() {
            let reflector = Reflector {
                who: name.clone(),
                conn: informers.clone(),
                list,
                stats: self.stats.clone(),
            };
            let seed = (i * WATCHES + w) as u64 * 0x9e37_79b9_7f4a_7c15;
            self.tasks.spawn(reflector.run(seed));
        }
        let stats = self.stats.clone();
        let who = name.clone();
        self.tasks.spawn(async move {
            // Spread over the 10 s, as kubelets started at different times are.
            tokio::time::sleep(Duration::from_millis((i as u64 * 7919) % 10_000)).await;
            let mut tick = tokio::time::interval(Duration::from_secs(10));
            loop {
                tick.tick().await;
                heartbeat(&who, &heartbeats, &stats).await;
            }
        });
        self.names.push(name);
    }

    pub fn reset_latencies(&self) {
        lock(&self.stats.lease_ms).clear();
        self.stats.failed.store(0, Ordering::Relaxed);
    }

    pub fn lease_percentiles(&self) -> (f64, f64) {
        let v = lock(&self.stats.lease_ms);
        (percentile(&v, 0.5), percentile(&v, 0.99))
    }

    /// Waits until every kubelet's every watch streams again (at most `limit`): how long since
    /// `since`, `None` past the limit.
    pub async fn all_watching(&self, since: Instant, limit: Duration) -> Option<Duration> {
        let want = self.names.len() * WATCHES;
        while since.elapsed() < limit {
            if self.stats.up.load(Ordering::Relaxed) >= want {
                return Some(since.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// The most lists sent in any one second after `since`: the herd.
    pub fn peak_lists(&self, since: Instant) -> usize {
        let lists = lock(&self.stats.lists);
        let mut per_second: std::collections::HashMap<u64, usize> = Default::default();
        for at in lists.iter().filter(|at| **at >= since) {
            *per_second
                .entry(at.duration_since(since).as_secs())
                .or_default() += 1;
        }
        per_second.into_values().max().unwrap_or(0)
    }

    /// Creates pod `name` bound to kubelet `node` (as the admin), and the ms until that kubelet's
    /// watch saw it.
    pub async fn deliver_pod(&self, admin: &Conn, node: usize, name: &str) -> Option<Delivery> {
        let node = self.names.get(node)?;
        let pod = format!(
            r#"{{"metadata":{{"name":"{name}"}},"spec":{{"nodeName":"{node}","automountServiceAccountToken":false,"containers":[{{"name":"c","image":"busybox"}}]}}}}"#
        );
        let started = Instant::now();
        let (code, body) = admin
            .call("POST", "/api/v1/namespaces/default/pods", JSON, JSON, pod)
            .await?;
        let created = started.elapsed().as_secs_f64() * 1000.0;
        if code != 201 {
            eprintln!("pod {name}: {code} {}", String::from_utf8_lossy(&body));
            return None;
        }
        for _ in 0..20_000 {
            if let Some(at) = lock(&self.stats.seen).get(name) {
                let total = at.duration_since(started).as_secs_f64() * 1000.0;
                return Some(Delivery { created, total });
            }
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
        None
    }
}

/// One pod's delivery, in milliseconds from its create's start: when the create was answered, and
/// when its kubelet's watch had the event.
pub struct Delivery {
    pub created: f64,
    pub total: f64,
}

/// Registers a kubelet's Node and Lease.
async fn register(name: String, conn: Arc<Conn>) -> bool {
    let now = rfc3339(SystemTime::now());
    let node = format!(r#"{{"metadata":{{"name":"{name}"}}}}"#);
    let lease = format!(
        r#"{{"metadata":{{"name":"{name}"}},"spec":{{"holderIdentity":"{name}","leaseDurationSeconds":40,"renewTime":"{now}"}}}}"#
    );
    for (path, body) in [("/api/v1/nodes", node), (LEASES, lease)] {
        match conn.call("POST", path, JSON, JSON, body).await {
            Some((201 | 409, _)) => {}
            other => {
                eprintln!("{name}: registering {path}: {:?}", other.map(|o| o.0));
                return false;
            }
        }
    }
    true
}

/// One heartbeat: the Lease renewed (its latency noted), the Node's Ready condition patched (a
/// strategic merge patch, as kubelet sends; kubelet renews its Lease with an update, here a merge
/// patch).
async fn heartbeat(name: &str, conn: &Conn, stats: &Stats) {
    let now = rfc3339(SystemTime::now());
    let renew = format!(r#"{{"spec":{{"renewTime":"{now}"}}}}"#);
    let started = Instant::now();
    let path = format!("{LEASES}/{name}");
    let merge = "application/merge-patch+json";
    let accept = "application/vnd.kubernetes.protobuf,application/json";
    match conn.call("PATCH", &path, merge, accept, renew).await {
        Some((200, _)) => {
            let ms = started.elapsed().as_secs_f64() * 1000.0;
            lock(&stats.lease_ms).push(ms);
        }
        other => note(stats, name, "lease", other),
    }
    let status = format!(
        r#"{{"status":{{"conditions":[{{"type":"Ready","status":"True","reason":"KubeletReady","message":"kubelet is posting ready status","lastHeartbeatTime":"{now}","lastTransitionTime":"{now}"}}]}}}}"#
    );
    let path = format!("/api/v1/nodes/{name}/status");
    let strategic = "application/strategic-merge-patch+json";
    match conn.call("PATCH", &path, strategic, accept, status).await {
        Some((200, _)) => {}
        other => note(stats, name, "node status", other),
    }
}
