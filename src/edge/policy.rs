//! What the edge holds one client connection to, as the pipeline reports its requests
//! (`proxy::wire::ConnectionPolicy`): a request failed by the client's fault counts against it
//! (`offenders`), one known only by its address waits out its hold before such an answer, and a
//! response may draw the connection's rebalancing GOAWAY (`rebalance`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::Edge;
use super::offenders::{note_client_fault, probation};
use super::rebalance::Goaway;
use crate::proxy::wire::ConnectionPolicy;

/// One connection's policy.
pub(super) struct Policy {
    pub edge: Arc<Edge>,
    /// The client's key (`ClientKey::hash`).
    pub key: u64,
    pub remote: SocketAddr,
    /// Whether the client is known only by its address (no verified certificate).
    pub by_address: bool,
    /// The connection's GOAWAY, when its requests may draw one (HTTP/2, a chance set).
    pub goaway: Option<Arc<Goaway>>,
}

impl ConnectionPolicy for Policy {
    fn client_fault(&self) {
        note_client_fault(&self.edge, self.key, self.remote);
    }

    fn probation(&self) -> Option<Duration> {
        if !self.by_address {
            return None;
        }
        probation(&self.edge, self.key)
    }

    fn answered(&self, long_running: bool) {
        if let Some(g) = &self.goaway
            && g.after_response(self.edge.goaway_chance, long_running)
        {
            self.edge
                .metrics
                .client_goaways
                .with_label_values(&["rebalance"])
                .inc();
        }
    }
}
