//! One simulated apiserver's request handling: version, health, discovery, and the resource verbs.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use serde_json::{Value, json};

use super::api::{self, ApiResource};
use super::auth::UserInfo;
use super::schema;
use super::store::{ObjectKey, StoreError, WriteRecord};
use super::{SimState, openapi, streams, watch};

/// The body of every simulator response.
pub type SimBody = BoxBody<Bytes, Infallible>;

/// Largest request body the simulator reads.
const MAX_BODY: usize = 3 * 1024 * 1024;

/// Answers one request.
pub async fn handle(sim: Arc<SimState>, req: Request<Incoming>) -> Response<SimBody> {
    let path = req.uri().path().to_owned();
    if req.method() != Method::GET && sim.controls.fails_write(&path) {
        return status_error(
            500,
            "InternalError",
            "the simulator fails this write (a test's)",
        );
    }
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segments.as_slice() {
        [
            "api",
            "v1",
            "namespaces",
            _,
            "pods",
            _,
            "exec" | "attach" | "portforward",
        ] if req.headers().contains_key(header::UPGRADE) => streams::upgrade_echo(req),
        ["api", "v1", "namespaces", _, "pods", _, "log"] => {
            streams::log(req.uri().query().unwrap_or(""))
        }
        ["version"] => json_response(StatusCode::OK, &sim.version_json()),
        ["readyz"] | ["livez"] | ["healthz"] => text(StatusCode::OK, "ok"),
        // A fixture for tests: the request's headers (and trailers), as the apiserver received them.
        ["debug", "headers"] => debug_headers(req).await,
        ["apis", "authentication.k8s.io", "v1", "selfsubjectreviews"]
            if req.method() == Method::POST =>
        {
            self_subject_review(&req)
        }
        ["apis", "authorization.k8s.io", "v1", "subjectaccessreviews"]
            if req.method() == Method::POST =>
        {
            subject_access_review(&sim, req).await
        }
        ["openapi", "v3", rest @ ..] => {
            let query = req.uri().query();
            openapi::serve(sim.version, &sim.git_version, rest, query)
        }
        ["api"] => json_response(StatusCode::OK, &api::core_versions()),
        ["apis"] => json_response(StatusCode::OK, &api::groups(sim.version)),
        ["api", version] => discovery(api::resource_list(sim.version, "", version)),
        ["apis", group, version] => discovery(api::resource_list(sim.version, group, version)),
        ["api", version, rest @ ..] => resource(&sim, "", version, rest, req).await,
        ["apis", group, version, rest @ ..] => resource(&sim, group, version, rest, req).await,
        _ => status_error(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ),
    }
}

/// `kubectl auth whoami`: the user the request was authenticated as.
fn self_subject_review(req: &Request<Incoming>) -> Response<SimBody> {
    let Some(user) = req.extensions().get::<Arc<UserInfo>>() else {
        return status_error(500, "InternalError", "no user on the request");
    };
    let extra: serde_json::Map<String, Value> = user
        .extra
        .iter()
        .map(|(k, v)| (k.clone(), json!([v])))
        .collect();
    json_response(
        StatusCode::CREATED,
        &json!({
            "kind": "SelfSubjectReview",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"creationTimestamp": null},
            "status": {"userInfo": {"username": user.name, "groups": user.groups, "extra": extra}},
        }),
    )
}

/// A `SubjectAccessReview`: allowed, unless its user is one of `SimControls::watch_denied`.
async fn subject_access_review(sim: &SimState, req: Request<Incoming>) -> Response<SimBody> {
    sim.controls.reviews.fetch_add(1, Ordering::Relaxed);
    let body = match http_body_util::Limited::new(req.into_body(), MAX_BODY)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) => return status_error(400, "BadRequest", &format!("body: {e}")),
    };
    let Ok(mut review) = serde_json::from_slice::<Value>(&body) else {
        return status_error(400, "BadRequest", "the body is no SubjectAccessReview");
    };
    let user = review["spec"]["user"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let denied = sim
        .controls
        .watch_denied
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&user);
    review["status"] = if denied {
        json!({"allowed": false, "reason": "the simulator denies this user"})
    } else {
        json!({"allowed": true})
    };
    json_response(StatusCode::CREATED, &review)
}

