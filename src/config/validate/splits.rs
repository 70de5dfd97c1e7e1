//! The pairs of rules that read an object through one backend and write it through another: a
//! client that replaces (PUT) what it read sends back the object as the reading version sees it,
//! and the writing version stores only what it knows, so the fields one of them lacks are lost.
//! `check` warns of each pair, with the objects it affects, unless a guard matches them all (it
//! refuses, warns of or repairs such an update: the client is told).
//!
//! The pairs, in the order the steering decides (a pin first, `reads: follow` taking the reads of
//! what it pins; then the rollouts; then the defaults):
//! - a rollout and a pin whose reads the rollouts decide (`reads: rollout`), to other backends;
//! - a rollout and `writes.default`, for what no pin takes;
//! - `reads.default` and a pin with `reads: rollout`, for what no rollout takes;
//! - `reads.default` and `writes.default`, for what nothing else takes.

use serde_saphyr::Location;

use super::Validator;
use crate::config::selector::{NamePattern, Part, ResourcePattern, Selector};
use crate::config::table::{PinReads, RouteTable, Selectors};

/// Where each rule is in the file, to say where a warning points.
#[derive(Default)]
pub(super) struct RuleSpans {
    pub(super) pins: Vec<Location>,
    pub(super) rollouts: Vec<Location>,
    pub(super) reads_default: Option<Location>,
}

impl Validator<'_> {
    /// Warns of every pair of rules that reads what it writes through another backend.
    pub(super) fn splits(&mut self, t: &RouteTable, at: &RuleSpans) {
        let name = |b: crate::config::BackendId| t.backend_name(b).to_owned();
        let guarded = |keys: &[&Selectors]| {
            t.guards.iter().any(|g| {
                let g = without_verbs(&g.selectors);
                keys.iter().any(|k| g.covers(&without_verbs(k)))
            })
        };
        let pins = &t.writes.pins;
        for (i, r) in t.reads.rollouts.iter().enumerate() {
            let (Some(&loc), reader) = (at.rollouts.get(i), format!("rollout {:?}", r.name)) else {
                continue;
            };
            let path = format!("reads.rollouts[{i}]");
            for p in pins.iter().filter(|p| p.reads == PinReads::Rollout) {
                if p.backend == r.to || !may_meet(&r.selectors, &p.selectors) {
                    continue;
                }
                if !guarded(&[&r.selectors, &p.selectors]) {
                    let keys = format!(
                        "{} that pin {:?} also names",
                        describe(&r.selectors),
                        p.name
                    );
                    let writer = format!("pin {:?}", p.name);
                    let text = message(&reader, &keys, &name(r.to), &writer, &name(p.backend));
                    self.warn(loc, &path, text);
                }
            }
            let unpinned = !(pins.iter())
                .any(|p| without_verbs(&p.selectors).covers(&without_verbs(&r.selectors)));
            if r.to != t.writes.default && unpinned && !guarded(&[&r.selectors]) {
                let keys = except_pins(&describe(&r.selectors), t, &r.selectors);
                let (to, w) = (name(r.to), name(t.writes.default));
                let text = message(&reader, &keys, &to, "writes.default", &w);
                self.warn(loc, &path, text);
            }
        }
        for (i, p) in pins.iter().enumerate() {
            let split = p.reads == PinReads::Rollout && p.backend != t.reads.default;
            let (Some(&loc), true) = (at.pins.get(i), split) else {
                continue;
            };
            if !guarded(&[&p.selectors]) {
                let keys = format!("{} that no rollout takes", describe(&p.selectors));
                let writer = format!("pin {:?}", p.name);
                let (r, w) = (name(t.reads.default), name(p.backend));
                let text = message("reads.default", &keys, &r, &writer, &w);
                self.warn(loc, format!("writes.pins[{i}]"), text);
            }
        }
        let (Some(loc), true) = (
            at.reads_default,
            t.reads.default != t.writes.default && !guarded(&[&Selectors::default()]),
        ) else {
            return;
        };
        let keys = except_pins("every object", t, &Selectors::default());
        let keys = if t.reads.rollouts.is_empty() {
            keys
        } else {
            format!("{keys} and no rollout takes")
        };
        let (r, w) = (name(t.reads.default), name(t.writes.default));
        let text = message("reads.default", &keys, &r, "writes.default", &w);
        self.warn(loc, "reads.default", text);
    }
}

