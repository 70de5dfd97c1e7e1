//! A test bed: simulated apiservers of two versions sharing one store, and skewgate in-process in
//! front of them with a route file in a temporary directory, all on loopback ports chosen by the OS.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use skewgate::app::{ServeOptions, Server};
use skewgate::edge::EdgeSettings;
use skewgate::proxy::ProxySettings;
use skewgate_sim::{self as sim, SimConfig, SimHandle, Store};

pub mod fleet;
#[allow(unused_imports)]
pub use fleet::*;
pub mod guard;
#[allow(unused_imports)]
pub use guard::configmap_guard;

pub const OLD: &str = "v1.29.4";
pub const NEW: &str = "v1.30.1";

static DIRS: AtomicUsize = AtomicUsize::new(0);

/// A fresh temporary directory.
pub fn temp_dir(tag: &str) -> PathBuf {
    let n = DIRS.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("skewgate-test-{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

pub fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().expect("addr")
}

/// A TCP relay on a loopback port: each connection it accepts goes on to `target()`, asked then.
/// Returns its address and the count of connections open through it.
pub async fn tcp_relay(
    target: impl Fn() -> SocketAddr + Send + 'static,
) -> (SocketAddr, std::sync::Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind(loopback())
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let open = std::sync::Arc::new(AtomicUsize::new(0));
    let count = open.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let (to, count) = (target(), count.clone());
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                if let Ok(mut server) = tokio::net::TcpStream::connect(to).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
                count.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    (addr, open)
}

/// Two simulators (OLD and NEW) over one store.
pub struct Sims {
    pub store: Store,
    pub old: SimHandle,
    pub new: SimHandle,
}

pub async fn sims() -> Sims {
    sims_with(100).await
}

pub async fn sims_with(max_streams: u32) -> Sims {
    let store = Store::new();
    let config = |v: &str| SimConfig {
        max_concurrent_streams: max_streams,
        ..SimConfig::new(v)
    };
    let old = sim::start(config(OLD), store.clone(), loopback())
        .await
        .expect("old sim");
    let new = sim::start(config(NEW), store.clone(), loopback())
        .await
        .expect("new sim");
    Sims { store, old, new }
}

/// An endpoint that accepts connections and never answers, as a frozen (SIGSTOPped) apiserver:
/// its URL, and the task holding its connections.
pub async fn black_hole() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind(loopback())
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    (url, task)
}

/// A route file over the two simulators whose namespace `frozen` (its writes, and its reads, which
/// follow the pin) goes to the endpoint `frozen` alone.
pub fn routes_with_frozen_namespace(sims: &Sims, frozen: &str) -> String {
    routes(
        sims,
        "writes:\n  default: old\n  pins:\n    - {name: frozen-ns, namespaces: [frozen], backend: frozen}\nreads:\n  default: old\n",
    )
    .replace(
        "backends:\n",
        &format!("backends:\n  - {{name: frozen, endpoints: [\"{frozen}\"]}}\n"),
    )
}

/// A route file over the two simulators: backends `old` and `new`, then `writes` and `reads` as given.
pub fn routes(sims: &Sims, writes_and_reads: &str) -> String {
    format!(
        "apiVersion: skewgate.io/v1alpha1
kind: RouteTable
backends:
  - name: old
    version: v1.29
    endpoints: [{}]
  - name: new
    version: v1.30
    endpoints: [{}]
{writes_and_reads}",
        sims.old.url(),
        sims.new.url()
    )
}

/// skewgate serving a route file from a temporary directory.
pub struct Gate {
    pub server: Server,
    pub routes: PathBuf,
}

impl Gate {
    pub fn url(&self) -> String {
        format!("http://{}", self.server.addr)
    }

    pub fn admin(&self) -> String {
        format!("http://{}", self.server.admin_addr)
    }

    /// Rewrites the route file (atomically, as a ConfigMap update does).
    pub fn rewrite(&self, text: &str) {
        let tmp = self.routes.with_extension("tmp");
        std::fs::write(&tmp, text).expect("write");
        std::fs::rename(&tmp, &self.routes).expect("rename");
    }

    /// The JSON the admin listener answers at `path`.
    pub async fn admin_json(&self, path: &str) -> serde_json::Value {
        reqwest::get(format!("{}{path}", self.admin()))
            .await
            .expect(path)
            .json()
            .await
            .expect("JSON")
    }

    /// The JSON of /debug/routes.
    pub async fn debug_routes(&self) -> serde_json::Value {
        self.admin_json("/debug/routes").await
    }

    /// The JSON of /debug/recent: the errors skewgate answered itself, the guards' decisions.
    pub async fn debug_recent(&self) -> serde_json::Value {
        self.admin_json("/debug/recent").await
    }

    /// `/debug/skew`: what differs between the backends' versions (null until it answers).
    pub async fn debug_skew(&self) -> serde_json::Value {
        match reqwest::get(format!("{}/debug/skew", self.admin())).await {
            Ok(r) => r.json().await.unwrap_or_default(),
            Err(_) => serde_json::Value::Null,
        }
    }

    /// Waits until the gate has read the backends' schemas (what the update guard judges by).
    pub async fn knows_schemas(&self) {
        let known = eventually(10, || async {
            self.debug_skew().await["report"]["kinds"]
                .as_array()
                .is_some_and(|k| !k.is_empty())
        })
        .await;
        assert!(known, "the schemas are read");
    }

    pub async fn metrics(&self) -> String {
        reqwest::get(format!("{}/metrics", self.admin()))
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text")
    }
}

pub async fn gate(routes_text: &str) -> Gate {
    gate_with(routes_text, ProxySettings::default()).await
}

