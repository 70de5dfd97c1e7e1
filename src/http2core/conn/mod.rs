//! The no-I/O core of one HTTP/2 connection, as both engines run it: frames in (as h2's codec
//! decoded them), what they come to out (`Event`), and the frames the connection owes its peer
//! queued (`out`). It owns what is the connection's and not a stream's, alike for the server and
//! the client side:
//!
//! - the stream-id space (RFC 9113, 5.1.1): the highest stream opened, and any frame but HEADERS
//!   and PRIORITY on a stream never opened a connection error PROTOCOL_ERROR;
//! - the connection's two windows (6.9): the peer's for what skewgate sends, and skewgate's for
//!   what the peer sends, given back at half as h2 gives it back;
//! - the peer's SETTINGS (applied, acknowledged) and skewgate's own (each acknowledgement matched
//!   to the SETTINGS it answers, with what the engine applies then; one not asked for is a
//!   PROTOCOL_ERROR, as h2 has it);
//! - PING answered, PUSH_PROMISE refused, GOAWAY sent once;
//! - the streams closed and forgotten (`closed`), and the bounds on what the peer may make
//!   skewgate do: resets for its fault (1,024 by default, h2's and hyper's), empty DATA frames
//!   (h2's 100), answers queued (4,096).
//!
//! What a stream holds (its data, its own windows, its handles) stays with each engine, which looks
//! up the stream an `Event` names and, if it no longer has it, asks `closed_*` here
//! (`faults.rs`: the peer's faults, and frames on streams closed and forgotten).

use std::collections::VecDeque;
use std::task::Waker;

use bytes::Bytes;
use h2::Reason;
use h2::frame::{Data, Frame, GoAway, Headers, Ping, Settings, StreamId, WindowUpdate};

use super::closed::ClosedStreams;
use super::{InitialWindow, Window};

mod faults;

/// Which side of the connection skewgate is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// The peer (a client) opens the streams.
    Server,
    /// skewgate opens the streams (to an apiserver).
    Client,
}

/// What a frame came to, for the engine to carry out on its streams.
#[derive(Debug)]
pub(crate) enum Event<A> {
    /// Nothing more to do: taken here (answers queued), or a connection error (`error` is set and
    /// GOAWAY queued).
    Done,
    /// A HEADERS frame opening a stream (the server's: an odd id above any before).
    Open(Headers),
    /// A HEADERS frame on a stream opened before: trailers, a response head, or a frame on a
    /// stream the engine may have forgotten (then `closed_headers`).
    Headers(Headers),
    /// A DATA frame on a stream opened before, its length taken from the connection's window (the
    /// engine gives it back, `give_back`, when it has taken the data, or at once).
    Data(Data<Bytes>),
    /// RST_STREAM on a stream opened before.
    Reset(StreamId, Reason),
    /// WINDOW_UPDATE on a stream opened before (the increment is not 0: the codec refuses 0).
    StreamWindow(StreamId, u32),
    /// WINDOW_UPDATE on the connection: streams waiting for room may send.
    ConnectionWindow,
    /// The peer's SETTINGS, acknowledged; `delta`: by how much its new initial window moves every
    /// open stream's send window (the engine shifts them, and a stream moved past 2^31-1 is
    /// `go_away(FLOW_CONTROL_ERROR)`). The engine applies the codec's part (`apply_codec_settings`).
    Settings(Box<Settings>, Option<i64>),
    /// The peer acknowledged skewgate's oldest SETTINGS, which carried `A`.
    SettingsAcked(A),
    /// The peer answered a PING of skewgate's with this payload.
    Pong([u8; 8]),
    /// GOAWAY from the peer: no stream above `last` was or will be processed.
    GoAway(StreamId, Reason),
}

/// The bounds on what the peer may make the connection do.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bounds {
    /// The connection window skewgate grants (given back at half).
    pub(crate) recv_window: u32,
    /// Streams skewgate may reset for the peer's fault before GOAWAY ENHANCE_YOUR_CALM.
    pub(crate) max_local_resets: usize,
}

