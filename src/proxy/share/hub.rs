//! One shared watch: the upstream watch of one distinct watch (`key.rs`), the recent events it
//! keeps for clients that join behind it, and the clients it feeds.
//!
//! What a hub knows is every change after `floor`: it started its watch at `floor`, and raises it
//! to the last change it lets go of. A client that starts at or after `floor` gets, from the
//! buffer and then as they come, exactly the changes after its start, which is what the
//! apiserver would send it; one that starts before is not joined (its own upstream watch answers
//! it, 410 included). Replay and live delivery happen under one lock, so none is lost between.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http::HeaderMap;
use tokio::sync::{Notify, mpsc, watch};

use super::events::{Event, Kind};
use super::key::{Ask, Key};
use crate::upstream::ResponseBudget;

/// The most events a hub keeps for replay.
pub(crate) const BUFFER_EVENTS: usize = 256;
/// The most bytes of events a hub keeps for replay.
pub(crate) const BUFFER_BYTES: usize = 4 << 20;
/// The most events one client may have waiting: past it, the client is cut off, as the
/// apiserver's watch cache cuts a watcher whose channel stays full.
pub(crate) const CLIENT_EVENTS: usize = 100;

/// How a hub's upstream watch began.
#[derive(Clone, Debug)]
pub(crate) enum Start {
    Pending,
    /// Streaming; the head every client is answered with.
    Up(Arc<HeaderMap>),
    /// It could not begin: its clients watch on their own.
    Failed,
}

/// A client of a hub, as the hub feeds it.
struct Member {
    id: u64,
    ask: Ask,
    /// The newest version sent to it (its start, until an event is).
    sent: u64,
    /// It asked from where the hub's watch began, before the hub resumed: what the apiserver
    /// sends the hub is what it would send it, all of it.
    exact: bool,
    tx: mpsc::Sender<Bytes>,
    queued: Arc<AtomicUsize>,
}

pub(crate) struct State {
    /// Every change after it is known: in `buffer`, or before the buffer's first when it is empty.
    pub floor: u64,
    /// Where the hub's upstream watch began first.
    pub begun: u64,
    /// The newest version seen (a change or a bookmark): where a new upstream watch resumes.
    pub latest: u64,
    buffer: VecDeque<Event>,
    buffered: usize,
    /// The apiserver's last BOOKMARK to the hub, as it came: a client's own before its timeout.
    last_bookmark: Option<Event>,
    members: Vec<Member>,
    next_id: u64,
    pub ended: bool,
    /// Its watch was begun again after the apiserver ended one.
    pub resumed: bool,
}

/// What a client takes from its hub: its events, and its count of what waits, held in the
/// response budget.
pub(crate) struct Joined {
    pub id: u64,
    pub rx: mpsc::Receiver<Bytes>,
    pub queued: Arc<AtomicUsize>,
    pub replayed: usize,
}

/// What a delivery did, for the metrics.
#[derive(Default, Debug, PartialEq, Eq)]
pub(crate) struct Delivered {
    /// Clients cut off because they did not keep up.
    pub cut: usize,
}

pub(crate) struct Hub {
    pub key: Key,
    pub state: std::sync::Mutex<State>,
    pub start: watch::Sender<Start>,
    /// Told when a client leaves, so the hub can end once it has none.
    pub left: Notify,
    budget: Arc<ResponseBudget>,
}

