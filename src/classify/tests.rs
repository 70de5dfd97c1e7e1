//! RequestInfo cases: every case of kube-apiserver's own `requestinfo_test.go`, plus malformed paths.

use super::*;

fn split(url: &str) -> (&str, Option<&str>) {
    match url.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (url, None),
    }
}

fn info<'a>(method: &str, url: &'a str) -> RequestInfo<'a> {
    let (path, query) = split(url);
    classify(method, path, query)
}

/// (method, url, verb, prefix, group, version, namespace, resource, subresource, name)
type Case = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
);

const RESOURCE_CASES: &[Case] = &[
    // resource paths
    (
        "GET",
        "/api/v1/namespaces",
        "list",
        "api",
        "",
        "v1",
        "",
        "namespaces",
        "",
        "",
    ),
    (
        "GET",
        "/api/v1/namespaces/other",
        "get",
        "api",
        "",
        "v1",
        "other",
        "namespaces",
        "",
        "other",
    ),
    (
        "GET",
        "/api/v1/namespaces/other/pods",
        "list",
        "api",
        "",
        "v1",
        "other",
        "pods",
        "",
        "",
    ),
    (
        "GET",
        "/api/v1/namespaces/other/pods/foo",
        "get",
        "api",
        "",
        "v1",
        "other",
        "pods",
        "",
        "foo",
    ),
    (
        "HEAD",
        "/api/v1/namespaces/other/pods/foo",
        "get",
        "api",
        "",
        "v1",
        "other",
        "pods",
        "",
        "foo",
    ),
    (
        "GET",
        "/api/v1/pods",
        "list",
        "api",
        "",
        "v1",
        "",
        "pods",
        "",
        "",
    ),
    (
        "HEAD",
        "/api/v1/pods",
        "list",
        "api",
        "",
        "v1",
        "",
        "pods",
        "",
        "",
    ),
    (
        "PATCH",
        "/api/v1/namespaces/new-namespace",
        "patch",
        "api",
        "",
        "v1",
        "new-namespace",
        "namespaces",
        "",
        "new-namespace",
    ),
    // special verbs
    (
        "GET",
        "/api/v1/proxy/namespaces/other/pods/foo",
        "proxy",
        "api",
        "",
        "v1",
        "other",
        "pods",
        "",
        "foo",
    ),
    (
        "GET",
        "/api/v1/proxy/namespaces/other/pods/foo/subpath/not/a/subresource",
        "proxy",
        "api",
        "",
        "v1",
        "other",
        "pods",
        "",
        "foo",
    ),
    (
        "GET",
        "/api/v1/watch/pods",
        "watch",
        "api",
        "",
        "v1",
        "",
        "pods",
        "",
        "",
    ),
    (
        "GET",
        "/api/v1/pods?watch=true",
        "watch",
        "api",
        "",
        "v1",
        "",
        "pods",
        "",
        "",
    ),
    (
        "GET",
        "/api/v1/pods?watch=false",
        "list",
        "api",
        "",
        "v1",
        "",
        "pods",
        "",
        "",
    ),
    (
        "GET",
        "/api/v1/watch/namespaces/other/pods",
        "watch",
        "api",
        "",
        "v1",
        "other",
        "pods",
        "",
        "",
    ),
    (
        "GET",
        "/api/v1/namespaces/other/pods?watch=1",
        "watch",
        "api",
        "",
        "v1",
        "other",
        "pods",
        "",
        "",
    ),
    (
        "GET",
        "/api/v1/namespaces/other/pods?watch=0",
        "list",
        "api",
        "",
        "v1",
        "other",
        "pods",
        "",
        "",
    ),
    (
        "GET",
        "/api/v1/namespaces/other/pods?watch=",
        "watch",
        "api",
        "",
        "v1",
        "other",
        "pods",
        "",
        "",
    ),
    (
        "GET",
        "/api/v1/namespaces/other/pods?watch=FALSE",
        "list",
        "api",
        "",
        "v1",
        "other",
        "pods",
        "",
        "",
    ),
    // subresource identification
    (
        "GET",
        "/api/v1/namespaces/other/pods/foo/status",
        "get",
        "api",
        "",
        "v1",
        "other",
        "pods",
        "status",
        "foo",
    ),
    (
        "GET",
        "/api/v1/namespaces/other/pods/foo/proxy/subpath",
        "get",
        "api",
        "",
        "v1",
        "other",
        "pods",
        "proxy",
        "foo",
    ),
    (
        "PUT",
        "/api/v1/namespaces/other/finalize",
        "update",
        "api",
        "",
        "v1",
        "other",
        "namespaces",
        "finalize",
        "other",
    ),
    (
        "PUT",
        "/api/v1/namespaces/other/status",
        "update",
        "api",
        "",
        "v1",
        "other",
        "namespaces",
        "status",
        "other",
    ),
    // verb identification
    (
        "PATCH",
        "/api/v1/namespaces/other/pods/foo",
        "patch",
        "api",
        "",
        "v1",
        "other",
        "pods",
        "",
        "foo",
    ),
    (
        "DELETE",
        "/api/v1/namespaces/other/pods/foo",
        "delete",
        "api",
        "",
        "v1",
        "other",
        "pods",
        "",
        "foo",
    ),
    (
        "POST",
        "/api/v1/namespaces/other/pods",
        "create",
        "api",
        "",
        "v1",
        "other",
        "pods",
        "",
        "",
    ),
    (
        "PUT",
        "/api/v1/namespaces/other/pods/foo",
        "update",
        "api",
        "",
        "v1",
        "other",
        "pods",
        "",
        "foo",
    ),
    // deletecollection verb identification
    (
        "DELETE",
        "/api/v1/nodes",
        "deletecollection",
        "api",
        "",
        "v1",
        "",
        "nodes",
        "",
        "",
    ),
    (
        "DELETE",
        "/api/v1/namespaces",
        "deletecollection",
        "api",
        "",
        "v1",
        "",
        "namespaces",
        "",
        "",
    ),
    (
        "DELETE",
        "/api/v1/namespaces/other/pods",
        "deletecollection",
        "api",
        "",
        "v1",
        "other",
        "pods",
        "",
        "",
    ),
    (
        "DELETE",
        "/apis/extensions/v1/namespaces/other/pods",
        "deletecollection",
        "apis",
        "extensions",
        "v1",
        "other",
        "pods",
        "",
        "",
    ),
    // api group identification
    (
        "POST",
        "/apis/extensions/v1/namespaces/other/pods",
        "create",
        "apis",
        "extensions",
        "v1",
        "other",
        "pods",
        "",
        "",
    ),
    // api version identification
    (
        "POST",
        "/apis/extensions/v1beta3/namespaces/other/pods",
        "create",
        "apis",
        "extensions",
        "v1beta3",
        "other",
        "pods",
        "",
        "",
    ),
    // groups with dots, cluster-scoped, field selectors
    (
        "PUT",
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-1",
        "update",
        "apis",
        "coordination.k8s.io",
        "v1",
        "kube-node-lease",
        "leases",
        "",
        "node-1",
    ),
    (
        "GET",
        "/apis/apps/v1/deployments",
        "list",
        "apis",
        "apps",
        "v1",
        "",
        "deployments",
        "",
        "",
    ),
    (
        "GET",
        "/api/v1/nodes/node-1",
        "get",
        "api",
        "",
        "v1",
        "",
        "nodes",
        "",
        "node-1",
    ),
    (
        "GET",
        "/apis/group/version/resource?fieldSelector=metadata.name=name1",
        "list",
        "apis",
        "group",
        "version",
        "",
        "resource",
        "",
        "name1",
    ),
    (
        "GET",
        "/apis/group/version/resource?watch=true&fieldSelector=metadata.name=name1",
        "watch",
        "apis",
        "group",
        "version",
        "",
        "resource",
        "",
        "name1",
    ),
    (
        "GET",
        "/apis/group/version/resource?fieldSelector=foo=bar",
        "list",
        "apis",
        "group",
        "version",
        "",
        "resource",
        "",
        "",
    ),
    (
        "GET",
        "/apis/group/version/resource?fieldSelector=metadata.name=name1,foo",
        "list",
        "apis",
        "group",
        "version",
        "",
        "resource",
        "",
        "",
    ),
    (
        "GET",
        "/apis/group/version/resource?fieldSelector=metadata.name=name1,foo&watch=true",
        "watch",
        "apis",
        "group",
        "version",
        "",
        "resource",
        "",
        "",
    ),
    (
        "GET",
        "/apis/group/version/resource?fieldSelector=metadata.name=name1,foo&watch=false",
        "list",
        "apis",
        "group",
        "version",
        "",
        "resource",
        "",
        "",
    ),
    // a field selector never turns a deletecollection into a delete
    (
        "DELETE",
        "/api/v1/namespaces/other/pods?fieldSelector=metadata.name=a",
        "deletecollection",
        "api",
        "",
        "v1",
        "other",
        "pods",
        "",
        "",
    ),
    // percent-encoded paths are decoded first, as Go's URL.Path is
    (
        "GET",
        "/api/v1/namespaces/te%73t/pods/a%2Db",
        "get",
        "api",
        "",
        "v1",
        "test",
        "pods",
        "",
        "a-b",
    ),
    (
        "GET",
        "/api/v1/namespaces/a%2Fb/pods",
        "get",
        "api",
        "",
        "v1",
        "a",
        "b",
        "",
        "pods",
    ),
    // simple groupless and group forms
    (
        "GET",
        "/api/version/resource",
        "list",
        "api",
        "",
        "version",
        "",
        "resource",
        "",
        "",
    ),
    (
        "GET",
        "/apis/group/version/resource/name/subresource",
        "get",
        "apis",
        "group",
        "version",
        "",
        "resource",
        "subresource",
        "name",
    ),
    (
        "GET",
        "/api/version/resource/name/subresource",
        "get",
        "api",
        "",
        "version",
        "",
        "resource",
        "subresource",
        "name",
    ),
    (
        "GET",
        "/apis/batch/v1/job",
        "list",
        "apis",
        "batch",
        "v1",
        "",
        "job",
        "",
        "",
    ),
    (
        "GET",
        "/apis/batch/v1/job/foo",
        "get",
        "apis",
        "batch",
        "v1",
        "",
        "job",
        "",
        "foo",
    ),
    (
        "GET",
        "/apis/batch/v1/job/foo/scale",
        "get",
        "apis",
        "batch",
        "v1",
        "",
        "job",
        "scale",
        "foo",
    ),
];