async fn debug_headers(req: Request<Incoming>) -> Response<SimBody> {
    let mut doc = headers_json(req.headers());
    let mut trailers = http::HeaderMap::new();
    let mut body = req.into_body();
    while let Some(frame) = body.frame().await {
        match frame.map(|f| f.into_trailers()) {
            Ok(Ok(t)) => trailers.extend(t),
            Ok(Err(_)) => {}
            Err(e) => return status_error(400, "BadRequest", &format!("body: {e}")),
        }
    }
    if let Value::Object(map) = &mut doc {
        map.insert("trailers".to_owned(), headers_json(&trailers));
    }
    json_response(StatusCode::OK, &doc)
}

fn headers_json(headers: &http::HeaderMap) -> Value {
    let mut out = serde_json::Map::new();
    for name in headers.keys() {
        let values: Vec<Value> = headers
            .get_all(name)
            .iter()
            .map(|v| Value::String(String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect();
        out.insert(name.as_str().to_owned(), Value::Array(values));
    }
    Value::Object(out)
}

fn discovery(doc: Option<Value>) -> Response<SimBody> {
    match doc {
        Some(doc) => json_response(StatusCode::OK, &doc),
        None => status_error(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ),
    }
}

/// Where a resource path points.
struct Target<'a> {
    res: &'static ApiResource,
    namespace: &'a str,
    name: Option<&'a str>,
    /// `status`, for a write of the status subresource.
    sub: Option<&'a str>,
}

fn target<'a>(
    served: (u32, u32),
    group: &str,
    version: &str,
    rest: &[&'a str],
) -> Option<Target<'a>> {
    let (namespace, rest) = match rest {
        ["namespaces", ns, resource, tail @ ..] => (*ns, [&[*resource][..], tail].concat()),
        _ => ("", rest.to_vec()),
    };
    let (resource, name, sub) = (rest.first()?, rest.get(1).copied(), rest.get(2).copied());
    let res = api::find(served, group, version, resource)?;
    // Status updates replace the object in the simulator; other subresources are not served.
    if sub.is_some_and(|s| s != "status") || rest.len() > 3 {
        return None;
    }
    let misplaced = if res.namespaced {
        namespace.is_empty() && name.is_some()
    } else {
        !namespace.is_empty()
    };
    if misplaced {
        return None;
    }
    Some(Target {
        res,
        namespace,
        name,
        sub,
    })
}

async fn resource(
    sim: &Arc<SimState>,
    group: &str,
    version: &str,
    rest: &[&str],
    req: Request<Incoming>,
) -> Response<SimBody> {
    let Some(t) = target(sim.version, group, version, rest) else {
        return status_error(
            404,
            "NotFound",
            "the server could not find the requested resource",
        );
    };
    let query = req.uri().query().unwrap_or("").to_owned();
    let method = req.method().clone();
    let is_write = !matches!(method, Method::GET | Method::HEAD);
    if !is_write && sim.controls.should_fail_read() {
        return status_error(
            500,
            "InternalError",
            "simulated failure (the simulator was told to fail reads)",
        );
    }
    match (method, t.name) {
        (Method::GET | Method::HEAD, Some(name)) => get(sim, &t, name),
        (Method::GET | Method::HEAD, None) if watch::wants_watch(&query) => {
            watch::serve(sim.clone(), t.res, t.namespace, &query)
        }
        (Method::GET | Method::HEAD, None) => list(sim, &t, &query),
        (Method::PUT, Some(name)) if dry_run(&query) => update_dry_run(sim, &t, name, req).await,
        (Method::POST, None) | (Method::PUT | Method::PATCH | Method::DELETE, Some(_)) => {
            write(sim, t, req).await
        }
        _ => status_error(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        ),
    }
}

fn get(sim: &SimState, t: &Target<'_>, name: &str) -> Response<SimBody> {
    match sim.store.get(&ObjectKey::new(t.res, t.namespace, name)) {
        Some(obj) => json_response(StatusCode::OK, &sim.read_view(t.res, &obj)),
        None => store_error(&StoreError {
            code: 404,
            reason: "NotFound",
            message: format!("{} \"{name}\" not found", t.res.resource),
        }),
    }
}

