//! The worker threads: one single-threaded runtime each, serving the edge's share of clients.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio_util::sync::CancellationToken;

use super::StartError;
use crate::edge::{Balance, Edge, Inbox};

/// Starts `workers` threads, each accepting on its clone of `listener` (bound to `addr`) and from
/// its inbox, until `stop`. Each thread says whether every connection closed within the grace
/// period.
pub(super) fn spawn(
    edge: &Arc<Edge>,
    workers: usize,
    (listener, addr): (std::net::TcpListener, SocketAddr),
    stop: &CancellationToken,
) -> Result<Vec<JoinHandle<bool>>, StartError> {
    let (balance, inboxes) = Balance::new(workers, &edge.metrics);
    let mut handles = Vec::with_capacity(workers);
    for (i, inbox) in inboxes.into_iter().enumerate() {
        let listener = listener
            .try_clone()
            .map_err(|error| StartError::Bind { addr, error })?;
        let (edge, stop) = (edge.clone(), stop.clone());
        let balance = balance.clone();
        let handle = std::thread::Builder::new()
            .name(format!("skewgate-worker-{i}"))
            .spawn(move || run_worker(i, edge, (listener, balance, inbox), stop))
            .map_err(|error| StartError::Bind { addr, error })?;
        handles.push(handle);
    }
    Ok(handles)
}

/// One worker thread: a single-threaded runtime accepting on a clone of the listener, so a client
/// connection, its requests and their upstream streams all run on this thread.
fn run_worker(
    i: usize,
    edge: Arc<Edge>,
    (listener, balance, inbox): (std::net::TcpListener, Arc<Balance>, Inbox),
    stop: CancellationToken,
) -> bool {
    crate::runtime::worker::enter(i);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(worker = i, error = %e, "cannot start a worker runtime");
            return false;
        }
    };
    runtime.block_on(crate::edge::serve_worker(
        i,
        edge,
        (listener, balance, inbox),
        stop,
    ))
}
