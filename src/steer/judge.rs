//! How the update guard that matches an update judges it, as `explain` says it: in each direction
//! of skew (proxy/guard/ does the judging on the wire).

use std::time::SystemTime;

use super::{Decision, Quiet, SteerRequest, Steering};
use crate::classify::Verb;
use crate::config::{BackendId, Guard, RouteTable, UnknownVersion};

/// How a guard judges one update, in each direction of skew, as said to a person.
pub struct Judged {
    /// Down: whether the serving backend is older than another, and what is checked then.
    pub down: String,
    /// Up: the version the update is judged as, and whether that is older than the serving one.
    pub up: String,
}

impl Steering {
    /// The guard that matches `req` (decided as `d`), and how it judges it: down, when the serving
    /// backend is older than another; up, as the older of the client's version and that of the
    /// backend the same client's reads of the object go to.
    pub fn judge_guard(
        &self,
        req: &SteerRequest<'_>,
        d: &Decision,
        now: SystemTime,
    ) -> Option<(&Guard, Judged)> {
        let g = &self.table().guards[self.guard(req)?];
        let reader = self.reader(req, || now, &Quiet);
        Some((g, judged(g, req, d, reader, self.table())))
    }

    /// Where the same client's reads of the object `req` names go (the request as a get): a
    /// guarded update is judged by what its client could read too.
    pub fn reader(
        &self,
        req: &SteerRequest<'_>,
        now: impl Fn() -> SystemTime,
        live: &impl super::LiveState,
    ) -> BackendId {
        let mut get = req.info.clone();
        get.verb = Verb::Get;
        let read = SteerRequest {
            info: &get,
            ..req.clone()
        };
        self.decide_reading(&read, now, live).backend
    }
}

/// The two directions the guard `g` judges this update in: down, when the serving backend is
/// older than another; up, as the older of the client's version and that of the backend its
/// reads of the object go to (`reader`).
fn judged(
    g: &Guard,
    req: &SteerRequest<'_>,
    d: &Decision,
    reader: BackendId,
    t: &RouteTable,
) -> Judged {
    let client = &req.client;
    let version = |b: BackendId| t.backends[b.index()].version;
    let named = |b: BackendId| match version(b) {
        Some((x, y)) => format!("{} (v{x}.{y})", t.backend_name(b)),
        None => t.backend_name(b).to_owned(),
    };
    let Some(serving) = version(d.backend) else {
        let none = format!("nothing: {} declares no version", named(d.backend));
        return Judged {
            down: none.clone(),
            up: none,
        };
    };
    let newest = (0..t.backends.len())
        .filter_map(|i| {
            let b = BackendId::new(i);
            Some((version(b)?, b))
        })
        .filter(|(v, _)| *v > serving)
        .max_by_key(|(v, _)| *v);
    let down = match newest {
        Some((_, n)) => format!(
            "served by {}, older than {}: the stored object is read from {} and the fields {} cannot store are checked",
            named(d.backend),
            named(n),
            t.backend_name(n),
            t.backend_name(d.backend)
        ),
        None => format!(
            "served by {}, the newest: nothing to check",
            named(d.backend)
        ),
    };
    let own = match (client.version, g.unknown_version) {
        (Some(v), _) => Some((
            (v.major, v.minor),
            format!("this v{}.{} client", v.major, v.minor),
        )),
        (None, UnknownVersion::Guard) => {
            Some(((0, 0), "this client of unknown version".to_owned()))
        }
        (None, UnknownVersion::Pass) => None,
    };
    let read = version(reader).map(|v| (v, reader));
    let level = match (own, read) {
        (Some((c, who)), Some((r, b))) if r < c => Some((
            r,
            format!("{who}, reading this object through {},", named(b)),
        )),
        (Some(own), _) => Some(own),
        (None, Some((r, b))) => Some((
            r,
            format!("this client, reading this object through {},", named(b)),
        )),
        (None, None) => None,
    };
    let up = match level {
        Some((l, who)) if l < serving => format!(
            "{who} is older than {}: what the stored object has and the body lacks is checked",
            named(d.backend)
        ),
        Some((_, who)) => format!("{who} is as new as {}: not checked", named(d.backend)),
        None => "this client's version is unknown and it reads where it writes: passes".to_owned(),
    };
    Judged { down, up }
}
