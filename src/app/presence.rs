//! This replica's presence in the cluster, with `--advertise-address`.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::cluster::{Hooks, OnView, Presence, Report, Target, first_ready};
use crate::proxy::Proxy;

/// With `--advertise-address`, this replica's presence in the cluster: its Lease carrying what it
/// runs (`Proxy::fleet_report`), the others' read back into the proxy (`Proxy::fleet_seen`), the
/// `kubernetes` endpoints kept. Logs which mode is in force.
pub(super) fn publish(
    proxy: &Arc<Proxy>,
    settings: Option<crate::cluster::PublishSettings>,
    addr: SocketAddr,
    background: &CancellationToken,
) -> Option<Arc<Presence>> {
    let Some(mut publish) = settings else {
        tracing::info!(
            "single-replica mode (no --advertise-address): nothing is published; pins move at flipAt by this replica's clock alone"
        );
        return None;
    };
    // `--listen` on port 0: the port the kernel chose is the one clients reach.
    if publish.address.port() == 0 {
        publish.address.set_port(addr.port());
    }
    let routing = Arc::downgrade(proxy);
    let target: Target = Box::new(move || first_ready(&routing.upgrade()?.routing().backends));
    let (me, me_too) = (Arc::downgrade(proxy), Arc::downgrade(proxy));
    // By the proxy's clock, the one `flipAt` is judged by.
    let report: Report = Box::new(move |_| {
        me.upgrade()
            .map(|p| p.fleet_report(p.settings.clock.now()))
            .unwrap_or_default()
    });
    let on_view: OnView = Box::new(move |view, now, to_mine| {
        if let Some(p) = me_too.upgrade() {
            p.fleet_seen(view, now, to_mine);
        }
    });
    proxy.fleet_gates.enable(publish.interval);
    let hooks = Hooks {
        report,
        on_view,
        gates: proxy.fleet_gates.clone(),
    };
    let shared = (proxy.metrics.clone(), proxy.settings.clock.clone());
    let presence = Presence::spawn(publish, target, hooks, shared, background.clone());
    let _ = proxy.presence.set(presence.clone());
    tracing::info!(
        "fleet mode: this replica publishes its route table, pin moves and rollout aborts in its Lease, and a pin with flipAt moves when every live replica runs its move; /debug/fleet shows the replicas"
    );
    Some(presence)
}
