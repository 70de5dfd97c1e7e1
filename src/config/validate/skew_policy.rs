//! Validation of `skewPolicy`, and the warnings of a table that would serve a Kubernetes component
//! through an apiserver older than itself.

use serde_saphyr::Spanned;

use super::Validator;
use crate::classify::{Component, ComponentSet};
use crate::config::raw::FileSkewPolicy;
use crate::config::table::{Backend, SkewPolicy};

impl Validator<'_> {
    /// The policy's exceptions; a warning for each (the table says in so many words that it breaks
    /// the version-skew policy), and for each backend without `version` in a table that has more
    /// than one backend (the policy cannot tell whether it is older than a component).
    pub(super) fn skew_policy(
        &mut self,
        raw: Option<Spanned<FileSkewPolicy>>,
        backends: &[Backend],
    ) -> SkewPolicy {
        let mut allowed = ComponentSet::default();
        if let Some(raw) = raw {
            let at = raw.referenced;
            match raw.value.allow_older_apiserver {
                Some(list) if list.value.is_empty() => self.error(
                    list.referenced,
                    "skewPolicy.allowOlderApiserver",
                    "is empty; leave it out instead (no component may be served by an older apiserver)",
                ),
                Some(list) => {
                    for (i, item) in list.value.iter().enumerate() {
                        let path = format!("skewPolicy.allowOlderApiserver[{i}]");
                        match (item.value.as_str(), Component::from_name(&item.value)) {
                            ("*", _) => allowed = ComponentSet::ALL,
                            (_, Some(c)) => allowed.insert(c),
                            (other, None) => self.error(
                                item.referenced,
                                path,
                                format!(
                                    "{other:?} is not a component the version-skew policy binds: \
                                     one of {}, or *",
                                    names(ComponentSet::ALL)
                                ),
                            ),
                        }
                    }
                }
                None => {}
            }
            if !allowed.is_empty() {
                self.warn(
                    at,
                    "skewPolicy.allowOlderApiserver",
                    format!(
                        "lets {} be served by an apiserver older than itself, which the \
                         version-skew policy forbids: a newer component writes through an \
                         apiserver that drops what it does not know",
                        names(allowed)
                    ),
                );
            }
        }
        self.unversioned_backends(backends);
        SkewPolicy {
            allow_older_apiserver: allowed,
        }
    }

    fn unversioned_backends(&mut self, backends: &[Backend]) {
        if backends.len() < 2 {
            return;
        }
        for (i, b) in backends.iter().enumerate() {
            if b.version.is_none() {
                self.warn_at_backend(
                    i,
                    format!(
                        "backend {:?} names no version: the version-skew policy cannot tell \
                         whether it is older than a component, so components go to it as the \
                         rules say; write its major.minor (e.g. v1.36)",
                        b.name
                    ),
                );
            }
        }
    }
}

impl Validator<'_> {
    fn warn_at_backend(&mut self, i: usize, message: String) {
        if let Some(&at) = self.backend_spans.get(i) {
            self.warn(at, format!("backends[{i}].version"), message);
        }
    }
}

/// `kubelet, kube-scheduler`.
fn names(set: ComponentSet) -> String {
    set.iter()
        .map(Component::name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The longest fence a moving pin may hold the leader-election Leases for: kube-controller-manager
/// and kube-scheduler renew within `--leader-elect-renew-deadline` (10 s by default) or lose the
/// lead, and their last renewal before `flipAt` may be a retry period (2 s) old.
const LEADER_FENCE: std::time::Duration = std::time::Duration::from_secs(8);

impl Validator<'_> {
    /// A warning for each pin that moves at `flipAt` and takes the writes of the Leases in
    /// kube-system, when `writes.fence` holds them as long as a leader's renew deadline: at the
    /// flip the control plane's leaders may lose the lead (found with the real ones).
    pub(super) fn leader_leases_fenced(&mut self, t: &crate::config::RouteTable) {
        if t.writes.fence < LEADER_FENCE {
            return;
        }
        let fence = humantime::format_duration(t.writes.fence);
        for (i, pin) in t.writes.pins.iter().enumerate() {
            let s = &pin.selectors;
            let namespace = s
                .namespaces
                .as_ref()
                .is_none_or(|sel| sel.matches_with(|p| p.matches("kube-system")));
            let leases = s.resources.as_ref().is_none_or(|sel| {
                sel.matches_with(|p| p.matches("coordination.k8s.io", "leases", ""))
            });
            let Some(&at) = self.spans.pins.get(i) else {
                continue;
            };
            if pin.flip_at.is_some() && namespace && leases {
                let text = format!(
                    "pin {:?} moves the leader-election Leases (kube-system) at flipAt, and writes.fence ({fence}) holds their renewals as long as kube-controller-manager's and kube-scheduler's renew deadline (10s by default, and the last renewal may be 2s old): their leaders may lose the lead at the flip; write a fence under {}s",
                    pin.name,
                    LEADER_FENCE.as_secs()
                );
                self.warn(at, format!("writes.pins[{i}]"), text);
            }
        }
    }
}
