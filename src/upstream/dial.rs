//! Opening a connection to an apiserver endpoint, the one way the pool (HTTP/2) and upgrades
//! (HTTP/1.1) connect: TCP, then TLS with the credential's configuration and the protocol agreed by
//! ALPN, within the connect timeout. A failure marks the endpoint down, with the reason that
//! `/readyz` and a client's 503 show.

use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::InvalidDnsNameError;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::UpstreamError;
use super::pool::{Credential, EndpointPool, EndpointState};
use crate::identity::Alpn;

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

impl EndpointPool {
    /// Opens a connection for `credential`'s requests offering `alpn`, within the connect timeout.
    /// A failure marks the endpoint down.
    pub(crate) async fn dial(
        &self,
        credential: Credential,
        alpn: Alpn,
    ) -> Result<Dialed, UpstreamError> {
        let within = self.settings().connect_timeout;
        let result = match tokio::time::timeout(within, self.dial_once(credential, alpn)).await {
            Ok(r) => r,
            Err(_) => Err(DialError::TimedOut {
                url: self.url(),
                what: "no connection (TCP and TLS)",
                within,
            }),
        };
        result.map_err(|e| self.connect_failed(e))
    }

    /// Marks the endpoint down for a failed connect, and makes the error a request's.
    pub(crate) fn connect_failed(&self, e: DialError) -> UpstreamError {
        self.set_state(EndpointState::Down);
        self.set_failure(Some(e.to_string()));
        UpstreamError::Connect(e)
    }

    /// The endpoint's URL, for errors.
    pub(crate) fn url(&self) -> Arc<str> {
        Arc::from(self.endpoint.url.as_str())
    }

    async fn dial_once(&self, credential: Credential, alpn: Alpn) -> Result<Dialed, DialError> {
        let ep = &self.endpoint;
        let tcp = TcpStream::connect((ep.host.as_str(), ep.port))
            .await
            .map_err(|source| DialError::Tcp {
                url: self.url(),
                source,
            })?;
        let _ = tcp.set_nodelay(true);
        if !ep.tls {
            return Ok(Dialed::Plain(tcp));
        }
        let Some(tls) = self.settings().tls.as_ref() else {
            return Err(DialError::NoTlsConfig { url: self.url() });
        };
        let config = tls.config(credential == Credential::Anonymous, alpn);
        let name =
            rustls_pki_types::ServerName::try_from(ep.server_name.clone()).map_err(|source| {
                DialError::ServerName {
                    url: self.url(),
                    source,
                }
            })?;
        let stream = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .map_err(|source| DialError::Tls {
                url: self.url(),
                source,
            })?;
        let wanted: &[u8] = match alpn {
            Alpn::H2 => b"h2",
            Alpn::Http11 => b"http/1.1",
        };
        let agreed = stream.get_ref().1.alpn_protocol();
        // An HTTP/1.1 server that does not speak ALPN at all agrees by default.
        if agreed != Some(wanted) && !(alpn == Alpn::Http11 && agreed.is_none()) {
            return Err(DialError::Alpn {
                url: self.url(),
                alpn,
            });
        }
        Ok(Dialed::Tls(Box::new(stream)))
    }
}
