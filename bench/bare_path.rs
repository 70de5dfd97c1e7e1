//! Two yardsticks between skewgate and the frame-relay floor (bench/relay_floor.rs), run by the load
//! bench as `bare` and `bare+frames` in both its tables.
//!
//! Both have hyper's HTTP/1.1 and HTTP/2 servers on the client side, set up as skewgate sets them
//! up (keep-alive PINGs, header timeout, windows, buffer and header limits), and a response
//! timeout per request, as every proxy has; and nothing of skewgate's own: no classification or
//! steering, no admission, no metrics or accounting, no header rewriting, no guards. One thread
//! runs everything (a `LocalSet`, so that nothing needs to be `Send`), with one upstream
//! connection shared by every request.
//!
//! - `bare`: requests go upstream through h2's client, as skewgate's pool did until 2026-11-25.
//! - `bare+frames`: requests go upstream as frames through h2's codec, each response delivered to
//!   its request through a slot of its own, with no h2 stream store on the upstream side, as
//!   skewgate's pool does since (src/upstream/frames, which adds flow control, PING and GOAWAY).
//!   The gap from skewgate to `bare+frames` is what skewgate's own work and its wiring of hyper
//!   cost; from `bare` to `bare+frames`, what the frame-level upstream connection saved.
//! - `bare-h2` (`--bare-server h2`, h2c only, counted by bench/instructions.sh): `bare` with h2's
//!   server in place of hyper's on the client side, each connection's streams polled by the
//!   connection's own task (no task per stream) and no keep-alive PINGs. The gap from `bare` is what
//!   dropping hyper's layer alone would save, h2's stream machinery kept on both sides.
//!
//! Measuring instruments, not proxies: request bodies are dropped, windows are granted without
//! accounting (the load never exhausts them), and an upstream failure ends the process.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::future::poll_fn;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use h2::Codec;
use h2::frame::{Frame, Headers, Pseudo, Settings, StreamId, WindowUpdate};
use http::{Request, Response};
use http_body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use super::relay_floor::{self, CONNECTION_WINDOW, Inbox, PREFACE, STREAM_WINDOW};

/// The response timeout of every request, as skewgate's (`ProxySettings::response_timeout`).
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(70);

/// How requests go upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upstream {
    /// Through h2's client.
    H2,
    /// As frames, through h2's codec.
    Frames,
}

/// Serves HTTP/1.1 and h2c on `listen`, sending every request to the h2c server at `upstream`,
/// until the process is killed.
pub fn run(listen: SocketAddr, upstream: SocketAddr, how: Upstream, direct: bool) {
    relay_floor::on_one_thread(listen, upstream, move |listener, tcp| async move {
        if direct {
            let send = h2_upstream(tcp).await;
            return serve_direct(listener, send).await;
        }
        let send = match how {
            Upstream::H2 => Sender::H2(h2_upstream(tcp).await),
            Upstream::Frames => {
                let up = Rc::new(FrameUpstream::default());
                tokio::task::spawn_local(frame_upstream(tcp, up.clone()));
                Sender::Frames(up)
            }
        };
        serve(listener, send).await;
    });
}

/// Where a request goes.
#[derive(Clone)]
enum Sender {
    H2(h2::client::SendRequest<Bytes>),
    Frames(Rc<FrameUpstream>),
}

/// Accepts clients; each connection is served by hyper, HTTP/2 when it opens with the preface.
async fn serve(listener: TcpListener, send: Sender) {
    // As skewgate's listener sets them up (src/edge/listener.rs).
    let mut h2 = hyper::server::conn::http2::Builder::new(Local);
    h2.timer(TokioTimer::new())
        .max_concurrent_streams(1000)
        .keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(15))
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_send_buf_size(64 << 10)
        .max_header_list_size(128 << 10);
    let mut h1 = hyper::server::conn::http1::Builder::new();
    h1.timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30))
        .max_buf_size(128 << 10);
    let (h2, h1) = (Rc::new(h2), Rc::new(h1));
    while let Ok((tcp, _)) = listener.accept().await {
        let _ = tcp.set_nodelay(true);
        let (send, h2, h1) = (send.clone(), h2.clone(), h1.clone());
        tokio::task::spawn_local(async move {
            let mut first = [0u8; 3];
            let is_h2 = matches!(tcp.peek(&mut first).await, Ok(3)) && first == PREFACE[..3];
            let service = hyper::service::service_fn(move |req| handle(send.clone(), req));
            let io = TokioIo::new(tcp);
            let _ = if is_h2 {
                h2.serve_connection(io, service).await
            } else {
                h1.serve_connection(io, service).await
            };
        });
    }
}

/// Accepts h2c clients and serves each with h2's server directly: no hyper, no task per stream.
/// Every stream of a connection is a future polled by the connection's own task.
async fn serve_direct(listener: TcpListener, send: h2::client::SendRequest<Bytes>) {
    while let Ok((tcp, _)) = listener.accept().await {
        let _ = tcp.set_nodelay(true);
        tokio::task::spawn_local(serve_direct_connection(tcp, send.clone()));
    }
}

