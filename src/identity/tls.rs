//! TLS configurations: the serving side (ALPN h2 and http/1.1, optional client certificates) and the
//! upstream side (the apiservers' CA, the front-proxy client certificate, ALPN h2).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// A TLS file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no usable PEM.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// rustls refused the combination.
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// The serving side's files.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// `--tls-cert-file`: the serving certificate chain (PEM).
    pub cert: PathBuf,
    /// `--tls-private-key-file`: its key (PEM).
    pub key: PathBuf,
    /// `--client-ca-file`: CAs that verify client certificates; without it clients are not asked.
    pub client_ca: Option<PathBuf>,
}

/// The upstream side's files.
#[derive(Clone, Debug, Default)]
pub struct UpstreamTlsFiles {
    /// `--upstream-ca-file`: CAs that verify apiserver certificates.
    pub ca: Option<PathBuf>,
    /// `--proxy-client-cert-file` and `--proxy-client-key-file`: the front-proxy identity.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn file_error(path: &Path, message: impl Into<String>) -> TlsError {
    TlsError::File {
        path: path.to_owned(),
        message: message.into(),
    }
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(path, format!("cannot read certificates: {e}")))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, format!("invalid PEM: {e}")))?;
    if certs.is_empty() {
        return Err(file_error(path, "holds no CERTIFICATE block"));
    }
    Ok(certs)
}

fn key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| file_error(path, format!("holds no usable private key: {e}")))
}

fn roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    for cert in certs(path)? {
        store
            .add(cert)
            .map_err(|e| file_error(path, format!("not a CA certificate: {e}")))?;
    }
    Ok(store)
}

/// The serving configuration: ALPN `h2` and `http/1.1`; with a client CA, client certificates are
/// requested and verified (a client without one is anonymous unless it brings a token).
pub(super) fn server_config(files: &TlsFiles) -> Result<Arc<ServerConfig>, TlsError> {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match &files.client_ca {
        Some(ca) => {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots(ca)?), provider())
                    .allow_unauthenticated()
                    .build()
                    .map_err(|e| TlsError::Config(format!("client CA {}: {e}", ca.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certs(&files.cert)?, key(&files.key)?)
        .map_err(|e| {
            TlsError::Config(format!(
                "{} and {}: {e}",
                files.cert.display(),
                files.key.display()
            ))
        })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The upstream configuration: apiservers verified against the CA, the front-proxy certificate
/// presented, ALPN `h2`.
pub(super) fn client_config(files: &UpstreamTlsFiles) -> Result<Arc<ClientConfig>, TlsError> {
    let Some(ca) = &files.ca else {
        return Err(TlsError::Config(
            "https:// endpoints need --upstream-ca-file to verify the apiservers".to_owned(),
        ));
    };
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots(ca)?);
    let mut config = match &files.client_cert {
        Some((cert, key_file)) => builder
            .with_client_auth_cert(certs(cert)?, key(key_file)?)
            .map_err(|e| TlsError::Config(format!("{}: {e}", cert.display())))?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// The bytes of a set of files as last loaded, to tell whether any changed.
pub(super) struct FileContents(std::sync::Mutex<Vec<Option<Vec<u8>>>>);

impl FileContents {
    pub(super) fn read<'p>(paths: impl Iterator<Item = &'p Path>) -> FileContents {
        FileContents(std::sync::Mutex::new(Self::contents(paths)))
    }

    fn contents<'p>(paths: impl Iterator<Item = &'p Path>) -> Vec<Option<Vec<u8>>> {
        paths.map(|p| std::fs::read(p).ok()).collect()
    }

    /// Whether the files' bytes differ from when last seen; remembers them.
    pub(super) fn changed<'p>(&self, paths: impl Iterator<Item = &'p Path>) -> bool {
        let now = Self::contents(paths);
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if *seen == now {
            return false;
        }
        *seen = now;
        true
    }
}

impl TlsFiles {
    pub(super) fn paths(&self) -> impl Iterator<Item = &Path> {
        [Some(&self.cert), Some(&self.key), self.client_ca.as_ref()]
            .into_iter()
            .flatten()
            .map(PathBuf::as_path)
    }
}

impl UpstreamTlsFiles {
    pub(super) fn paths(&self) -> impl Iterator<Item = &Path> {
        let (cert, key) = match &self.client_cert {
            Some((c, k)) => (Some(c), Some(k)),
            None => (None, None),
        };
        [self.ca.as_ref(), cert, key]
            .into_iter()
            .flatten()
            .map(PathBuf::as_path)
    }
}

/// The serving TLS configuration, rebuilt when its files change on disk (a renewed certificate, a
/// rotated client CA), without a restart. A change that does not load keeps the running one.
pub struct ServingTls {
    files: TlsFiles,
    current: arc_swap::ArcSwap<ServerConfig>,
    contents: FileContents,
}

impl std::fmt::Debug for ServingTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingTls")
            .field("files", &self.files)
            .finish()
    }
}

impl ServingTls {
    /// Loads the files; fails when they do not make a configuration.
    pub fn load(files: TlsFiles) -> Result<Arc<ServingTls>, TlsError> {
        let contents = FileContents::read(files.paths());
        let config = server_config(&files)?;
        Ok(Arc::new(ServingTls {
            files,
            current: arc_swap::ArcSwap::new(config),
            contents,
        }))
    }

    /// The configuration in force.
    pub(crate) fn config(&self) -> Arc<ServerConfig> {
        self.current.load_full()
    }

    /// The files, to be watched.
    pub(crate) fn files(&self) -> impl Iterator<Item = &Path> {
        self.files.paths()
    }

    /// Reloads the configuration if a file changed; returns whether a new one is in force.
    pub(crate) fn reload_if_changed(&self) -> bool {
        if !self.contents.changed(self.files.paths()) {
            return false;
        }
        match server_config(&self.files) {
            Ok(config) => {
                self.current.store(config);
                tracing::info!(cert = %self.files.cert.display(), "serving certificate or client CA reloaded");
                true
            }
            Err(e) => {
                tracing::error!(error = %e, "TLS files changed but do not load; keeping the running configuration");
                false
            }
        }
    }
}
