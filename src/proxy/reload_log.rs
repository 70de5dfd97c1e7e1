//! What the status page says of the route file: when the running table was loaded, and whether the
//! file has failed to load since (with why), so that an operator who edits it to move a pin and
//! makes a mistake sees that nothing moved. Written at each reload, read by `/debug/routes`.

use std::sync::Mutex;
use std::time::SystemTime;

use serde_json::{Value, json};

use super::debug::rfc3339;

/// Errors kept of a failed load.
const ERRORS: usize = 8;

/// The route file's loads.
pub(crate) struct ReloadLog {
    inner: Mutex<Loads>,
}

struct Loads {
    /// When the running table was loaded.
    loaded: SystemTime,
    /// Since when the file has failed to load, the last try, and its errors.
    failing: Option<(SystemTime, SystemTime, Vec<String>)>,
}

impl ReloadLog {
    /// A log whose running table was loaded at `at`.
    pub(crate) fn new(at: SystemTime) -> ReloadLog {
        ReloadLog {
            inner: Mutex::new(Loads {
                loaded: at,
                failing: None,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Loads> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The file loaded at `at`: a new table (`applied`), or the running one again.
    pub(crate) fn loaded(&self, at: SystemTime, applied: bool) {
        let mut loads = self.lock();
        if applied {
            loads.loaded = at;
        }
        loads.failing = None;
    }

    /// The file failed to load at `at`, for `errors`.
    pub(crate) fn failed(&self, at: SystemTime, errors: impl Iterator<Item = String>) {
        let mut loads = self.lock();
        let since = loads.failing.as_ref().map_or(at, |(since, _, _)| *since);
        loads.failing = Some((since, at, errors.take(ERRORS).collect()));
    }

    /// `reload` in `/debug/routes`.
    pub(crate) fn json(&self) -> Value {
        let loads = self.lock();
        json!({
            "loadedAt": rfc3339(loads.loaded),
            "failing": loads.failing.as_ref().map(|(since, last, errors)| json!({
                "since": rfc3339(*since),
                "lastTry": rfc3339(*last),
                "errors": errors,
            })),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_failing_file_says_since_when_until_it_loads() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let at = |s: u64| t0 + Duration::from_secs(s);
        let log = ReloadLog::new(t0);
        log.failed(at(10), ["routes.yaml:3:5: first".to_owned()].into_iter());
        log.failed(at(20), (0..20).map(|i| format!("error {i}")));
        let failing = &log.json()["failing"];
        assert_eq!(failing["since"], "2027-01-15T08:00:10Z");
        assert_eq!(failing["lastTry"], "2027-01-15T08:00:20Z");
        assert_eq!(failing["errors"].as_array().map(Vec::len), Some(ERRORS));
        assert_eq!(log.json()["loadedAt"], "2027-01-15T08:00:00Z");
        // The file as it was: nothing failing, the running table still the one loaded at t0.
        log.loaded(at(30), false);
        assert_eq!(
            log.json(),
            json!({"loadedAt": "2027-01-15T08:00:00Z", "failing": null})
        );
        log.loaded(at(40), true);
        assert_eq!(log.json()["loadedAt"], "2027-01-15T08:00:40Z");
    }
}
