//! The identity of a client: from its verified certificate, user = CN and groups = O values.

use std::net::IpAddr;
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

/// Who a client is, for what it is held to (its limit of requests in flight, its record as an
/// offender): its verified user, else its address.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ClientKey<'a> {
    /// A user whose certificate skewgate verified.
    User(&'a str),
    /// Anyone else, by address.
    Address(IpAddr),
}

impl ClientKey<'_> {
    /// The client of a connection: its verified user, else its address.
    pub(crate) fn of(identity: Option<&Identity>, remote: std::net::SocketAddr) -> ClientKey<'_> {
        match identity {
            Some(id) => ClientKey::User(&id.user),
            None => ClientKey::Address(remote.ip()),
        }
    }

    /// A hash of the client, the key of its entries.
    pub(crate) fn hash(&self) -> u64 {
        match self {
            ClientKey::User(u) => xxhash_rust::xxh3::xxh3_64_with_seed(u.as_bytes(), 1),
            ClientKey::Address(IpAddr::V4(a)) => {
                xxhash_rust::xxh3::xxh3_64_with_seed(&a.octets(), 4)
            }
            ClientKey::Address(IpAddr::V6(a)) => {
                xxhash_rust::xxh3::xxh3_64_with_seed(&a.octets(), 6)
            }
        }
    }
}

impl std::fmt::Display for ClientKey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientKey::User(u) => write!(f, "user {u:?}"),
            ClientKey::Address(a) => write!(f, "address {a}"),
        }
    }
}
