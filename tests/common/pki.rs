//! Certificates made at test time: a cluster CA for serving and client certificates, and a
//! front-proxy CA for the proxy's upstream identity, written to PEM files as kubeadm lays them out.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;
use skewgate::edge::EdgeSettings;
use skewgate::identity::{ServingTls, TlsFiles, UpstreamTlsFiles};
use skewgate::proxy::ProxySettings;
use skewgate::upstream::PoolSettings;
use tokio::net::TcpStream;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

static PKIS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The PKI kubeadm lays out (`ca` for clients and serving, `front-proxy-ca` for the front-proxy
/// client certificate with CN `front-proxy-client`), plus a foreign CA and a client it signed.
pub struct Pki {
    pub dir: std::path::PathBuf,
    pub ca: Ca,
    pub front_proxy_ca: Ca,
    pub evil_ca: Ca,
    pub apiserver: Leaf,
    pub serving: Leaf,
    pub alice: Leaf,
    pub front_proxy_client: Leaf,
    pub mallory: Leaf,
}

/// A fresh PKI in a temporary directory.
pub fn pki() -> Pki {
    let dir = std::env::temp_dir().join(format!(
        "skewgate-test-pki-{}-{}",
        std::process::id(),
        PKIS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("pki dir");
    let ca = Ca::new(&dir, "ca");
    let front_proxy_ca = Ca::new(&dir, "front-proxy-ca");
    let evil_ca = Ca::new(&dir, "evil-ca");
    Pki {
        apiserver: ca.issue(
            &dir,
            "apiserver",
            "kube-apiserver",
            &[],
            &["localhost", "127.0.0.1"],
        ),
        serving: ca.issue(
            &dir,
            "skewgate",
            "skewgate",
            &[],
            &["localhost", "127.0.0.1"],
        ),
        alice: ca.issue(&dir, "alice", "alice", &["devs", "ops"], &[]),
        front_proxy_client: front_proxy_ca.issue(
            &dir,
            "front-proxy-client",
            "front-proxy-client",
            &[],
            &[],
        ),
        mallory: evil_ca.issue(&dir, "mallory", "mallory", &["system:masters"], &[]),
        dir,
        ca,
        front_proxy_ca,
        evil_ca,
    }
}

impl Pki {
    /// `skewgate sim`'s flags to serve as kubeadm's apiserver: its certificate, the cluster CA for
    /// client certificates, and the front-proxy CA for request headers from `front-proxy-client`.
    pub fn sim_tls_flags(&self) -> Vec<std::ffi::OsString> {
        let flag = |name: &str, file: &Path| [name.into(), file.as_os_str().to_owned()];
        [
            flag("--tls-cert-file", &self.apiserver.cert_file),
            flag("--tls-private-key-file", &self.apiserver.key_file),
            flag("--client-ca-file", &self.ca.cert_file),
            flag(
                "--requestheader-client-ca-file",
                &self.front_proxy_ca.cert_file,
            ),
            [
                "--requestheader-allowed-names".into(),
                "front-proxy-client".into(),
            ],
        ]
        .concat()
    }
}

/// skewgate as README tells a kubeadm user to run it: serving TLS with the cluster CA for clients,
/// and upstream the cluster CA and (with `front_proxy_cert`) the front-proxy certificate.
pub fn settings(p: &Pki, front_proxy_cert: bool) -> (ProxySettings, EdgeSettings) {
    let tls = ServingTls::load(TlsFiles {
        cert: p.serving.cert_file.clone(),
        key: p.serving.key_file.clone(),
        client_ca: Some(p.ca.cert_file.clone()),
    })
    .expect("serving TLS");
    let upstream = skewgate::identity::UpstreamTls::load(UpstreamTlsFiles {
        ca: Some(p.ca.cert_file.clone()),
        client_cert: front_proxy_cert.then(|| {
            (
                p.front_proxy_client.cert_file.clone(),
                p.front_proxy_client.key_file.clone(),
            )
        }),
    })
    .expect("upstream TLS");
    let proxy = ProxySettings {
        pool: PoolSettings {
            tls: Some(upstream),
            ..PoolSettings::default()
        },
        ..ProxySettings::default()
    };
    let edge = EdgeSettings {
        tls: Some(tls),
        ..EdgeSettings::default()
    };
    (proxy, edge)
}

/// A kubeconfig for alice's certificate and skewgate over TLS on `port`.
pub fn alice_kubeconfig(p: &Pki, port: u16) -> PathBuf {
    let kubeconfig = p.dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{port}\n    certificate-authority: {}\nusers:\n- name: alice\n  user:\n    client-certificate: {}\n    client-key: {}\ncontexts:\n- name: c\n  context: {{cluster: c, user: alice}}\ncurrent-context: c\n",
            p.ca.cert_file.display(),
            p.alice.cert_file.display(),
            p.alice.key_file.display()
        ),
    )
    .expect("kubeconfig");
    kubeconfig
}

/// A CA that signs certificates.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pub cert_pem: String,
    pub cert_file: PathBuf,
}

