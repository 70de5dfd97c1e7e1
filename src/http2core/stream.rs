//! A stream as both engines keep it (h2's `Stream`, shared by its client and server through its
//! `Peer`): its state from the time it is open (RFC 9113, 5.1), each end closed once, by
//! END_STREAM or a reset, and never opened again; why it failed; its receiving half
//! (`recv.rs`); the task that sends on it; and the handles still held. "Local" is what skewgate
//! sends on the stream (a response to a client, a request to an apiserver), "remote" what the
//! peer sends. What only one role keeps is the stream's `role` part: the server's response queue
//! and its verdicts on a reset stream (`edge::http2`), the client's response head and budget
//! (`upstream::frames`).

use std::task::Waker;

use h2::frame::StreamId;

use super::recv::{Next, Recv};
use super::{Failure, wake};

/// One stream of a connection; `R` is what only its role keeps.
pub(crate) struct Stream<R> {
    pub(crate) id: StreamId,
    /// Which ends are closed: the peer's by END_STREAM received, skewgate's by END_STREAM sent
    /// (queued, on the server); both by a reset.
    pub(crate) ends: Ends,
    pub(crate) failure: Option<Failure>,
    /// What the peer sent and the reader has not taken.
    pub(crate) recv: Recv,
    /// The task that sends on the stream, waiting for room (or for a reset).
    pub(crate) send_task: Option<Waker>,
    /// The handles still held: the reader's, and the sender's.
    pub(crate) recv_handle: bool,
    pub(crate) send_handle: bool,
    pub(crate) role: R,
}

impl<R> Stream<R> {
    /// A stream opened as `id` with `ends` closed, the peer granted `window`; a handle is held for
    /// each end still open.
    #[inline]
    pub(crate) fn new(id: StreamId, ends: Ends, window: u32, role: R) -> Stream<R> {
        Stream {
            id,
            ends,
            failure: None,
            recv: Recv::new(window),
            send_task: None,
            recv_handle: !ends.recv_closed(),
            send_handle: !ends.send_closed(),
            role,
        }
    }

    /// The error a handle is told, when the stream failed, or the whole connection did.
    #[inline]
    pub(crate) fn failed(&self, connection: Option<&Failure>) -> Option<h2::Error> {
        self.failure.as_ref().or(connection).map(Failure::to_error)
    }

    /// Fails the stream with `why` unless it failed before, and wakes both its tasks; whether it
    /// did.
    pub(crate) fn fail(&mut self, why: Failure) -> bool {
        if self.failure.is_some() {
            return false;
        }
        self.failure = Some(why);
        self.wake_both();
        true
    }

    /// Wakes the reader and the sender.
    pub(crate) fn wake_both(&mut self) {
        wake(&mut self.recv.task);
        wake(&mut self.send_task);
    }

    /// Whether the peer may still send on the stream: its end open, and the stream not failed.
    pub(crate) fn receiving(&self) -> bool {
        !self.ends.recv_closed() && self.failure.is_none()
    }

    /// What the reader takes next, and whether the body ends with it (`Recv::take`).
    #[inline(always)]
    pub(crate) fn take(&mut self) -> (Next, bool) {
        self.recv.take(self.ends.recv_closed())
    }

    /// `len` bytes taken by the reader (`Recv::release`), while the stream receives: the
    /// WINDOW_UPDATE to send, if one is due.
    pub(crate) fn release(
        &mut self,
        len: usize,
        target: u32,
        room: impl FnOnce(usize) -> bool,
    ) -> Option<(StreamId, u32)> {
        if !self.receiving() {
            return None;
        }
        let grant = self.recv.release(len, target, room)?;
        Some((self.id, grant))
    }
}

/// The states of RFC 9113, 5.1, past idle (and the reserved states, which no server push makes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StreamState {
    Open,
    /// skewgate sent END_STREAM; the peer may still send.
    HalfClosedLocal,
    /// The peer sent END_STREAM; skewgate may still send.
    HalfClosedRemote,
    Closed,
}

/// Which ends of an open stream are closed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Ends {
    recv_closed: bool,
    send_closed: bool,
}

impl Ends {
    /// A stream opened by a HEADERS frame; `recv_closed` or `send_closed` when that frame ended
    /// its side at once (a GET's request).
    pub(crate) const fn new(recv_closed: bool, send_closed: bool) -> Ends {
        Ends {
            recv_closed,
            send_closed,
        }
    }

    pub(crate) fn state(self) -> StreamState {
        match (self.recv_closed, self.send_closed) {
            (false, false) => StreamState::Open,
            (false, true) => StreamState::HalfClosedLocal,
            (true, false) => StreamState::HalfClosedRemote,
            (true, true) => StreamState::Closed,
        }
    }

    /// The peer may send no more (END_STREAM received, or the stream reset).
    pub(crate) fn recv_closed(self) -> bool {
        self.recv_closed
    }

    /// skewgate may send no more (END_STREAM or RST_STREAM sent, or the stream reset).
    pub(crate) fn send_closed(self) -> bool {
        self.send_closed
    }

    /// Closed both ways.
    pub(crate) fn is_closed(self) -> bool {
        self.state() == StreamState::Closed
    }

    /// END_STREAM received.
    pub(crate) fn close_recv(&mut self) {
        self.recv_closed = true;
    }

    /// END_STREAM sent.
    pub(crate) fn close_send(&mut self) {
        self.send_closed = true;
    }

    /// RST_STREAM, either way: closed at once.
    pub(crate) fn close(&mut self) {
        *self = Ends::new(true, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_end_closes_once_and_the_states_follow_rfc_9113() {
        let mut get = Ends::new(true, false);
        assert_eq!(get.state(), StreamState::HalfClosedRemote);
        get.close_send();
        assert_eq!(get.state(), StreamState::Closed);
        let mut upload = Ends::new(false, false);
        assert_eq!(upload.state(), StreamState::Open);
        upload.close_send();
        assert_eq!(upload.state(), StreamState::HalfClosedLocal);
        upload.close_send();
        assert_eq!(upload.state(), StreamState::HalfClosedLocal);
        let mut reset = Ends::new(false, false);
        reset.close();
        assert!(reset.is_closed() && reset.recv_closed() && reset.send_closed());
    }
}