fn list(sim: &SimState, t: &Target<'_>, query: &str) -> Response<SimBody> {
    let (limit, after) = super::list::page_of(query);
    let after = after
        .as_ref()
        .map(|(ns, name)| (ns.as_str(), name.as_str()));
    let resource = ObjectKey::new(t.res, "", "").resource;
    let (items, rv, more) = sim.store.list_from(&resource, t.namespace, after, limit);
    let next = more
        .then(|| items.last().map(|o| super::list::token_after(o)))
        .flatten();
    let body = super::list::ListBody::new(sim.version, t.res, items, rv).with_continue(next);
    let mut resp = Response::new(body.boxed());
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    resp
}

/// Whether a write is a server-side dry run (`dryRun=All`).
fn dry_run(query: &str) -> bool {
    form_urlencoded::parse(query.as_bytes()).any(|(k, v)| k == "dryRun" && v == "All")
}

/// An update with `dryRun=All`, as kube-apiserver answers it: the object as this version would
/// store it (decoded into its own schema: what it does not know is dropped), stored nowhere.
async fn update_dry_run(
    sim: &Arc<SimState>,
    t: &Target<'_>,
    name: &str,
    req: Request<Incoming>,
) -> Response<SimBody> {
    let body = match read_body(req.into_body()).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let Some(current) = sim.store.get(&ObjectKey::new(t.res, t.namespace, name)) else {
        return store_error(&StoreError {
            code: 404,
            reason: "NotFound",
            message: format!("{} \"{name}\" not found", t.res.resource),
        });
    };
    let sent: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return store_error(&bad_request(format!("the body is not JSON: {e}"))),
    };
    let mut object = with_status(t, &current, sent);
    schema::apply(sim.version, t.res.resource, &mut object);
    json_response(StatusCode::OK, &sim.read_view(t.res, &object))
}

async fn write(sim: &Arc<SimState>, t: Target<'_>, req: Request<Incoming>) -> Response<SimBody> {
    let arrived = Instant::now();
    let method = req.method().clone();
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_owned();
    let client = req
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = match read_body(req.into_body()).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let delay = sim.controls.write_delay.load(Ordering::Relaxed);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    let (verb, result) = apply_write(sim, &t, &method, &content_type, &body);
    let name = match (&result, t.name) {
        (_, Some(n)) => n.to_owned(),
        (Ok(obj), None) => obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        (Err(_), None) => String::new(),
    };
    let response = match &result {
        Ok(obj) => {
            let code = if verb == "create" {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            json_response(code, &sim.read_view(t.res, obj))
        }
        Err(e) => store_error(e),
    };
    sim.store.record_write(WriteRecord {
        version: sim.git_version.clone(),
        key: ObjectKey::new(t.res, t.namespace, &name),
        verb,
        arrived,
        completed: Instant::now(),
        status: response.status().as_u16(),
        client,
    });
    response
}

fn apply_write(
    sim: &SimState,
    t: &Target<'_>,
    method: &Method,
    content_type: &str,
    body: &[u8],
) -> (&'static str, Result<Arc<Value>, StoreError>) {
    let parse = || -> Result<Value, StoreError> {
        serde_json::from_slice(body).map_err(|e| bad_request(format!("the body is not JSON: {e}")))
    };
    let own_schema = |mut obj: Value| {
        schema::apply(sim.version, t.res.resource, &mut obj);
        obj
    };
    let key = |name: &str| ObjectKey::new(t.res, t.namespace, name);
    match (method, t.name) {
        (&Method::POST, _) => (
            "create",
            parse().and_then(|obj| sim.store.create(t.res, t.namespace, own_schema(obj))),
        ),
        (&Method::PUT, Some(name)) => {
            let result = parse().and_then(|obj| {
                check_name(&obj, name)?;
                sim.store.update(t.res, &key(name), |current| {
                    Ok(own_schema(with_status(t, current, obj)))
                })
            });
            ("update", result)
        }
        (&Method::PATCH, Some(name)) => {
            let result = parse().and_then(|patch| {
                sim.store.update(t.res, &key(name), |current| {
                    // The serving version decodes the stored object into its own schema first, so a
                    // patch through an older version loses the fields it does not know.
                    let mut obj = own_schema(current.clone());
                    apply_patch(&mut obj, content_type, &patch)?;
                    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                        // A patch carries no precondition unless it sets resourceVersion itself.
                        if patch.pointer("/metadata/resourceVersion").is_none() {
                            meta.remove("resourceVersion");
                        }
                    }
                    Ok(own_schema(obj))
                })
            });
            ("patch", result)
        }
        (&Method::DELETE, Some(name)) => ("delete", sim.store.delete(t.res, &key(name))),
        _ => ("unknown", Err(bad_request("unsupported write".to_owned()))),
    }
}

