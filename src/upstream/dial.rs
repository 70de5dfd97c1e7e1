//! Opening a connection to an apiserver endpoint, the one way the pool (HTTP/2) and upgrades
//! (HTTP/1.1) connect: TCP, then TLS with the credential's configuration and the protocol agreed by
//! ALPN, within the connect timeout. A failure marks the endpoint down, with the reason that
//! `/readyz` and a client's 503 show.

use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::InvalidDnsNameError;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::config::Endpoint;
use crate::identity::{Alpn, UpstreamTls};

/// A connection to an endpoint, before any HTTP.
pub(crate) enum Dialed {
    /// `http://`: cleartext.
    Plain(TcpStream),
    /// `https://`: TLS, with the protocol asked for agreed.
    Tls(Box<TlsStream<TcpStream>>),
}

/// Why a connection could not be opened.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DialError {
    /// TCP connect failed.
    #[error("{url}: {source}")]
    Tcp {
        /// The endpoint.
        url: Arc<str>,
        /// The socket's error.
        #[source]
        source: std::io::Error,
    },
    /// The endpoint's host is not a name TLS can verify.
    #[error("{url}: server name: {source}")]
    ServerName {
        /// The endpoint.
        url: Arc<str>,
        /// Why the name is invalid.
        #[source]
        source: InvalidDnsNameError,
    },
    /// `https://` with no upstream TLS configured.
    #[error(
        "{url}: https endpoints need --upstream-ca-file (and the front-proxy client certificate)"
    )]
    NoTlsConfig {
        /// The endpoint.
        url: Arc<str>,
    },
    /// The TLS handshake failed.
    #[error("{url}: TLS: {source}")]
    Tls {
        /// The endpoint.
        url: Arc<str>,
        /// tokio-rustls's error (a `rustls::Error` inside).
        #[source]
        source: std::io::Error,
    },
    /// The apiserver did not agree to the protocol by ALPN.
    #[error("{url}: the apiserver did not agree to {} by ALPN", alpn_name(*.alpn))]
    Alpn {
        /// The endpoint.
        url: Arc<str>,
        /// The protocol asked for.
        alpn: Alpn,
    },
    /// The HTTP/2 handshake failed.
    #[error("{url}: HTTP/2 handshake: {source}")]
    Handshake {
        /// The endpoint.
        url: Arc<str>,
        /// h2's error.
        #[source]
        source: h2::Error,
    },
    /// The HTTP/1.1 handshake (of an upgrade's connection) failed.
    #[error("{url}: HTTP/1.1 handshake: {source}")]
    Http1Handshake {
        /// The endpoint.
        url: Arc<str>,
        /// hyper's error.
        #[source]
        source: hyper::Error,
    },
    /// The connection closed as soon as it opened.
    #[error("{url}: the connection closed as it opened")]
    ClosedAtOnce {
        /// The endpoint.
        url: Arc<str>,
    },
    /// Not connected within the connect timeout.
    #[error("{url}: {what} within {within:?}")]
    TimedOut {
        /// The endpoint.
        url: Arc<str>,
        /// What did not happen in time.
        what: &'static str,
        /// The timeout.
        within: Duration,
    },
}

fn alpn_name(alpn: Alpn) -> &'static str {
    match alpn {
        Alpn::H2 => "HTTP/2 (ALPN h2)",
        Alpn::Http11 => "HTTP/1.1 (ALPN http/1.1)",
    }
}

/// Opens a connection to `endpoint` offering `alpn`, within `within`: TCP, then TLS with `tls`'s
/// configuration (its client certificate unless `anonymous`).
pub(crate) async fn dial(
    endpoint: &Endpoint,
    tls: Option<&UpstreamTls>,
    anonymous: bool,
    alpn: Alpn,
    within: Duration,
) -> Result<Dialed, DialError> {
    let url = || Arc::from(endpoint.url.as_str());
    match tokio::time::timeout(within, dial_once(endpoint, tls, anonymous, alpn, url)).await {
        Ok(r) => r,
        Err(_) => Err(DialError::TimedOut {
            url: url(),
            what: "no connection (TCP and TLS)",
            within,
        }),
    }
}

async fn dial_once(
    ep: &Endpoint,
    tls: Option<&UpstreamTls>,
    anonymous: bool,
    alpn: Alpn,
    url: impl Fn() -> Arc<str>,
) -> Result<Dialed, DialError> {
    let tcp = TcpStream::connect((ep.host.as_str(), ep.port))
        .await
        .map_err(|source| DialError::Tcp { url: url(), source })?;
    let _ = tcp.set_nodelay(true);
    if !ep.tls {
        return Ok(Dialed::Plain(tcp));
    }
    let Some(tls) = tls else {
        return Err(DialError::NoTlsConfig { url: url() });
    };
    let config = tls.config(anonymous, alpn);
    let name = rustls_pki_types::ServerName::try_from(ep.server_name.clone())
        .map_err(|source| DialError::ServerName { url: url(), source })?;
    let stream = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|source| DialError::Tls { url: url(), source })?;
    let wanted: &[u8] = match alpn {
        Alpn::H2 => b"h2",
        Alpn::Http11 => b"http/1.1",
    };
    let agreed = stream.get_ref().1.alpn_protocol();
    // An HTTP/1.1 server that does not speak ALPN at all agrees by default.
    if agreed != Some(wanted) && !(alpn == Alpn::Http11 && agreed.is_none()) {
        return Err(DialError::Alpn { url: url(), alpn });
    }
    Ok(Dialed::Tls(Box::new(stream)))
}
