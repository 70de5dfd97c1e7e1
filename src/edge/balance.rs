//! Client connections spread over the workers by how many each serves.
//!
//! Every worker accepts on the one listening socket, and the kernel gives a connection to whichever
//! worker's accept comes first. Under load that is often the same worker, so a handful of busy
//! HTTP/2 connections (kube-controller-manager's, the scheduler's, a load test's four) could all
//! land on one worker while the others idle: one core doing the work of a replica started with
//! several. The load bench found all four of its h2c connections on one of two workers.
//!
//! So the worker that accepts a connection hands it to the worker that serves the fewest (itself on
//! a tie), as HAProxy hands each accepted connection to its least loaded thread. The hand-over is a
//! channel send and a wake-up per connection, before TLS or any byte is read.

use std::net::SocketAddr;
use std::sync::Arc;

use prometheus::IntGauge;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::OwnedSemaphorePermit;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio_util::sync::CancellationToken;

use super::capacity::ConnectionSlots;
use crate::metrics::Metrics;

/// The workers' connection counts and the inboxes through which they hand connections over.
pub(crate) struct Balance {
    /// Connections each worker serves now (`skewgate_worker_connections{worker}`).
    serving: Box<[IntGauge]>,
    inboxes: Box<[UnboundedSender<Handed>]>,
}

/// A worker's inbox of connections handed to it.
pub(crate) type Inbox = UnboundedReceiver<Handed>;

/// A connection accepted by one worker for another to serve.
pub(crate) struct Handed {
    stream: std::net::TcpStream,
    remote: SocketAddr,
    slot: OwnedSemaphorePermit,
    place: Place,
}

/// A connection's place among its worker's; given back when the connection ends.
pub(crate) struct Place(IntGauge);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// A client connection for this worker to serve.
pub(crate) struct Arrival {
    pub stream: TcpStream,
    pub remote: SocketAddr,
    /// Its place under the connection bound.
    pub slot: OwnedSemaphorePermit,
    pub place: Place,
}

impl Balance {
    /// The balance of `workers` workers, and each worker's inbox (in order).
    pub(crate) fn new(workers: usize, metrics: &Metrics) -> (Arc<Balance>, Vec<Inbox>) {
        let (inboxes, receivers): (Vec<_>, Vec<_>) =
            (0..workers).map(|_| unbounded_channel()).unzip();
        let serving = (0..workers)
            .map(|i| {
                metrics
                    .worker_connections
                    .with_label_values(&[&i.to_string()])
            })
            .collect();
        let balance = Balance {
            serving,
            inboxes: inboxes.into(),
        };
        (Arc::new(balance), receivers)
    }

    /// The worker to serve a connection that worker `me` accepted: the one serving the fewest,
    /// `me` on a tie. The connection is counted there at once, so that the next choice, on any
    /// worker, sees it.
    fn choose(&self, me: usize) -> (usize, Place) {
        let mine = self.serving.get(me).map_or(i64::MAX, IntGauge::get);
        let (to, _) = self
            .serving
            .iter()
            .enumerate()
            .map(|(i, g)| (i, g.get()))
            .fold(
                (me, mine),
                |best, (i, n)| if n < best.1 { (i, n) } else { best },
            );
        (to, self.place(to))
    }

    /// A place among worker `w`'s connections.
    fn place(&self, w: usize) -> Place {
        let gauge = self.serving.get(w).cloned().unwrap_or_else(|| {
            // Not a worker's index, which cannot be: every intake is made for one of the
            // server's workers. Counted nowhere rather than a panic.
            IntGauge::new("unbalanced", "-").unwrap_or_else(|_| unreachable!())
        });
        gauge.inc();
        Place(gauge)
    }
}

/// Where one worker's connections come from: its accepts and its inbox.
pub(crate) struct Intake {
    me: usize,
    listener: TcpListener,
    inbox: Inbox,
    balance: Arc<Balance>,
    /// A place under the connection bound, taken before the next accept.
    slot: Option<OwnedSemaphorePermit>,
}

impl Intake {
    /// Worker `me`'s intake.
    pub(crate) fn new(
        me: usize,
        listener: TcpListener,
        inbox: Inbox,
        balance: Arc<Balance>,
    ) -> Intake {
        Intake {
            me,
            listener,
            inbox,
            balance,
            slot: None,
        }
    }

    /// The next connection this worker is to serve, accepted here or handed over; `None` once
    /// `stop` fires. A worker accepts only with a place under the connection bound (at the bound,
    /// connections wait in the backlog, not in EMFILE); connections handed to it carry their own.
    /// Connections still in the inbox when the worker stops are closed unread with the intake: by
    /// then the replica has drained and left the Service, so few can be.
    pub(crate) async fn next(
        &mut self,
        slots: &ConnectionSlots,
        stop: &CancellationToken,
    ) -> Option<Arrival> {
        loop {
            tokio::select! {
                biased;
                () = stop.cancelled() => return None,
                Some(handed) = self.inbox.recv() => {
                    if let Some(client) = take_over(handed) {
                        return Some(client);
                    }
                }
                slot = slots.acquire(), if self.slot.is_none() => self.slot = Some(slot),
                accepted = skewgate_shared::next_connection(&self.listener, stop, "proxy"), if self.slot.is_some() => {
                    let (stream, remote) = accepted?;
                    let slot = self.slot.take()?;
                    if let Some(client) = self.assign(stream, remote, slot) {
                        return Some(client);
                    }
                }
            }
        }
    }

    /// Serves an accepted connection here, or hands it to the worker serving the fewest.
    fn assign(
        &self,
        stream: TcpStream,
        remote: SocketAddr,
        slot: OwnedSemaphorePermit,
    ) -> Option<Arrival> {
        let (to, place) = self.balance.choose(self.me);
        if to == self.me {
            return Some(Arrival {
                stream,
                remote,
                slot,
                place,
            });
        }
        let stream = match stream.into_std() {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(%remote, error = %e, "cannot hand a connection over; closed");
                return None;
            }
        };
        let handed = Handed {
            stream,
            remote,
            slot,
            place,
        };
        let Err(back) = self.balance.inboxes.get(to)?.send(handed) else {
            return None;
        };
        // That worker has stopped (so is this one, about to): served here.
        let Handed {
            stream,
            remote,
            slot,
            ..
        } = back.0;
        let place = self.balance.place(self.me);
        take_over(Handed {
            stream,
            remote,
            slot,
            place,
        })
    }
}

/// A handed-over connection, registered with this worker's runtime.
fn take_over(handed: Handed) -> Option<Arrival> {
    let Handed {
        stream,
        remote,
        slot,
        place,
    } = handed;
    match TcpStream::from_std(stream) {
        Ok(stream) => Some(Arrival {
            stream,
            remote,
            slot,
            place,
        }),
        Err(e) => {
            tracing::debug!(%remote, error = %e, "cannot take a handed-over connection; closed");
            None
        }
    }
}
