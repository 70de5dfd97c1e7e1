//! What the replicas run, as they say it: each publishes a report in its Lease (the annotation
//! `skewgate.io/state`: its route table's digest, name and generation, each pin's move, each
//! rollout's abort, its clock), and reads the others' in the Lease list it reads anyway. The view
//! says whether the live replicas run the same table, and since when they have not.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::Method;
use serde_json::{Value, json};

use crate::upstream::{EndpointPool, own_dated};

/// The label that marks a skewgate replica's Lease.
pub(super) const LEASE_LABEL: &str = "skewgate.io/endpoint";

/// The Lease annotation a replica's report is published in (as a JSON string).
pub(super) const STATE_ANNOTATION: &str = "skewgate.io/state";

/// What a replica runs at a time: made by the proxy (`Proxy::fleet_report`).
pub(crate) type Report = Box<dyn Fn(SystemTime) -> Value + Send + Sync>;

/// What the proxy does with the replicas as read at a time: its gates of the pins' moves
/// (`Proxy::fleet_seen`), given how to read a time on the apiservers' clock as this replica's.
pub(crate) type OnView =
    Box<dyn Fn(&FleetView, SystemTime, &dyn Fn(SystemTime) -> SystemTime) + Send + Sync>;

/// The proxy's side of the presence.
pub(crate) struct Hooks {
    /// What this replica runs.
    pub(crate) report: Report,
    /// What it does with the others'.
    pub(crate) on_view: OnView,
    /// The fleet's moves as this replica knows them, told of each renewal of its Lease.
    pub(crate) gates: Arc<super::FleetGates>,
}

/// One replica, as its Lease says.
#[derive(Clone, Debug)]
pub(crate) struct Member {
    /// Its address (the Lease's holder).
    pub(crate) address: SocketAddr,
    /// When it last renewed its Lease, by its clock.
    pub(crate) renewed: SystemTime,
    /// Whether its Lease held when read.
    pub(crate) live: bool,
    /// Its report (`Null` from a replica that publishes none: an older skewgate).
    pub(crate) state: Value,
}

impl Member {
    /// The digest of the route table it runs.
    pub(crate) fn table(&self) -> &str {
        self.state["table"].as_str().unwrap_or("unknown")
    }
}

/// The replicas as last read.
#[derive(Clone, Debug, Default)]
pub(crate) struct FleetView {
    /// Every replica with a Lease, live or not, by address.
    pub(crate) members: Vec<Member>,
    /// When the Leases were last read.
    pub(crate) read_at: Option<SystemTime>,
    /// Since when the live replicas have run different tables.
    pub(crate) disagreeing_since: Option<SystemTime>,
}

impl FleetView {
    /// The view from `members` read at `now`, `previous` the view before it.
    pub(super) fn new(mut members: Vec<Member>, now: SystemTime, previous: &FleetView) -> Self {
        members.sort_by_key(|m| m.address);
        let mut view = FleetView {
            members,
            read_at: Some(now),
            disagreeing_since: None,
        };
        if !view.agreed() {
            view.disagreeing_since = Some(previous.disagreeing_since.unwrap_or(now));
        }
        view
    }

    /// The live replicas.
    pub(crate) fn live(&self) -> impl Iterator<Item = &Member> {
        self.members.iter().filter(|m| m.live)
    }

    /// Whether every live replica runs the same table.
    pub(crate) fn agreed(&self) -> bool {
        let mut tables = self.live().map(Member::table);
        let first = tables.next();
        tables.all(|t| Some(t) == first)
    }

    /// How long the live replicas have disagreed at `now` (zero when they agree).
    pub(crate) fn disagreement(&self, now: SystemTime) -> Duration {
        self.disagreeing_since.map_or(Duration::ZERO, |s| {
            now.duration_since(s).unwrap_or_default()
        })
    }

    /// `/debug/fleet`: this replica (`me`), every replica's report, and whether they agree.
    pub(crate) fn to_json(&self, me: SocketAddr, now: SystemTime) -> Value {
        let time = |t: SystemTime| humantime::format_rfc3339_millis(t).to_string();
        let members: Vec<Value> = self
            .members
            .iter()
            .map(|m| {
                json!({
                    "address": m.address.to_string(),
                    "me": m.address == me,
                    "live": m.live,
                    "renewed": time(m.renewed),
                    "state": m.state,
                })
            })
            .collect();
        let offsets: Vec<f64> = self
            .live()
            .filter_map(|m| m.state["clockOffsetMs"].as_f64())
            .collect();
        let spread = offsets.iter().copied().fold(f64::MIN, f64::max)
            - offsets.iter().copied().fold(f64::MAX, f64::min);
        json!({
            "mode": "fleet",
            "me": me.to_string(),
            "clockSpreadMs": (!offsets.is_empty()).then_some(spread),
            "readAt": self.read_at.map(time),
            "agreed": self.agreed(),
            "disagreeingSince": self.disagreeing_since.map(time),
            "disagreementSeconds": self.disagreement(now).as_secs(),
            "replicas": members,
        })
    }
}

/// The skewgate replicas whose Lease is in `list` (a LeaseList), each live when its Lease holds
/// at `now`.
pub(super) fn members(list: &Value, now: SystemTime) -> Vec<Member> {
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| l["metadata"]["labels"][LEASE_LABEL] == "true")
        .filter_map(|l| {
            let spec = &l["spec"];
            let address: SocketAddr = spec["holderIdentity"].as_str()?.parse().ok()?;
            let renewed = humantime::parse_rfc3339_weak(spec["renewTime"].as_str()?).ok()?;
            let holds = Duration::from_secs(spec["leaseDurationSeconds"].as_u64()?);
            let state = l["metadata"]["annotations"][STATE_ANNOTATION]
                .as_str()
                .and_then(|s| serde_json::from_str(s).ok())
                .unwrap_or(Value::Null);
            Some(Member {
                address,
                renewed,
                // A Lease said to hold past what a time can say holds.
                live: renewed.checked_add(holds).is_none_or(|until| until > now),
                state,
            })
        })
        .collect()
}