async fn serve_direct_connection(tcp: TcpStream, send: h2::client::SendRequest<Bytes>) {
    use futures_util::StreamExt;
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(1000)
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_send_buffer_size(64 << 10)
        .max_header_list_size(128 << 10);
    let Ok(mut conn) = builder.handshake::<_, Bytes>(tcp).await else {
        return;
    };
    let mut streams = futures_util::stream::FuturesUnordered::new();
    loop {
        let next = poll_fn(|cx| {
            while let Poll::Ready(Some(())) = streams.poll_next_unpin(cx) {}
            conn.poll_accept(cx)
        })
        .await;
        match next {
            Some(Ok((req, respond))) => streams.push(direct_stream(send.clone(), req, respond)),
            _ => break,
        }
    }
}

/// One stream of `serve_direct`: sent upstream, its answer relayed within its window.
async fn direct_stream(
    send: h2::client::SendRequest<Bytes>,
    req: Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
) {
    let (parts, _body) = req.into_parts();
    let mut head = Request::new(());
    *head.uri_mut() = absolute(parts.uri);
    *head.method_mut() = parts.method;
    *head.headers_mut() = parts.headers;
    let answer = async {
        let (response, _) = send.ready().await?.send_request(head, true)?;
        response.await
    };
    let Ok(Ok(resp)) = tokio::time::timeout(RESPONSE_TIMEOUT, answer).await else {
        let mut resp = Response::new(());
        *resp.status_mut() = http::StatusCode::BAD_GATEWAY;
        let _ = respond.send_response(resp, true);
        return;
    };
    let (parts, mut body) = resp.into_parts();
    let Ok(mut out) = respond.send_response(Response::from_parts(parts, ()), body.is_end_stream())
    else {
        return;
    };
    while let Some(Ok(mut data)) = poll_fn(|cx| body.poll_data(cx)).await {
        let _ = body.flow_control().release_capacity(data.len());
        while !data.is_empty() {
            out.reserve_capacity(data.len());
            let Some(Ok(n)) = poll_fn(|cx| out.poll_capacity(cx)).await else {
                return;
            };
            let chunk = data.split_to(n.min(data.len()));
            let end = data.is_empty() && body.is_end_stream();
            if out.send_data(chunk, end).is_err() {
                return;
            }
        }
    }
}

/// hyper's tasks, spawned on the thread's `LocalSet`.
#[derive(Clone, Copy)]
struct Local;

impl<F: Future + 'static> hyper::rt::Executor<F> for Local {
    fn execute(&self, fut: F) {
        tokio::task::spawn_local(fut);
    }
}

/// One request: its head as an HTTP/2 request, sent upstream; the answer streamed back.
async fn handle(send: Sender, req: Request<Incoming>) -> Result<Response<Answer>, Infallible> {
    let (parts, _body) = req.into_parts();
    let mut head = Request::new(());
    *head.uri_mut() = absolute(parts.uri);
    *head.method_mut() = parts.method;
    *head.headers_mut() = parts.headers;
    head.headers_mut().remove(http::header::HOST);
    Ok(match send {
        Sender::H2(send) => {
            let answer = async {
                let (response, _) = send.ready().await?.send_request(head, true)?;
                response.await
            };
            match tokio::time::timeout(RESPONSE_TIMEOUT, answer).await {
                Ok(Ok(resp)) => resp.map(Answer::H2),
                _ => bad_gateway(),
            }
        }
        Sender::Frames(up) => tokio::time::timeout(RESPONSE_TIMEOUT, up.send(head))
            .await
            .unwrap_or_else(|_| bad_gateway()),
    })
}

/// An HTTP/1.1 request's target made absolute, as HTTP/2 wants it.
fn absolute(uri: http::Uri) -> http::Uri {
    if uri.scheme().is_some() {
        return uri;
    }
    let mut parts = uri.into_parts();
    parts.scheme = Some(http::uri::Scheme::HTTP);
    parts.authority = Some(http::uri::Authority::from_static("127.0.0.1"));
    http::Uri::from_parts(parts).unwrap_or_default()
}

fn bad_gateway() -> Response<Answer> {
    let mut resp = Response::new(Answer::Empty);
    *resp.status_mut() = http::StatusCode::BAD_GATEWAY;
    resp
}

/// A response body from either upstream.
enum Answer {
    H2(h2::RecvStream),
    Slot(Rc<Slot>),
    Empty,
}

