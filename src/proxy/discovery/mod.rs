//! Discovery across versions. kubectl decides which kinds exist from discovery, so through skewgate
//! it must see every group/version that some backend serves: `/api`, `/apis` (legacy and aggregated
//! forms) and `/openapi/v3` are answered as the union of the backends' documents, each
//! group/version taken from the backend the route table sends its resources to (or, when that one
//! does not serve it, the first that does); `/api/VERSION`, `/apis/GROUP/VERSION` and their OpenAPI
//! documents go to that same backend.
//!
//! The merged documents are built off the request path, when discovery refreshes or the route table
//! reloads. A request for one is still sent to an apiserver first, so that the apiserver alone
//! decides who may read discovery (anonymous clients may not): only its `200` is replaced by the
//! merged document.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};
use serde_json::{Value, json};

mod answer;
mod documents;
mod openapi;

pub(crate) use answer::{Answer, Merge, MergedAnswer, merged_discovery};
pub(crate) use openapi::{OpenApiMerges, Plan};

use crate::config::BackendId;
use crate::upstream::Served;
use documents::{
    aggregated, choose_sources, core_group, group_list, merged_openapi, openapi_plans,
    union_of_versions,
};

/// A discovery path, as far as merging is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DiscoveryPath<'a> {
    /// `/api` (`core`) or `/apis`: answered merged.
    Root {
        /// `/api` rather than `/apis`.
        core: bool,
    },
    /// `/openapi/v3`: answered merged.
    OpenApiIndex,
    /// `/api/VERSION`, `/apis/GROUP/VERSION` and their `/openapi/v3/...` documents: sent to the
    /// backend the group/version's documents are taken from.
    GroupVersion {
        /// The group; empty for the core group.
        group: &'a str,
        /// The version.
        version: &'a str,
        /// Its OpenAPI document, not its resource list.
        openapi: bool,
    },
}

/// The discovery path a GET of `path` asks for, if any.
pub(super) fn discovery_path(path: &str) -> Option<DiscoveryPath<'_>> {
    let mut segments = path.strip_prefix('/')?.split('/');
    let parts: [Option<&str>; 6] = std::array::from_fn(|_| segments.next());
    Some(match parts {
        [Some("api"), None, ..] => DiscoveryPath::Root { core: true },
        [Some("apis"), None, ..] => DiscoveryPath::Root { core: false },
        [Some("api"), Some(version), None, ..] => DiscoveryPath::GroupVersion {
            group: "",
            version,
            openapi: false,
        },
        [
            Some("openapi"),
            Some("v3"),
            Some("api"),
            Some(version),
            None,
            ..,
        ] => DiscoveryPath::GroupVersion {
            group: "",
            version,
            openapi: true,
        },
        [Some("apis"), Some(group), Some(version), None, ..] => DiscoveryPath::GroupVersion {
            group,
            version,
            openapi: false,
        },
        [
            Some("openapi"),
            Some("v3"),
            Some("apis"),
            Some(group),
            Some(version),
            None,
        ] => DiscoveryPath::GroupVersion {
            group,
            version,
            openapi: true,
        },
        [Some("openapi"), Some("v3"), None, ..] => DiscoveryPath::OpenApiIndex,
        _ => return None,
    })
}

/// One merged document, ready to send.
#[derive(Debug)]
struct Document {
    body: Bytes,
    etag: HeaderValue,
}

impl Document {
    fn new(value: &Value) -> Document {
        let body = Bytes::from(serde_json::to_vec(value).unwrap_or_default());
        let etag = format!("\"{:016x}\"", xxhash_rust::xxh3::xxh3_64(&body));
        Document {
            etag: HeaderValue::from_str(&etag)
                .unwrap_or_else(|_| HeaderValue::from_static("\"0\"")),
            body,
        }
    }
}

/// `/api` or `/apis` in each form a client may ask for.
#[derive(Debug)]
struct Forms {
    legacy: Document,
    v2: Document,
    v2beta1: Document,
}

/// Which form the client's `Accept` asks for first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    Legacy,
    V2,
    V2Beta1,
}

const V2_TYPE: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
const V2BETA1_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";