impl super::Presence {
    /// The Lease list, its answer's `Date` measuring this replica's clock offset.
    pub(super) async fn read_leases(&self, ep: &Arc<EndpointPool>) -> Result<Value, String> {
        let path = super::lease_collection();
        let sent = self.clock.now();
        let (code, body, date) = own_dated(ep, Method::GET, &path, None).await?;
        let received = self.clock.now();
        if !code.is_success() {
            return Err(super::answered(&path, code, &body));
        }
        if let Some(date) = date {
            let mut estimate = self.offset.lock().unwrap_or_else(|e| e.into_inner());
            estimate.sample(sent, received, date);
            if let Some(o) = estimate.offset() {
                self.metrics.clock_offset.set(o.seconds);
            }
        }
        serde_json::from_slice(&body).map_err(|e| format!("{path}: {e}"))
    }

    /// What this replica publishes at `now`: the proxy's report, and its clock's offset from the
    /// apiservers' once measured.
    pub(super) fn report(&self, now: SystemTime) -> Value {
        let mut state = (self.hooks.report)(now);
        let offset = self.offset();
        // The moves' times, on the apiservers' clock.
        let to_theirs = |t: SystemTime| shift(t, -offset.map_or(0.0, |o| o.seconds));
        for pin in state["pins"].as_array_mut().into_iter().flatten() {
            for field in ["readySince", "flipsAt"] {
                let t = pin[field]
                    .as_str()
                    .and_then(|t| humantime::parse_rfc3339_weak(t).ok());
                if let Some(t) = t {
                    pin[field] = json!(humantime::format_rfc3339_millis(to_theirs(t)).to_string());
                }
            }
        }
        for said in state["said"].as_array_mut().into_iter().flatten() {
            let t = said["at"]
                .as_str()
                .and_then(|t| humantime::parse_rfc3339_weak(t).ok());
            if let Some(t) = t {
                said["at"] = json!(humantime::format_rfc3339_millis(to_theirs(t)).to_string());
            }
        }
        if let (Some(o), Some(map)) = (offset, state.as_object_mut()) {
            map.insert("clockOffsetMs".into(), json!((o.seconds * 1000.0).round()));
            map.insert(
                "clockOffsetWithinMs".into(),
                json!((o.within * 1000.0).round()),
            );
        }
        state
    }

    fn offset(&self) -> Option<super::offset::Offset> {
        self.offset
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .offset()
    }

    /// Keeps the replicas as read at `now`, and counts them, and gives them to the proxy.
    pub(super) fn saw(&self, members: Vec<Member>, now: SystemTime) {
        let mut fleet = self.fleet.lock().unwrap_or_else(|e| e.into_inner());
        *fleet = FleetView::new(members, now, &fleet);
        let m = &self.metrics;
        m.fleet_replica_table.reset();
        for member in fleet.live() {
            let replica = member.address.to_string();
            m.fleet_replica_table
                .with_label_values(&[replica.as_str(), member.table()])
                .set(1);
        }
        m.fleet_disagreement
            .set(fleet.disagreement(now).as_secs_f64());
        let offset = self.offset();
        let to_mine = |t: SystemTime| shift(t, offset.map_or(0.0, |o| o.seconds));
        (self.hooks.on_view)(&fleet, self.clock.now(), &to_mine);
    }

    /// `/debug/fleet`: the replicas as last read, at `now`.
    pub(crate) fn fleet_json(&self, now: SystemTime) -> Value {
        let fleet = self.fleet.lock().unwrap_or_else(|e| e.into_inner());
        fleet.to_json(self.settings.address, now)
    }
}

/// `t` moved by `secs` (either way).
fn shift(t: SystemTime, secs: f64) -> SystemTime {
    let by = Duration::from_secs_f64(secs.abs());
    if secs >= 0.0 { t + by } else { t - by }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(port: u16, table: &str, live: bool) -> Member {
        Member {
            address: SocketAddr::from(([10, 0, 0, 1], port)),
            renewed: SystemTime::UNIX_EPOCH,
            live,
            state: json!({"table": table}),
        }
    }

    #[test]
    fn the_live_replicas_agree_when_they_run_one_table_and_a_disagreement_keeps_its_start() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let agreed = FleetView::new(
            vec![
                member(1, "a", true),
                member(2, "a", true),
                member(3, "b", false),
            ],
            t0,
            &FleetView::default(),
        );
        assert!(
            agreed.agreed(),
            "a replica whose Lease lapsed does not count"
        );
        assert_eq!(agreed.disagreement(t0), Duration::ZERO);
        let split = vec![member(1, "a", true), member(2, "b", true)];
        let first = FleetView::new(split.clone(), t0, &agreed);
        let later = FleetView::new(split, t0 + Duration::from_secs(20), &first);
        assert!(!later.agreed());
        assert_eq!(later.disagreeing_since, Some(t0));
        assert_eq!(
            later.disagreement(t0 + Duration::from_secs(30)),
            Duration::from_secs(30)
        );
        let again = FleetView::new(vec![member(1, "b", true)], t0, &later);
        assert!(again.agreed() && again.disagreeing_since.is_none());
    }
}