/// What a PUT of `sent` stores over `current`: for a kind with a status subresource, a write of
/// the main object keeps the stored status, and a write of `/status` the stored rest (as
/// kube-apiserver's strategies reset them); for another, `sent` whole.
fn with_status(t: &Target<'_>, current: &Value, mut sent: Value) -> Value {
    if !t.res.status {
        return sent;
    }
    let status = |obj: &Value| obj.get("status").cloned();
    if t.sub == Some("status") {
        let mut kept = current.clone();
        match (kept.as_object_mut(), status(&sent)) {
            (Some(map), Some(s)) => {
                map.insert("status".to_owned(), s);
            }
            (Some(map), None) => {
                map.remove("status");
            }
            _ => {}
        }
        // The write's precondition is the sent resourceVersion.
        if let Some(rv) = sent.pointer("/metadata/resourceVersion").cloned()
            && let Some(meta) = kept.get_mut("metadata").and_then(Value::as_object_mut)
        {
            meta.insert("resourceVersion".to_owned(), rv);
        }
        return kept;
    }
    if let Some(map) = sent.as_object_mut() {
        match status(current) {
            Some(s) => {
                map.insert("status".to_owned(), s);
            }
            None => {
                map.remove("status");
            }
        }
    }
    sent
}

fn check_name(obj: &Value, name: &str) -> Result<(), StoreError> {
    match obj.pointer("/metadata/name").and_then(Value::as_str) {
        Some(n) if n == name => Ok(()),
        _ => Err(bad_request(format!(
            "the name of the object does not match the name on the URL ({name})"
        ))),
    }
}

fn apply_patch(obj: &mut Value, content_type: &str, patch: &Value) -> Result<(), StoreError> {
    let kind = content_type.split(';').next().unwrap_or("").trim();
    match kind {
        "application/json-patch+json" => {
            let ops: json_patch::Patch = serde_json::from_value(patch.clone())
                .map_err(|e| bad_request(format!("invalid JSON patch: {e}")))?;
            json_patch::patch(obj, &ops).map_err(|e| StoreError {
                code: 422,
                reason: "Invalid",
                message: format!("the JSON patch does not apply: {e}"),
            })
        }
        // The simulator treats a strategic merge patch as a JSON merge patch: right for maps and for
        // the list-free objects it stores.
        "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
            json_patch::merge(obj, patch);
            Ok(())
        }
        other => Err(StoreError {
            code: 415,
            reason: "UnsupportedMediaType",
            message: format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json (got {other})"
            ),
        }),
    }
}

async fn read_body(body: Incoming) -> Result<Bytes, Response<SimBody>> {
    let limited = http_body_util::Limited::new(body, MAX_BODY);
    match limited.collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) => Err(status_error(
            413,
            "RequestEntityTooLarge",
            &format!("cannot read the body: {e}"),
        )),
    }
}

fn bad_request(message: String) -> StoreError {
    StoreError {
        code: 400,
        reason: "BadRequest",
        message,
    }
}

/// A JSON response.
pub fn json_response(code: StatusCode, body: &Value) -> Response<SimBody> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut resp = Response::new(Full::new(Bytes::from(bytes)).boxed());
    *resp.status_mut() = code;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    resp
}

fn text(code: StatusCode, body: &'static str) -> Response<SimBody> {
    let mut resp = Response::new(Full::new(Bytes::from_static(body.as_bytes())).boxed());
    *resp.status_mut() = code;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain"),
    );
    resp
}

fn store_error(e: &StoreError) -> Response<SimBody> {
    status_error(e.code, e.reason, &e.message)
}

/// A Kubernetes `Status` failure.
pub fn status_error(code: u16, reason: &str, message: &str) -> Response<SimBody> {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(
        status,
        &skewgate_shared::Status::failure(code, reason, message).to_value(),
    )
}
