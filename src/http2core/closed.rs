//! Frames for streams that are closed (RFC 9113, 5.1): what the peer (a client, an apiserver) may
//! still send on a stream after it was reset or ended, and what is an error. Each closed stream is
//! remembered by how it closed, the latest `REMEMBERED` of them, as h2 remembers the streams it
//! reset (`DEFAULT_RESET_STREAM_MAX`); one closed before those is forgotten, and a frame for it is
//! answered as h2 answers it (DATA: RST_STREAM STREAM_CLOSED; HEADERS: GOAWAY PROTOCOL_ERROR).
//!
//! Every answer that is an error is counted against the peer (`Conn::refuse`): a flood of frames on
//! closed streams ends with GOAWAY ENHANCE_YOUR_CALM, as h2's and HAProxy's end it.

use std::collections::VecDeque;

/// How many closed streams are remembered.
const REMEMBERED: usize = 64;

/// How a stream closed, for the frames the client sends on it afterwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gone {
    /// skewgate reset it while the peer could still send: frames already in flight are ignored
    /// (RFC 9113, 5.4.2), up to the window the peer then had and up to its END_STREAM.
    Reset { window: i64 },
    /// The peer reset it, or skewgate reset it after the peer's END_STREAM (or past what the
    /// peer may still send): any frame but PRIORITY is a stream error STREAM_CLOSED.
    Closed,
    /// Over both ways without a reset: any frame but PRIORITY, WINDOW_UPDATE and RST_STREAM is a
    /// connection error STREAM_CLOSED.
    Ended,
}

/// What a frame on a closed stream comes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Dropped (its flow-controlled length given back to the connection's window).
    Ignore,
    /// RST_STREAM STREAM_CLOSED, counted against the peer.
    StreamError,
    /// GOAWAY STREAM_CLOSED.
    ConnectionError,
}

impl Gone {
    /// A DATA frame of `flow` flow-controlled bytes (`end`: with END_STREAM).
    pub(crate) fn on_data(&mut self, flow: usize, end: bool) -> Verdict {
        match self {
            Gone::Reset { window } => {
                *window -= flow as i64;
                if *window < 0 {
                    *self = Gone::Closed;
                    return Verdict::StreamError;
                }
                if end {
                    *self = Gone::Closed;
                }
                Verdict::Ignore
            }
            Gone::Closed => Verdict::StreamError,
            Gone::Ended => Verdict::ConnectionError,
        }
    }

    /// A HEADERS frame (`end`: with END_STREAM): trailers in flight are ignored once.
    pub(crate) fn on_headers(&mut self, end: bool) -> Verdict {
        match self {
            Gone::Reset { .. } if end => {
                *self = Gone::Closed;
                Verdict::Ignore
            }
            Gone::Reset { .. } => {
                *self = Gone::Closed;
                Verdict::StreamError
            }
            Gone::Closed => Verdict::StreamError,
            Gone::Ended => Verdict::ConnectionError,
        }
    }
}

/// The latest closed streams skewgate no longer holds, by id.
#[derive(Default)]
pub(crate) struct ClosedStreams {
    list: VecDeque<(u32, Gone)>,
}

impl ClosedStreams {
    /// Remembers stream `id`, forgetting the oldest beyond `REMEMBERED`.
    pub(crate) fn remember(&mut self, id: u32, gone: Gone) {
        if self.list.len() == REMEMBERED {
            self.list.pop_front();
        }
        self.list.push_back((id, gone));
    }

    /// How stream `id` closed, if it is remembered.
    pub(crate) fn get_mut(&mut self, id: u32) -> Option<&mut Gone> {
        self.list
            .iter_mut()
            .rev()
            .find(|(i, _)| *i == id)
            .map(|(_, gone)| gone)
    }

    /// How many are remembered.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    /// Gives back the memory of a connection with no stream (a kubelet's idle connection).
    pub(crate) fn shrink(&mut self) {
        if self.list.is_empty() {
            self.list = VecDeque::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_in_flight_after_a_reset_is_ignored_up_to_the_window_then_an_error() {
        let mut gone = Gone::Reset { window: 100 };
        assert_eq!(gone.on_data(60, false), Verdict::Ignore);
        assert_eq!(gone.on_data(40, false), Verdict::Ignore);
        // One byte more than the client was granted.
        assert_eq!(gone.on_data(1, false), Verdict::StreamError);
        assert_eq!(gone.on_data(0, false), Verdict::StreamError);
    }

    #[test]
    fn end_stream_after_a_reset_ends_what_is_ignored() {
        let mut gone = Gone::Reset { window: 100 };
        assert_eq!(gone.on_data(10, true), Verdict::Ignore);
        assert_eq!(gone.on_data(0, true), Verdict::StreamError);
        let mut gone = Gone::Reset { window: 100 };
        assert_eq!(gone.on_headers(true), Verdict::Ignore);
        assert_eq!(gone.on_headers(true), Verdict::StreamError);
        let mut gone = Gone::Reset { window: 100 };
        assert_eq!(gone.on_headers(false), Verdict::StreamError);
    }

    #[test]
    fn an_ended_stream_takes_no_data_nor_headers() {
        assert_eq!(Gone::Ended.on_data(0, false), Verdict::ConnectionError);
        assert_eq!(Gone::Ended.on_headers(true), Verdict::ConnectionError);
        assert_eq!(Gone::Closed.on_data(4, true), Verdict::StreamError);
    }

    #[test]
    fn only_the_latest_are_remembered() {
        let mut closed = ClosedStreams::default();
        for id in (1..=2 * REMEMBERED as u32).step_by(1) {
            closed.remember(id * 2 + 1, Gone::Ended);
        }
        assert!(closed.get_mut(3).is_none());
        assert_eq!(
            closed.get_mut(4 * REMEMBERED as u32 + 1),
            Some(&mut Gone::Ended)
        );
    }
}
