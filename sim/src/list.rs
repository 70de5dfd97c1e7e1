//! LIST answers encoded item by item as the client reads them, as kube-apiserver writes a list
//! into the response stream: a client that resets the stream or stops reading stops the encoding,
//! and no list is held whole in memory.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use serde_json::Value;

use super::api::ApiResource;
use super::schema::{self, Minor};

/// A `…List` object as a body: its head, then one frame per item, then its tail.
pub struct ListBody {
    version: Minor,
    res: &'static ApiResource,
    items: std::vec::IntoIter<Arc<Value>>,
    head: Option<Bytes>,
    rv: u64,
    first: bool,
    done: bool,
}

impl ListBody {
    /// The list of `items` of `res` at resourceVersion `rv`, each as version `version` shows it.
    pub fn new(
        version: Minor,
        res: &'static ApiResource,
        items: Vec<Arc<Value>>,
        rv: u64,
    ) -> ListBody {
        let head = format!(
            r#"{{"kind":"{}List","apiVersion":"{}","metadata":{{"resourceVersion":"{rv}"}},"items":["#,
            res.kind,
            res.api_version()
        );
        ListBody {
            version,
            res,
            items: items.into_iter(),
            head: Some(Bytes::from(head)),
            rv,
            first: true,
            done: false,
        }
    }

    /// The list as one page of several: `metadata.continue` names where the next begins.
    pub fn with_continue(mut self, next: Option<String>) -> ListBody {
        if let Some(token) = next {
            let head = format!(
                r#"{{"kind":"{}List","apiVersion":"{}","metadata":{{"resourceVersion":"{}","continue":{}}},"items":["#,
                self.res.kind,
                self.res.api_version(),
                self.rv,
                Value::String(token)
            );
            self.head = Some(Bytes::from(head));
        }
        self
    }

    fn item(&mut self, stored: &Value) -> Bytes {
        let mut obj = stored.clone();
        schema::apply(self.version, self.res.resource, &mut obj);
        let mut out = Vec::with_capacity(256);
        if !std::mem::take(&mut self.first) {
            out.push(b',');
        }
        // Serializing a Value to memory cannot fail.
        let _ = serde_json::to_writer(&mut out, &obj);
        Bytes::from(out)
    }
}

impl Body for ListBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if let Some(head) = this.head.take() {
            return Poll::Ready(Some(Ok(Frame::data(head))));
        }
        if let Some(stored) = this.items.next() {
            let bytes = this.item(&stored);
            return Poll::Ready(Some(Ok(Frame::data(bytes))));
        }
        if std::mem::replace(&mut this.done, true) {
            return Poll::Ready(None);
        }
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"]}")))))
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// The page a list asks for (`limit`, `continue`): its size (0: all) and the key it goes on
/// after. The token is opaque to clients; like kube-apiserver's (base64), it holds characters a
/// query must escape.
pub fn page_of(query: &str) -> (usize, Option<(String, String)>) {
    let mut limit = 0usize;
    let mut after = None;
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        match &*k {
            "limit" => limit = v.parse().unwrap_or(0),
            "continue" => {
                after = v
                    .strip_prefix("k+/")
                    .and_then(|key| key.split_once('/'))
                    .map(|(ns, name)| (ns.to_owned(), name.to_owned()));
            }
            _ => {}
        }
    }
    (limit, after)
}

/// The token of a page whose last object is `last`.
pub fn token_after(last: &Value) -> String {
    let m = &last["metadata"];
    format!(
        "k+/{}/{}",
        m["namespace"].as_str().unwrap_or(""),
        m["name"].as_str().unwrap_or("")
    )
}