fn message(reader: &str, keys: &str, from: &str, writer: &str, through: &str) -> String {
    format!(
        "reads and writes part: {reader} reads from {from:?} {keys}, and {writer} writes them through {through:?}; a client that replaces (PUT) an object it read loses the fields one of the two versions does not store. Add a guard that matches these objects (it refuses, warns of or repairs such an update), or make their reads follow their writes"
    )
}

/// `keys`, less what the pins that may meet `selectors` take.
fn except_pins(keys: &str, t: &RouteTable, selectors: &Selectors) -> String {
    let names: Vec<String> = t
        .writes
        .pins
        .iter()
        .filter(|p| may_meet(&p.selectors, selectors))
        .map(|p| format!("{:?}", p.name))
        .collect();
    match names.len() {
        0 => keys.to_owned(),
        1 => format!("{keys} except what pin {} takes", names[0]),
        _ => format!("{keys} except what pins {} take", names.join(", ")),
    }
}

fn without_verbs(s: &Selectors) -> Selectors {
    Selectors {
        verbs: None,
        ..s.clone()
    }
}

/// The objects and clients a rule names, as a person reads them (`namespaces [!kube-system],
/// clients [kubectl>=1.30]`); `every object` when it names none.
pub(super) fn describe(s: &Selectors) -> String {
    fn list<I>(name: &str, s: &Option<Selector<I>>, show: impl Fn(&I) -> String) -> Option<String> {
        let s = s.as_ref()?;
        let items: Vec<String> = (s.include.iter().map(&show))
            .chain(s.exclude.iter().map(|x| format!("!{}", show(x))))
            .collect();
        Some(format!("{name} [{}]", items.join(", ")))
    }
    let parts: Vec<String> = [
        list("namespaces", &s.namespaces, |n| n.source().to_owned()),
        list("resources", &s.resources, ToString::to_string),
        list("users", &s.users, |n| n.source().to_owned()),
        list("groups", &s.groups, |n| n.source().to_owned()),
        list("clients", &s.clients, ToString::to_string),
    ]
    .into_iter()
    .flatten()
    .collect();
    if parts.is_empty() {
        "every object".to_owned()
    } else {
        format!("the objects of {}", parts.join(", "))
    }
}

/// Whether one request may match both (verbs aside: a read and a write of one object): false
/// only when the items as written exclude each other (names that differ, a name the other
/// excludes); patterns are tried against names, never against each other.
pub(crate) fn may_meet(a: &Selectors, b: &Selectors) -> bool {
    fn list<I>(
        a: &Option<Selector<I>>,
        b: &Option<Selector<I>>,
        meet: impl Fn(&I, &I) -> bool,
        same: impl Fn(&I, &I) -> bool,
    ) -> bool {
        let (Some(a), Some(b)) = (a, b) else {
            return true;
        };
        let includes = a.include.is_empty()
            || b.include.is_empty()
            || a.include
                .iter()
                .any(|x| b.include.iter().any(|y| meet(x, y)));
        let excluded = |s: &Selector<I>, o: &Selector<I>| {
            !s.include.is_empty()
                && s.include
                    .iter()
                    .all(|x| o.exclude.iter().any(|y| same(x, y)))
        };
        includes && !excluded(a, b) && !excluded(b, a)
    }
    let same_name = |x: &NamePattern, y: &NamePattern| x == y;
    let same_resource = |x: &ResourcePattern, y: &ResourcePattern| x == y;
    list(&a.namespaces, &b.namespaces, names_meet, same_name)
        && list(&a.resources, &b.resources, resources_meet, same_resource)
        && list(&a.users, &b.users, names_meet, same_name)
        && list(
            &a.clients,
            &b.clients,
            |x, y| x.name.is_empty() || y.name.is_empty() || x.name == y.name,
            |x, y| x == y,
        )
}

fn names_meet(x: &NamePattern, y: &NamePattern) -> bool {
    match (x.as_exact(), y.as_exact()) {
        (Some(a), Some(b)) => a == b,
        (Some(a), None) => y.matches(a),
        (None, Some(b)) => x.matches(b),
        (None, None) => true,
    }
}

