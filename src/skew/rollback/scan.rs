//! Reading the cluster for the check: every backend's kinds (its OpenAPI), then, through the newest
//! backend that serves each, the objects of every kind that the older backend either does not
//! serve or describes with fewer fields, in pages, each object judged and forgotten.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderValue;
use serde::Deserialize;
use serde_json::Value;

use super::{BackendRef, ResourceRef, Stake, Tally, field_of};
use crate::config::RouteTable;
use crate::metrics::Metrics;
use crate::skew::{Gvk, KindFields, VersionFields, unstorable};
use crate::upstream::{EndpointPool, PoolSettings, Upstreams, own_get_with_groups};

/// One backend as the check reads it: its kinds, and the endpoint that answered.
pub(crate) struct Source {
    pub(crate) backend: BackendRef,
    pub(crate) version: Option<(u32, u32)>,
    pub(crate) fields: VersionFields,
    endpoint: Arc<EndpointPool>,
}

impl Source {
    pub(crate) fn endpoint(&self) -> &Arc<EndpointPool> {
        &self.endpoint
    }
}

/// How the check reads.
pub struct ScanOptions {
    /// Objects per list page.
    pub page: usize,
    /// Names shown per finding and namespace.
    pub max_names: usize,
    /// The groups the reads name (`X-Remote-Group`) besides skewgate's own user.
    pub groups: Vec<HeaderValue>,
    /// How long one page may take.
    pub page_timeout: Duration,
}

/// Where the check tells how far it is (stderr, for a person waiting).
pub trait Progress {
    fn listing(&mut self, resource: &str, through: &str);
    fn page(&mut self, resource: &str, objects: u64);
    fn skipped(&mut self, resource: &str, why: &str);
}

/// Each backend of `table`, read from its first endpoint whose OpenAPI answers.
pub(super) async fn connect(table: &RouteTable, pool: PoolSettings) -> Result<Vec<Source>, String> {
    let upstreams = Upstreams::new(pool, Arc::new(Metrics::new()));
    let mut out = Vec::new();
    for backend in upstreams.backends_for(table) {
        let mut why = format!("backend {} has no endpoint", backend.name);
        let mut read = None;
        for ep in &backend.endpoints {
            match crate::skew::live::fetch_endpoint(ep).await {
                Ok(fields) => {
                    read = Some((fields, ep.clone()));
                    break;
                }
                Err(e) => why = format!("backend {}: {e}", backend.name),
            }
        }
        let (fields, endpoint) = read.ok_or(why)?;
        out.push(Source {
            backend: BackendRef {
                name: backend.name.clone(),
                version: backend.version.map(|(a, b)| format!("v{a}.{b}")),
            },
            version: backend.version,
            fields,
            endpoint,
        });
    }
    Ok(out)
}

/// A kind to list, and how its objects are judged.
struct Target<'s> {
    resource: ResourceRef,
    through: &'s Source,
    /// The newer kind and the older's, when fields are judged; `None`: the older does not serve it.
    fields: Option<(&'s KindFields, &'s KindFields)>,
}

/// What the scan gives: the tally, the objects read and the resources listed.
pub(crate) struct Scanned {
    pub(crate) tally: Tally,
    pub(crate) objects: u64,
    pub(crate) resources: u64,
}

/// Lists and judges every kind at stake; `to` is the older backend, `from` the newer ones.
pub(super) async fn scan(
    to: &Source,
    from: &[&Source],
    options: &ScanOptions,
    progress: &mut dyn Progress,
) -> Result<Scanned, String> {
    let mut scanned = Scanned {
        tally: Tally::new(options.max_names),
        objects: 0,
        resources: 0,
    };
    for target in targets(to, from) {
        let selector = target.resource.selector();
        progress.listing(&selector, &target.through.backend.name);
        match list(&target, options, &mut scanned, progress).await? {
            Listed::Read => scanned.resources += 1,
            Listed::NotListable(why) => progress.skipped(&selector, &why),
        }
    }
    Ok(scanned)
}

