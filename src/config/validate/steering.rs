//! The pins and rollouts of a route file: each named once, its selectors, backend, move and
//! schedule checked, and a warning for one that can never decide (one before it takes all it would).

use std::collections::HashSet;
use std::time::SystemTime;

use serde_saphyr::{Location, Spanned};

use super::Validator;
use crate::config::raw::{FilePin, FileRollout};
use crate::config::table::{BackendId, Pin, PinReads, Rollout, Selectors, StickyBy};

impl Validator<'_> {
    pub(super) fn pins(&mut self, raw: Vec<Spanned<FilePin>>) -> Vec<Pin> {
        let mut names = HashSet::new();
        let mut out = Vec::new();
        for (i, pin) in raw.into_iter().enumerate() {
            let path = format!("writes.pins[{i}]");
            self.spans.pins.push(pin.referenced);
            let p: FilePin = pin.value;
            let name = match &p.name {
                Some(n) => {
                    self.unique_name(&mut names, n, &format!("{path}.name"), "pin");
                    n.value.clone()
                }
                None => path.clone(),
            };
            let selectors = Selectors {
                namespaces: self.namespaces(p.namespaces.as_ref(), &path),
                resources: self.resources(p.resources.as_ref(), &path),
                ..Selectors::default()
            };
            let backend = self.backend_ref(&p.backend, &format!("{path}.backend"));
            let reads = self.pin_reads(&p, pin.referenced, &path);
            let (flip_at, flip_from) = self.pin_move(&p, &path);
            // With flipAt, a pin of everything is how a fleet moves every write at one moment
            // (writes.default has no flipAt): said in the runbook, not warned of.
            if selectors.is_match_all() && flip_at.is_none() {
                self.warn(pin.referenced, &path, format!("pin {name:?} has no selector (namespaces, resources, verbs, users, groups, clients): it takes every write, and the reads that follow it, so writes.default and the pins after it never decide; give it a selector, or set writes.default instead"));
            }
            if let Some(first) = out.iter().find(|o: &&Pin| o.selectors.covers(&selectors)) {
                self.warn(pin.referenced, &path, format!("never decides: pin {:?} before it covers every object this one names, and the first pin that matches decides; put this one first, or narrow that one", first.name));
            }
            out.push(Pin {
                name,
                selectors,
                backend,
                reads,
                flip_at,
                flip_from,
            });
        }
        out
    }

    pub(super) fn rollouts(
        &mut self,
        raw: Vec<Spanned<FileRollout>>,
        default: BackendId,
    ) -> Vec<Rollout> {
        let mut names = HashSet::new();
        let mut out: Vec<Rollout> = Vec::new();
        for (i, r) in raw.into_iter().enumerate() {
            let path = format!("reads.rollouts[{i}]");
            let at = r.referenced;
            self.spans.rollouts.push(at);
            let mut r: FileRollout = r.value;
            self.unique_name(&mut names, &r.name, &format!("{path}.name"), "rollout");
            let selectors = self.match_selectors(
                r.match_.take().unwrap_or_default(),
                &format!("{path}.match"),
            );
            let to = self.backend_ref(&r.to, &format!("{path}.to"));
            let sticky_by = match r.sticky_by.as_ref().map(|s| s.value.as_str()) {
                None | Some("namespace") => StickyBy::Namespace,
                Some("user") => StickyBy::User,
                Some("object") => StickyBy::Object,
                Some("client") => StickyBy::Client,
                Some(other) => {
                    let at = r.sticky_by.as_ref().map_or(at, |s| s.referenced);
                    self.error(
                        at,
                        format!("{path}.stickyBy"),
                        format!("{other:?} is not one of namespace, user, object, client"),
                    );
                    StickyBy::Namespace
                }
            };
            let schedule = self.schedule(&r, at, &path);
            let abort = r.abort.as_ref().and_then(|a| self.abort(&a.value, &path));
            if to == default && !self.backend_names.is_empty() {
                self.warn(r.to.referenced, format!("{path}.to"), format!("to is {:?}, reads.default itself: this rollout changes nothing; name the backend it rolls reads out to", r.to.value));
            }
            if let Some(first) = out.iter().find(|o| o.selectors.is_match_all()) {
                self.warn(at, &path, format!("never decides: rollout {:?} before it has no match, so it takes every read first; give it a match, or put it last", first.name));
            } else if let Some(first) = out.iter().find(|o| o.selectors.covers(&selectors)) {
                self.warn(at, &path, format!("never decides: rollout {:?} before it matches every read this one matches, and the first rollout that matches decides; put this one first, or narrow that one", first.name));
            }
            out.push(Rollout {
                name: r.name.value,
                selectors,
                to,
                sticky_by,
                schedule,
                abort,
            });
        }
        out
    }

    /// A pin's `reads`: follow (the default) or rollout.
    fn pin_reads(&mut self, p: &FilePin, at: Location, path: &str) -> PinReads {
        match p.reads.as_ref().map(|r| r.value.as_str()) {
            None | Some("follow") => PinReads::Follow,
            Some("rollout") => PinReads::Rollout,
            Some(other) => {
                let at = p.reads.as_ref().map_or(at, |r| r.referenced);
                self.error(
                    at,
                    format!("{path}.reads"),
                    format!("{other:?} is neither follow nor rollout"),
                );
                PinReads::Follow
            }
        }
    }

    /// A pin's move: when (`flipAt`) and from which backend (`from`, which needs `flipAt` and
    /// another backend than the pin's own).
    fn pin_move(&mut self, p: &FilePin, path: &str) -> (Option<SystemTime>, Option<BackendId>) {
        let flip_at = p
            .flip_at
            .as_ref()
            .and_then(|t| self.timestamp(t, &format!("{path}.flipAt")));
        let flip_from = p
            .from
            .as_ref()
            .map(|f| self.backend_ref(f, &format!("{path}.from")));
        if let (Some(from), None) = (&p.from, &p.flip_at) {
            self.error(
                from.referenced,
                format!("{path}.from"),
                "from names the backend a pin moves from at flipAt: add flipAt, or leave from out",
            );
        } else if let Some(from) = p
            .from
            .as_ref()
            // (compared by name: an unknown backend stands in as the first, and is already an
            // error of its own)
            .filter(|f| f.value == p.backend.value)
        {
            self.error(
                from.referenced,
                format!("{path}.from"),
                format!("from names the pin's own backend {:?}: a pin moves from another backend; leave from out if it does not move", from.value),
            );
        }
        (flip_at, flip_from)
    }
}
