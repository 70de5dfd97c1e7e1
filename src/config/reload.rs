//! Watches the routes path and the TLS files: hands every changed route table (or its errors) to
//! the caller, and tells it when the other files may have changed (it checks their bytes itself).
//!
//! The directories are watched, not the files: a ConfigMap update swaps a symlink, which a watch on the
//! file itself would miss. Events are debounced, for no longer than `MAX_SETTLE` (a folder
//! something else writes to all the time is never quiet), and a periodic poll catches anything the
//! watcher misses (network filesystems, exhausted inotify limits). A file whose bytes did not change is not
//! parsed again.

use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{ConfigErrors, RouteTable, load_path, route_files_in};

/// How long the directory must be quiet before a change is read.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// The longest a change waits for the directory to be quiet: a folder that something else writes
/// to all the time (a log beside the route files, a sidecar's temporary files) never is, and its
/// route files are read at least this often while it is busy.
const MAX_SETTLE: Duration = Duration::from_millis(500);

/// The bytes a route table was loaded from, to tell whether the path changed since.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Fingerprint(Option<Vec<u8>>);

/// Takes the fingerprint of `path`. Take it before loading: a change that lands between the two
/// is then seen as a change (and reloading an equal table is a no-op), never missed.
pub(crate) fn fingerprint(path: &Path) -> Fingerprint {
    Fingerprint(read_all(path))
}

/// What to watch.
pub(crate) struct Watch {
    /// The routes path: a route file, or a directory of them.
    pub(crate) routes: PathBuf,
    /// The routes as loaded at start.
    pub(crate) loaded: Fingerprint,
    /// Other files (certificates, keys, CAs) whose changes the caller reloads.
    pub(crate) files: Vec<PathBuf>,
    /// How often everything is checked besides the watch's events.
    pub(crate) poll: Duration,
}

/// The directory a watch of `path` watches: itself if it is one, else its parent.
fn directory_of(path: &Path) -> PathBuf {
    if path.is_dir() {
        return path.to_path_buf();
    }
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A watcher of `directories` that sends on `tx` at every event; `None` (polling only) when the
/// system refuses (no inotify, its limits exhausted).
fn watch_directories(directories: &[PathBuf], tx: mpsc::Sender<()>) -> Option<RecommendedWatcher> {
    let watcher = RecommendedWatcher::new(
        move |_event| {
            let _ = tx.try_send(());
        },
        notify::Config::default(),
    )
    .and_then(|mut w| {
        for dir in directories {
            w.watch(dir, RecursiveMode::NonRecursive)?;
        }
        Ok(w)
    });
    match watcher {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(directories = ?directories, error = %e, "cannot watch the routes and TLS directories; polling only");
            None
        }
    }
}

/// Until `stop`: calls `on_change` with each load of the routes that differs from the one loaded
/// and from the previous one, and `on_files` whenever something in a watched directory changed or
/// the poll interval passed.
pub(crate) fn spawn_watcher<F, G>(watch: Watch, stop: CancellationToken, on_change: F, on_files: G)
where
    F: Fn(Result<RouteTable, ConfigErrors>) + Send + 'static,
    G: Fn() + Send + 'static,
{
    let (tx, mut rx) = mpsc::channel::<()>(16);
    let mut directories: Vec<PathBuf> = std::iter::once(&watch.routes)
        .chain(&watch.files)
        .map(|p| directory_of(p))
        .collect();
    directories.sort();
    directories.dedup();
    let watcher = watch_directories(&directories, tx);
    let Watch {
        routes,
        loaded,
        poll,
        ..
    } = watch;
    tokio::spawn(async move {
        let _watcher = watcher;
        let mut last = loaded;
        let mut ticker = tokio::time::interval(poll);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = ticker.tick() => {}
                Some(()) = rx.recv() => settle(&mut rx).await,
            }
            on_files();
            let now = fingerprint(&routes);
            if now == last {
                continue;
            }
            last = now;
            on_change(load_path(&routes));
        }
    });
}

/// Waits until no event has come for `DEBOUNCE`, or `MAX_SETTLE` has passed since the first.
async fn settle(rx: &mut mpsc::Receiver<()>) {
    let deadline = tokio::time::Instant::now() + MAX_SETTLE;
    loop {
        let quiet = (tokio::time::Instant::now() + DEBOUNCE).min(deadline);
        match tokio::time::timeout_at(quiet, rx.recv()).await {
            Ok(Some(())) if tokio::time::Instant::now() < deadline => {}
            _ => return,
        }
    }
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