/// Empty DATA frames without END_STREAM the peer may send in a connection's life (h2's
/// `MAX_RECV_EMPTY_DATA_FRAMES`): such a frame carries nothing and costs a turn.
pub(crate) const MAX_EMPTY_DATA: usize = 100;

/// The most frames queued before answers to the peer's PINGs and SETTINGS are dropped: a peer that
/// sends them and does not read its socket does not grow the queue without bound (the server side
/// stops reading well before, at its own `MAX_QUEUED`).
pub(crate) const MAX_ANSWERS: usize = 4096;

/// The largest stream id (RFC 9113, 5.1.1).
pub(crate) const MAX_STREAM_ID: u32 = (1 << 31) - 1;

/// One connection's core. `A` is what each of skewgate's own SETTINGS carries until the peer
/// acknowledges it.
pub(crate) struct Conn<A> {
    role: Role,
    bounds: Bounds,
    /// The highest stream id opened: by the peer (server), by skewgate (client).
    last_id: u32,
    /// The peer's window for what skewgate sends on the connection.
    pub(crate) send_window: Window,
    /// skewgate's window for what the peer sends on the connection.
    pub(crate) recv_window: Window,
    /// Data taken and not yet given back in a connection WINDOW_UPDATE.
    unacked: u32,
    /// The peer's SETTINGS_INITIAL_WINDOW_SIZE, given to each new stream.
    pub(crate) peer_initial_window: InitialWindow,
    /// The largest DATA payload the peer accepts.
    pub(crate) max_frame: usize,
    /// skewgate's SETTINGS not acknowledged yet, oldest first.
    own_settings: VecDeque<A>,
    /// Streams closed and forgotten, for the frames still in flight.
    closed: ClosedStreams,
    empty_data: usize,
    /// Streams reset for the peer's fault, and of those the ones the engine took (`faults`).
    local_resets: usize,
    told_resets: usize,
    /// Frames to write before any stream's data, in order.
    pub(crate) out: VecDeque<Frame<Bytes>>,
    /// The connection's task, woken when a frame is queued outside its turn.
    waker: Option<Waker>,
    /// The connection's task is in its turn: what is queued is written in it.
    pub(crate) quiet: bool,
    /// A connection error: GOAWAY sent with this reason, nothing more read.
    pub(crate) error: Option<Reason>,
    /// GOAWAY NO_ERROR sent (the server's): no stream above this id is taken.
    pub(crate) going_away: Option<u32>,
}

impl<A> Conn<A> {
    pub(crate) fn new(role: Role, bounds: Bounds) -> Conn<A> {
        Conn {
            role,
            bounds,
            last_id: 0,
            send_window: Window::new(65_535),
            recv_window: Window::new(bounds.recv_window),
            unacked: 0,
            peer_initial_window: InitialWindow::default(),
            max_frame: 16_384,
            own_settings: VecDeque::new(),
            closed: ClosedStreams::default(),
            empty_data: 0,
            local_resets: 0,
            told_resets: 0,
            out: VecDeque::new(),
            waker: None,
            quiet: false,
            error: None,
            going_away: None,
        }
    }

    /// The connection's task, woken when a frame is queued outside its turn.
    pub(crate) fn set_waker(&mut self, waker: &Waker) {
        match &self.waker {
            Some(w) if w.will_wake(waker) => {}
            _ => self.waker = Some(waker.clone()),
        }
    }

    /// Wakes the connection's task, unless it is in its turn.
    pub(crate) fn wake(&self) {
        if !self.quiet
            && let Some(w) = &self.waker
        {
            w.wake_by_ref();
        }
    }

    /// Queues `frame` and wakes the connection's task to write it.
    pub(crate) fn push(&mut self, frame: Frame<Bytes>) {
        self.out.push_back(frame);
        self.wake();
    }