impl Hub {
    /// A hub for `key`, to begin at `rv`.
    pub(crate) fn new(key: Key, rv: u64, budget: Arc<ResponseBudget>) -> Hub {
        Hub {
            key,
            state: std::sync::Mutex::new(State {
                floor: rv,
                begun: rv,
                latest: rv,
                buffer: VecDeque::new(),
                buffered: 0,
                last_bookmark: None,
                members: Vec::new(),
                next_id: 0,
                ended: false,
                resumed: false,
            }),
            start: watch::channel(Start::Pending).0,
            left: Notify::new(),
            budget,
        }
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Joins a client asking `ask`: `None` when the hub has ended or does not reach back to its
    /// start.
    pub(crate) fn join(&self, ask: Ask) -> Option<Joined> {
        let mut s = self.lock();
        if s.ended || ask.start < s.floor {
            return None;
        }
        let exact = ask.start == s.begun && !s.resumed;
        let replay: Vec<Bytes> = s
            .buffer
            .iter()
            .filter(|e| exact || e.rv > ask.start)
            .map(|e| e.bytes.clone())
            .collect();
        let (tx, rx) = mpsc::channel(CLIENT_EVENTS + BUFFER_EVENTS);
        let queued = Arc::new(AtomicUsize::new(0));
        let replayed = replay.len();
        let sent = s.buffer.back().map_or(ask.start, |e| e.rv.max(ask.start));
        for bytes in &replay {
            // The channel holds the whole buffer: a replay always fits.
            let _ = offer(&tx, &queued, &self.budget, bytes);
        }
        s.next_id += 1;
        let id = s.next_id;
        s.members.push(Member {
            id,
            ask,
            sent,
            exact,
            tx,
            queued: queued.clone(),
        });
        Some(Joined {
            id,
            rx,
            queued,
            replayed,
        })
    }

    /// Marks the hub's watch as begun again: from here on, every client gets only what is newer
    /// than what it has had.
    pub(crate) fn resume(&self) {
        let mut s = self.lock();
        s.resumed = true;
        for m in &mut s.members {
            m.exact = false;
        }
    }

    /// Lets client `id` go.
    pub(crate) fn leave(&self, id: u64) {
        let mut s = self.lock();
        s.members.retain(|m| m.id != id);
        let none = s.members.is_empty();
        drop(s);
        if none {
            self.left.notify_one();
        }
    }

    pub(crate) fn members(&self) -> usize {
        self.lock().members.len()
    }

    /// Delivers an event to every client it is for, keeps a change for replay, and cuts off the
    /// clients that do not keep up.
    pub(crate) fn deliver(&self, event: &Event) -> Delivered {
        let mut s = self.lock();
        let mut out = Delivered::default();
        let budget = &self.budget;
        s.members.retain_mut(|m| {
            let wanted =
                (event.rv > m.sent || m.exact) && (event.kind != Kind::Bookmark || m.ask.bookmarks);
            if !wanted {
                return true;
            }
            // A client holding what it has not taken while the process is over its response
            // budget is cut, as the budget cuts the connection that takes nothing.
            if budget.over() && m.queued.load(Ordering::Relaxed) > 0 {
                out.cut += 1;
                return false;
            }
            match offer(&m.tx, &m.queued, budget, &event.bytes) {
                Ok(()) => {
                    m.sent = event.rv;
                    true
                }
                Err(mpsc::error::TrySendError::Full(_)) => {
                    out.cut += 1;
                    false
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            }
        });
        s.latest = s.latest.max(event.rv);
        if event.kind == Kind::Bookmark {
            s.last_bookmark = Some(event.clone());
        }
        if event.kind == Kind::Change {
            s.buffered += event.bytes.len();
            s.buffer.push_back(event.clone());
            while s.buffer.len() > BUFFER_EVENTS || s.buffered > BUFFER_BYTES {
                let Some(old) = s.buffer.pop_front() else {
                    break;
                };
                s.buffered -= old.bytes.len();
                s.floor = s.floor.max(old.rv);
            }
        }
        out
    }

    /// The bookmark the apiserver sends a watch that asked for bookmarks 2 s before its timeout:
    /// the hub's last one from the apiserver, if it is newer than all client `id` has had.
    pub(crate) fn bookmark_for(&self, id: u64) -> bool {
        let mut s = self.lock();
        let Some(bookmark) = s.last_bookmark.clone() else {
            return false;
        };
        let Some(m) = s.members.iter_mut().find(|m| m.id == id) else {
            return false;
        };
        if !m.ask.bookmarks || bookmark.rv <= m.sent {
            return false;
        }
        let sent = offer(&m.tx, &m.queued, &self.budget, &bookmark.bytes).is_ok();
        if sent {
            m.sent = bookmark.rv;
        }
        sent
    }

    /// Ends the hub: an ERROR event goes to the clients that asked from where the hub's own watch
    /// began, whom the apiserver answered it; the others end cleanly, as a watch may, and
    /// watch again from where they are.
    pub(crate) fn end(&self, error: Option<&Event>) {
        let mut s = self.lock();
        s.ended = true;
        let begun = s.begun;
        for m in s.members.drain(..) {
            if let Some(e) = error
                && m.ask.start <= begun
            {
                let _ = offer(&m.tx, &m.queued, &self.budget, &e.bytes);
            }
        }
    }
}

/// Queues `bytes` for a client, counted in its `queued` and the response budget before it can be
/// taken (and so uncounted, `stream.rs`), and not counted if it cannot be queued.
fn offer(
    tx: &mpsc::Sender<Bytes>,
    queued: &AtomicUsize,
    budget: &ResponseBudget,
    bytes: &Bytes,
) -> Result<(), mpsc::error::TrySendError<Bytes>> {
    let len = bytes.len();
    queued.fetch_add(len, Ordering::Relaxed);
    budget.add(len);
    let sent = tx.try_send(bytes.clone());
    if sent.is_err() {
        queued.fetch_sub(len, Ordering::Relaxed);
        budget.sub(len);
    }
    sent
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hub(rv: u64) -> Hub {
        let key = Key {
            backend: "b".into(),
            path: "/api/v1/secrets".into(),
            query: Vec::new(),
            accept: String::new(),
        };
        Hub::new(key, rv, Arc::new(ResponseBudget::new(0)))
    }

    fn ask(start: u64, bookmarks: bool) -> Ask {
        Ask {
            start,
            timeout: None,
            bookmarks,
        }
    }

    fn ev(kind: Kind, rv: u64) -> Event {
        Event {
            kind,
            rv,
            bytes: Bytes::from(format!("{kind:?}{rv}\n")),
        }
    }

    fn drain(j: &mut Joined) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(b) = j.rx.try_recv() {
            out.push(String::from_utf8_lossy(&b).trim().to_owned());
        }
        out
    }

    #[test]
    fn each_client_gets_the_changes_after_its_own_start_and_bookmarks_if_asked() {
        let h = hub(10);
        let mut a = h.join(ask(10, true)).unwrap();
        h.deliver(&ev(Kind::Change, 11));
        h.deliver(&ev(Kind::Change, 12));
        // Joins behind the hub: replayed from 11 on.
        let mut b = h.join(ask(11, false)).unwrap();
        assert_eq!(b.replayed, 1);
        // Joins ahead of it (it listed after 13 happened, before the hub saw it).
        let mut c = h.join(ask(14, true)).unwrap();
        h.deliver(&ev(Kind::Change, 13));
        h.deliver(&ev(Kind::Bookmark, 15));
        h.deliver(&ev(Kind::Change, 16));
        assert_eq!(
            drain(&mut a),
            ["Change11", "Change12", "Change13", "Bookmark15", "Change16"]
        );
        assert_eq!(drain(&mut b), ["Change12", "Change13", "Change16"]);
        assert_eq!(drain(&mut c), ["Bookmark15", "Change16"]);
        assert!(
            h.join(ask(9, false)).is_none(),
            "before the hub began: its own watch"
        );
    }

    #[test]
    fn what_the_buffer_lets_go_of_can_no_longer_be_replayed() {
        let h = hub(1);
        for rv in 2..(BUFFER_EVENTS as u64 + 12) {
            h.deliver(&ev(Kind::Change, rv));
        }
        let floor = h.lock().floor;
        assert_eq!(floor, 11);
        assert!(h.join(ask(10, false)).is_none());
        let j = h.join(ask(11, false)).unwrap();
        assert_eq!(j.replayed, BUFFER_EVENTS);
    }

    #[test]
    fn a_client_that_does_not_read_is_cut_and_the_others_go_on() {
        let h = hub(1);
        let mut reader = h.join(ask(1, false)).unwrap();
        let stuck = h.join(ask(1, false)).unwrap();
        let mut cut = 0;
        for rv in 2..(CLIENT_EVENTS + BUFFER_EVENTS + 10) as u64 {
            cut += h.deliver(&ev(Kind::Change, rv)).cut;
            drain(&mut reader);
        }
        assert_eq!(cut, 1);
        assert_eq!(h.members(), 1);
        drop(stuck);
        h.deliver(&ev(Kind::Change, 10_000));
        assert_eq!(drain(&mut reader), ["Change10000"]);
    }

    #[test]
    fn an_error_goes_to_those_who_asked_from_where_the_hub_began() {
        let h = hub(5);
        let mut first = h.join(ask(5, false)).unwrap();
        let mut later = h.join(ask(8, false)).unwrap();
        h.end(Some(&ev(Kind::Error, 0)));
        assert_eq!(drain(&mut first), ["Error0"]);
        assert!(drain(&mut later).is_empty());
        assert!(first.rx.try_recv().is_err() && later.rx.try_recv().is_err());
        assert!(h.join(ask(5, false)).is_none());
    }
}
