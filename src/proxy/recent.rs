//! What the status page shows of the recent past that no counter keeps: the errors skewgate
//! answered itself (429, 431, 502, 503, 504) with their reason, and the guards' decisions with the
//! fields they named. Written only on those paths, under a lock held for a push; nothing on a
//! request that succeeds. Read by `/debug/recent`.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use super::debug::rfc3339;

/// Distinct errors kept (an error like the newest one is counted on it, not kept again).
const ERRORS: usize = 48;
/// Guard decisions kept.
const GUARDED: usize = 24;
/// Fields named per guard decision.
const FIELDS: usize = 8;
/// Characters of an error's message kept.
pub(crate) const MESSAGE: usize = 300;
/// The span guard decisions are counted over: an hour, in minutes.
const MINUTES: u64 = 60;

/// The codes an error skewgate answered itself is kept for: the client was held back (429), its
/// head was too large for the apiserver (431), or the apiserver could not be reached, failed or was
/// too slow (502, 503, 504). A client's own malformed request is counted elsewhere (offenders).
pub(crate) fn kept(code: u16) -> bool {
    matches!(code, 429 | 431 | 502 | 503 | 504)
}

/// The recent errors and guard decisions.
#[derive(Default)]
pub(crate) struct Recent {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Newest last.
    errors: VecDeque<Timed>,
    /// Newest last.
    guarded: VecDeque<(SystemTime, Guarded)>,
    /// Guard decisions per minute (since the epoch) and action, the last hour's.
    minutes: VecDeque<(u64, [u64; 3])>,
}

/// An error skewgate answered itself.
pub(crate) struct Answered {
    pub code: u16,
    /// The Status reason (`TooManyRequests`).
    pub reason: &'static str,
    /// The Status message, cut to `MESSAGE` characters (`cut`).
    pub message: String,
    /// The latest request answered so: its verb, resource and backend, and who sent it.
    pub verb: &'static str,
    pub resource: String,
    pub backend: String,
    pub client: String,
}

/// One guard decision.
pub(crate) struct Guarded {
    pub guard: String,
    /// `reject`, `warn` or `preserve`.
    pub action: &'static str,
    pub resource: String,
    pub namespace: String,
    pub name: String,
    /// What cannot know or store the fields: the client's version (`a v1.29 client`), or the
    /// serving backend's (`backend "v1-29" (v1.29)`).
    pub against: String,
    pub fields: Vec<String>,
    /// The encoding of the body judged: `json`, `yaml` or `protobuf`.
    pub encoding: &'static str,
}

/// An error, and how often and over what span it was answered.
struct Timed {
    first: SystemTime,
    last: SystemTime,
    times: u64,
    what: Answered,
}

const ACTIONS: [&str; 3] = ["reject", "warn", "preserve"];

fn minute(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs()
        / 60
}

/// `s` cut to at most `max` characters (and an ellipsis).
pub(crate) fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

impl Recent {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps an error answered at `now`; one with the same code and message as a kept one is
    /// counted on it (and becomes the newest), so that a storm of one error leaves the others.
    pub(crate) fn answered(&self, now: SystemTime, error: Answered) {
        self.answered_times(now, error, 1);
    }

    /// [`Recent::answered`], `times` over.
    fn answered_times(&self, now: SystemTime, error: Answered, times: u64) {
        let mut inner = self.lock();
        let errors = &mut inner.errors;
        let same = errors
            .iter()
            .position(|e| e.what.code == error.code && e.what.message == error.message);
        let (first, before) = same
            .and_then(|i| errors.remove(i))
            .map_or((now, 0), |e| (e.first, e.times));
        errors.push_back(Timed {
            first,
            last: now,
            times: before + times,
            what: error,
        });
        if errors.len() > ERRORS {
            errors.pop_front();
        }
    }

