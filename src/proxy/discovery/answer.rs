//! What the request path does with a discovery request: a group/version's documents go to the
//! backend merged discovery took them from; the root lists and the OpenAPI index are answered with
//! the merged document once the apiserver has let the client read them.

use http::header::{self, HeaderMap, HeaderValue};
use http::{Response, StatusCode};

use super::DiscoveryPath;
use bytes::Bytes;

use super::MergedDiscovery;
use crate::config::BackendId;

/// A discovery document answered merged once the apiserver has let the client read it: the
/// client's `Accept` and `If-None-Match`, the latter kept from the apiserver (its copy, or a 304 for
/// it, is not what the client gets).
pub(crate) struct MergedAnswer {
    path: DiscoveryPath<'static>,
    accept: Option<HeaderValue>,
    if_none_match: Option<HeaderValue>,
}

impl MergedAnswer {
    /// The merged document in place of the apiserver's answer, once the apiserver answered 200.
    pub(crate) fn answer(
        &self,
        discovery: Option<&MergedDiscovery>,
        status: StatusCode,
    ) -> Option<Response<Bytes>> {
        if status != StatusCode::OK {
            return None;
        }
        discovery?.respond(self.path, self.accept.as_ref(), self.if_none_match.as_ref())
    }

    pub(crate) fn take(merge: Merge, headers: &mut HeaderMap) -> Option<MergedAnswer> {
        let Merge::Answer(path) = merge else {
            return None;
        };
        Some(MergedAnswer {
            path,
            accept: headers.get(header::ACCEPT).cloned(),
            if_none_match: headers.remove(header::IF_NONE_MATCH),
        })
    }
}

/// What merged discovery does with a discovery request.
#[derive(Clone, Copy)]
pub(crate) enum Merge {
    /// Sent to this backend (a group/version's documents).
    Source(BackendId),
    /// Answered with the merged document once the apiserver has answered 200.
    Answer(DiscoveryPath<'static>),
}

pub(crate) fn merged_discovery(
    discovery: Option<&MergedDiscovery>,
    path: DiscoveryPath<'_>,
) -> Option<Merge> {
    match path {
        DiscoveryPath::GroupVersion { group, version } => {
            discovery?.source(group, version).map(Merge::Source)
        }
        DiscoveryPath::Root { core } => Some(Merge::Answer(DiscoveryPath::Root { core })),
        DiscoveryPath::OpenApiIndex => Some(Merge::Answer(DiscoveryPath::OpenApiIndex)),
    }
}