#[test]
fn resource_requests_match_the_apiserver() {
    for &(method, url, verb, prefix, group, version, ns, resource, sub, name) in RESOURCE_CASES {
        let i = info(method, url);
        assert!(i.is_resource, "{method} {url}: expected a resource request");
        let got = (
            i.verb.as_str(),
            &*i.api_prefix,
            &*i.api_group,
            &*i.api_version,
            &*i.namespace,
            &*i.resource,
            &*i.subresource,
            &*i.name,
        );
        assert_eq!(
            got,
            (verb, prefix, group, version, ns, resource, sub, name),
            "{method} {url}"
        );
    }
}

#[test]
fn non_resource_requests_match_the_apiserver() {
    for url in [
        "/",
        "",
        "/api",
        "/api/v1",
        "/api/version/",
        "/apis",
        "/apis/apps",
        "/apis/apps/v1",
        "/apis/group/version/",
        "/apis/extensions/v1beta1",
        "/apis/extensions/v1beta1/",
        "/badprefix/version/resource",
        "/not-api/version/resource",
        "/apis/version/resource",
        "/version",
        "/healthz",
        "/openapi/v2",
    ] {
        let i = info("GET", url);
        assert!(!i.is_resource, "{url}: expected a non-resource request");
        assert_eq!(i.verb, Verb::Get, "{url}");
        assert!(i.resource.is_empty() && i.namespace.is_empty(), "{url}");
    }
    assert_eq!(info("POST", "/version").verb.as_str(), "post");
    assert_eq!(info("PUT", "/healthz").verb.as_str(), "put");
    assert_eq!(info("HEAD", "/healthz").verb.as_str(), "head");
}

