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
    let info = req.info;
    s.namespaces.as_ref().is_none_or(|sel| {
        !info.namespace.is_empty() && sel.matches_with(|p| p.matches(&info.namespace))
    }) && s.resources.as_ref().is_none_or(|sel| {
        info.is_resource
            && sel.matches_with(|p| p.matches(&info.api_group, &info.resource, &info.subresource))
    }) && s.verbs.is_none_or(|(include, exclude)| {
        (include == VerbSet::default() || include.contains(info.verb))
            && !exclude.contains(info.verb)
    }) && s
        .users
        .as_ref()
        .is_none_or(|sel| sel.matches_with(|p| p.matches(req.user)))
        && s.groups
            .as_ref()
            .is_none_or(|sel| sel.matches_with(|p| req.groups.iter().any(|g| p.matches(g))))
        && s.clients
            .as_ref()
            .is_none_or(|sel| sel.matches_with(|p| p.matches(&req.client)))
}
