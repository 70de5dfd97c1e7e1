//! One watcher for everything that reloads: the route table, and every certificate and key,
//! serving and upstream.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::ServeOptions;
use crate::config;
use crate::proxy::Proxy;

/// One watcher for everything that reloads: the route table, and every certificate and key,
/// serving and upstream.
pub(super) fn watch_for_changes(
    proxy: &Arc<Proxy>,
    opts: &ServeOptions,
    loaded: config::Fingerprint,
    background: CancellationToken,
) {
    let serving_tls = opts.edge.tls.clone();
    let upstream_tls = opts.settings.pool.tls.clone();
    let files = serving_tls
        .iter()
        .flat_map(|t| t.files())
        .chain(upstream_tls.iter().flat_map(|t| t.files()))
        .map(std::path::Path::to_path_buf)
        .collect();
    let watch = config::Watch {
        routes: opts.routes.clone(),
        loaded,
        files,
        poll: opts.reload_poll,
    };
    let reloading = Arc::downgrade(proxy);
    let reconnecting = Arc::downgrade(proxy);
    config::spawn_watcher(
        watch,
        background,
        move |loaded| {
            if let Some(p) = reloading.upgrade() {
                p.reload(loaded);
            }
        },
        move || {
            if let Some(tls) = &serving_tls {
                tls.reload_if_changed();
            }
            // The apiserver checks the front-proxy certificate on every request: connections
            // made with the old one are replaced, their open streams left to finish.
            if let Some(tls) = &upstream_tls
                && tls.reload_if_changed()
                && let Some(p) = reconnecting.upgrade()
            {
                p.reconnect_upstreams();
            }
        },
    );
}
