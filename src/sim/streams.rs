//! The simulator's streaming subresources: exec/attach/port-forward that echo the bytes they get
//! after the protocol upgrade, and a container log that streams a line every 100 ms.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use tokio::sync::mpsc;

use super::handler::SimBody;

/// Accepts the upgrade (SPDY/3.1 or WebSocket, whichever the client asks for) and echoes every byte
/// back until the client closes. A stand-in for a container's stdin/stdout: it speaks no SPDY or
/// channel framing, it only proves that bytes cross the proxy both ways.
pub fn upgrade_echo(mut req: Request<Incoming>) -> Response<SimBody> {
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
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok(Frame::data(b)), rx))
    });
    let mut resp = Response::new(BodyExt::boxed(StreamBody(Box::pin(stream))));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain"),
    );
    resp
}

type FrameStream = std::pin::Pin<
    Box<
        dyn futures_util::Stream<Item = Result<Frame<Bytes>, std::convert::Infallible>>
            + Send
            + Sync,
    >,
>;

/// A body from a stream of frames.
struct StreamBody(FrameStream);

impl http_body::Body for StreamBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0.as_mut().poll_next(cx)
    }
}
