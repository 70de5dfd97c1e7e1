//! Certificates made at test time: a cluster CA for serving and client certificates, and a
//! front-proxy CA for the proxy's upstream identity, written to PEM files as kubeadm lays them out.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

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
