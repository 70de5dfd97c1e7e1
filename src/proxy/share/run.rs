//! A hub's upstream watch: begun as skewgate's own from the first client's start, its events cut
//! and delivered, and begun again from the newest version seen when the apiserver ends it (its
//! own timeout, a restart), so its clients go on. It ends when it has had no client for
//! `LINGER`, when its events cannot be read, when the apiserver sends an ERROR, or when it cannot
//! be begun again.

use std::sync::Arc;
use std::time::Duration;

use http::header;
use http_body_util::BodyExt;

use super::Shares;
use super::events::{Event, Framer, Kind};
use super::hub::{Hub, Start};
use crate::upstream::{EndpointPool, UpstreamBody, own_watch};

/// How long a hub with no client keeps its watch and buffer, for a client that watches again
/// (a kubelet's watch ends every 5 to 10 minutes).
pub(crate) const LINGER: Duration = Duration::from_secs(10);

/// How a stretch of the upstream watch ended.
enum Pumped {
    /// The apiserver ended it: begin again.
    Ended,
    /// An ERROR event.
    Error(Event),
    /// No client for `LINGER`.
    Idle,
    /// Bytes that are no watch events.
    Unreadable(&'static str),
}

pub(super) async fn run(shares: Arc<Shares>, hub: Arc<Hub>, ep: Arc<EndpointPool>) {
    let mut resumed = false;
    let mut backoff = Duration::from_millis(100);
    while let Some((body, protobuf)) = begin(&shares, &hub, &ep, resumed).await {
        match pump(&shares, &hub, body, protobuf).await {
            Pumped::Ended => {
                resumed = true;
                hub.resume();
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
                if hub.members() == 0 {
                    break;
                }
            }
            // An ERROR at the first watch is the apiserver's answer to where it began; at a
            // resumed one it is the hub's own, and its clients end cleanly.
            Pumped::Error(e) => {
                hub.end((!resumed).then_some(&e));
                break;
            }
            Pumped::Idle => break,
            Pumped::Unreadable(why) => {
                tracing::warn!(why, "a shared watch sent what is no watch event; ending it");
                shares.note_failed(&hub.key);
                break;
            }
        }
    }
    hub.end(None);
    shares.remove(&hub);
}

/// Begins (or, `resumed`, begins again) the hub's upstream watch from the newest version it saw:
/// its body and whether it is protobuf; `None` when it cannot, told to the clients waiting for
/// the first.
async fn begin(
    shares: &Shares,
    hub: &Hub,
    ep: &Arc<EndpointPool>,
    resumed: bool,
) -> Option<(UpstreamBody, bool)> {
    let path = hub.key.upstream_path(hub.lock().latest);
    let answer = own_watch(ep, &path, &hub.key.accept).await;
    let begun = match answer {
        Ok(resp) if resp.status() == http::StatusCode::OK => {
            let (head, body) = resp.into_parts();
            // An encoding skewgate does not cut into events (CBOR) is not shared.
            framing(&head.headers)
                .map(|protobuf| (head, body, protobuf))
                .ok_or_else(|| "an encoding other than JSON and protobuf".to_owned())
        }
        Ok(resp) => Err(format!("answered {}", resp.status())),
        Err(e) => Err(e),
    };
    let starts = &shares.metrics.shared_watch_starts;
    match begun {
        Ok((head, body, protobuf)) => {
            starts
                .with_label_values(&[if resumed { "resumed" } else { "up" }])
                .inc();
            if !resumed {
                let headers = Arc::new(client_headers(head.headers));
                hub.start.send_replace(Start::Up(headers));
            }
            Some((body, protobuf))
        }
        Err(why) => {
            tracing::info!(path, %why, "a shared watch could not begin; its clients watch on their own");
            starts.with_label_values(&["failed"]).inc();
            shares.note_failed(&hub.key);
            hub.start.send_replace(Start::Failed);
            None
        }
    }
}

/// Delivers the watch's events until it ends.
async fn pump(shares: &Shares, hub: &Hub, mut body: UpstreamBody, protobuf: bool) -> Pumped {
    let mut framer = Framer::new(protobuf);
    let mut idle_since: Option<tokio::time::Instant> = None;
    loop {
        idle_since = match (hub.members(), idle_since) {
            (0, None) => Some(tokio::time::Instant::now()),
            (0, at) => at,
            _ => None,
        };
        let linger = async {
            match idle_since {
                Some(at) => tokio::time::sleep_until(at + LINGER).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            frame = body.frame() => {
                let data = match frame {
                    Some(Ok(f)) => match f.into_data() {
                        Ok(d) => d,
                        Err(_) => continue,
                    },
                    Some(Err(_)) | None => return Pumped::Ended,
                };
                let events = match framer.feed(&data) {
                    Ok(events) => events,
                    Err(e) => return Pumped::Unreadable(e.0),
                };
                for e in events {
                    if e.kind == Kind::Error {
                        return Pumped::Error(e);
                    }
                    let delivered = hub.deliver(&e);
                    shares.metrics.shared_watch_cut.inc_by(delivered.cut as u64);
                }
            }
            () = hub.left.notified() => {}
            () = linger => {
                if hub.members() == 0 {
                    return Pumped::Idle;
                }
            }
        }
    }
}

/// Whether a watch's `Content-Type` frames it as protobuf (`true`) or JSON lines (`false`); `None`
/// for any other.
fn framing(headers: &http::HeaderMap) -> Option<bool> {
    let media = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    match media.split(';').next().unwrap_or_default().trim() {
        "application/vnd.kubernetes.protobuf" => Some(true),
        "application/json" => Some(false),
        _ => None,
    }
}

/// The head every client of the hub is answered with: the apiserver's, but for what is the
/// connection's or the request's own (hop-by-hop headers, its length, its `Audit-Id`).
fn client_headers(mut headers: http::HeaderMap) -> http::HeaderMap {
    crate::proxy::forwarding::strip_hop_by_hop(&mut headers);
    headers.remove(header::CONTENT_LENGTH);
    headers.remove("audit-id");
    headers
}