    /// skewgate's opening SETTINGS and the connection window it grants beyond the default, queued.
    pub(crate) fn start(&mut self, settings: Settings, carried: A) {
        self.push_settings(settings, carried);
        let grant = self.bounds.recv_window.saturating_sub(65_535);
        if grant > 0 {
            self.push(WindowUpdate::new(StreamId::zero(), grant).into());
        }
    }

    /// Queues SETTINGS of skewgate's; `carried` comes back with its acknowledgement.
    pub(crate) fn push_settings(&mut self, settings: Settings, carried: A) {
        self.own_settings.push_back(carried);
        self.push(settings.into());
    }

    /// What skewgate's SETTINGS not yet acknowledged carry, oldest first.
    pub(crate) fn settings_unacked(&self) -> impl Iterator<Item = &A> {
        self.own_settings.iter()
    }

    /// The highest stream id opened.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn last_id(&self) -> u32 {
        self.last_id
    }

    /// The client's next stream: its id, or `None` when the ids are spent.
    pub(crate) fn open_local(&mut self) -> Option<StreamId> {
        debug_assert_eq!(self.role, Role::Client);
        let id = if self.last_id == 0 {
            1
        } else {
            self.last_id.checked_add(2)?
        };
        if id > MAX_STREAM_ID {
            return None;
        }
        self.last_id = id;
        Some(StreamId::from(id))
    }

    /// The id the client's next stream would take.
    pub(crate) fn next_local(&self) -> u32 {
        if self.last_id == 0 {
            1
        } else {
            self.last_id + 2
        }
    }

    /// Whether `id` names a stream never opened (RFC 9113, 5.1: idle): an even id (the peer's
    /// pushes, which skewgate refuses, or a client's, which it may not use), or one above the last.
    pub(crate) fn idle(&self, id: StreamId) -> bool {
        let id = u32::from(id);
        id.is_multiple_of(2) || id > self.last_id
    }

    /// One frame from the peer.
    pub(crate) fn recv(&mut self, frame: Frame) -> Event<A> {
        if self.error.is_some() {
            return Event::Done;
        }
        match frame {
            Frame::Headers(headers) => self.on_headers(headers),
            Frame::Data(data) => self.on_data(data),
            Frame::Reset(reset) => match self.check_opened(reset.stream_id()) {
                true => Event::Reset(reset.stream_id(), reset.reason()),
                false => Event::Done,
            },
            Frame::WindowUpdate(w) => self.on_window_update(w.stream_id(), w.size_increment()),
            Frame::Settings(settings) => self.on_settings(settings),
            Frame::Ping(ping) if ping.is_ack() => Event::Pong(*ping.payload()),
            Frame::Ping(ping) => {
                self.answer(Ping::pong(ping.into_payload()).into());
                Event::Done
            }
            Frame::GoAway(go_away) => Event::GoAway(go_away.last_stream_id(), go_away.reason()),
            // A client cannot push (RFC 9113, 8.4), and skewgate's SETTINGS refuse an apiserver's.
            Frame::PushPromise(_) => self.fail(Reason::PROTOCOL_ERROR),
            Frame::Priority(_) => Event::Done,
        }
    }

    fn on_headers(&mut self, headers: Headers) -> Event<A> {
        let id = u32::from(headers.stream_id());
        match self.role {
            Role::Server if id.is_multiple_of(2) => self.fail(Reason::PROTOCOL_ERROR),
            Role::Server if id > self.last_id => {
                self.last_id = id;
                Event::Open(headers)
            }
            Role::Client if self.idle(headers.stream_id()) => self.fail(Reason::PROTOCOL_ERROR),
            _ => Event::Headers(headers),
        }
    }

    fn on_data(&mut self, data: Data<Bytes>) -> Event<A> {
        let flow = data.flow_controlled_len();
        if let Err(reason) = self.recv_window.receive(flow) {
            return self.fail(reason);
        }
        if !self.check_opened(data.stream_id()) {
            return Event::Done;
        }
        if data.payload().is_empty() && !data.is_end_stream() {
            self.empty_data += 1;
            if self.empty_data > MAX_EMPTY_DATA {
                tracing::debug!("an HTTP/2 peer sent too many empty DATA frames; GOAWAY");
                return self.fail(Reason::ENHANCE_YOUR_CALM);
            }
        }
        Event::Data(data)
    }

    fn on_window_update(&mut self, id: StreamId, increment: u32) -> Event<A> {
        if id.is_zero() {
            return match self.send_window.widen(increment) {
                Ok(()) => Event::ConnectionWindow,
                Err(reason) => self.fail(reason),
            };
        }
        match self.check_opened(id) {
            true => Event::StreamWindow(id, increment),
            false => Event::Done,
        }
    }

    fn on_settings(&mut self, settings: Settings) -> Event<A> {
        if settings.is_ack() {
            return match self.own_settings.pop_front() {
                Some(carried) => Event::SettingsAcked(carried),
                None => self.fail(Reason::PROTOCOL_ERROR),
            };
        }
        let delta = settings
            .initial_window_size()
            .map(|size| self.peer_initial_window.set(size));
        if let Some(size) = settings.max_frame_size() {
            self.max_frame = size as usize;
        }
        self.answer(Settings::ack().into());
        Event::Settings(Box::new(settings), delta)
    }

    /// Whether a frame on `id` (not HEADERS, not PRIORITY) names a stream opened; a connection
    /// error if not (RFC 9113, 5.1).
    fn check_opened(&mut self, id: StreamId) -> bool {
        if self.idle(id) {
            self.fail(Reason::PROTOCOL_ERROR);
            return false;
        }
        true
    }

    fn fail(&mut self, reason: Reason) -> Event<A> {
        self.go_away(reason);
        Event::Done
    }

    /// Queues an answer the connection owes the peer, unless `MAX_ANSWERS` frames wait already.
    pub(crate) fn answer(&mut self, frame: Frame<Bytes>) {
        if self.out.len() < MAX_ANSWERS {
            self.push(frame);
        }
    }

    /// The connection is broken by the peer: GOAWAY with `reason` (once), and nothing read after
    /// it.
    pub(crate) fn go_away(&mut self, reason: Reason) {
        if self.error.is_none() {
            self.error = Some(reason);
            let last = match self.role {
                Role::Server => StreamId::from(self.last_id),
                // skewgate takes no stream of the apiserver's.
                Role::Client => StreamId::zero(),
            };
            self.push(GoAway::new(last, reason).into());
        }
    }

    /// The server stops taking new streams: GOAWAY NO_ERROR naming the last stream taken.
    pub(crate) fn graceful_go_away(&mut self) {
        if self.going_away.is_none() && self.error.is_none() {
            self.going_away = Some(self.last_id);
            self.push(GoAway::new(StreamId::from(self.last_id), Reason::NO_ERROR).into());
        }
    }

    /// Connection window taken by data skewgate took or will not hold: given back in a
    /// WINDOW_UPDATE once half the window is.
    pub(crate) fn give_back(&mut self, len: usize) {
        if len == 0 {
            return;
        }
        self.recv_window.grant(len);
        self.unacked = self.unacked.saturating_add(len as u32);
        if self.unacked >= self.bounds.recv_window / 2 {
            let grant = std::mem::take(&mut self.unacked);
            self.push(WindowUpdate::new(StreamId::zero(), grant).into());
        }
    }

    /// With no stream left, the memory of closed streams is given back (a kubelet's idle
    /// connection); the queue too, when empty.
    pub(crate) fn shrink(&mut self) {
        self.closed.shrink();
        if self.out.is_empty() {
            self.out = VecDeque::new();
        }
    }

    /// For the fuzz target's invariants: how many closed streams are remembered, and the
    /// connection window not yet given back.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn held(&self) -> (usize, u32) {
        (self.closed.len(), self.unacked)
    }
}
