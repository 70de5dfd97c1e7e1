//! A stream's state (RFC 9113, 5.1) from the time it is open, as both engines keep it: each end
//! closes once, by END_STREAM or a reset, and never opens again. "Local" is what skewgate sends
//! on the stream (a response to a client, a request to an apiserver), "remote" what the peer
//! sends.

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
