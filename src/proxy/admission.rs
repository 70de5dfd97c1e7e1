//! Admission of a client's request: its place among its requests in flight (past its limit, 429).
//! A pinned write's own admission, held in its fence and then by the ledger, is `fence.rs`.

use std::net::SocketAddr;
use std::sync::Arc;

use super::limits::{ClientLimit, ClientLimits, ClientPermit};
use super::status::ProxyError;
use crate::identity::ClientKey;
use crate::identity::Identity;

/// The client's place among its requests in flight (after waiting its turn when it has too many),
/// or why there is none; `None` when there is no limit.
pub(crate) async fn admit_client(
    limits: &ClientLimits,
    limit: Option<&Arc<ClientLimit>>,
    identity: Option<&Identity>,
    remote: SocketAddr,
) -> Result<Option<ClientPermit>, ProxyError> {
    let Some(client) = limit else {
        return Ok(None);
    };
    client
        .acquire()
        .await
        .map(Some)
        .map_err(|_| ProxyError::ClientBusy {
            client: ClientKey::of(identity, remote).to_string(),
            limit: limits.limit(),
        })
}
