//! The upstream side's TLS: the configurations skewgate connects to apiservers with, one per
//! credential (front-proxy certificate or none) and protocol (h2 for the pool, http/1.1 for
//! upgrades), rebuilt when their files change on disk (a renewed front-proxy certificate, a rotated
//! apiserver CA) without a restart. A change that does not load keeps the running ones.

use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::ClientConfig;

use super::tls::{FileContents, TlsError, UpstreamTlsFiles, client_config};

/// The protocol a connection offers by ALPN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Alpn {
    /// HTTP/2: the pool's connections.
    H2,
    /// HTTP/1.1: upgrades (exec, attach, port-forward), which HTTP/2 cannot carry.
    Http11,
}

/// The four configurations built from one set of files.
struct Configs {
    /// Front-proxy certificate, then none (anonymous clients); h2 then http/1.1.
    by_use: [Arc<ClientConfig>; 4],
}

impl Configs {
    fn build(files: &UpstreamTlsFiles) -> Result<Configs, TlsError> {
        let front_proxy = client_config(files)?;
        let anonymous = without_client_certificate(&front_proxy);
        let http11 = |config: &Arc<ClientConfig>| {
            let mut c = ClientConfig::clone(config);
            c.alpn_protocols = vec![b"http/1.1".to_vec()];
            Arc::new(c)
        };
        Ok(Configs {
            by_use: [
                http11(&front_proxy),
                http11(&anonymous),
                front_proxy,
                anonymous,
            ],
        })
    }
}

/// The upstream TLS configurations in force, and the files they come from.
pub struct UpstreamTls {
    files: UpstreamTlsFiles,
    current: ArcSwap<Configs>,
    contents: FileContents,
}

impl std::fmt::Debug for UpstreamTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamTls")
            .field("files", &self.files)
            .finish()
    }
}

impl UpstreamTls {
    /// Loads the files; fails when they do not make a configuration.
    pub fn load(files: UpstreamTlsFiles) -> Result<Arc<UpstreamTls>, TlsError> {
        let contents = FileContents::read(files.paths());
        let configs = Configs::build(&files)?;
        Ok(Arc::new(UpstreamTls {
            files,
            current: ArcSwap::from_pointee(configs),
            contents,
        }))
    }

    /// The configuration for a connection: with the front-proxy certificate unless `anonymous`,
    /// offering `alpn`.
    pub(crate) fn config(&self, anonymous: bool, alpn: Alpn) -> Arc<ClientConfig> {
        let i = match alpn {
            Alpn::H2 => 2,
            Alpn::Http11 => 0,
        } + usize::from(anonymous);
        self.current.load().by_use[i].clone()
    }

    /// The files, to be watched.
    pub(crate) fn files(&self) -> impl Iterator<Item = &std::path::Path> {
        self.files.paths()
    }

    /// Rebuilds the configurations if a file changed; returns whether new ones are in force. New
    /// connections use them; open ones keep theirs.
    pub(crate) fn reload_if_changed(&self) -> bool {
        if !self.contents.changed(self.files.paths()) {
            return false;
        }
        match Configs::build(&self.files) {
            Ok(configs) => {
                self.current.store(Arc::new(configs));
                tracing::info!("upstream CA or front-proxy client certificate reloaded");
                true
            }
            Err(e) => {
                tracing::error!(error = %e, "upstream TLS files changed but do not load; keeping the running configuration");
                false
            }
        }
    }
}

/// `config` without its client certificate: what an anonymous client's requests are sent with.
fn without_client_certificate(config: &Arc<ClientConfig>) -> Arc<ClientConfig> {
    let mut anonymous = ClientConfig::clone(config);
    anonymous.client_auth_cert_resolver = Arc::new(NoClientCertificate);
    // A session resumed from a front-proxy connection would carry that connection's authentication:
    // anonymous connections keep sessions of their own.
    anonymous.resumption = rustls::client::Resumption::in_memory_sessions(64);
    Arc::new(anonymous)
}

/// Offers no client certificate, whatever the server asks.
#[derive(Debug)]
struct NoClientCertificate;

impl rustls::client::ResolvesClientCert for NoClientCertificate {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        None
    }

    fn has_certs(&self) -> bool {
        false
    }
}