#[test]
fn long_running_requests() {
    for (method, url, long) in [
        ("GET", "/api/v1/pods?watch=true", true),
        ("GET", "/api/v1/watch/pods", true),
        ("GET", "/api/v1/proxy/namespaces/a/pods/b", true),
        ("POST", "/api/v1/namespaces/a/pods/b/exec", true),
        ("GET", "/api/v1/namespaces/a/pods/b/log", true),
        ("POST", "/api/v1/namespaces/a/pods/b/attach", true),
        ("POST", "/api/v1/namespaces/a/pods/b/portforward", true),
        ("GET", "/api/v1/namespaces/a/services/b/proxy/x", true),
        ("GET", "/api/v1/pods", false),
        ("PUT", "/api/v1/namespaces/a/pods/b/status", false),
        ("GET", "/log", false),
    ] {
        assert_eq!(info(method, url).is_long_running(), long, "{method} {url}");
    }
}

#[test]
fn plain_paths_are_borrowed_not_copied() {
    let i = info("GET", "/api/v1/namespaces/a/pods/b?fieldSelector=x");
    assert!(matches!(i.namespace, Cow::Borrowed(_)));
    assert!(matches!(i.name, Cow::Borrowed(_)));
    let i = info(
        "GET",
        "/api/v1/namespaces/a/pods?fieldSelector=metadata.name%3Db",
    );
    assert_eq!(i.name, "b");
}