impl Body for Answer {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, h2::Error>>> {
        match self.get_mut() {
            Answer::H2(recv) => match recv.poll_data(cx) {
                Poll::Ready(Some(Ok(data))) => {
                    let _ = recv.flow_control().release_capacity(data.len());
                    Poll::Ready(Some(Ok(http_body::Frame::data(data))))
                }
                Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            },
            Answer::Slot(slot) => slot
                .poll_data(cx)
                .map(|d| d.map(|d| Ok(http_body::Frame::data(d)))),
            Answer::Empty => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Answer::H2(recv) => recv.is_end_stream(),
            Answer::Slot(slot) => slot.ended.get() && slot.data.borrow().is_empty(),
            Answer::Empty => true,
        }
    }
}

/// h2's client on the upstream connection, driven by a task of its own.
async fn h2_upstream(tcp: TcpStream) -> h2::client::SendRequest<Bytes> {
    let (send, connection) = h2::client::Builder::new()
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .handshake::<_, Bytes>(tcp)
        .await
        .expect("h2 handshake upstream");
    tokio::task::spawn_local(connection);
    send
}

/// The frame-level upstream connection: its outgoing frames, and the slot of each open stream.
#[derive(Default)]
struct FrameUpstream {
    inbox: Inbox,
    next_id: Cell<u32>,
    slots: RefCell<HashMap<u32, Rc<Slot>>>,
}

/// What a request's upstream stream has brought so far, and who waits for it.
#[derive(Default)]
struct Slot {
    head: RefCell<Option<http::response::Parts>>,
    data: RefCell<VecDeque<Bytes>>,
    ended: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

impl Slot {
    fn wake(&self) {
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }

    /// What `take` finds in the slot; `None` once the stream ended without it; else waits.
    fn poll_take<T>(
        &self,
        cx: &mut Context<'_>,
        take: impl FnOnce(&Slot) -> Option<T>,
    ) -> Poll<Option<T>> {
        if let Some(found) = take(self) {
            return Poll::Ready(Some(found));
        }
        if self.ended.get() {
            return Poll::Ready(None);
        }
        *self.waker.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    }

    fn poll_data(&self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        self.poll_take(cx, |s| s.data.borrow_mut().pop_front())
    }
}

impl FrameUpstream {
    /// Sends `head` as a HEADERS frame on a new stream and waits for the response's head.
    async fn send(&self, head: Request<()>) -> Response<Answer> {
        let id = self.next_id.get().max(1);
        self.next_id.set(id + 2);
        let slot = Rc::new(Slot::default());
        self.slots.borrow_mut().insert(id, slot.clone());
        let (parts, ()) = head.into_parts();
        let pseudo = Pseudo::request(parts.method, parts.uri, None);
        let mut frame = Headers::new(id.into(), pseudo, parts.headers);
        frame.set_end_stream();
        self.inbox.push(frame.into());
        let head = poll_fn(|cx| slot.poll_take(cx, |s| s.head.borrow_mut().take())).await;
        match head {
            Some(head) => Response::from_parts(head, Answer::Slot(slot)),
            None => bad_gateway(),
        }
    }

    /// The slot of upstream stream `id`; forgotten with the stream's last frame.
    fn slot(&self, id: StreamId, end: bool) -> Option<Rc<Slot>> {
        let id = u32::from(id);
        if end {
            self.slots.borrow_mut().remove(&id)
        } else {
            self.slots.borrow().get(&id).cloned()
        }
    }
}

/// Drives the frame-level upstream connection: each stream's frames go to its slot.
async fn frame_upstream(mut tcp: TcpStream, up: Rc<FrameUpstream>) {
    tcp.write_all(PREFACE).await.expect("preface upstream");
    let mut settings = Settings::default();
    settings.set_enable_push(false);
    settings.set_initial_window_size(Some(STREAM_WINDOW));
    relay_floor::open(&up.inbox, settings);
    let mut consumed: u32 = 0;
    relay_floor::drive(Codec::new(tcp), &up.inbox, |frame| match frame {
        Frame::Headers(h) => {
            let end = h.is_end_stream();
            if let Some(slot) = up.slot(h.stream_id(), end) {
                let (pseudo, fields) = h.into_parts();
                let mut head = Response::new(());
                *head.status_mut() = pseudo.status.unwrap_or(http::StatusCode::BAD_GATEWAY);
                *head.headers_mut() = fields;
                *slot.head.borrow_mut() = Some(head.into_parts().0);
                slot.ended.set(end);
                slot.wake();
            }
        }
        Frame::Data(d) => {
            let end = d.is_end_stream();
            consumed = consumed.saturating_add(d.payload().len() as u32);
            if let Some(slot) = up.slot(d.stream_id(), end) {
                slot.data.borrow_mut().push_back(d.into_payload());
                slot.ended.set(end);
                slot.wake();
            }
            if consumed > CONNECTION_WINDOW / 2 {
                up.inbox
                    .push(WindowUpdate::new(StreamId::zero(), consumed).into());
                consumed = 0;
            }
        }
        Frame::Reset(r) => {
            if let Some(slot) = up.slot(r.stream_id(), true) {
                slot.ended.set(true);
                slot.wake();
            }
        }
        _ => {}
    })
    .await;
}
