//! The object as stored, read with the update's own credentials and identity headers, so that
//! the guard sees what the client may see and nothing more.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Empty};

use super::body::Stored;
use crate::protobuf;
use crate::upstream::{Credential, EndpointPool, head, send};

/// The object as stored, read at `uri` with the update's own credentials, as protobuf when
/// `as_protobuf` (to put a protobuf body's fields back from), else as JSON; `None` when there is
/// none.
pub(super) async fn read_stored(
    endpoint: &Arc<EndpointPool>,
    credential: Credential,
    update: &http::request::Parts,
    uri: http::Uri,
    as_protobuf: bool,
) -> Result<Option<Stored>, String> {
    let mut get = Request::builder()
        .method(Method::GET)
        .uri(uri)
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