    /// Keeps `times` heads over `limit` bytes from `client` that its connection (`protocol`)
    /// answered 431 before they were read whole: they never became requests.
    pub(crate) fn heads_too_large(
        &self,
        now: SystemTime,
        client: String,
        times: usize,
        (limit, protocol): (usize, &'static str),
    ) {
        let unread = Answered {
            code: 431,
            reason: "RequestHeaderFieldsTooLarge",
            message: format!(
                "skewgate: a request head over {limit} bytes, the most this listener reads over {protocol}, answered before it was read whole"
            ),
            verb: "(unread)",
            resource: String::new(),
            backend: String::new(),
            client,
        };
        self.answered_times(now, unread, times as u64);
    }

    /// Keeps a guard decision made at `now`, and counts it in its minute.
    pub(crate) fn guarded(&self, now: SystemTime, mut decision: Guarded) {
        decision.fields.truncate(FIELDS);
        let at = minute(now);
        let action = ACTIONS.iter().position(|a| *a == decision.action);
        let mut inner = self.lock();
        inner.guarded.push_back((now, decision));
        if inner.guarded.len() > GUARDED {
            inner.guarded.pop_front();
        }
        if inner.minutes.back().is_none_or(|(m, _)| *m != at) {
            inner.minutes.push_back((at, [0; 3]));
        }
        if let (Some((_, counts)), Some(a)) = (inner.minutes.back_mut(), action) {
            counts[a] += 1;
        }
        while inner
            .minutes
            .front()
            .is_some_and(|(m, _)| m + MINUTES <= at)
        {
            inner.minutes.pop_front();
        }
    }

    /// `/debug/recent`: the kept errors and guard decisions, newest first, and the guard
    /// decisions of the last hour by action.
    pub(crate) fn json(&self, now: SystemTime) -> Value {
        let inner = self.lock();
        let errors: Vec<Value> = inner
            .errors
            .iter()
            .rev()
            .map(|e| {
                json!({
                    "code": e.what.code,
                    "reason": e.what.reason,
                    "message": e.what.message,
                    "verb": e.what.verb,
                    "resource": e.what.resource,
                    "backend": e.what.backend,
                    "client": e.what.client,
                    "times": e.times,
                    "first": rfc3339(e.first),
                    "last": rfc3339(e.last),
                })
            })
            .collect();
        let guarded: Vec<Value> = inner
            .guarded
            .iter()
            .rev()
            .map(|(at, g)| {
                json!({
                    "at": rfc3339(*at),
                    "guard": g.guard,
                    "action": g.action,
                    "resource": g.resource,
                    "namespace": g.namespace,
                    "name": g.name,
                    "against": g.against,
                    "fields": g.fields,
                    "encoding": g.encoding,
                })
            })
            .collect();
        let mut hour = [0u64; 3];
        let now = minute(now);
        for (_, counts) in inner.minutes.iter().filter(|(m, _)| m + MINUTES > now) {
            for (sum, n) in hour.iter_mut().zip(counts) {
                *sum += n;
            }
        }
        json!({
            "errors": errors,
            "guards": {
                "lastHour": {"reject": hour[0], "warn": hour[1], "preserve": hour[2]},
                "recent": guarded,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(client: &str) -> Answered {
        Answered {
            code: 429,
            reason: "TooManyRequests",
            message: format!("{client} is busy"),
            verb: "list",
            resource: "pods".to_owned(),
            backend: "old".to_owned(),
            client: client.to_owned(),
        }
    }

    fn unavailable() -> Answered {
        Answered {
            code: 503,
            reason: "ServiceUnavailable",
            message: "backend \"new\" has no endpoint ready".to_owned(),
            verb: "get",
            resource: "configmaps".to_owned(),
            backend: "new".to_owned(),
            client: "alice".to_owned(),
        }
    }

    #[test]
    fn a_storm_of_one_error_is_counted_on_it_and_leaves_the_others() {
        let r = Recent::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        r.answered(t0, unavailable());
        for i in 0..10_000 {
            r.answered(t0 + Duration::from_secs(1 + i % 3), busy("mallory"));
        }
        let got = r.json(t0 + Duration::from_secs(5));
        let errors = got["errors"].as_array().expect("errors");
        assert_eq!(errors.len(), 2, "{got}");
        assert_eq!(errors[0]["code"], 429);
        assert_eq!(errors[0]["times"], 10_000);
        assert_eq!(errors[0]["first"], "2027-01-15T08:00:01Z");
        assert_eq!(errors[1]["code"], 503);
        assert_eq!(errors[1]["times"], 1);
        // Distinct errors beyond the bound push out the oldest.
        for i in 0..ERRORS {
            r.answered(t0, busy(&format!("client-{i}")));
        }
        let got = r.json(t0);
        let errors = got["errors"].as_array().expect("errors");
        assert_eq!(errors.len(), ERRORS);
        assert!(
            errors.iter().all(|e| e["code"] == 429),
            "the 503 went first"
        );
        // A long message is cut, at a character's boundary.
        let long = "é".repeat(5_000);
        assert_eq!(cut(&long, MESSAGE), format!("{}…", "é".repeat(MESSAGE)));
        assert_eq!(cut("short", MESSAGE), "short");
    }

    #[test]
    fn guard_decisions_are_counted_over_the_last_hour_and_the_newest_kept() {
        let r = Recent::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let decision = |action: &'static str, n: usize| Guarded {
            guard: "pods".to_owned(),
            action,
            resource: "pods".to_owned(),
            namespace: "team-a".to_owned(),
            name: format!("web-{n}"),
            against: "a v1.35 client".to_owned(),
            fields: (0..20).map(|f| format!("spec.f{f}")).collect(),
            encoding: "protobuf",
        };
        r.guarded(t0, decision("reject", 0));
        r.guarded(t0 + Duration::from_secs(30 * 60), decision("warn", 1));
        for n in 2..40 {
            r.guarded(t0 + Duration::from_secs(61 * 60), decision("preserve", n));
        }
        let got = r.json(t0 + Duration::from_secs(61 * 60));
        // The reject is more than an hour old.
        assert_eq!(
            got["guards"]["lastHour"],
            json!({"reject": 0, "warn": 1, "preserve": 38})
        );
        let recent = got["guards"]["recent"].as_array().expect("recent");
        assert_eq!(recent.len(), GUARDED);
        assert_eq!(recent[0]["name"], "web-39");
        assert_eq!(recent[0]["fields"].as_array().map(Vec::len), Some(FIELDS));
        // Two hours on, nothing is counted.
        let later = r.json(t0 + Duration::from_secs(3 * 3600));
        assert_eq!(
            later["guards"]["lastHour"],
            json!({"reject": 0, "warn": 0, "preserve": 0})
        );
    }
}
