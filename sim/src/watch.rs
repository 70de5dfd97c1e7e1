//! Watches: a chunked stream of JSON events, one per line, as the apiserver sends them.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use super::SimState;
use super::api::ApiResource;
use super::handler::SimBody;
use super::store::{Event, EventType, ObjectKey};

/// Whether a collection GET asks for a watch (`watch` present and not `0`/`false`), the query read
/// as kube-apiserver reads it (Go's `url.ParseQuery`: `watch=false;` and `watch=%zz` are dropped).
pub fn wants_watch(query: &str) -> bool {
    skewgate_shared::go_query::pairs(query)
        .find(|(k, _)| k == "watch")
        .is_some_and(|(_, v)| !(v == "0" || v.eq_ignore_ascii_case("false")))
}

struct WatchParams {
    since: Option<u64>,
    name: Option<String>,
    timeout: Option<Duration>,
}

fn params(query: &str) -> WatchParams {
    let mut p = WatchParams {
        since: None,
        name: None,
        timeout: None,
    };
    for (k, v) in skewgate_shared::go_query::pairs(query) {
        match &*k {
            "resourceVersion" => p.since = v.parse().ok().filter(|rv| *rv > 0),
            "fieldSelector" => p.name = v.strip_prefix("metadata.name=").map(str::to_owned),
            "timeoutSeconds" => p.timeout = v.parse().ok().map(Duration::from_secs),
            _ => {}
        }
    }
    p
}

/// Starts a watch of `res` in `namespace` (all namespaces when empty).
pub fn serve(
    sim: Arc<SimState>,
    res: &'static ApiResource,
    namespace: &str,
    query: &str,
) -> Response<SimBody> {
    let p = params(query);
    let resource = ObjectKey::new(res, "", "").resource;
    let namespace = namespace.to_owned();
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let (initial, live) = match p.since {
        Some(since) => match sim.store.watch(since) {
            (Some(past), live) => (past, live),
            (None, _) => {
                let message = format!("too old resource version: {since}");
                let status = skewgate_shared::Status::failure(410, "Expired", &message);
                let gone = json!({"type": "ERROR", "object": status.to_value()});
                let _ = tx.try_send(line(&gone));
                return stream_response(rx);
            }
        },
        None => {
            // No resourceVersion: the current state as ADDED events, then changes after it.
            let (items, rv) = sim.store.list(&resource, &namespace);
            let (_, live) = sim.store.watch(rv);
            let added = items
                .into_iter()
                .map(|object| Event {
                    rv,
                    kind: EventType::Added,
                    key: ObjectKey {
                        resource: resource.clone(),
                        namespace: object
                            .pointer("/metadata/namespace")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_owned(),
                        name: object
                            .pointer("/metadata/name")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_owned(),
                    },
                    object,
                })
                .collect();
            (added, live)
        }
    };
    let filter = move |e: &Event| {
        e.key.resource == resource
            && (namespace.is_empty() || e.key.namespace == namespace)
            && p.name.as_ref().is_none_or(|n| *n == e.key.name)
    };
    sim.controls.watches.fetch_add(1, Ordering::Relaxed);
    sim.controls.watches_open.fetch_add(1, Ordering::Relaxed);
    tokio::spawn(async move {
        let run = pump(&sim, res, initial, live, &filter, &tx);
        let limit = async {
            match p.timeout {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        // Ends with its timeout, or when the client (or the connection) is gone.
        tokio::select! {
            _ = run => {}
            _ = limit => {}
            _ = tx.closed() => {}
        }
        sim.controls.watches_open.fetch_sub(1, Ordering::Relaxed);
    });
    stream_response(rx)
}

async fn pump(
    sim: &SimState,
    res: &ApiResource,
    initial: Vec<Event>,
    mut live: broadcast::Receiver<Event>,
    filter: &(impl Fn(&Event) -> bool + Send + Sync),
    tx: &mpsc::Sender<Bytes>,
) {
    let mut last = 0;
    for e in initial.iter().filter(|e| filter(e)) {
        last = last.max(e.rv);
        if tx.send(event_line(sim, res, e)).await.is_err() {
            return;
        }
    }
    loop {
        match live.recv().await {
            Ok(e) if e.rv > last && filter(&e) => {
                last = e.rv;
                if tx.send(event_line(sim, res, &e)).await.is_err() {
                    return;
                }
            }
            Ok(_) => {}
            // A watcher too slow for the event rate is ended; the client re-lists, as with a real one.
            Err(_) => return,
        }
    }
}

fn event_line(sim: &SimState, res: &ApiResource, e: &Event) -> Bytes {
    line(&json!({"type": e.kind.as_str(), "object": sim.read_view(res, &e.object)}))
}

fn line(v: &Value) -> Bytes {
    let mut bytes = serde_json::to_vec(v).unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

fn stream_response(rx: mpsc::Receiver<Bytes>) -> Response<SimBody> {
    let mut resp = Response::new(BodyExt::boxed(ChannelBody(rx)));
    *resp.status_mut() = StatusCode::OK;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    resp
}

/// A body whose chunks arrive on a channel; it ends when the sender is dropped.
pub(super) struct ChannelBody(pub(super) mpsc::Receiver<Bytes>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|b| Ok(Frame::data(b))))
    }
}