/// A signed certificate and its key, as PEM files.
pub struct Leaf {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub cert_pem: String,
    pub key_pem: String,
}

impl Ca {
    pub fn new(dir: &Path, name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("self-signed");
        let cert_file = dir.join(format!("{name}.crt"));
        std::fs::write(&cert_file, cert.pem()).expect("write");
        Ca {
            issuer: Issuer::new(params, key),
            cert_pem: cert.pem(),
            cert_file,
        }
    }

    /// A certificate for `common_name` with organizations `orgs`, valid for `names` (DNS or IP).
    pub fn issue(
        &self,
        dir: &Path,
        file: &str,
        common_name: &str,
        orgs: &[&str],
        names: &[&str],
    ) -> Leaf {
        self.issue_with(dir, file, common_name, orgs, names, false)
    }

    /// Like `issue`, but expired in 2021.
    pub fn issue_expired(&self, dir: &Path, file: &str, common_name: &str) -> Leaf {
        self.issue_with(dir, file, common_name, &[], &[], true)
    }

    fn issue_with(
        &self,
        dir: &Path,
        file: &str,
        common_name: &str,
        orgs: &[&str],
        names: &[&str],
        expired: bool,
    ) -> Leaf {
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .expect("params");
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        // rcgen keeps one value per attribute type; a second O goes in under its raw OID
        // (2.5.4.10), which encodes the same attribute.
        assert!(orgs.len() <= 2, "at most two organizations");
        for (i, o) in orgs.iter().enumerate() {
            let ty = if i == 0 {
                DnType::OrganizationName
            } else {
                DnType::CustomDnType(vec![2, 5, 4, 10])
            };
            params.distinguished_name.push(ty, *o);
        }
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("signed");
        let (cert_file, key_file) = (
            dir.join(format!("{file}.crt")),
            dir.join(format!("{file}.key")),
        );
        std::fs::write(&cert_file, cert.pem()).expect("write");
        std::fs::write(&key_file, key.serialize_pem()).expect("write");
        Leaf {
            cert_file,
            key_file,
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn roots(ca_pem: &str) -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.expect("pem")).expect("root");
    }
    roots
}

/// A client configuration trusting `ca`, presenting `cert` when given, offering `alpn`.
pub fn client_config(ca: &Ca, cert: Option<&Leaf>, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots(&ca.cert_pem));
    let mut config = match cert {
        Some(leaf) => builder
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(leaf.cert_pem.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .expect("certs"),
                PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).expect("key"),
            )
            .expect("client auth"),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// A serving configuration with `cert` that requires client certificates signed by `client_ca`,
/// as an apiserver requires the front-proxy certificate.
pub fn server_requiring_clients(cert: &Leaf, client_ca: &Ca) -> Arc<rustls::ServerConfig> {
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots(&client_ca.cert_pem)),
        provider(),
    )
    .build()
    .expect("verifier");
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            CertificateDer::pem_slice_iter(cert.cert_pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .expect("certs"),
            PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).expect("key"),
        )
        .expect("server config");
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(config)
}

/// One request over TLS with `config`; h2 or HTTP/1.1 by `h2`: its status, the simulator version
/// that answered, and its JSON body (`Null` when not JSON). Err when the connection fails.
pub async fn tls_call(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    h2: bool,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Result<(u16, String, Value), String> {
    let tls = connect_tls(addr, config).await?;
    let mut req = http::Request::builder().method(method).uri(if h2 {
        format!("https://{addr}{path}")
    } else {
        path.to_owned()
    });
    if !h2 {
        req = req.header("host", "skewgate");
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let body = Full::new(Bytes::from(body.unwrap_or_default().to_owned()));
    let req = req.body(body).map_err(|e| e.to_string())?;
    let resp = if h2 {
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                .await
                .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        send.send_request(req).await.map_err(|e| e.to_string())?
    } else {
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        send.send_request(req).await.map_err(|e| e.to_string())?
    };
    let status = resp.status().as_u16();
    let version = resp
        .headers()
        .get(skewgate_sim::VERSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((
        status,
        version,
        serde_json::from_slice(&body).unwrap_or(Value::Null),
    ))
}

/// Opens a request over TLS (HTTP/2) with `config` whose response streams: the response, its body
/// not read.
pub async fn tls_open(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<http::Response<hyper::body::Incoming>, String> {
    let tls = connect_tls(addr, config).await?;
    let mut req = http::Request::builder().uri(format!("https://{addr}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    send.send_request(req).await.map_err(|e| e.to_string())
}

/// A TLS connection to skewgate at `addr` (named 127.0.0.1) with `config`.
async fn connect_tls(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").map_err(|e| e.to_string())?;
    tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())
}
