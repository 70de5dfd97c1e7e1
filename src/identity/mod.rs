//! Who a client is, and the TLS that proves it: serving and upstream TLS configurations, the user
//! and groups of a verified client certificate, and the hygiene of identity headers.
//!
//! Connection sharing only works if the upstream connection is the proxy's, so the proxy verifies
//! client certificates itself, removes every identity header a client sent, and forwards the
//! identity in `X-Remote-User` / `X-Remote-Group` on connections authenticated with the front-proxy
//! client certificate, as the Kubernetes aggregation layer does.

mod headers;
mod tls;
mod token;
mod upstream_tls;
mod user;

pub use headers::IdentityHeaders;
pub use headers::forward_identity;
pub(crate) use headers::{ForwardedIdentity, forward_made};
pub use tls::{ServingTls, TlsFiles, UpstreamTlsFiles};
pub use token::cached as token_identity;
pub use token::from_authorization as read_token_identity;
pub(crate) use upstream_tls::Alpn;
pub use upstream_tls::UpstreamTls;
pub(crate) use user::ClientKey;
pub use user::Identity;
pub(crate) use user::VerifiedClient;
