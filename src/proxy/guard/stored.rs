//! The object as stored, read with the update's own credentials and identity headers, so that
//! the guard sees what the client may see and nothing more.
//!
//! A `/status` update's object is read at the main object's path: the same object, and what the
//! client may read. Real components are granted no more: kube-controller-manager's
//! replicaset-controller may update `replicasets/status` but not get it (a real v1.35 one,
//! through skewgate, was answered 403 on every status update before this).

use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Empty};

use super::body::Stored;
use crate::protobuf;
use crate::upstream::{Credential, EndpointPool, head, send};

/// The object as stored, read at `uri` (the update's, or the same on another endpoint) with the
/// update's own credentials, as protobuf when `as_protobuf` (to put a protobuf body's fields back
/// from), else as JSON; `None` when there is none.
pub(super) async fn read_stored(
    endpoint: &Arc<EndpointPool>,
    credential: Credential,
    update: &http::request::Parts,
    uri: &http::Uri,
    subresource: &str,
    as_protobuf: bool,
) -> Result<Option<Stored>, String> {
    let mut get = Request::builder()
        .method(Method::GET)
        .uri(object_uri(uri, subresource)?)
        .body(())
        .map_err(|e| e.to_string())?;
    for (name, value) in &update.headers {
        let body_header = matches!(
            *name,
            header::CONTENT_TYPE
                | header::CONTENT_LENGTH
                | header::TRANSFER_ENCODING
                | header::EXPECT
                | header::ACCEPT
        );
        if !body_header {
            get.headers_mut().append(name.clone(), value.clone());
        }
    }
    let accept = if as_protobuf {
        protobuf::MEDIA_TYPE
    } else {
        "application/json"
    };
    get.headers_mut()
        .insert(header::ACCEPT, HeaderValue::from_static(accept));
    let resp = send(
        endpoint,
        credential,
        (head(get), Empty::<Bytes>::new()),
        None,
    )
    .await
    .map_err(|e| format!("reading the stored object: {e}"))?;
    let code = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("reading the stored object: {e}"))?
        .to_bytes();
    match code {
        StatusCode::NOT_FOUND => Ok(None),
        c if c.is_success() => Stored::read(&body, as_protobuf).map(Some),
        c => Err(format!("reading the stored object answered {c}")),
    }
}

/// Where the object an update of `subresource` at `uri` writes is read: for `status`, the path
/// without it; without the update's query (its `fieldManager` or `dryRun` mean nothing to a read).
fn object_uri(uri: &http::Uri, subresource: &str) -> Result<http::Uri, String> {
    let path = uri.path();
    let path = match subresource {
        "status" => path.strip_suffix("/status").unwrap_or(path),
        _ => path,
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(path.parse().map_err(|e| format!("{e}"))?);
    http::Uri::from_parts(parts).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::object_uri;

    fn read(uri: &str, subresource: &str) -> String {
        let uri = uri.parse().expect("uri");
        object_uri(&uri, subresource).expect("read").to_string()
    }

    #[test]
    fn a_status_update_reads_its_main_object() {
        let status = "https://10.0.0.1:6443/apis/apps/v1/namespaces/a/replicasets/web/status";
        assert_eq!(
            read(&format!("{status}?fieldManager=x"), "status"),
            "https://10.0.0.1:6443/apis/apps/v1/namespaces/a/replicasets/web"
        );
        let pod = "/api/v1/namespaces/a/pods/p";
        assert_eq!(read(pod, ""), pod);
        // Another subresource's object is its own (a Scale), read where it is written.
        let scale = "/apis/apps/v1/namespaces/a/deployments/d/scale";
        assert_eq!(read(scale, "scale"), scale);
        // A pod named status is a pod.
        let named = "/api/v1/namespaces/a/pods/status";
        assert_eq!(read(named, ""), named);
        assert_eq!(read(&format!("{named}/status"), "status"), named);
    }
}