/// What a test tunes of skewgate: the pipeline's settings, the edge's, or both.
pub struct Tuning {
    pub proxy: ProxySettings,
    pub edge: EdgeSettings,
}

impl From<ProxySettings> for Tuning {
    fn from(proxy: ProxySettings) -> Tuning {
        Tuning {
            proxy,
            edge: EdgeSettings::default(),
        }
    }
}

impl From<EdgeSettings> for Tuning {
    fn from(edge: EdgeSettings) -> Tuning {
        Tuning {
            proxy: ProxySettings::default(),
            edge,
        }
    }
}

impl From<(ProxySettings, EdgeSettings)> for Tuning {
    fn from((proxy, edge): (ProxySettings, EdgeSettings)) -> Tuning {
        Tuning { proxy, edge }
    }
}

/// skewgate serving `routes_text` from a temporary directory, with `settings`.
pub async fn gate_with(routes_text: &str, settings: impl Into<Tuning>) -> Gate {
    let dir = temp_dir("gate");
    let routes = dir.join("routes.yaml");
    std::fs::write(&routes, routes_text).expect("write routes");
    gate_on(&routes, settings).await
}

/// skewgate serving the route file at `routes` (which may be shared with other instances).
pub async fn gate_on(routes: &std::path::Path, settings: impl Into<Tuning>) -> Gate {
    let Tuning { proxy, edge } = settings.into();
    let server = Server::start(ServeOptions {
        routes: routes.to_path_buf(),
        listen: loopback(),
        admin_listen: loopback(),
        reload_poll: Duration::from_millis(200),
        settings: proxy,
        edge: EdgeSettings {
            shutdown_grace: Duration::from_secs(2),
            ..edge
        },
    })
    .await
    .expect("skewgate starts");
    Gate {
        server,
        routes: routes.to_path_buf(),
    }
}

/// An HTTP/1.1 client.
pub fn h1() -> reqwest::Client {
    reqwest::Client::builder()
        .http1_only()
        .build()
        .expect("client")
}

/// An h2c (prior knowledge) client.
pub fn h2() -> reqwest::Client {
    reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .expect("client")
}

/// Opens a watch of the configmaps of namespace `ns` through the gate at `base` (its `url()`).
pub async fn watch_configmaps(
    client: &reqwest::Client,
    base: &str,
    ns: &str,
) -> reqwest::Result<reqwest::Response> {
    client
        .get(format!("{base}/api/v1/namespaces/{ns}/configmaps?watch=1"))
        .send()
        .await
}

/// The simulator version that answered.
pub fn served_by(resp: &reqwest::Response) -> String {
    resp.headers()
        .get(sim::VERSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

/// Polls `check` every 50 ms for up to `secs` seconds.
pub async fn eventually<F, Fut>(secs: u64, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The value of a metric line that starts with `prefix` (the name and its labels), or 0.
pub fn metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Whether kubectl is on PATH.
pub fn kubectl_available() -> bool {
    Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A kubeconfig at `dir/kubeconfig` for a cleartext `server`, with no credentials.
pub fn kubeconfig(dir: &Path, server: &str) -> PathBuf {
    let path = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: t\n  cluster:\n    server: {server}\nusers:\n- name: t\n  user: {{}}\ncontexts:\n- name: t\n  context: {{cluster: t, user: t}}\ncurrent-context: t\n"
    );
    std::fs::write(&path, text).expect("kubeconfig");
    path
}

/// Runs kubectl with a kubeconfig, off the async threads.
pub async fn kubectl(kc: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new("kubectl");
    cmd.arg("--kubeconfig").arg(kc).args(args);
    tokio::task::spawn_blocking(move || cmd.output().expect("kubectl runs"))
        .await
        .expect("join")
}

/// The output of a kubectl run that must have succeeded.
pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "kubectl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Sends raw HTTP/1.1 bytes and reads one answer (to its Content-Length, or until the server
/// closes): its status code and body.
pub async fn raw_h1(addr: std::net::SocketAddr, request: &[u8]) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    tokio::io::AsyncWriteExt::write_all(&mut s, request)
        .await
        .expect("write");
    let mut out = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            match tokio::io::AsyncReadExt::read(&mut s, &mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
            let text = String::from_utf8_lossy(&out).to_ascii_lowercase();
            if let Some(end) = text.find("\r\n\r\n") {
                let length = text[..end]
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok());
                if length.is_some_and(|n| out.len() >= end + 4 + n) {
                    return;
                }
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), read).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (code, body)
}

/// Fills the store with `n` configmaps of `size` bytes each, directly on the simulator.
pub async fn big_configmaps(sims: &Sims, n: usize, size: usize) {
    let client = h2();
    let data = "x".repeat(size);
    for i in 0..n {
        let body = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("big-{size}-{i}"), "namespace": "default"},
            "data": {"blob": data},
        });
        let resp = client
            .post(format!(
                "{}/api/v1/namespaces/default/configmaps",
                sims.old.url()
            ))
            .json(&body)
            .send()
            .await
            .expect("create");
        assert_eq!(resp.status(), 201);
    }
}

/// A rollback table's `writes` and `reads` (backends left to the caller): the pins
/// `rollback-check` suggested first, then a pin moving every other write from `new` back to `old`
/// at `flip_at`, under `fence`.
pub fn rollback_plan(suggested_pins: &str, flip_at: &str, fence: &str) -> String {
    let pins: Vec<&str> = suggested_pins
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("writes:") && !l.starts_with("  pins:"))
        .collect();
    format!(
        "writes:\n  default: new\n  fence: {fence}\n  pins:\n{}\n    - {{name: everything, backend: old, from: new, flipAt: \"{flip_at}\"}}\nreads:\n  default: new\n",
        pins.join("\n")
    )
}
