//! What steering knows of one request: its RequestInfo, who sent it, and with which client.

use crate::classify::{Client, RequestInfo, Verb};
use crate::config::{Selectors, VerbSet};

/// A classified request with its identity, as the selectors of a route file see it.
#[derive(Clone, Debug)]
pub struct SteerRequest<'a> {
    /// The apiserver's RequestInfo.
    pub info: &'a RequestInfo<'a>,
    /// The authenticated user name (empty when anonymous or not known to the proxy).
    pub user: &'a str,
    /// The user's groups.
    pub groups: &'a [&'a str],
    /// The client, from the User-Agent.
    pub client: Client<'a>,
}

impl SteerRequest<'_> {
    /// The request's verb.
    pub fn verb(&self) -> Verb {
        self.info.verb
    }
}

/// Whether every selector given matches the request.
pub(crate) fn selectors_match(s: &Selectors, req: &SteerRequest<'_>) -> bool {
    mismatch(s, req).is_none()
}

/// The first selector of `s` the request does not match (`namespaces`, `resources`, `verbs`,
/// `users`, `groups`, `clients`), or `None` when it matches them all: for `explain`.
pub fn mismatch(s: &Selectors, req: &SteerRequest<'_>) -> Option<&'static str> {
    let info = req.info;
    if !s.namespaces.as_ref().is_none_or(|sel| {
        !info.namespace.is_empty() && sel.matches_with(|p| p.matches(&info.namespace))
    }) {
        return Some("namespaces");
    }
    if !s.resources.as_ref().is_none_or(|sel| {
        info.is_resource
            && sel.matches_with(|p| p.matches(&info.api_group, &info.resource, &info.subresource))
    }) {
        return Some("resources");
    }
    if !s.verbs.is_none_or(|(include, exclude)| {
        (include == VerbSet::default() || include.contains(info.verb))
            && !exclude.contains(info.verb)
    }) {
        return Some("verbs");
    }
    if !s
        .users
        .as_ref()
        .is_none_or(|sel| sel.matches_with(|p| p.matches(req.user)))
    {
        return Some("users");
    }
    if !s
        .groups
        .as_ref()
        .is_none_or(|sel| sel.matches_with(|p| req.groups.iter().any(|g| p.matches(g))))
    {
        return Some("groups");
    }
    if !s
        .clients
        .as_ref()
        .is_none_or(|sel| sel.matches_with(|p| p.matches(&req.client)))
    {
        return Some("clients");
    }
    None
}
