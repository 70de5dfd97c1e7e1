//! The pipeline's one entry, all the edge names of it besides `wire`: the pipeline the edge holds
//! (`Proxy`), a client connection's context (`ClientConn`, made once per connection), the request
//! handed in (`handle`) with its body and response types, and what the edge tells the pipeline of
//! its workers and of requests that never became requests.

use tokio_util::sync::CancellationToken;

use crate::identity::ClientKey;

pub(crate) use super::Proxy;
pub(crate) use super::body::ProxyBody;
pub(crate) use super::request_body::Incoming;
pub(crate) use super::service::{ClientConn, handle};

impl Proxy {
    /// On a worker, until `stop`: what the pipeline keeps per worker (its hold on the routing in
    /// force) is let go when the routing changes, whether or not a request comes.
    pub(crate) fn start_worker(&self, stop: CancellationToken) {
        self.routing.spawn_worker_release(stop);
    }

    /// Shutdown began: long-running responses (watches) end cleanly.
    pub(crate) fn end_long_running(&self) {
        self.stop_long_running.cancel();
    }

    /// Keeps `times` heads over `bound` (bytes, and the protocol) that a connection of `client`
    /// answered 431 before they were read whole, for the status page.
    pub(crate) fn heads_too_large(
        &self,
        client: ClientKey<'_>,
        times: usize,
        bound: (usize, &'static str),
    ) {
        let now = self.settings.clock.now();
        self.recent
            .heads_too_large(now, client.to_string(), times, bound);
    }
}