fn resources_meet(x: &ResourcePattern, y: &ResourcePattern) -> bool {
    let part = |a: &Part, b: &Part| match (a, b) {
        (Part::Exact(a), Part::Exact(b)) => a == b,
        _ => true,
    };
    let sub = match (&x.subresource, &y.subresource) {
        (Some(a), Some(b)) => part(a, b),
        _ => true,
    };
    part(&x.resource, &y.resource) && part(&x.group, &y.group) && sub
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::parse_route_table;

    fn warnings(writes: &str, reads: &str, guards: &str) -> Vec<String> {
        let text = format!(
            "apiVersion: skewgate.io/v1alpha1\nkind: RouteTable\nbackends:\n  - {{name: old, version: v1.29, endpoints: [http://127.0.0.1:1]}}\n  - {{name: new, version: v1.30, endpoints: [http://127.0.0.1:2]}}\nwrites:\n{writes}reads:\n{reads}{guards}"
        );
        let t = parse_route_table(Path::new("r.yaml"), &text).unwrap_or_else(|e| panic!("{e}"));
        t.warnings.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn every_pair_that_reads_where_it_does_not_write_is_warned_of_with_its_objects() {
        // The defaults apart.
        let w = warnings("  default: old\n", "  default: new\n", "");
        assert!(
            w.len() == 1
                && w[0].contains("r.yaml:9:12: reads.default: reads and writes part: reads.default reads from \"new\" every object, and writes.default writes them through \"old\""),
            "{w:?}"
        );
        // A rollout over what the default writes, less what a pin (following) takes.
        let w = warnings(
            "  default: old\n  pins:\n    - {name: a, namespaces: [a], backend: new}\n",
            "  default: old\n  rollouts:\n    - {name: r, to: new, percent: 5, match: {namespaces: [\"!kube-system\"]}}\n",
            "",
        );
        assert!(
            w.len() == 1
                && w[0].contains("reads.rollouts[0]")
                && w[0].contains("rollout \"r\" reads from \"new\" the objects of namespaces [!kube-system] except what pin \"a\" takes, and writes.default writes them through \"old\""),
            "{w:?}"
        );
        // A pin whose reads the rollouts decide: with a rollout elsewhere, and with the default.
        let pin = "  default: new\n  pins:\n    - {name: leases, resources: [leases.coordination.k8s.io], backend: old, reads: rollout}\n";
        let w = warnings(
            pin,
            "  default: old\n  rollouts:\n    - {name: r, to: new, percent: 5, match: {clients: [kubectl]}}\n",
            "",
        );
        // (and the defaults apart, for what neither takes)
        assert!(
            w.len() == 2
                && w[1].contains("reads.default reads from \"old\" every object except what pin \"leases\" takes and no rollout takes")
                && w[0].contains("rollout \"r\" reads from \"new\" the objects of clients [kubectl] that pin \"leases\" also names, and pin \"leases\" writes them through \"old\""),
            "{w:?}"
        );
        let w = warnings(pin, "  default: new\n", "");
        assert!(
            w.len() == 1
                && w[0].contains("writes.pins[0]: reads and writes part: reads.default reads from \"new\" the objects of resources [leases.coordination.k8s.io] that no rollout takes"),
            "{w:?}"
        );
    }

    #[test]
    fn pairs_that_cannot_meet_or_that_a_guard_covers_are_not() {
        // A rollout of other namespaces than the pin's (which reads as the rollouts say).
        let w = warnings(
            "  default: new\n  pins:\n    - {name: p, namespaces: [a], backend: old, reads: rollout}\n",
            "  default: old\n  rollouts:\n    - {name: r, to: new, percent: 5, match: {namespaces: [b, \"/^c-/\"]}}\n",
            "",
        );
        assert!(
            w.iter().all(|w| !w.contains("pin \"p\" also names")),
            "{w:?}"
        );
        // A rollout that a following pin covers entirely reads where it writes.
        let w = warnings(
            "  default: old\n  pins:\n    - {name: a, namespaces: [a], backend: new}\n",
            "  default: old\n  rollouts:\n    - {name: r, to: new, percent: 5, match: {namespaces: [a]}}\n",
            "",
        );
        assert!(w.is_empty(), "{w:?}");
        // A guard over the rollout's objects: the client is told, so check says nothing.
        let w = warnings(
            "  default: old\n",
            "  default: old\n  rollouts:\n    - {name: r, to: new, percent: 5, match: {namespaces: [\"!kube-system\"]}}\n",
            "guards:\n  - {name: g, match: {namespaces: [\"!kube-system\"]}}\n",
        );
        assert!(w.is_empty(), "{w:?}");
        // A narrower guard does not cover it.
        let w = warnings(
            "  default: old\n",
            "  default: old\n  rollouts:\n    - {name: r, to: new, percent: 5, match: {namespaces: [\"!kube-system\"]}}\n",
            "guards:\n  - {name: g, match: {namespaces: [\"!kube-system\"], clients: [\"kubectl<1.30\"]}}\n",
        );
        assert_eq!(w.len(), 1, "{w:?}");
    }
}
