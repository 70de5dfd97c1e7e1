//! A connection's streams, polled by its task when they were woken: a slab of them and a list of
//! the woken ones, in place of `FuturesUnordered`.
//!
//! Why not `FuturesUnordered`: it allocates a reference-counted task per stream, links it into a
//! list of all its tasks and, when woken, into a lock-free queue, and registers the polling task's
//! waker anew on every call: about 25 atomic read-modify-writes per proxied GET
//! (`bench/instructions.sh`), for a set that only ever lives on one thread. Here a stream's waker
//! is an `Arc` of its own (its key and a flag), the woken keys go into a list under a lock taken
//! once per wake-up and once per turn of the connection, and a stream is polled with its waker
//! by reference.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Wake, Waker};

use slab::Slab;

use super::ConnWake;

/// The streams of one connection.
pub(super) struct Streams<S> {
    slab: Slab<Entry<S>>,
    woken: Arc<Woken>,
    /// Streams pushed since the last poll: each is polled once without being woken.
    fresh: Vec<usize>,
    /// The woken list taken for one poll, kept for its allocation.
    taking: Vec<usize>,
}

struct Entry<S> {
    stream: S,
    wake: Arc<StreamWake>,
    waker: Waker,
}

/// The keys of the streams woken since the connection last took them.
struct Woken {
    keys: Mutex<Vec<usize>>,
    conn: Arc<ConnWake>,
}

struct StreamWake {
    key: usize,
    /// In the woken list (or about to be polled): a wake-up adds nothing.
    queued: AtomicBool,
    woken: Arc<Woken>,
}

impl Wake for StreamWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        self.woken
            .keys
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(self.key);
        self.woken.conn.wake_streams();
    }
}

