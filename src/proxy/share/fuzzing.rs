//! The fuzz target's driver over a shared watch (`fuzz/fuzz_targets/shared_watch.rs`): the first
//! byte picks the encoding (protobuf or JSON lines) and where the hub begins; the rest is what the
//! apiserver sends, cut into pieces at the bytes' own values. Each event goes to a hub with clients
//! of four starts, some that read and some that do not, a client joining every few events. After
//! every event the invariants no apiserver may break: a client that did not ask from where the hub
//! began gets only versions newer than its start and than what it had, in order; a client's queue
//! stays within its bound; a hub that lets go of events never serves a start it no longer reaches.

use std::sync::Arc;

use bytes::Bytes;

use super::events::{Framer, Kind};
use super::hub::{BUFFER_EVENTS, CLIENT_EVENTS, Hub, Joined};
use super::key::{Ask, Key};
use crate::upstream::ResponseBudget;

struct Client {
    joined: Joined,
    start: u64,
    exact: bool,
    reads: bool,
    last: u64,
    protobuf: bool,
}

pub(crate) fn drive(input: &[u8]) {
    let Some((&first, rest)) = input.split_first() else {
        return;
    };
    let protobuf = first & 1 == 1;
    let begun = u64::from(first >> 1);
    let key = Key {
        backend: "b".into(),
        path: "/api/v1/secrets".into(),
        query: Vec::new(),
        accept: String::new(),
    };
    let hub = Hub::new(key, begun, Arc::new(ResponseBudget::new(1 << 20)));
    let mut framer = Framer::new(protobuf);
    let mut clients: Vec<Client> = Vec::new();
    let mut at = 0;
    let mut events = 0u64;
    while at < rest.len() {
        let len = (usize::from(rest[at]) % 64) + 1;
        at += 1;
        let piece = &rest[at..(at + len).min(rest.len())];
        at += len;
        let Ok(got) = framer.feed(piece) else {
            return;
        };
        for e in got {
            if e.kind == Kind::Error {
                hub.end(Some(&e));
                return;
            }
            hub.deliver(&e);
            events += 1;
            if events % 3 == 1 && clients.len() < 8 {
                join(&hub, &mut clients, begun + events % 4, protobuf);
            }
            check(&hub, &mut clients);
        }
    }
}

fn join(hub: &Hub, clients: &mut Vec<Client>, start: u64, protobuf: bool) {
    let floor = hub.lock().floor;
    let ask = Ask {
        start,
        timeout: None,
        bookmarks: start % 2 == 0,
    };
    match hub.join(ask) {
        Some(joined) => {
            assert!(start >= floor, "joined at {start} below the floor {floor}");
            assert!(joined.replayed <= BUFFER_EVENTS);
            clients.push(Client {
                joined,
                start,
                exact: start == hub.lock().begun,
                reads: clients.len() % 2 == 0,
                last: start,
                protobuf,
            });
        }
        None => assert!(
            start < floor,
            "refused at {start}, at or above the floor {floor}"
        ),
    }
}

fn check(hub: &Hub, clients: &mut [Client]) {
    for c in clients.iter_mut() {
        assert!(c.joined.rx.len() <= CLIENT_EVENTS + BUFFER_EVENTS);
        if !c.reads {
            continue;
        }
        while let Ok(bytes) = c.joined.rx.try_recv() {
            taken(&c.joined, &bytes);
            let mut framer = Framer::new(c.protobuf);
            let Ok(events) = framer.feed(&bytes) else {
                panic!("a client was sent what is no whole event");
            };
            assert_eq!(events.len(), 1, "one event per chunk");
            let rv = events[0].rv;
            if !c.exact {
                assert!(
                    rv > c.start && rv > c.last,
                    "{rv} after {} (start {})",
                    c.last,
                    c.start
                );
            }
            c.last = c.last.max(rv);
        }
    }
}

/// What the client's body does when it takes a chunk (`stream.rs`).
fn taken(joined: &Joined, bytes: &Bytes) {
    joined
        .queued
        .fetch_sub(bytes.len(), std::sync::atomic::Ordering::Relaxed);
}