fn form(accept: Option<&HeaderValue>) -> Form {
    let Some(accept) = accept.and_then(|a| a.to_str().ok()) else {
        return Form::Legacy;
    };
    for entry in accept.split(',') {
        let mut parts = entry.split(';').map(str::trim);
        let media = parts.next().unwrap_or("");
        // Only JSON is served here; a client that lists protobuf first lists JSON after it.
        if !matches!(media, "application/json" | "*/*" | "application/*") {
            continue;
        }
        let (mut g, mut v, mut r#as) = (None, None, None);
        for p in parts {
            match p.split_once('=') {
                Some(("g", x)) => g = Some(x),
                Some(("v", x)) => v = Some(x),
                Some(("as", x)) => r#as = Some(x),
                _ => {}
            }
        }
        match (g, v, r#as) {
            (Some("apidiscovery.k8s.io"), Some("v2"), Some("APIGroupDiscoveryList")) => {
                return Form::V2;
            }
            (Some("apidiscovery.k8s.io"), Some("v2beta1"), Some("APIGroupDiscoveryList")) => {
                return Form::V2Beta1;
            }
            (None, None, None) => return Form::Legacy,
            _ => {}
        }
    }
    Form::Legacy
}

/// The merged discovery of one route table.
#[derive(Debug)]
pub(crate) struct MergedDiscovery {
    sources: HashMap<(String, String), BackendId>,
    /// The resource lists other backends added resources to, as `/api/VERSION` and
    /// `/apis/GROUP/VERSION` answer them.
    lists: HashMap<(String, String), Document>,
    api: Forms,
    apis: Forms,
    openapi: Option<Document>,
    /// The OpenAPI documents of the group/versions in `lists` (`openapi`).
    openapi_plans: Vec<Plan>,
    /// Those made so far, answered in place of the source backend's.
    openapi_docs: HashMap<(String, String), Arc<Document>>,
}

/// A named group while merging: its versions in order, and its preferred version.
struct MergedGroup {
    name: String,
    versions: Vec<String>,
    preferred: Option<String>,
}

impl MergedDiscovery {
    /// Merges what `served` (the backends, most preferred first: the one `reads.default` names,
    /// then the route file's order) serve. `source_of(group, version, resource)` is the backend the
    /// route table would send that group/version's resources to. `None` until some backend has been
    /// discovered.
    /// `merges` holds the merged OpenAPI documents made so far.
    pub(crate) fn build(
        served: &[(BackendId, Arc<Served>)],
        source_of: impl Fn(&str, &str, &str) -> BackendId,
        merges: &OpenApiMerges,
    ) -> Option<MergedDiscovery> {
        let primary = served.first()?;
        let (core_versions, groups) = union_of_versions(served);
        let (sources, lists) = choose_sources(served, &core_versions, &groups, source_of);
        let api = Forms {
            legacy: Document::new(&json!({
                "kind": "APIVersions",
                "versions": core_versions,
                "serverAddressByClientCIDRs": primary.1.core["serverAddressByClientCIDRs"],
            })),
            v2: Document::new(&aggregated("v2", &[core_group(&core_versions)], &lists)),
            v2beta1: Document::new(&aggregated(
                "v2beta1",
                &[core_group(&core_versions)],
                &lists,
            )),
        };
        let apis = Forms {
            legacy: Document::new(&group_list(&groups)),
            v2: Document::new(&aggregated("v2", &groups, &lists)),
            v2beta1: Document::new(&aggregated("v2beta1", &groups, &lists)),
        };
        let openapi_plans = openapi_plans(served, &sources, &lists);
        let mut index = merged_openapi(served, &sources);
        let mut openapi_docs = HashMap::new();
        for (gv, plan) in &openapi_plans {
            if let (Some(doc), Some(paths)) = (merges.get(&plan.key), index.as_mut()) {
                let entry = json!({"serverRelativeURL": plan.url()});
                paths.insert(plan.index_path.clone(), entry);
                openapi_docs.insert(gv.clone(), doc);
            }
        }
        let openapi = index.map(|paths| Document::new(&json!({"paths": paths})));
        let lists = lists
            .into_iter()
            .filter(|(_, l)| l.added)
            .map(|(gv, l)| (gv, Document::new(&l.list)))
            .collect();
        Some(MergedDiscovery {
            sources,
            lists,
            api,
            apis,
            openapi,
            openapi_plans: openapi_plans.into_iter().map(|(_, p)| p).collect(),
            openapi_docs,
        })
    }

    /// The merged OpenAPI documents this discovery names, made or not.
    pub(crate) fn openapi_plans(&self) -> Vec<Plan> {
        self.openapi_plans.clone()
    }

    /// Whether `group`/`version`'s OpenAPI document is answered merged.
    pub(crate) fn has_merged_openapi(&self, group: &str, version: &str) -> bool {
        self.openapi_docs
            .contains_key(&(group.to_owned(), version.to_owned()))
    }

    /// The backend the documents of `group`/`version` come from, if some backend serves it.
    pub(crate) fn source(&self, group: &str, version: &str) -> Option<BackendId> {
        // Discovery requests are rare; the owned key costs nothing that matters.
        self.sources
            .get(&(group.to_owned(), version.to_owned()))
            .copied()
    }

    /// Whether `group`/`version`'s resource list has resources other backends added.
    pub(crate) fn has_merged_list(&self, group: &str, version: &str) -> bool {
        self.lists
            .contains_key(&(group.to_owned(), version.to_owned()))
    }

    /// The merged answer to a GET of `path` with the client's `Accept` and `If-None-Match`; `None`
    /// when there is nothing merged to answer with.
    pub(crate) fn respond(
        &self,
        path: &Answer,
        accept: Option<&HeaderValue>,
        if_none_match: Option<&HeaderValue>,
    ) -> Option<Response<Bytes>> {
        let (doc, content_type) = match path {
            Answer::Root { core } => {
                let forms = if *core { &self.api } else { &self.apis };
                match form(accept) {
                    Form::Legacy => (&forms.legacy, "application/json"),
                    Form::V2 => (&forms.v2, V2_TYPE),
                    Form::V2Beta1 => (&forms.v2beta1, V2BETA1_TYPE),
                }
            }
            Answer::OpenApiIndex => (self.openapi.as_ref()?, "application/json"),
            Answer::List(gv) => (self.lists.get(&**gv)?, "application/json"),
            Answer::OpenApi(gv) => (&**self.openapi_docs.get(&**gv)?, "application/json"),
        };
        let fresh = if_none_match.is_some_and(|v| v == doc.etag);
        let mut resp = if fresh {
            let mut r = Response::new(Bytes::new());
            *r.status_mut() = StatusCode::NOT_MODIFIED;
            r
        } else {
            Response::new(doc.body.clone())
        };
        let h = resp.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        h.insert(header::ETAG, doc.etag.clone());
        h.insert(header::VARY, HeaderValue::from_static("Accept"));
        Some(resp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_paths() {
        assert_eq!(
            discovery_path("/api"),
            Some(DiscoveryPath::Root { core: true })
        );
        assert_eq!(
            discovery_path("/apis"),
            Some(DiscoveryPath::Root { core: false })
        );
        assert_eq!(
            discovery_path("/apis/apps/v1"),
            Some(DiscoveryPath::GroupVersion {
                group: "apps",
                version: "v1",
                openapi: false
            })
        );
        assert_eq!(
            discovery_path("/openapi/v3/apis/apps/v1"),
            Some(DiscoveryPath::GroupVersion {
                group: "apps",
                version: "v1",
                openapi: true
            })
        );
        assert_eq!(
            discovery_path("/openapi/v3/api/v1"),
            Some(DiscoveryPath::GroupVersion {
                group: "",
                version: "v1",
                openapi: true
            })
        );
        assert_eq!(
            discovery_path("/openapi/v3"),
            Some(DiscoveryPath::OpenApiIndex)
        );
        assert_eq!(discovery_path("/api/v1/pods"), None);
        assert_eq!(discovery_path("/apis/apps/v1/deployments"), None);
        assert_eq!(discovery_path("/version"), None);
    }

    #[test]
    fn accept_picks_the_first_form_served() {
        let h = |s: &'static str| HeaderValue::from_static(s);
        assert_eq!(form(None), Form::Legacy);
        assert_eq!(
            form(Some(&h(
                "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
            ))),
            Form::V2
        );
        assert_eq!(
            form(Some(&h(
                "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
            ))),
            Form::V2Beta1
        );
        assert_eq!(form(Some(&h("application/json, */*"))), Form::Legacy);
    }
}
