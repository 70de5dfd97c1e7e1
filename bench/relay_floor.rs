//! The floor of a frame-level HTTP/2 relay: what relaying h2c requests would cost if skewgate
//! decoded each HTTP/2 frame once and re-encoded it for the other side, with no hyper per-stream
//! task, no h2 stream store, and no frame queues per stream. The load bench runs it beside
//! skewgate and HAProxy (`floor` in its tables), so that the gap between skewgate's data path and
//! this design is measured in the same run.
//!
//! It is a measuring instrument, not a proxy: one thread, one upstream connection shared by every
//! client connection (as skewgate pools them per worker), each connection its own task, frames
//! handed between tasks through per-task inboxes. It keeps the work every HTTP/2 proxy must do:
//! framing and HPACK both ways (h2's own codec) and a stream-id map per side. It leaves out what a
//! proxy must add: flow control per stream (it grants windows of 1 MiB and more, which the load
//! never exhausts), the request's classification and steering, limits against abusive clients,
//! GOAWAY handling beyond stopping.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::future::poll_fn;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use futures_util::Stream;
use h2::Codec;
use h2::frame::{Data, Frame, Headers, Ping, Reset, Settings, StreamId, WindowUpdate};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub(crate) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The windows the relay grants each side.
pub(crate) const STREAM_WINDOW: u32 = 1 << 20;
pub(crate) const CONNECTION_WINDOW: u32 = 8 << 20;

type FrameCodec = Codec<TcpStream, Bytes>;

/// Frames other tasks hand a connection's task, and that task's waker.
#[derive(Default)]
pub(crate) struct Inbox {
    frames: RefCell<VecDeque<Frame>>,
    waker: RefCell<Option<Waker>>,
}

impl Inbox {
    pub(crate) fn push(&self, frame: Frame) {
        self.frames.borrow_mut().push_back(frame);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }

    fn pop(&self) -> Option<Frame> {
        self.frames.borrow_mut().pop_front()
    }
}

/// The shared upstream connection: its inbox, and where each of its streams' frames go.
struct Upstream {
    inbox: Inbox,
    next_id: Cell<u32>,
    routes: RefCell<HashMap<u32, (Rc<Inbox>, u32)>>,
}

impl Upstream {
    /// Where a frame of upstream stream `id` goes; forgotten with the stream's last frame.
    fn route(&self, id: StreamId, end: bool) -> Option<(Rc<Inbox>, StreamId)> {
        let id = u32::from(id);
        let route = if end {
            self.routes.borrow_mut().remove(&id)
        } else {
            self.routes.borrow().get(&id).cloned()
        };
        route.map(|(inbox, client_id)| (inbox, client_id.into()))
    }
}

/// Serves h2c on `listen`, relaying to the h2c server at `upstream`, until the process is killed.
pub fn run(listen: SocketAddr, upstream: SocketAddr) {
    on_one_thread(listen, upstream, |listener, tcp| async move {
        let up = Rc::new(Upstream {
            inbox: Inbox::default(),
            next_id: Cell::new(1),
            routes: RefCell::new(HashMap::new()),
        });
        tokio::task::spawn_local(run_upstream(tcp, up.clone()));
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::task::spawn_local(run_client(tcp, up.clone()));
        }
    });
}

/// Runs `serve` on one thread (a `LocalSet`, so that nothing needs to be `Send`) with the listener
/// bound on `listen` and a connection to `upstream`, as this bench's own relays run.
pub(crate) fn on_one_thread<F: Future>(
    listen: SocketAddr,
    upstream: SocketAddr,
    serve: impl FnOnce(TcpListener, TcpStream) -> F,
) {
    // Header blocks as literals on this thread, as skewgate's workers write them.
    h2::set_literal_header_encoding(true);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let listener = TcpListener::bind(listen).await.expect("bind");
        let tcp = TcpStream::connect(upstream)
            .await
            .expect("connect upstream");
        let _ = tcp.set_nodelay(true);
        serve(listener, tcp).await;
    });
}

/// Our SETTINGS and connection window, first on a connection.
pub(crate) fn open(inbox: &Inbox, settings: Settings) {
    inbox.push(settings.into());
    inbox.push(WindowUpdate::new(StreamId::zero(), CONNECTION_WINDOW).into());
}

/// Reads every frame that is ready, handing each to `on_frame`; `Ready` when the connection ended.
fn read_ready(
    codec: &mut FrameCodec,
    cx: &mut Context<'_>,
    mut on_frame: impl FnMut(Frame),
) -> Poll<()> {
    loop {
        match Pin::new(&mut *codec).poll_next(cx) {
            Poll::Ready(Some(Ok(Frame::GoAway(_)) | Err(_)) | None) => return Poll::Ready(()),
            Poll::Ready(Some(Ok(frame))) => on_frame(frame),
            Poll::Pending => return Poll::Pending,
        }
    }
}

/// Writes what the inbox holds, as far as the socket takes it, and flushes.
fn write_inbox(codec: &mut FrameCodec, cx: &mut Context<'_>, inbox: &Inbox) {
    while let Poll::Ready(Ok(())) = codec.poll_ready(cx) {
        let Some(frame) = inbox.pop() else { break };
        let _ = codec.buffer(frame);
    }
    let _ = codec.flush(cx);
}

