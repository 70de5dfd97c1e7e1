//! A stream's receiving half, as both engines keep it (h2's `Recv`, per stream): the body the
//! peer sent and the stream's reader has not taken yet, its trailers, the window skewgate granted
//! for it, what the reader took and was not given back yet, and the reader's task. The server
//! receives a client's request body, the client an apiserver's response body; what only one of
//! them does stays with it (a request's content-length, a response's head and budget).

use std::task::Waker;

use bytes::{Bytes, BytesMut};
use http::HeaderMap;

use super::{Chunks, Window};

/// A DATA payload shorter than this is copied into `Recv::small` by `hold_coalesced` (h2's
/// `DEFAULT_DATA_FRAME_OVERHEAD_THRESHOLD`: about what one held chunk costs beside its bytes).
const SMALL_DATA: usize = 256;

/// What a stream received and its reader has not taken.
pub(crate) struct Recv {
    /// Data not yet taken, oldest first.
    pub(crate) data: Chunks,
    /// Payloads of small DATA frames, copied together after `data` (`hold_coalesced`). None on
    /// a stream that was never sent one, as every upstream stream: it costs nothing to drop.
    small: Option<BytesMut>,
    /// Boxed: few bodies have trailers, and every stream would carry an inline map's size.
    pub(crate) trailers: Option<Box<HeaderMap>>,
    /// How much more the peer may send on the stream, as skewgate granted it.
    pub(crate) window: Window,
    /// Data the reader took and skewgate has not given back to the peer yet.
    pub(crate) released: u32,
    /// The reader, waiting for data.
    pub(crate) task: Option<Waker>,
}

/// What the reader takes next.
pub(crate) enum Next {
    Data(Bytes),
    /// Boxed as they were held: `Next` stays the size of `Bytes`.
    Trailers(Box<HeaderMap>),
    /// The peer ended its side and all it sent was taken.
    End,
    /// Nothing held, and more may come.
    Nothing,
}

impl Recv {
    /// A stream's receiving half, with `window` granted.
    #[inline]
    pub(crate) fn new(window: u32) -> Recv {
        Recv {
            data: Chunks::default(),
            small: None,
            trailers: None,
            window: Window::new(window),
            released: 0,
            task: None,
        }
    }

    /// Bytes held for the reader.
    #[inline]
    pub(crate) fn held(&self) -> usize {
        self.data.len() + self.small.as_ref().map_or(0, BytesMut::len)
    }

    /// Whether small payloads are held.
    fn holds_small(&self) -> bool {
        self.small.as_ref().is_some_and(|s| !s.is_empty())
    }

    /// Holds a payload for the reader as it came.
    pub(crate) fn hold(&mut self, payload: Bytes) {
        self.data.push_back(payload);
    }

    /// Holds a payload for the reader, a small one copied behind the others: a peer that sends
    /// its body in frames of a few bytes holds no more chunks than bytes allow, nor pins the read
    /// buffers they came in (h2 bounds them with its `data_frame_budget`).
    pub(crate) fn hold_coalesced(&mut self, payload: Bytes) {
        if payload.len() < SMALL_DATA {
            self.small
                .get_or_insert_with(BytesMut::new)
                .extend_from_slice(&payload);
            return;
        }
        if let Some(small) = self.small.as_mut().filter(|s| !s.is_empty()) {
            self.data.push_back(small.split().freeze());
        }
        self.data.push_back(payload);
    }

    /// What the reader takes next: data first (the small payloads after the others), then the
    /// trailers, then the end once the peer ended its side (`closed`); and whether the body ends
    /// with it.
    #[inline(always)]
    pub(crate) fn take(&mut self, closed: bool) -> (Next, bool) {
        let data = match self.data.pop_front() {
            Some(data) => Some(data),
            None => match &mut self.small {
                Some(small) if !small.is_empty() => Some(small.split().freeze()),
                _ => None,
            },
        };
        if let Some(data) = data {
            let ended =
                closed && self.data.is_empty() && !self.holds_small() && self.trailers.is_none();
            return (Next::Data(data), ended);
        }
        if let Some(trailers) = self.trailers.take() {
            return (Next::Trailers(trailers), true);
        }
        if closed {
            return (Next::End, true);
        }
        (Next::Nothing, false)
    }