impl<S> Streams<S>
where
    S: Future<Output = ()> + Unpin,
{
    pub(super) fn new(conn: Arc<ConnWake>) -> Streams<S> {
        Streams {
            slab: Slab::new(),
            woken: Arc::new(Woken {
                keys: Mutex::new(Vec::new()),
                conn,
            }),
            fresh: Vec::new(),
            taking: Vec::new(),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.slab.is_empty()
    }

    /// Adds a stream, polled at the next `poll`.
    pub(super) fn push(&mut self, stream: S) {
        let entry = self.slab.vacant_entry();
        let key = entry.key();
        let wake = Arc::new(StreamWake {
            key,
            queued: AtomicBool::new(true),
            woken: self.woken.clone(),
        });
        let waker = Waker::from(wake.clone());
        entry.insert(Entry {
            stream,
            wake,
            waker,
        });
        self.fresh.push(key);
    }

    /// Whether a stream was woken since the last `poll` took the woken ones.
    pub(super) fn any_woken(&self) -> bool {
        !self.fresh.is_empty()
            || !self
                .woken
                .keys
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_empty()
    }

    /// Polls the streams pushed or woken since the last call, each once, and drops those that
    /// ended. A stream woken while they are polled is polled by the next call.
    pub(super) fn poll(&mut self) {
        let mut keys = std::mem::take(&mut self.taking);
        keys.append(&mut self.fresh);
        {
            let mut woken = self.woken.keys.lock().unwrap_or_else(|e| e.into_inner());
            keys.append(&mut woken);
        }
        for &key in &keys {
            // A key whose stream ended since it was woken (or a new stream in its slot, which a
            // spurious poll does not harm).
            let Some(entry) = self.slab.get_mut(key) else {
                continue;
            };
            // Before the poll: a wake-up during or after it queues the stream again.
            entry.wake.queued.store(false, Ordering::Release);
            let mut cx = Context::from_waker(&entry.waker);
            if Pin::new(&mut entry.stream).poll(&mut cx).is_ready() {
                // Its waker may still be held (and woken) elsewhere: `queued` set for good, it
                // adds nothing to the list.
                entry.wake.queued.store(true, Ordering::Release);
                self.slab.remove(key);
            }
        }
        keys.clear();
        self.taking = keys;
        if self.slab.is_empty() && self.slab.capacity() > 0 {
            // A connection with no stream keeps nothing of its busiest moment (thousands of
            // kubelet connections are idle most of the time).
            self.slab = Slab::new();
            self.taking = Vec::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::task::Poll;

    use super::*;

    /// A stream that counts its polls, keeps the last waker it was polled with, and ends at its
    /// `ends_at`-th poll.
    struct Probe {
        polls: Arc<AtomicUsize>,
        waker: Arc<Mutex<Option<Waker>>>,
        ends_at: usize,
    }

    impl Future for Probe {
        type Output = ();

        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            let n = self.polls.fetch_add(1, Ordering::Relaxed) + 1;
            *self.waker.lock().expect("lock") = Some(cx.waker().clone());
            if n >= self.ends_at {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }
    }

    fn probe(ends_at: usize) -> (Probe, Arc<AtomicUsize>, Arc<Mutex<Option<Waker>>>) {
        let polls = Arc::new(AtomicUsize::new(0));
        let waker = Arc::new(Mutex::new(None));
        let p = Probe {
            polls: polls.clone(),
            waker: waker.clone(),
            ends_at,
        };
        (p, polls, waker)
    }

    fn wake(waker: &Mutex<Option<Waker>>) {
        waker
            .lock()
            .expect("lock")
            .clone()
            .expect("polled once")
            .wake();
    }

    /// The connection's task, as a waker that counts its wake-ups.
    struct Task(AtomicUsize);

    impl Wake for Task {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn task() -> (Arc<ConnWake>, Arc<Task>) {
        let wakes = super::super::Wakes::new();
        let task = Arc::new(Task(AtomicUsize::new(0)));
        wakes.conn.task.register(&Waker::from(task.clone()));
        (wakes.conn.clone(), task)
    }

    #[test]
    fn a_stream_is_polled_when_pushed_and_then_only_when_woken() {
        let (conn, task) = task();
        let mut streams = Streams::new(conn);
        let (p, polls, waker) = probe(2);
        streams.push(p);
        streams.poll();
        assert_eq!(polls.load(Ordering::Relaxed), 1, "polled once, pushed");
        streams.poll();
        assert_eq!(polls.load(Ordering::Relaxed), 1, "not polled unwoken");
        assert!(!streams.any_woken());
        let w = waker.clone();
        std::thread::spawn(move || wake(&w)).join().expect("woken");
        assert_eq!(task.0.load(Ordering::Relaxed), 1, "the task was woken");
        assert!(streams.any_woken());
        streams.poll();
        assert_eq!(polls.load(Ordering::Relaxed), 2, "polled, woken");
        assert!(streams.is_empty(), "it ended");
        assert_eq!(streams.slab.capacity(), 0, "nothing kept once empty");
    }

    #[test]
    fn an_ended_streams_waker_does_not_poll_the_stream_in_its_place() {
        let (conn, _task) = task();
        let mut streams = Streams::new(conn);
        let (first, _, old_waker) = probe(1);
        streams.push(first);
        streams.poll();
        assert!(streams.is_empty());
        let (second, polls, _) = probe(5);
        streams.push(second);
        streams.poll();
        assert_eq!(polls.load(Ordering::Relaxed), 1);
        wake(&old_waker);
        assert!(
            !streams.any_woken(),
            "the ended stream's wake-up adds nothing"
        );
        streams.poll();
        assert_eq!(polls.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_wake_up_while_the_streams_are_polled_is_noted_not_sent() {
        let (conn, task) = task();
        let mut streams = Streams::new(conn.clone());
        let (p, polls, waker) = probe(3);
        streams.push(p);
        streams.poll();
        conn.streams_polled.store(true, Ordering::SeqCst);
        wake(&waker);
        // Woken twice before it is polled: listed once.
        wake(&waker);
        conn.streams_polled.store(false, Ordering::SeqCst);
        assert_eq!(
            task.0.load(Ordering::Relaxed),
            0,
            "the task looks after polling"
        );
        assert!(streams.any_woken());
        streams.poll();
        assert_eq!(polls.load(Ordering::Relaxed), 2, "polled once for both");
        assert!(!streams.any_woken());
    }
}
