//! The edge: the wire clients speak to skewgate on. It accepts TCP (each connection handed to the
//! worker serving the fewest, `balance`), tells TLS, HTTP/2 and HTTP/1.1 apart (`detect`,
//! `handshake`), serves HTTP/1.1 (`http1`, and hyper's bursts for the rest, `keepalive`) and HTTP/2
//! (`http2`, frame by frame), bounds what a client may do on a connection (`resets`, and what a
//! connection watches beside its requests, `signals`), and holds clients to what the process can
//! give: connection slots and memory given back (`capacity`), offenders held back before they are
//! served (`offenders`), long-lived connections spread again by GOAWAY (`rebalance`), each by its
//! own settings (`settings`). It hands each request to the pipeline through one entry
//! (`crate::proxy::entry`); the pipeline names none of its types (`crate::proxy::wire`).

mod balance;
pub(crate) mod capacity;
mod detect;
mod ending;
mod handshake;
pub(crate) mod http1;
pub(crate) mod http2;
mod keepalive;
mod listener;
mod offenders;
mod policy;
mod rebalance;
mod resets;
mod settings;
mod signals;

pub(crate) use balance::{Balance, Inbox};
pub(crate) use listener::serve;
pub use settings::EdgeSettings;

use std::sync::Arc;

use crate::metrics::Metrics;
use crate::proxy::entry::Proxy;
use crate::upstream::ResponseBudget;

/// The HTTP/2 server's frames-in, frames-out core driven by `input` as a client's bytes after the
/// preface, its invariants checked after every read (`fuzz/fuzz_targets/http2_server.rs`).
#[cfg(feature = "fuzzing")]
pub fn fuzz_http2_server(input: &[u8]) {
    http2::fuzzing::serve_frames(input);
}

/// One worker's share of the clients, on its own runtime: accepting on its clone of the listener
/// and from its inbox, until `stop`. Whether every connection closed within the grace period.
pub(crate) async fn serve_worker(
    i: usize,
    edge: Arc<Edge>,
    (listener, balance, inbox): (std::net::TcpListener, Arc<Balance>, Inbox),
    stop: tokio_util::sync::CancellationToken,
) -> bool {
    // Header blocks as literals, as HAProxy writes them, on both sides of every connection this
    // worker serves: no dynamic-table look-ups and no Huffman coding (vendor/README.md).
    h2::set_literal_header_encoding(true);
    match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => {
            serve(
                edge,
                balance::Intake::new(i, listener, inbox, balance),
                stop,
            )
            .await
        }
        Err(e) => {
            tracing::error!(worker = i, error = %e, "cannot use the listener");
            false
        }
    }
}

/// What the edge shares across its workers: its settings, what it holds clients to (connection
/// slots, offenders, rebalancing), and the pipeline it hands requests to.
pub(crate) struct Edge {
    pub(crate) settings: EdgeSettings,
    /// The request pipeline.
    pub(crate) proxy: Arc<Proxy>,
    pub(crate) metrics: Arc<Metrics>,
    /// Client connections held at once.
    pub(crate) connection_slots: Arc<capacity::ConnectionSlots>,
    /// Clients whose connections were closed for resets, held back on reconnecting.
    offenders: offenders::Offenders,
    /// `settings.goaway_chance` in millionths.
    goaway_chance: u32,
    /// The largest header list the apiservers are sent (the HTTP/1.1 head bound is twice it).
    header_list: usize,
    /// The bound on response data held for all clients, that HTTP/2 clients' stalls answer to.
    budget: Arc<ResponseBudget>,
}

impl Edge {
    /// The edge of `proxy`, holding clients to `settings`; `header_list` and `budget` are the
    /// upstream's bounds its clients' requests and responses meet.
    pub(crate) fn new(
        settings: EdgeSettings,
        proxy: Arc<Proxy>,
        metrics: Arc<Metrics>,
        (header_list, budget): (usize, Arc<ResponseBudget>),
    ) -> Arc<Edge> {
        let slots = match settings.max_client_connections {
            0 => capacity::default_max_connections(capacity::raise_fd_limit()),
            n => n,
        };
        Arc::new(Edge {
            connection_slots: Arc::new(capacity::ConnectionSlots::new(slots)),
            offenders: offenders::Offenders::new(settings.hold_back_offenders),
            goaway_chance: rebalance::per_million(settings.goaway_chance),
            settings,
            proxy,
            metrics,
            header_list,
            budget,
        })
    }
}
