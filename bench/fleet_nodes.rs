//! The fleet's nodes as clients: each from its own loopback address, with a kubelet's h2
//! connection (its watches and writes on it), a plugin's h2 connection and two HTTP/1.1 ones.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::JoinSet;

/// What one node holds open.
pub struct Node {
    pub i: usize,
    pub kubelet: http2::SendRequest<Full<Bytes>>,
    _plugin: http2::SendRequest<Full<Bytes>>,
    _h1: [http1::SendRequest<Full<Bytes>>; 2],
    /// The connections' tasks and the watches' readers; aborted to close them.
    tasks: JoinSet<()>,
}

/// Why a node's connection or request failed, counted across nodes until `take`n.
pub struct Failures([AtomicU64; 5]);

/// The reasons, in the order of `REASONS`.
#[derive(Clone, Copy)]
enum Reason {
    Connect,
    Handshake,
    NotOk,
    ConnectionError,
    Timeout,
}

const REASONS: [&str; 5] = [
    "connect",
    "handshake",
    "not 200",
    "connection error",
    "timeout",
];

pub static FAILED: Failures = Failures([const { AtomicU64::new(0) }; 5]);

impl Failures {
    fn count(&self, reason: Reason) {
        self.0[reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The counts so far, as "reason N, ...", and zero again.
    pub fn take(&self) -> String {
        let counts: Vec<String> = REASONS
            .iter()
            .zip(&self.0)
            .map(|(r, n)| format!("{r} {}", n.swap(0, Ordering::Relaxed)))
            .collect();
        counts.join(", ")
    }
}

/// Node `i`'s own loopback address, as every node of a cluster has its own.
pub fn node_ip(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(
        127,
        1 + (i / 60_000) as u8,
        ((i / 250) % 240) as u8,
        1 + (i % 250) as u8,
    ))
}

async fn tcp_from(ip: IpAddr, to: SocketAddr) -> Option<TcpStream> {
    let connected = async {
        let socket = TcpSocket::new_v4().ok()?;
        socket.bind(SocketAddr::new(ip, 0)).ok()?;
        socket.connect(to).await.ok()
    };
    let Some(tcp) = connected.await else {
        FAILED.count(Reason::Connect);
        return None;
    };
    let _ = tcp.set_nodelay(true);
    Some(tcp)
}

pub async fn h2_conn(
    ip: IpAddr,
    to: SocketAddr,
    tasks: &mut JoinSet<()>,
) -> Option<http2::SendRequest<Full<Bytes>>> {
    let tcp = tcp_from(ip, to).await?;
    let Ok((send, conn)) = http2::handshake(TokioExecutor::new(), TokioIo::new(tcp)).await else {
        FAILED.count(Reason::Handshake);
        return None;
    };
    tasks.spawn(async move {
        let _ = conn.await;
    });
    Some(send)
}

async fn h1_conn(
    ip: IpAddr,
    to: SocketAddr,
    tasks: &mut JoinSet<()>,
) -> Option<http1::SendRequest<Full<Bytes>>> {
    let tcp = tcp_from(ip, to).await?;
    let Ok((send, conn)) = http1::handshake(TokioIo::new(tcp)).await else {
        FAILED.count(Reason::Handshake);
        return None;
    };
    tasks.spawn(async move {
        let _ = conn.await;
    });
    Some(send)
}

pub fn get(path: &str) -> http::Request<Full<Bytes>> {
    http::Request::get(path)
        .header("host", "apiserver")
        .header(
            "user-agent",
            "kubelet/v1.30.0 (linux/amd64) kubernetes/abcdef",
        )
        .body(Full::default())
        .expect("request")
}

/// Whether `req` got a 200 (or `want`) and its whole body.
pub async fn call<S>(send: &mut S, req: http::Request<Full<Bytes>>, want: u16) -> bool
where
    S: Sender,
{
    match tokio::time::timeout(Duration::from_secs(30), send.call(req)).await {
        Ok(Some(r)) if r.status() == want => r.into_body().collect().await.is_ok(),
        Ok(Some(_)) => {
            FAILED.count(Reason::NotOk);
            false
        }
        Ok(None) => {
            FAILED.count(Reason::ConnectionError);
            false
        }
        Err(_) => {
            FAILED.count(Reason::Timeout);
            false
        }
    }
}

/// The two client halves, HTTP/1.1 and h2, behind one call.
pub trait Sender {
    fn call(
        &mut self,
        req: http::Request<Full<Bytes>>,
    ) -> impl Future<Output = Option<http::Response<hyper::body::Incoming>>>;
}

impl Sender for http1::SendRequest<Full<Bytes>> {
    async fn call(
        &mut self,
        req: http::Request<Full<Bytes>>,
    ) -> Option<http::Response<hyper::body::Incoming>> {
        self.ready().await.ok()?;
        self.send_request(req).await.ok()
    }
}

impl Sender for http2::SendRequest<Full<Bytes>> {
    async fn call(
        &mut self,
        req: http::Request<Full<Bytes>>,
    ) -> Option<http::Response<hyper::body::Incoming>> {
        self.send_request(req).await.ok()
    }
}

/// A node's connections, each after one GET.
pub async fn connect_node(i: usize, (h2, h1): (SocketAddr, SocketAddr)) -> Option<Node> {
    let ip = node_ip(i);
    let mut tasks = JoinSet::new();
    let mut kubelet = h2_conn(ip, h2, &mut tasks).await?;
    let mut plugin = h2_conn(ip, h2, &mut tasks).await?;
    let mut a = h1_conn(ip, h1, &mut tasks).await?;
    let mut b = h1_conn(ip, h1, &mut tasks).await?;
    let object = format!("/api/v1/namespaces/fleet/configmaps/node-{i}");
    let answered = [
        call(&mut kubelet, get(&object), 200).await,
        call(&mut plugin, get(&object), 200).await,
        call(&mut a, get(&object), 200).await,
        call(&mut b, get(&object), 200).await,
    ];
    answered.iter().all(|ok| *ok).then_some(Node {
        i,
        kubelet,
        _plugin: plugin,
        _h1: [a, b],
        tasks,
    })
}

/// The node's two watches on its kubelet connection, their events counted.
pub async fn watch_node(mut node: Node, events: Arc<AtomicU64>) -> Option<Node> {
    let i = node.i;
    for path in [
        format!(
            "/api/v1/namespaces/fleet/configmaps?watch=1&fieldSelector=metadata.name%3Dnode-{i}"
        ),
        format!(
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases?watch=1&fieldSelector=metadata.name%3Dnode-{i}"
        ),
    ] {
        let resp = tokio::time::timeout(
            Duration::from_secs(30),
            node.kubelet.send_request(get(&path)),
        )
        .await;
        let Ok(Ok(resp)) = resp else { return None };
        if resp.status() != 200 {
            return None;
        }
        let events = events.clone();
        node.tasks.spawn(async move {
            let mut body = resp.into_body();
            while let Some(Ok(frame)) = body.frame().await {
                if frame.is_data() {
                    events.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    Some(node)
}

/// Runs `step` on every item, `at_once` at a time; keeps what it gave back.
pub async fn each<T, R, F, Fut>(items: Vec<T>, at_once: usize, step: F) -> Vec<R>
where
    T: Send + 'static,
    R: Send + 'static,
    F: Fn(T) -> Fut,
    Fut: Future<Output = Option<R>> + Send + 'static,
{
    let mut nodes = Vec::with_capacity(items.len());
    let mut running = JoinSet::new();
    let n = items.len();
    for (k, item) in items.into_iter().enumerate() {
        running.spawn(step(item));
        while running.len() >= at_once || (k + 1 == n && !running.is_empty()) {
            if let Some(Ok(Some(node))) = running.join_next().await {
                nodes.push(node);
            }
        }
    }
    nodes
}
