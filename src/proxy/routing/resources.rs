//! The resources of the request metrics' labels, grown from discovery, and the warning of resources
//! the rules name that no backend serves.

use std::sync::Arc;

use super::Routing;
use crate::classify::RequestInfo;

impl Routing {
    /// Gives the resources the backends serve label values of their own.
    pub(super) fn extend_resources<'s>(
        &self,
        served: impl Iterator<Item = &'s crate::upstream::Served>,
    ) {
        let pairs: Vec<(&str, &str)> = served
            .flat_map(|s| s.lists.iter())
            .flat_map(|l| {
                let resources = l.list.get("resources").and_then(|r| r.as_array());
                resources
                    .into_iter()
                    .flatten()
                    .filter_map(|r| r.get("name")?.as_str())
                    .filter(|name| !name.contains('/'))
                    .map(|name| (l.group.as_str(), name))
            })
            .collect();
        let discovered = !pairs.is_empty();
        if let Some(grown) = self.resources.load().extended(pairs.into_iter()) {
            self.resources.store(Arc::new(grown));
        }
        if discovered
            && !self
                .resources_checked
                .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            self.warn_of_unserved_resources();
        }
    }

    /// Warns (once per table, after discovery) of each resource a rule names that Kubernetes does
    /// not ship and no backend serves: a custom resource misspelt, or not installed yet.
    fn warn_of_unserved_resources(&self) {
        use crate::config::Part;
        let t = self.table();
        let index = self.resources.load();
        let rules = t
            .writes
            .pins
            .iter()
            .map(|p| (p.name.as_str(), &p.selectors))
            .chain(
                t.reads
                    .rollouts
                    .iter()
                    .map(|r| (r.name.as_str(), &r.selectors)),
            )
            .chain(t.guards.iter().map(|g| (g.name.as_str(), &g.selectors)));
        for (rule, selectors) in rules {
            let Some(resources) = &selectors.resources else {
                continue;
            };
            for p in resources.include.iter().chain(&resources.exclude) {
                if let (Part::Exact(r), Part::Exact(g)) = (&p.resource, &p.group)
                    && !index.contains(g, r)
                {
                    let resource = if g.is_empty() {
                        r.clone()
                    } else {
                        format!("{r}.{g}")
                    };
                    tracing::warn!(
                        rule,
                        resource,
                        "no backend serves this resource (by discovery): is it misspelt, or its custom resource definition not installed yet?"
                    );
                }
            }
        }
    }

    /// The resource slot of a request, for `count_response`.
    pub(crate) fn resource_slot(&self, info: &RequestInfo<'_>) -> usize {
        self.resources.load().slot(info)
    }

    /// A resource slot as a person reads it: `pods`, `deployments.apps`, `other`, or empty for a
    /// request that names no resource.
    pub(crate) fn resource_name(&self, slot: usize) -> String {
        let resources = self.resources.load();
        match resources.labels(slot) {
            ("", resource) => resource.to_owned(),
            (group, resource) => format!("{resource}.{group}"),
        }
    }
}
