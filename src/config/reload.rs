//! Watches the routes path and hands every changed route table (or its errors) to the caller.
//!
//! The directory is watched, not the file: a ConfigMap update swaps a symlink, which a watch on the
//! file itself would miss. Events are debounced, and a periodic poll catches anything the watcher
//! misses (network filesystems, exhausted inotify limits). A file whose bytes did not change is not
//! parsed again.

use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{ConfigErrors, RouteTable, load_path, route_files_in};

/// How long the directory must be quiet before a change is read.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// The bytes a route table was loaded from, to tell whether the path changed since.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Fingerprint(Option<Vec<u8>>);

/// Takes the fingerprint of `path`. Take it before loading: a change that lands between the two
/// is then seen as a change (and reloading an equal table is a no-op), never missed.
pub(crate) fn fingerprint(path: &Path) -> Fingerprint {
    Fingerprint(read_all(path))
}

/// Calls `on_change` with each load of `path` that differs from `loaded` and from the previous one,
/// until `stop`.
pub(crate) fn spawn_watcher<F>(
    path: PathBuf,
    loaded: Fingerprint,
    poll: Duration,
    stop: CancellationToken,
    on_change: F,
) where
    F: Fn(Result<RouteTable, ConfigErrors>) + Send + 'static,
{
    let (tx, mut rx) = mpsc::channel::<()>(16);
    let watched = if path.is_dir() {
        path.clone()
    } else {
        path.parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."))
    };
    let watcher = RecommendedWatcher::new(
        move |_event| {
            let _ = tx.try_send(());
        },
        notify::Config::default(),
    )
    .and_then(|mut w| w.watch(&watched, RecursiveMode::NonRecursive).map(|()| w));
    let watcher = match watcher {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(path = %watched.display(), error = %e, "cannot watch the routes directory; polling only");
            None
        }
    };
    tokio::spawn(async move {
        let _watcher = watcher;
        let mut last = loaded;
        let mut ticker = tokio::time::interval(poll);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = ticker.tick() => {}
                Some(()) = rx.recv() => {
                    // Debounce: wait until events stop arriving.
                    while let Ok(Some(())) = tokio::time::timeout(DEBOUNCE, rx.recv()).await {}
                }
            }
            let now = fingerprint(&path);
            if now == last {
                continue;
            }
            last = now;
            on_change(load_path(&path));
        }
    });
}

/// The bytes that make up the route table at `path`: the file, or the route files of a directory
/// with their names. `None` when nothing can be read.
fn read_all(path: &Path) -> Option<Vec<u8>> {
    if !path.is_dir() {
        return std::fs::read(path).ok();
    }
    let mut out = Vec::new();
    for file in route_files_in(path).ok()? {
        out.extend_from_slice(file.to_string_lossy().as_bytes());
        out.push(0);
        out.extend_from_slice(&std::fs::read(&file).ok()?);
        out.push(0);
    }
    Some(out)
}