/// The kinds at stake, each read through the newest backend that serves it.
fn targets<'s>(to: &'s Source, from: &[&'s Source]) -> Vec<Target<'s>> {
    let mut newest_first: Vec<&Source> = from.to_vec();
    newest_first.sort_by_key(|s| std::cmp::Reverse(s.version));
    let mut chosen: BTreeMap<&Gvk, Target<'s>> = BTreeMap::new();
    for source in newest_first {
        for (gvk, kind) in &source.fields.kinds {
            if chosen.contains_key(gvk) {
                continue;
            }
            let resource = ResourceRef {
                group: gvk.group.clone(),
                version: gvk.version.clone(),
                resource: kind.resource.clone(),
            };
            let serves_resource = (to.fields.kinds.iter())
                .any(|(g, k)| g.group == gvk.group && k.resource == kind.resource);
            let fields = match to.fields.kinds.get(gvk) {
                _ if !serves_resource => None,
                // Served by the older in other versions only: the apiserver converts; storage
                // versions are judged apart.
                None => continue,
                Some(older) if differs(kind, older) => Some((kind, older)),
                Some(_) => continue,
            };
            chosen.insert(
                gvk,
                Target {
                    resource,
                    through: source,
                    fields,
                },
            );
        }
    }
    chosen.into_values().collect()
}

/// Whether the newer kind has a field the older does not.
fn differs(newer: &KindFields, older: &KindFields) -> bool {
    newer.fields.keys().any(|p| !older.fields.contains_key(p))
}

enum Listed {
    Read,
    NotListable(String),
}

/// One page of a list, as the apiserver answers it.
#[derive(Deserialize)]
struct Page {
    #[serde(default)]
    metadata: PageMeta,
    #[serde(default)]
    items: Vec<Value>,
}

#[derive(Default, Deserialize)]
struct PageMeta {
    #[serde(default, rename = "continue")]
    next: Option<String>,
}

/// Lists the target's objects page by page, judging each.
async fn list(
    target: &Target<'_>,
    options: &ScanOptions,
    scanned: &mut Scanned,
    progress: &mut dyn Progress,
) -> Result<Listed, String> {
    let selector = target.resource.selector();
    let base = collection_path(&target.resource);
    let mut next: Option<String> = None;
    let mut read = 0u64;
    loop {
        let path = match &next {
            None => format!("{base}?limit={}", options.page),
            Some(token) => format!("{base}?limit={}&continue={}", options.page, escape(token)),
        };
        let ep = &target.through.endpoint;
        let (code, body) =
            own_get_with_groups(ep, &path, &options.groups, options.page_timeout).await?;
        if code == http::StatusCode::NOT_FOUND || code == http::StatusCode::METHOD_NOT_ALLOWED {
            return Ok(Listed::NotListable(format!("not listable ({code})")));
        }
        let page: Page = match code {
            c if c.is_success() => serde_json::from_slice(&body)
                .map_err(|e| format!("{selector}: the list is not JSON: {e}"))?,
            // A continue token older than etcd's compaction: the apiserver gives one to go on
            // from, inconsistently (objects changed meanwhile may be missed or seen twice).
            http::StatusCode::GONE => match expired_continue(&body) {
                Some(token) => {
                    go_on(&mut next, token, &selector)?;
                    continue;
                }
                None => return Err(format!("{selector}: the list expired (410) mid-way")),
            },
            c => {
                return Err(crate::upstream::own_answered(ep, &path, c, &body));
            }
        };
        for item in &page.items {
            judge(target, item, &mut scanned.tally);
        }
        read += page.items.len() as u64;
        scanned.objects += page.items.len() as u64;
        progress.page(&selector, read);
        match page.metadata.next.filter(|t| !t.is_empty()) {
            Some(token) => go_on(&mut next, token, &selector)?,
            None => return Ok(Listed::Read),
        }
    }
}

/// The next page's token: one the apiserver gave for this page already would never end the list.
fn go_on(next: &mut Option<String>, token: String, selector: &str) -> Result<(), String> {
    if next.as_deref() == Some(token.as_str()) {
        return Err(format!(
            "{selector}: the apiserver gave the same continue token twice; the list would not end"
        ));
    }
    *next = Some(token);
    Ok(())
}

/// Counts one object.
fn judge(target: &Target<'_>, item: &Value, tally: &mut Tally) {
    let meta = &item["metadata"];
    let namespace = meta["namespace"].as_str().unwrap_or("");
    let name = meta["name"].as_str().unwrap_or("");
    match target.fields {
        None => tally.add(&target.resource, Stake::KindNotServed, namespace, name),
        Some((newer, older)) => {
            let mut fields: Vec<String> = unstorable(newer, older, item)
                .iter()
                .map(|p| field_of(p))
                .collect();
            fields.sort();
            fields.dedup();
            for field in fields {
                tally.add(&target.resource, Stake::Field { field }, namespace, name);
            }
        }
    }
}

/// `/api/v1/pods`, `/apis/apps/v1/deployments`: every namespace's objects.
fn collection_path(r: &ResourceRef) -> String {
    if r.group.is_empty() {
        format!("/api/{}/{}", r.version, r.resource)
    } else {
        format!("/apis/{}/{}/{}", r.group, r.version, r.resource)
    }
}

/// The token a 410 `Status` offers to go on from (`metadata.continue`), if any.
fn expired_continue(body: &[u8]) -> Option<String> {
    let status: Value = serde_json::from_slice(body).ok()?;
    let token = status["metadata"]["continue"].as_str()?;
    (!token.is_empty()).then(|| token.to_owned())
}

/// A continue token in a query: it is base64 (`+`, `/`, `=`), escaped as a query value.
pub(crate) fn escape(token: &str) -> String {
    let mut out = String::with_capacity(token.len());
    for b in token.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_list_whose_token_does_not_move_is_an_error_not_a_loop() {
        let mut next = None;
        assert!(super::go_on(&mut next, "a".into(), "pods").is_ok());
        assert!(super::go_on(&mut next, "b".into(), "pods").is_ok());
        let again = super::go_on(&mut next, "b".into(), "pods");
        assert!(again.is_err_and(|e| e.contains("same continue token twice")));
        assert_eq!(super::escape("a+b/c="), "a%2Bb%2Fc%3D");
    }
}
