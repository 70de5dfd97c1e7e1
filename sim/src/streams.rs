//! The simulator's streaming subresources: exec/attach/port-forward that echo the bytes they get
//! after the protocol upgrade, and a container log that streams a line every 100 ms.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::sync::mpsc;

use super::handler::SimBody;
use super::watch::ChannelBody;

/// Accepts the upgrade (SPDY/3.1 or WebSocket, whichever the client asks for) and echoes every byte
/// back until the client closes. A stand-in for a container's stdin/stdout: it speaks no SPDY or
/// channel framing, it only proves that bytes cross the proxy both ways.
pub fn upgrade_echo(mut req: Request<Incoming>) -> Response<SimBody> {
    if let Some(resp) = channel_websocket(&mut req) {
        return resp;
    }
    let protocol = req.headers().get(header::UPGRADE).cloned();
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        if let Ok(upgraded) = upgrade.await {
            let (mut r, mut w) = tokio::io::split(TokioIo::new(upgraded));
            let _ = tokio::io::copy(&mut r, &mut w).await;
        }
    });
    let mut resp = Response::new(BodyExt::boxed(http_body_util::Empty::new()));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(
        header::CONNECTION,
        header::HeaderValue::from_static("Upgrade"),
    );
    if let Some(p) = protocol {
        h.insert(header::UPGRADE, p);
    }
    resp
}

/// The WebSocket form of exec that kubectl speaks (`v5.channel.k8s.io`): each binary message starts
/// with its channel; what arrives on stdin (0) goes back on stdout (1); when the client closes stdin
/// (255, 0), the exec ends with a success Status on the error channel (3). `None` when the request
/// is not such a WebSocket.
fn channel_websocket(req: &mut Request<Incoming>) -> Option<Response<SimBody>> {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::protocol::Role;

    let key = req.headers().get("sec-websocket-key")?.clone();
    let offered = req
        .headers()
        .get("sec-websocket-protocol")?
        .to_str()
        .ok()?
        .to_owned();
    if !offered.split(',').any(|p| p.trim() == "v5.channel.k8s.io") {
        return None;
    }
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let upgrade = hyper::upgrade::on(req);
    tokio::spawn(async move {
        let Ok(upgraded) = upgrade.await else { return };
        let mut ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
            TokioIo::new(upgraded),
            Role::Server,
            None,
        )
        .await;
        while let Some(Ok(msg)) = ws.next().await {
            let Message::Binary(data) = msg else { continue };
            match data.first() {
                Some(0) => {
                    let mut out = data.to_vec();
                    out[0] = 1;
                    if ws.send(Message::Binary(out.into())).await.is_err() {
                        return;
                    }
                }
                Some(255) if data.get(1) == Some(&0) => {
                    let mut status = vec![3u8];
                    status.extend_from_slice(br#"{"metadata":{},"status":"Success"}"#);
                    let _ = ws.send(Message::Binary(status.into())).await;
                    let normal = tokio_tungstenite::tungstenite::protocol::CloseFrame {
                        code: tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode::Normal,
                        reason: "".into(),
                    };
                    let _ = ws.close(Some(normal)).await;
                    return;
                }
                _ => {}
            }
        }
    });
    let mut resp = Response::new(BodyExt::boxed(http_body_util::Empty::new()));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(
        header::CONNECTION,
        header::HeaderValue::from_static("Upgrade"),
    );
    h.insert(
        header::UPGRADE,
        header::HeaderValue::from_static("websocket"),
    );
    h.insert(
        "sec-websocket-protocol",
        header::HeaderValue::from_static("v5.channel.k8s.io"),
    );
    h.insert(
        "sec-websocket-accept",
        header::HeaderValue::from_str(&accept).ok()?,
    );
    Some(resp)
}

/// A container log: three lines, or with `follow=true` a line every 100 ms until the client leaves.
pub fn log(query: &str) -> Response<SimBody> {
    let follow =
        form_urlencoded::parse(query.as_bytes()).any(|(k, v)| k == "follow" && v == "true");
    let (tx, rx) = mpsc::channel::<Bytes>(4);
    tokio::spawn(async move {
        for n in 1.. {
            if tx
                .send(Bytes::from(format!("log line {n}\n")))
                .await
                .is_err()
                || (!follow && n == 3)
            {
                return;
            }
            if follow {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });
    let mut resp = Response::new(BodyExt::boxed(ChannelBody(rx)));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain"),
    );
    resp
}