    /// Drops what is held (the stream failed, or its reader went away); how many bytes.
    pub(crate) fn drop_held(&mut self) -> usize {
        let held = self.held();
        self.data.clear();
        self.small = None;
        held
    }

    /// `len` bytes taken by the reader: once half of `target` was taken (as h2 gives back), the
    /// window is granted again, no more than keeps what the peer may send and what is held within
    /// `target`, and only if `room` takes the grant (a bound beside the window); the
    /// WINDOW_UPDATE's increment.
    pub(crate) fn release(
        &mut self,
        len: usize,
        target: u32,
        room: impl FnOnce(usize) -> bool,
    ) -> Option<u32> {
        self.released = self
            .released
            .saturating_add(u32::try_from(len).unwrap_or(u32::MAX));
        let target = i64::from(target);
        if i64::from(self.released) < target / 2 {
            return None;
        }
        let credit = self.window.size() + self.held() as i64;
        let grant = (target - credit).min(i64::from(self.released));
        if grant > 0 && !room(grant as usize) {
            return None;
        }
        self.released = 0;
        let grant = u32::try_from(grant).ok().filter(|g| *g > 0)?;
        self.window.grant(grant as usize);
        Some(grant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn next(recv: &mut Recv, closed: bool) -> (String, bool) {
        let (what, ended) = recv.take(closed);
        let what = match what {
            Next::Data(d) => String::from_utf8_lossy(&d).into_owned(),
            Next::Trailers(_) => "trailers".into(),
            Next::End => "end".into(),
            Next::Nothing => "nothing".into(),
        };
        (what, ended)
    }

    #[test]
    fn small_payloads_are_copied_together_after_the_larger_ones_held_before_them() {
        let mut recv = Recv::new(65_535);
        recv.hold_coalesced(Bytes::from_static(b"a"));
        recv.hold_coalesced(Bytes::from_static(b"b"));
        let large = Bytes::from(vec![b'L'; SMALL_DATA]);
        recv.hold_coalesced(large.clone());
        recv.hold_coalesced(Bytes::from_static(b"c"));
        assert_eq!(recv.held(), 3 + SMALL_DATA);
        assert_eq!(next(&mut recv, false), ("ab".into(), false));
        let (large, ended) = recv.take(true);
        assert!(matches!(large, Next::Data(d) if d.len() == SMALL_DATA));
        assert!(!ended, "\"c\" is still held");
        assert_eq!(next(&mut recv, true), ("c".into(), true));
        assert_eq!(next(&mut recv, true), ("end".into(), true));
        assert_eq!(recv.held(), 0);
    }

    #[test]
    fn trailers_come_after_the_data_and_end_the_body() {
        let mut recv = Recv::new(65_535);
        recv.hold(Bytes::from_static(b"x"));
        recv.trailers = Some(Box::default());
        assert_eq!(next(&mut recv, true), ("x".into(), false));
        assert_eq!(next(&mut recv, true), ("trailers".into(), true));
        assert_eq!(next(&mut recv, false), ("nothing".into(), false));
    }

    #[test]
    fn the_window_is_given_back_once_half_of_it_was_taken_and_only_with_room() {
        let mut recv = Recv::new(100);
        assert!(recv.window.receive(60).is_ok());
        recv.hold(Bytes::from(vec![0; 60]));
        recv.data.clear();
        assert_eq!(recv.release(40, 100, |_| true), None, "less than half");
        assert_eq!(recv.release(20, 100, |_| false), None, "no room");
        assert_eq!(recv.released, 60, "kept for the next release");
        assert_eq!(recv.release(0, 100, |_| true), Some(60));
        assert_eq!(recv.window.size(), 100);
        // A smaller target (the budget under pressure) grants no more than keeps within it.
        assert!(recv.window.receive(80).is_ok());
        assert_eq!(
            recv.release(80, 50, |_| true),
            Some(30),
            "up to the smaller target"
        );
        assert_eq!(
            recv.release(10, 10, |_| true),
            None,
            "what was granted is past it"
        );
        assert_eq!(recv.released, 0);
    }
}
