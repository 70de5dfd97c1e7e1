//! The time of a turn of an HTTP/2 client connection's task, read once for the turn.
//!
//! A request's start and its end (its duration observed) each read the clock: two `clock_gettime`
//! calls per proxied GET, about 1 % of skewgate's CPU time per h2c GET under the load bench's
//! client (`perf`, `__vdso_clock_gettime` and `read_tsc`). An HTTP/2 connection's task begins and
//! ends several requests in one turn, and the turn's time (read at the first use in the turn)
//! stands for all of them: off by at most the length of one turn (tens of microseconds), against
//! durations counted in milliseconds and a premature reset judged at a second. Outside such a turn
//! (HTTP/1.1 connections, other tasks) `now` reads the clock.

use std::cell::Cell;
use std::time::Instant;

#[derive(Clone, Copy)]
enum Turn {
    /// No turn on this thread: read the clock each time.
    Off,
    /// In a turn that has not read the clock yet.
    Unread,
    Read(Instant),
}

thread_local! {
    static TURN: Cell<Turn> = const { Cell::new(Turn::Off) };
}

/// The time now, or the time of this turn.
pub(crate) fn now() -> Instant {
    TURN.with(|t| match t.get() {
        Turn::Off => Instant::now(),
        Turn::Read(at) => at,
        Turn::Unread => {
            let at = Instant::now();
            t.set(Turn::Read(at));
            at
        }
    })
}

/// A turn of a connection's task on this thread: until it is dropped, `now` reads the clock once.
pub(crate) struct TurnGuard(());

impl TurnGuard {
    pub(crate) fn begin() -> TurnGuard {
        TURN.with(|t| t.set(Turn::Unread));
        TurnGuard(())
    }
}

impl Drop for TurnGuard {
    fn drop(&mut self) {
        TURN.with(|t| t.set(Turn::Off));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_reads_the_clock_once_and_outside_a_turn_every_time() {
        let outside = now();
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(now() > outside, "outside a turn, the clock is read");
        let turn = TurnGuard::begin();
        let first = now();
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert_eq!(now(), first, "in a turn, its first reading");
        drop(turn);
        assert!(now() > first, "the turn over, the clock again");
    }
}
