//! What the request path does with a discovery request: a group/version's documents go to the
//! backend merged discovery took them from (its resource list answered merged when other backends
//! add resources to it); the root lists and the OpenAPI index are answered with the merged document
//! once the apiserver has let the client read them.

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
    path: Answer,
    accept: Option<HeaderValue>,
    if_none_match: Option<HeaderValue>,
}

impl MergedAnswer {
    /// The merged document in place of the apiserver's answer, once the apiserver answered 200.
    pub(crate) fn answer(
        &self,
        discovery: Option<&MergedDiscovery>,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> Option<Response<Bytes>> {
        if status != StatusCode::OK {
            return None;
        }
        // The merged OpenAPI document is JSON: a client that asked for protobuf gets the source
        // backend's own.
        let json = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("application/json"));
        if matches!(self.path, Answer::OpenApi(_)) && !json {
            return None;
        }
        discovery?.respond(
            &self.path,
            self.accept.as_ref(),
            self.if_none_match.as_ref(),
        )
    }

    /// Whether it answers a group/version's OpenAPI document.
    pub(crate) fn is_openapi(&self) -> bool {
        matches!(self.path, Answer::OpenApi(_))
    }

    pub(crate) fn take(merge: Merge, headers: &mut HeaderMap) -> Option<MergedAnswer> {
        let (Merge::Answer(path) | Merge::SourceAnswer(_, path)) = merge else {
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
#[derive(Clone)]
pub(crate) enum Merge {
    /// Sent to this backend (a group/version's documents).
    Source(BackendId),
    /// Answered with the merged document once the apiserver has answered 200.
    Answer(Answer),
    /// Sent to this backend, and answered with the merged document once it has answered 200 (a
    /// group/version's resource list that other backends add resources to).
    SourceAnswer(BackendId, Answer),
}

/// A merged document a request is answered with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// `/api` (`core`) or `/apis`.
    Root { core: bool },
    /// `/openapi/v3`.
    OpenApiIndex,
    /// `/api/VERSION` or `/apis/GROUP/VERSION`.
    List(Box<(String, String)>),
    /// `/openapi/v3/api/VERSION` or `/openapi/v3/apis/GROUP/VERSION`, asked for as JSON.
    OpenApi(Box<(String, String)>),
}

pub(crate) fn merged_discovery(
    discovery: Option<&MergedDiscovery>,
    path: DiscoveryPath<'_>,
) -> Option<Merge> {
    match path {
        DiscoveryPath::GroupVersion {
            group,
            version,
            openapi,
        } => {
            let discovery = discovery?;
            let source = discovery.source(group, version)?;
            let gv = || Box::new((group.to_owned(), version.to_owned()));
            if !openapi && discovery.has_merged_list(group, version) {
                return Some(Merge::SourceAnswer(source, Answer::List(gv())));
            }
            if openapi && discovery.has_merged_openapi(group, version) {
                return Some(Merge::SourceAnswer(source, Answer::OpenApi(gv())));
            }
            Some(Merge::Source(source))
        }
        DiscoveryPath::Root { core } => Some(Merge::Answer(Answer::Root { core })),
        DiscoveryPath::OpenApiIndex => Some(Merge::Answer(Answer::OpenApiIndex)),
    }
}
