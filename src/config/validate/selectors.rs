//! Selector lists of a route file: names, namespaces, resources, verbs, clients.

use super::{Validator, is_dns1123_label};
use crate::classify::Verb;
use crate::config::raw::{FileMatch, TextList};
use crate::config::selector::{ClientPattern, NamePattern, ResourcePattern, Selector, VerbSet};
use crate::config::table::Selectors;

impl Validator<'_> {
    pub(super) fn match_selectors(&mut self, m: FileMatch, path: &str) -> Selectors {
        Selectors {
            namespaces: self.namespaces(m.namespaces.as_ref(), path),
            resources: self.resources(m.resources.as_ref(), path),
            verbs: self.verbs(m.verbs.as_ref(), path),
            users: self.names(m.users.as_ref(), path, "users"),
            groups: self.names(m.groups.as_ref(), path, "groups"),
            clients: self.list(m.clients.as_ref(), path, "clients", ClientPattern::parse),
        }
    }

    pub(super) fn names(
        &mut self,
        raw: Option<&TextList>,
        path: &str,
        field: &str,
    ) -> Option<Selector<NamePattern>> {
        self.list(raw, path, field, NamePattern::parse)
    }

    pub(super) fn namespaces(
        &mut self,
        raw: Option<&TextList>,
        path: &str,
    ) -> Option<Selector<NamePattern>> {
        self.list(raw, path, "namespaces", |item| {
            let pattern = NamePattern::parse(item)?;
            match pattern.as_exact() {
                Some(name) if !is_dns1123_label(name) => Err(format!(
                    "{name:?} is not a namespace name (a DNS-1123 label); for a pattern write /regex/"
                )),
                _ => Ok(pattern),
            }
        })
    }

    pub(super) fn resources(
        &mut self,
        raw: Option<&TextList>,
        path: &str,
    ) -> Option<Selector<ResourcePattern>> {
        self.list(raw, path, "resources", |item| {
            let pattern = ResourcePattern::parse(item)?;
            known_resource(item)?;
            Ok(pattern)
        })
    }

    pub(super) fn verbs(
        &mut self,
        raw: Option<&TextList>,
        path: &str,
    ) -> Option<(VerbSet, VerbSet)> {
        let sel = self.list(raw, path, "verbs", |item| {
            Verb::parse_selectable(item).ok_or_else(|| {
                format!(
                    "unknown verb {item:?}; use get, list, watch, create, update, patch, delete, \
                     deletecollection or proxy"
                )
            })
        })?;
        Some((VerbSet::of(&sel.include), VerbSet::of(&sel.exclude)))
    }

    /// Parses a selector list: each item, with or without `!`, through `parse`.
    pub(super) fn list<I>(
        &mut self,
        raw: Option<&TextList>,
        path: &str,
        field: &str,
        parse: impl Fn(&str) -> Result<I, String>,
    ) -> Option<Selector<I>> {
        let list = raw?;
        if list.value.is_empty() {
            self.error(
                list.referenced,
                format!("{path}.{field}"),
                "an empty list would match everything; leave the field out to mean that",
            );
        }
        let mut sel = Selector {
            include: Vec::new(),
            exclude: Vec::new(),
        };
        for (i, item) in list.value.iter().enumerate() {
            let (negated, text) = match item.value.strip_prefix('!') {
                Some(rest) => (true, rest),
                None => (false, item.value.as_str()),
            };
            match parse(text) {
                Ok(p) if negated => sel.exclude.push(p),
                Ok(p) => sel.include.push(p),
                Err(msg) => self.error(item.referenced, format!("{path}.{field}[{i}]"), msg),
            }
        }
        Some(sel)
    }
}

/// Refuses a resource of the core group or of a group Kubernetes ships that Kubernetes does not
/// have (a typo, or a singular), with the one meant; resources of other groups (custom resources)
/// are checked at serve time against the backends' discovery.
fn known_resource(item: &str) -> Result<(), String> {
    use crate::classify::BUILTIN_RESOURCES;
    let main = item.split('/').next().unwrap_or(item);
    let (resource, group) = main.split_once('.').unwrap_or((main, ""));
    if resource.contains('*') || group.contains('*') {
        return Ok(());
    }
    let Some((_, known)) = BUILTIN_RESOURCES.iter().find(|(g, _)| *g == group) else {
        return Ok(());
    };
    if known.contains(&resource) {
        return Ok(());
    }
    let spelled = |g: &str, r: &str| {
        if g.is_empty() {
            r.to_owned()
        } else {
            format!("{r}.{g}")
        }
    };
    let in_group = crate::config::shape::did_you_mean(resource, known).map(|r| spelled(group, r));
    // `deployments` without its group, or a group's resource under another group.
    let elsewhere = || {
        BUILTIN_RESOURCES
            .iter()
            .find(|(_, rs)| rs.contains(&resource))
            .map(|(g, _)| spelled(g, resource))
    };
    let home = if group.is_empty() {
        "the core group".to_owned()
    } else {
        format!("group {group}")
    };
    Err(match in_group.or_else(elsewhere) {
        Some(meant) => format!(
            "Kubernetes has no resource {resource:?} in {home}: did you mean {meant}? (resources are plural and lower case, with their group: pods, deployments.apps)"
        ),
        None => format!(
            "Kubernetes has no resource {resource:?} in {home}; write the plural resource as `kubectl api-resources` lists it, with its group (e.g. deployments.apps)"
        ),
    })
}
