//! What a stream of either engine holds beside its states: its data not yet taken (`Chunks`), why
//! it failed (`Failure`), and its tasks to wake.

use std::collections::VecDeque;
use std::io;
use std::task::{Context, Waker};

use bytes::Bytes;
use h2::Reason;

/// Why a stream, or the whole connection, can go no further. Kept as data (h2's error is not
/// `Clone`) and turned into an `h2::Error` for each one who asks.
#[derive(Clone, Debug)]
pub(crate) enum Failure {
    /// The stream was reset, by the apiserver or by skewgate.
    Reset(Reason),
    /// The apiserver sent GOAWAY before it took the stream: the stream was never processed.
    Refused,
    /// The connection failed or closed.
    Closed(io::ErrorKind, &'static str),
}

impl Failure {
    pub(crate) fn to_error(&self) -> h2::Error {
        match self {
            Failure::Reset(reason) => h2::Error::from(*reason),
            Failure::Refused => h2::Error::from(Reason::REFUSED_STREAM),
            Failure::Closed(kind, what) => h2::Error::from(io::Error::new(*kind, *what)),
        }
    }
}

/// A stream's response data not yet taken, oldest first. The first chunk is held inline: most
/// responses are one DATA frame, and a queue would allocate for it.
#[derive(Default)]
pub(crate) struct Chunks {
    first: Option<Bytes>,
    more: VecDeque<Bytes>,
    /// Bytes held.
    len: usize,
}

impl Chunks {
    pub(crate) fn push_back(&mut self, chunk: Bytes) {
        self.len += chunk.len();
        if self.first.is_none() && self.more.is_empty() {
            self.first = Some(chunk);
        } else {
            self.more.push_back(chunk);
        }
    }

    /// Puts back what was taken off the front and not used (a chunk larger than a window).
    pub(crate) fn push_front(&mut self, chunk: Bytes) {
        self.len += chunk.len();
        if let Some(first) = self.first.replace(chunk) {
            self.more.push_front(first);
        }
    }

    pub(crate) fn pop_front(&mut self) -> Option<Bytes> {
        let chunk = self.first.take().or_else(|| self.more.pop_front())?;
        self.len -= chunk.len();
        Some(chunk)
    }

    /// Bytes held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.first.is_none() && self.more.is_empty()
    }

    pub(crate) fn clear(&mut self) {
        self.len = 0;
        self.first = None;
        self.more.clear();
    }
}

pub(crate) fn wake(task: &mut Option<Waker>) {
    if let Some(task) = task.take() {
        task.wake();
    }
}

/// Keeps `cx`'s waker in `slot`, unless the one there already wakes the same task.
pub(crate) fn store_waker(slot: &mut Option<std::task::Waker>, cx: &Context<'_>) {
    match slot {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_chunks_come_out_in_the_order_they_came_in() {
        let mut chunks = Chunks::default();
        let mut out = Vec::new();
        for step in ["a", "b", "-", "c", "-", "-", "d", "-", "-"] {
            if step == "-" {
                out.push(chunks.pop_front());
            } else {
                chunks.push_back(Bytes::from_static(step.as_bytes()));
            }
        }
        let out: Vec<Option<&[u8]>> = out.iter().map(|c| c.as_deref()).collect();
        let expected: Vec<Option<&[u8]>> =
            vec![Some(b"a"), Some(b"b"), Some(b"c"), Some(b"d"), None];
        assert_eq!(out, expected);
        assert!(chunks.is_empty());
    }
}
