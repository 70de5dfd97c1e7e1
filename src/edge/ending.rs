//! How a client connection ends, and what it is held to for it: no first request in time, too many
//! resets, or an error of the client's (counted against it, `offenders`); and the heads
//! answered 431 before they were read whole, which never became requests, kept for the status
//! page (the pipeline's, told through `proxy::entry`).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::Edge;
use super::offenders::{cut_off_for_resets, is_client_fault, note_client_fault};
use super::resets::ResetBudget;
use super::signals::unless;
use crate::identity::{ClientKey, VerifiedClient};

/// A connection being served, either protocol.
pub(super) type Served<'a> =
    Pin<Box<dyn Future<Output = Result<(), Box<dyn std::error::Error + Send + Sync>>> + Send + 'a>>;

/// Who a connection's client is: its key (`ClientKey::hash`), its address, its verified identity.
#[derive(Clone, Copy)]
pub(super) struct ConnClient<'a> {
    pub key: u64,
    pub remote: SocketAddr,
    pub verified: Option<&'a VerifiedClient>,
}

impl ConnClient<'_> {
    /// Keeps `times` heads over `bound` (bytes, and the protocol) that the connection answered 431
    /// before they were read whole.
    pub(super) fn heads_too_large(&self, edge: &Edge, times: usize, bound: (usize, &'static str)) {
        if times == 0 {
            return;
        }
        let who = ClientKey::of(self.verified.map(|c| &c.identity), self.remote);
        edge.proxy.heads_too_large(who, times, bound);
    }
}

/// Why a connection was ended by skewgate.
enum Ended {
    NoRequest,
    Resets,
}

/// Runs a served connection until it ends, sends no first request in time, or resets too many of
/// its streams; says how it ended. `head_limit` is the longest HTTP/1.1 head it reads.
pub(super) async fn run_to_end(
    edge: &Edge,
    client: ConnClient<'_>,
    served: Served<'_>,
    (first_request, resets): (&AtomicBool, &ResetBudget),
    head_limit: usize,
) {
    // A client that connects (and completes TLS) but sends no request is closed, as a cleartext
    // one is: it would hold a descriptor and its buffers for nothing.
    let idle = no_request_within(edge.settings.first_request_timeout, first_request);
    let signal = std::pin::pin!(async {
        tokio::select! {
            () = idle => Ended::NoRequest,
            () = resets.exceeded() => Ended::Resets,
        }
    });
    let result = match unless(served, signal).await {
        Ok(r) => r,
        Err(Ended::NoRequest) => {
            let remote = client.remote;
            tracing::debug!(%remote, "no request within the first-request timeout; closing");
            Ok(())
        }
        Err(Ended::Resets) => {
            cut_off_for_resets(edge, client.key, client.remote);
            Ok(())
        }
    };
    if let Err(e) = result {
        ended_with_error(edge, client, &*e, head_limit);
    }
}

/// A client connection that ended with an error: logged, and counted against the client when the
/// client caused it. A head over `head_limit` (hyper's 431) is kept for the status page.
fn ended_with_error(
    edge: &Edge,
    client: ConnClient<'_>,
    e: &(dyn std::error::Error + Send + Sync + 'static),
    head_limit: usize,
) {
    let remote = client.remote;
    tracing::debug!(%remote, error = %e, "client connection ended with an error");
    if is_client_fault(e) {
        note_client_fault(edge, client.key, remote);
    }
    if e.downcast_ref::<hyper::Error>()
        .is_some_and(hyper::Error::is_parse_too_large)
    {
        client.heads_too_large(edge, 1, (head_limit, "HTTP/1.1"));
    }
}

/// Resolves when `deadline` has passed without a first request; never once one came.
async fn no_request_within(deadline: Duration, first_request: &AtomicBool) {
    tokio::time::sleep(deadline).await;
    if first_request.load(std::sync::atomic::Ordering::Relaxed) {
        std::future::pending::<()>().await;
    }
}
