//! An HTTP/2 client over TLS as the pair's admin, as client-go is: one connection, many requests
//! at once on it. For the checks that need more writers than curl processes allow.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::harness::Pair;

/// Requests on one connection to `addr` (skewgate's `host:port`), cloned for each task.
#[derive(Clone)]
pub struct H2 {
    send: SendRequest<Full<Bytes>>,
    authority: String,
}

impl H2 {
    /// Connects to `addr`, verifying it with the pair's CA, presenting the admin certificate.
    pub async fn connect(pair: &Pair, addr: &str) -> H2 {
        let read = |f: &str| std::fs::read(pair.pki(f)).expect("pki file");
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(&read("ca.crt")) {
            roots.add(c.expect("CA PEM")).expect("CA");
        }
        let certs: Vec<CertificateDer> = CertificateDer::pem_slice_iter(&read("admin.crt"))
            .collect::<Result<_, _>>()
            .expect("admin.crt");
        let key = PrivateKeyDer::from_pem_slice(&read("admin.key")).expect("admin.key");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_client_auth_cert(certs, key)
            .expect("client certificate");
        config.alpn_protocols = vec![b"h2".to_vec()];
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let name = rustls_pki_types::ServerName::try_from("127.0.0.1").expect("name");
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .expect("TLS");
        let (send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                .await
                .expect("HTTP/2");
        tokio::spawn(conn);
        H2 {
            send,
            authority: addr.to_owned(),
        }
    }

    /// `method path` with a JSON `body` of `content_type`: the status code, and the body.
    pub async fn call(
        &mut self,
        method: &str,
        path: &str,
        content_type: &str,
        body: String,
    ) -> (u16, String) {
        let (code, _, body) = self
            .call_with_headers(method, path, content_type, body)
            .await;
        (code, body)
    }

    /// [`H2::call`], with the answer's headers.
    pub async fn call_with_headers(
        &mut self,
        method: &str,
        path: &str,
        content_type: &str,
        body: String,
    ) -> (u16, http::HeaderMap, String) {
        let req = http::Request::builder()
            .method(method)
            .uri(format!("https://{}{path}", self.authority))
            .header("content-type", content_type)
            .body(Full::new(Bytes::from(body)))
            .expect("request");
        let Ok(resp) = self.send.send_request(req).await else {
            let failed = "the connection failed".to_owned();
            return (0, http::HeaderMap::new(), failed);
        };
        let code = resp.status().as_u16();
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.map(|b| b.to_bytes());
        (
            code,
            parts.headers,
            String::from_utf8_lossy(&body.unwrap_or_default()).into_owned(),
        )
    }
}