/// The answers a connection owes its peer itself: SETTINGS acknowledged, PING answered.
fn answer_control(frame: &Frame, inbox: &Inbox) -> bool {
    match frame {
        Frame::Settings(s) if !s.is_ack() => inbox.push(Settings::ack().into()),
        Frame::Ping(p) if !p.is_ack() => inbox.push(Ping::pong(*p.payload()).into()),
        Frame::Settings(_) | Frame::Ping(_) | Frame::WindowUpdate(_) | Frame::Priority(_) => {}
        _ => return false,
    }
    true
}

/// Drives a connection: frames in go to `on_frame`, frames in `inbox` go out, until it ends.
pub(crate) async fn drive(mut codec: FrameCodec, inbox: &Inbox, mut on_frame: impl FnMut(Frame)) {
    poll_fn(|cx| {
        loop {
            let mut read_any = false;
            let ended = read_ready(&mut codec, cx, |frame| {
                read_any = true;
                if !answer_control(&frame, inbox) {
                    on_frame(frame);
                }
            });
            write_inbox(&mut codec, cx, inbox);
            if ended.is_ready() {
                return Poll::Ready(());
            }
            if !read_any {
                *inbox.waker.borrow_mut() = Some(cx.waker().clone());
                return Poll::Pending;
            }
        }
    })
    .await
}

/// The upstream connection: frames of each stream go back to the client connection that sent
/// the stream, under the client's stream id.
async fn run_upstream(mut tcp: TcpStream, up: Rc<Upstream>) {
    if tcp.write_all(PREFACE).await.is_err() {
        return;
    }
    let mut settings = Settings::default();
    settings.set_enable_push(false);
    settings.set_initial_window_size(Some(STREAM_WINDOW));
    open(&up.inbox, settings);
    let mut consumed: u32 = 0;
    drive(Codec::new(tcp), &up.inbox, |frame| match frame {
        Frame::Headers(h) => {
            let end = h.is_end_stream();
            if let Some((client, id)) = up.route(h.stream_id(), end) {
                let (pseudo, fields) = h.into_parts();
                let mut out = Headers::new(id, pseudo, fields);
                if end {
                    out.set_end_stream();
                }
                client.push(out.into());
            }
        }
        Frame::Data(d) => {
            let end = d.is_end_stream();
            consumed = consumed.saturating_add(d.payload().len() as u32);
            if let Some((client, id)) = up.route(d.stream_id(), end) {
                let mut out = Data::new(id, d.into_payload());
                out.set_end_stream(end);
                client.push(out.into());
            }
            if consumed > CONNECTION_WINDOW / 2 {
                up.inbox
                    .push(WindowUpdate::new(StreamId::zero(), consumed).into());
                consumed = 0;
            }
        }
        Frame::Reset(r) => {
            if let Some((client, id)) = up.route(r.stream_id(), true) {
                client.push(Reset::new(id, r.reason()).into());
            }
        }
        _ => {}
    })
    .await;
}

/// A client connection: each stream goes upstream under a new upstream stream id.
async fn run_client(mut tcp: TcpStream, up: Rc<Upstream>) {
    let _ = tcp.set_nodelay(true);
    let mut preface = [0u8; PREFACE.len()];
    if tcp.read_exact(&mut preface).await.is_err() || preface != PREFACE {
        return;
    }
    let inbox = Rc::new(Inbox::default());
    let mut settings = Settings::default();
    settings.set_max_concurrent_streams(Some(1000));
    settings.set_initial_window_size(Some(STREAM_WINDOW));
    open(&inbox, settings);
    let mut upstream_id: HashMap<u32, u32> = HashMap::new();
    let mut consumed: u32 = 0;
    drive(Codec::new(tcp), &inbox, |frame| match frame {
        Frame::Headers(h) => {
            let id = u32::from(h.stream_id());
            let end = h.is_end_stream();
            let uid = up.next_id.get();
            up.next_id.set(uid + 2);
            upstream_id.insert(id, uid);
            up.routes.borrow_mut().insert(uid, (inbox.clone(), id));
            let (pseudo, fields) = h.into_parts();
            let mut out = Headers::new(uid.into(), pseudo, fields);
            if end {
                out.set_end_stream();
                upstream_id.remove(&id);
            }
            up.inbox.push(out.into());
        }
        Frame::Data(d) => {
            let id = u32::from(d.stream_id());
            let end = d.is_end_stream();
            consumed = consumed.saturating_add(d.payload().len() as u32);
            let uid = if end {
                upstream_id.remove(&id)
            } else {
                upstream_id.get(&id).copied()
            };
            if let Some(uid) = uid {
                let mut out = Data::new(uid.into(), d.into_payload());
                out.set_end_stream(end);
                up.inbox.push(out.into());
            }
            if consumed > CONNECTION_WINDOW / 2 {
                inbox.push(WindowUpdate::new(StreamId::zero(), consumed).into());
                consumed = 0;
            }
        }
        Frame::Reset(r) => {
            if let Some(uid) = upstream_id.remove(&u32::from(r.stream_id())) {
                up.routes.borrow_mut().remove(&uid);
                up.inbox.push(Reset::new(uid.into(), r.reason()).into());
            }
        }
        _ => {}
    })
    .await;
}
