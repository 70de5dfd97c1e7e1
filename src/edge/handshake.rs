//! A client's TLS handshake that failed: logged, and counted by a bounded reason; the connection is
//! dropped, other clients are not affected.

use std::net::SocketAddr;

use super::Edge;

/// Logs and counts a failed handshake; the connection is dropped, other clients are not affected.
pub(super) fn handshake_failed(
    edge: &Edge,
    remote: SocketAddr,
    reason: &'static str,
    detail: &str,
) {
    tracing::info!(%remote, reason, detail, "TLS handshake failed");
    edge.metrics
        .tls_handshake_errors
        .with_label_values(&[reason])
        .inc();
}

/// A bounded reason label for a failed handshake, from rustls's error inside tokio-rustls's.
pub(super) fn reason_of(e: &std::io::Error) -> &'static str {
    use rustls::{AlertDescription as A, Error as E};
    let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<E>()) else {
        return if e.kind() == std::io::ErrorKind::UnexpectedEof {
            "eof"
        } else {
            "protocol"
        };
    };
    match tls {
        // Not TLS at all: plain HTTP, or bytes that are no TLS record.
        E::InvalidMessage(_) => "not_tls",
        E::InvalidCertificate(_) | E::NoCertificatesPresented | E::InvalidCertRevocationList(_) => {
            "bad_certificate"
        }
        E::AlertReceived(
            A::BadCertificate
            | A::UnsupportedCertificate
            | A::CertificateRevoked
            | A::CertificateExpired
            | A::CertificateUnknown
            | A::CertificateRequired
            | A::UnknownCA,
        ) => "bad_certificate",
        _ => "protocol",
    }
}
