//! The identity of a client: from its verified certificate, user = CN and groups = O values.

use std::sync::Arc;

use rustls_pki_types::CertificateDer;
use x509_parser::prelude::{FromDer, X509Certificate};

use super::headers::ForwardedIdentity;

/// A client's user and groups; empty for an anonymous client (or one that brings a token, which the
/// apiserver authenticates itself).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// The user name (the certificate's common name).
    pub user: String,
    /// The groups (the certificate's organization values).
    pub groups: Vec<String>,
}

/// A client whose certificate was verified: its identity, and the header values that forward it.
/// Made once per connection at the handshake.
#[derive(Debug)]
pub(crate) struct VerifiedClient {
    /// Who it is.
    pub(crate) identity: Identity,
    /// Its identity as header values.
    pub(crate) forwarded: ForwardedIdentity,
}

impl VerifiedClient {
    /// The client of a verified certificate; `None` when it names no user.
    pub(crate) fn from_certificate(cert: &CertificateDer<'_>) -> Option<Arc<VerifiedClient>> {
        let identity = Identity::from_certificate(cert)?;
        Some(Arc::new(VerifiedClient {
            forwarded: ForwardedIdentity::of(&identity),
            identity,
        }))
    }
}

impl Identity {
    /// The identity in a verified client certificate; `None` when it names no user.
    pub(crate) fn from_certificate(cert: &CertificateDer<'_>) -> Option<Identity> {
        let (_, parsed) = X509Certificate::from_der(cert.as_ref()).ok()?;
        let subject = parsed.subject();
        let user = subject.iter_common_name().next()?.as_str().ok()?.to_owned();
        if user.is_empty() {
            return None;
        }
        let groups = subject
            .iter_organization()
            .filter_map(|o| o.as_str().ok())
            .map(str::to_owned)
            .collect();
        Some(Identity { user, groups })
    }

    /// The groups as string slices, for selectors.
    pub fn group_refs(&self) -> Vec<&str> {
        self.groups.iter().map(String::as_str).collect()
    }
}