#[test]
fn malformed_paths_never_panic() {
    let long = format!(
        "/api/v1/namespaces/{}/pods/{}",
        "a".repeat(100_000),
        "b/".repeat(10_000)
    );
    let cases = [
        "//",
        "///api///v1//",
        "/api//v1/pods",
        "/api/v1//namespaces//pods",
        "/api/v1/namespaces/%2F/pods",
        "/api/v1/namespaces/%/pods",
        "/api/v1/namespaces/%zz/pods",
        "/api/v1/namespaces/%ff%fe/pods",
        "/api/v1/../../etc/passwd",
        "/apis/../v1/x",
        "/api/v1/watch",
        "/api/v1/proxy",
        "/api/v1/namespaces",
        "/api/v1/namespaces/ü/pods/é",
        long.as_str(),
    ];
    for path in cases {
        for method in ["GET", "PUT", "DELETE", "BREW", ""] {
            let i = classify(
                method,
                path,
                Some("watch=%&fieldSelector=metadata.name%3D\\é,=,!"),
            );
            let _ = i.is_long_running();
            let _ = i.into_owned();
        }
    }
    // `..` is not special to the apiserver: it is a segment like any other.
    let i = info("GET", "/api/v1/namespaces/../pods");
    assert_eq!((&*i.namespace, &*i.resource), ("..", "pods"));
    // The deprecated special verb with nothing after it names no resource.
    let i = info("GET", "/api/v1/watch");
    assert!(i.is_resource && i.resource.is_empty());
    assert_eq!(i.verb, Verb::Watch);
}

proptest::proptest! {
    /// Segments are what Go's strings.Split gives after the slashes are trimmed, at most nine of
    /// them, whatever the path holds (empty segments, many slashes, characters of several bytes).
    #[test]
    fn segments_are_those_of_split(path in "[a/é_.%-]{1,40}") {
        let (segments, n) = super::split_segments(&path);
        let expected: Vec<&str> = path.split('/').take(super::MAX_SEGMENTS).collect();
        proptest::prop_assert_eq!(&segments[..n], &expected[..]);
    }
}
