//! The `group` and `resource` labels of `skewgate_requests_total`, bounded: the resources discovery
//! found on the backends get their own values (at most `MAX_RESOURCES`), every other resource
//! request counts as `other`, and non-resource requests (`/version`, discovery) have both empty.
//!
//! The index only grows while a route table is in force, so a slot taken when a request was decided
//! still names the same resource when its answer is counted.

use foldhash::HashMap;

use crate::classify::RequestInfo;

/// The most resources with a label value of their own.
pub(crate) const MAX_RESOURCES: usize = 500;

/// The slot of non-resource requests.
const NON_RESOURCE: usize = 0;
/// The slot of resources discovery has not found.
const OTHER: usize = 1;

/// Resource label values, by slot.
#[derive(Default)]
pub(crate) struct ResourceIndex {
    slots: HashMap<u64, usize>,
    names: Vec<(String, String)>,
}

fn key(group: &str, resource: &str) -> u64 {
    crate::keys::key_of(&[group, resource])
}

impl ResourceIndex {
    /// Slots a table of metric handles needs: non-resource, other, and each resource.
    pub(crate) const SLOTS: usize = MAX_RESOURCES + 2;

    /// This index with the `(group, resource)` pairs it lacks appended (up to `MAX_RESOURCES`), or
    /// `None` when it has them all.
    pub(crate) fn extended<'a>(
        &self,
        pairs: impl Iterator<Item = (&'a str, &'a str)>,
    ) -> Option<ResourceIndex> {
        let mut next: Option<ResourceIndex> = None;
        for (group, resource) in pairs {
            let k = key(group, resource);
            let known = next.as_ref().unwrap_or(self);
            if known.slots.contains_key(&k) || known.names.len() >= MAX_RESOURCES {
                continue;
            }
            let grown = next.get_or_insert_with(|| ResourceIndex {
                slots: self.slots.clone(),
                names: self.names.clone(),
            });
            grown.slots.insert(k, grown.names.len() + 2);
            grown.names.push((group.to_owned(), resource.to_owned()));
        }
        next
    }

    /// Whether `(group, resource)` has a slot (is built in, or discovery found it).
    pub(crate) fn contains(&self, group: &str, resource: &str) -> bool {
        self.slots.contains_key(&key(group, resource))
    }

    /// The slot of a request.
    pub(crate) fn slot(&self, info: &RequestInfo<'_>) -> usize {
        if !info.is_resource {
            return NON_RESOURCE;
        }
        self.slots
            .get(&key(&info.api_group, &info.resource))
            .copied()
            .unwrap_or(OTHER)
    }

    /// The `group` and `resource` label values of a slot.
    pub(crate) fn labels(&self, slot: usize) -> (&str, &str) {
        match slot {
            NON_RESOURCE => ("", ""),
            OTHER => ("other", "other"),
            _ => self
                .names
                .get(slot - 2)
                .map_or(("other", "other"), |(g, r)| (g.as_str(), r.as_str())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::classify;

    #[test]
    fn discovered_resources_have_their_own_labels_and_the_rest_are_other() {
        let index = ResourceIndex::default()
            .extended([("", "pods"), ("apps", "deployments")].into_iter())
            .expect("grown");
        let slot = |path: &str| index.labels(index.slot(&classify("GET", path, None)));
        assert_eq!(slot("/api/v1/namespaces/a/pods"), ("", "pods"));
        assert_eq!(
            slot("/apis/apps/v1/namespaces/a/deployments/x"),
            ("apps", "deployments")
        );
        assert_eq!(slot("/apis/evil.example/v1/x123"), ("other", "other"));
        assert_eq!(slot("/version"), ("", ""));
        // Nothing new: no new index; a new pair appends, earlier slots keep their meaning.
        assert!(index.extended([("", "pods")].into_iter()).is_none());
        let before = index.slot(&classify("GET", "/api/v1/pods", None));
        let grown = index
            .extended([("", "configmaps"), ("", "pods")].into_iter())
            .expect("grown");
        assert_eq!(grown.labels(before), ("", "pods"));
    }

    #[test]
    fn the_number_of_resource_labels_is_bounded() {
        let names: Vec<String> = (0..MAX_RESOURCES + 50).map(|i| format!("r{i}")).collect();
        let index = ResourceIndex::default()
            .extended(names.iter().map(|n| ("g", n.as_str())))
            .expect("grown");
        assert_eq!(index.names.len(), MAX_RESOURCES);
        let last = format!("/apis/g/v1/r{}", MAX_RESOURCES + 10);
        assert_eq!(
            index.labels(index.slot(&classify("GET", &last, None))),
            ("other", "other")
        );
    }
}
