//! The load bench's TLS scenario, as deployed: clients present certificates to the proxy, which
//! verifies them against the cluster CA, and the proxy reaches the apiserver over TLS with the
//! front-proxy client certificate, passing the user on in `X-Remote-User`. The simulator checks
//! both as kube-apiserver does (`--client-ca-file`, `--requestheader-client-ca-file`). HAProxy is
//! configured the same way; nginx is left out (it has no HTTP/2 to the upstream).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

#[path = "../tests/common/pki.rs"]
mod pki;

use super::targets::{Proc, Target, free_port, wait_ready, which, write_file};

/// A client connection, cleartext or TLS.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Connects to `addr`, with TLS when `tls` is given (no session resumption: kubelets and client-go
/// do full handshakes).
pub async fn dial(
    addr: SocketAddr,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Option<Box<dyn Io>> {
    let tcp = match TcpStream::connect(addr).await {
        Ok(t) => t,
        Err(e) => {
            eprintln!("connect to {addr} failed: {e}");
            return None;
        }
    };
    let _ = tcp.set_nodelay(true);
    let Some(config) = tls else {
        return Some(Box::new(tcp));
    };
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").ok()?;
    match tokio_rustls::TlsConnector::from(config.clone())
        .connect(name, tcp)
        .await
    {
        Ok(s) => Some(Box::new(s)),
        Err(e) => {
            eprintln!("TLS handshake with {addr} failed: {e}");
            None
        }
    }
}

/// The certificates, the TLS simulator and the proxies in front of it.
pub struct TlsSetup {
    pki: pki::Pki,
    pub sim: Proc,
    pub sim_addr: SocketAddr,
    pub targets: Vec<Target>,
}

impl TlsSetup {
    /// A client presenting alice's certificate, offering `alpn`.
    pub fn client(&self, alpn: &[u8]) -> Arc<rustls::ClientConfig> {
        let config = pki::client_config(&self.pki.ca, Some(&self.pki.alice), &[alpn]);
        let mut config = (*config).clone();
        config.resumption = rustls::client::Resumption::disabled();
        Arc::new(config)
    }
}

/// Starts a TLS simulator with `default/small`, then skewgate and HAProxy in front of it.
pub async fn start(exe: &str, dir: &Path) -> Option<TlsSetup> {
    let pki = pki::pki();
    let admin = pki
        .ca
        .issue(&pki.dir, "admin", "admin", &["system:masters"], &[]);
    let sim_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().ok()?;
    let sim = Proc::spawn(
        "tls simulator",
        Command::new(exe)
            .args(["sim", "--listen", &sim_addr.to_string()])
            .args(pki.sim_tls_flags()),
    )?;
    if !wait_ready(sim_addr).await {
        eprintln!("the TLS simulator did not start");
        return None;
    }
    let admin_tls = pki::client_config(&pki.ca, Some(&admin), &[b"http/1.1"]);
    let body = r#"{"metadata":{"name":"small"},"data":{"k":"v"}}"#;
    let created = pki::tls_call(
        sim_addr,
        admin_tls,
        false,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &[("content-type", "application/json")],
        Some(body),
    )
    .await;
    if !matches!(created, Ok((201, ..))) {
        eprintln!("creating default/small over TLS failed: {created:?}");
        return None;
    }
    let mut targets = vec![Target {
        name: "direct",
        h2: sim_addr,
        h1: sim_addr,
        process: None,
    }];
    if let Some(t) = start_skewgate(exe, dir, &pki, sim_addr).await {
        targets.push(t);
    }
    if let Some(t) = start_haproxy(dir, &pki, sim_addr).await {
        targets.push(t);
    }
    Some(TlsSetup {
        pki,
        sim,
        sim_addr,
        targets,
    })
}

async fn ready(name: &'static str, port: u16, process: Option<Proc>) -> Option<Target> {
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().ok()?;
    if process.is_some() && wait_ready(addr).await {
        return Some(Target {
            name,
            h2: addr,
            h1: addr,
            process,
        });
    }
    eprintln!("{name} (TLS) did not start");
    None
}

async fn start_skewgate(exe: &str, dir: &Path, p: &pki::Pki, sim: SocketAddr) -> Option<Target> {
    let routes = write_file(
        dir,
        "routes-tls.yaml",
        &format!(
            "apiVersion: skewgate.io/v1alpha1\nkind: RouteTable\nbackends:\n  - name: sim\n    endpoints: [https://{sim}]\nwrites:\n  default: sim\nreads:\n  default: sim\n"
        ),
    );
    let port = free_port();
    let process = Proc::spawn(
        "skewgate",
        Command::new(exe)
            .args(["serve", "--routes"])
            .arg(&routes)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--admin-listen", &format!("127.0.0.1:{}", free_port())])
            .args(["--goaway-chance=0", "--no-access-log"])
            .arg("--tls-cert-file")
            .arg(&p.serving.cert_file)
            .arg("--tls-private-key-file")
            .arg(&p.serving.key_file)
            .arg("--client-ca-file")
            .arg(&p.ca.cert_file)
            .arg("--upstream-ca-file")
            .arg(&p.ca.cert_file)
            .arg("--proxy-client-cert-file")
            .arg(&p.front_proxy_client.cert_file)
            .arg("--proxy-client-key-file")
            .arg(&p.front_proxy_client.key_file),
    );
    ready("skewgate", port, process).await
}

/// HAProxy as skewgate is set up: client certificates required and verified, the user's CN and
/// first O passed on as `X-Remote-User`/`X-Remote-Group` (client-sent ones dropped), h2 over TLS to
/// the apiserver with the front-proxy certificate, the apiserver's certificate verified.
async fn start_haproxy(dir: &Path, p: &pki::Pki, sim: SocketAddr) -> Option<Target> {
    let haproxy = which("haproxy")?;
    let serving = write_file(
        dir,
        "haproxy-serving.pem",
        &format!("{}{}", p.serving.cert_pem, p.serving.key_pem),
    );
    let front = write_file(
        dir,
        "haproxy-front-proxy.pem",
        &format!(
            "{}{}",
            p.front_proxy_client.cert_pem, p.front_proxy_client.key_pem
        ),
    );
    let ca = p.ca.cert_file.display();
    let port = free_port();
    let cfg = write_file(
        dir,
        "haproxy-tls.cfg",
        &format!(
            "global\n  nbthread 2\ndefaults\n  mode http\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n  http-reuse always\nfrontend fe\n  bind 127.0.0.1:{port} ssl crt {serving} ca-file {ca} verify required alpn h2,http/1.1\n  http-request del-header X-Remote-User\n  http-request del-header X-Remote-Group\n  http-request set-header X-Remote-User %[ssl_c_s_dn(cn)]\n  http-request set-header X-Remote-Group %[ssl_c_s_dn(o)]\n  default_backend be\nbackend be\n  server sim {sim} ssl crt {front} ca-file {ca} verify required verifyhost localhost alpn h2\n",
            serving = serving.display(),
            front = front.display(),
        ),
    );
    let process = Proc::spawn(
        "haproxy",
        Command::new(haproxy).arg("-db").arg("-f").arg(&cfg),
    );
    ready("haproxy", port, process).await
}

/// Handshake cost: `n` new connections, `concurrency` at a time, each a full TLS handshake with a
/// client certificate and one GET over h2, then closed. The rate, and the target's CPU per
/// connection (`None` for going direct).
pub async fn handshakes(
    target: &Target,
    config: &Arc<rustls::ClientConfig>,
    path: &'static str,
    n: usize,
    concurrency: usize,
) -> (f64, Option<f64>, usize) {
    let cpu0 = target.process.as_ref().map(Proc::cpu_seconds);
    let started = Instant::now();
    let mut failed = 0;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let (addr, config) = (target.h2, config.clone());
        tasks.spawn(async move { one_connection(addr, &config, path).await });
        if tasks.len() >= concurrency || i + 1 == n {
            while tasks.len() > if i + 1 == n { 0 } else { concurrency - 1 } {
                if !matches!(tasks.join_next().await, Some(Ok(true))) {
                    failed += 1;
                }
            }
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = target
        .process
        .as_ref()
        .map(Proc::cpu_seconds)
        .zip(cpu0)
        .map(|(a, b)| (a - b) * 1e6 / (n - failed).max(1) as f64);
    ((n - failed) as f64 / elapsed, cpu, failed)
}

async fn one_connection(addr: SocketAddr, config: &Arc<rustls::ClientConfig>, path: &str) -> bool {
    let Some(io) = dial(addr, Some(config)).await else {
        return false;
    };
    let Ok((mut send, conn)) = hyper::client::conn::http2::handshake::<_, _, Empty<Bytes>>(
        TokioExecutor::new(),
        TokioIo::new(io),
    )
    .await
    else {
        return false;
    };
    let conn = tokio::spawn(conn);
    let req = http::Request::get(format!("https://{addr}{path}"))
        .body(Empty::new())
        .expect("request");
    let ok = match tokio::time::timeout(Duration::from_secs(10), send.send_request(req)).await {
        Ok(Ok(r)) if r.status() == 200 => r.into_body().collect().await.is_ok(),
        Ok(Ok(r)) => {
            eprintln!("TLS request answered {}", r.status());
            false
        }
        _ => false,
    };
    drop(send);
    conn.abort();
    ok
}
