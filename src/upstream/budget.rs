//! The bound on response data skewgate holds for its clients, across all of them: what the
//! apiservers sent and no client has taken yet (a slow reader, a client that does not read at
//! all). Each upstream stream may hold up to its window of it (`STREAM_WINDOW`), so
//! without a bound 1,600 unread streams held 393 MB. The budget is one count for the process, in
//! the manner of Envoy's overload manager, with two levels beyond normal:
//!
//! - **pressure** (from half the limit held until a quarter): every upstream connection, at its
//!   next stream or DATA frame, announces a small initial stream window (`SMALL_WINDOW`, by
//!   SETTINGS_INITIAL_WINDOW_SIZE, which moves the window of every stream it has: RFC 9113,
//!   6.9.2), and gives a stream back no more than that;
//! - **over** (from the limit until three quarters): the initial window is 0, and a stream is
//!   given a small window only when its client has taken all it held and asks for more (its body
//!   polled empty): a stream whose client does not read is given nothing more. A DATA frame that
//!   still comes for a stream holding `SMALL_WINDOW` unread (sent before the apiserver saw the
//!   SETTINGS) resets that stream (CANCEL) instead: its client sees its response cut.
//!
//! The small window given on demand is given only while the budget has room for it: a stream
//! that finds it spent waits, and the client connection that has taken nothing for longest is cut
//! to make room (`stalls.rs`). So what is held and promised stays within the bound whatever the
//! number of connections and streams, and a client that reads still gets its response.
//!
//! A window smaller than the one before holds once the apiserver acknowledged it, a larger one at
//! once. Streams whose clients read hold little and go on at every level. What an HTTP/2 client's
//! streams hold unwritten (the chunk a stream took before its client's window shut) is counted
//! too (`edge::http2`, `State::count_queued`); an HTTP/1.1 connection's write in progress is not,
//! bounded by the connection (one write at a time).

use std::fmt;

use prometheus::core::Collector;
use prometheus::{IntCounter, IntGauge};

/// The default bound: room for a thousand full stream windows at once (1,000 large LISTs, each
/// read at the apiserver's pace), a quarter of the manifests' memory limit (deploy/).
pub const DEFAULT_LIMIT: usize = 256 << 20;

/// How much of one response the apiserver may send ahead of the client reading it: the most an
/// upstream stream buffers in skewgate, and the most an apiserver sends in vain for a client that
/// resets its stream. kube-apiserver sizes its own per-stream buffer the same (256 KiB: "at least
/// 99% of serialized resources in surveyed clusters were smaller than 256kb").
pub(crate) const STREAM_WINDOW: u32 = 256 << 10;

/// The stream window under pressure: one frame of the default size.
pub(crate) const SMALL_WINDOW: u32 = 16 << 10;

/// How hard the budget is pressed, as an upstream connection last announced it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Level {
    Normal,
    Pressure,
    Over,
}

impl Level {
    /// The initial stream window announced at this level.
    pub(crate) fn window(self) -> u32 {
        match self {
            Level::Normal => STREAM_WINDOW,
            Level::Pressure => SMALL_WINDOW,
            Level::Over => 0,
        }
    }
}

/// The bound, and what is held against it now.
pub struct ResponseBudget {
    limit: usize,
    /// `skewgate_response_buffered_bytes`: the count itself (an atomic integer).
    held: IntGauge,
    /// `skewgate_response_windows_open_bytes`: what the apiservers may still send on the streams
    /// open now, as their windows allow. The levels follow what is held and this together.
    promised: IntGauge,
    /// `skewgate_response_buffer_limit_bytes`.
    limit_gauge: IntGauge,
    /// `skewgate_response_buffer_resets_total`.
    resets: IntCounter,
    /// `skewgate_response_window_shrinks_total`: small windows announced to apiservers.
    shrinks: IntCounter,
    /// `skewgate_response_buffer_cut_connections_total`: client connections cut to make room.
    cuts: IntCounter,
    /// The connections holding what their clients do not take, and the streams waiting for room.
    stalls: super::stalls::Stalls,
}

impl ResponseBudget {
    /// A budget of `limit` bytes (0: no bound).
    pub fn new(limit: usize) -> ResponseBudget {
        let limit = if limit == 0 { usize::MAX } else { limit };
        let gauge = |name: &str, help: &str| {
            IntGauge::new(name, help).unwrap_or_else(|_| unreachable!("a constant name"))
        };
        let counter = |name: &str, help: &str| {
            IntCounter::new(name, help).unwrap_or_else(|_| unreachable!("a constant name"))
        };
        let limit_gauge = gauge(
            "skewgate_response_buffer_limit_bytes",
            "The bound on response data held for clients that have not read it yet (--max-buffered-response-bytes).",
        );
        limit_gauge.set(i64::try_from(limit).unwrap_or(i64::MAX));
        ResponseBudget {
            limit,
            held: gauge(
                "skewgate_response_buffered_bytes",
                "Response data received from apiservers and not yet taken by its client, or taken by an HTTP/2 client's stream and not yet written to it, across all clients.",
            ),
            promised: gauge(
                "skewgate_response_windows_open_bytes",
                "Response data the apiservers may still send on the streams open now, as skewgate's flow-control windows allow; with what is buffered, what the bound's levels follow.",
            ),
            limit_gauge,
            resets: counter(
                "skewgate_response_buffer_resets_total",
                "Responses cut (their upstream stream reset) because the buffered response data was at its bound and their client had not read what it held.",
            ),
            shrinks: counter(
                "skewgate_response_window_shrinks_total",
                "Times an upstream connection announced the small stream window because the buffered response data passed half its bound.",
            ),
            cuts: counter(
                "skewgate_response_buffer_cut_connections_total",
                "Client connections cut because the buffered response data was at its bound, a reader waited for room, and they had taken nothing of what they held for longest.",
            ),
            stalls: super::stalls::Stalls::default(),
        }
    }

    /// The families to register with the metrics.
    pub(crate) fn collectors(&self) -> Vec<Box<dyn Collector>> {
        vec![
            Box::new(self.held.clone()),
            Box::new(self.promised.clone()),
            Box::new(self.limit_gauge.clone()),
            Box::new(self.resets.clone()),
            Box::new(self.shrinks.clone()),
            Box::new(self.cuts.clone()),
        ]
    }

    /// Bytes held now.
    pub(crate) fn held(&self) -> usize {
        usize::try_from(self.held.get()).unwrap_or(0)
    }

    pub(crate) fn add(&self, n: usize) {
        self.held.add(i64::try_from(n).unwrap_or(i64::MAX));
    }

    pub(crate) fn sub(&self, n: usize) {
        self.held.sub(i64::try_from(n).unwrap_or(i64::MAX));
        self.wake_waiting();
    }

    /// What the windows open may still bring moved by `delta`.
    pub(crate) fn promise(&self, delta: i64) {
        self.promised.add(delta);
        if delta < 0 {
            self.wake_waiting();
        }
    }

    /// Streams waiting for room are woken once there is room for one small window.
    fn wake_waiting(&self) {
        if self.stalls.any_waiting() && self.has_room(SMALL_WINDOW as usize) {
            self.stalls.room();
        }
    }

    /// Whether `more` fits beside what is held and promised.
    pub(crate) fn has_room(&self, more: usize) -> bool {
        self.held()
            .saturating_add(self.promised())
            .saturating_add(more)
            <= self.limit
    }

    /// The stalled connections and the streams waiting for room (`stalls.rs`).
    pub(crate) fn stalls(&self) -> &super::stalls::Stalls {
        &self.stalls
    }

    pub(crate) fn count_cut(&self) {
        self.cuts.inc();
    }

    /// Bytes promised now.
    pub(crate) fn promised(&self) -> usize {
        usize::try_from(self.promised.get()).unwrap_or(0)
    }

    /// Whether what is held and promised, and `more`, stays below where level `now` begins.
    pub(crate) fn below_entry(&self, now: Level, more: usize) -> bool {
        let entry = match now {
            Level::Normal => return true,
            Level::Pressure => self.limit / 2,
            Level::Over => self.limit,
        };
        self.held() + self.promised() + more < entry
    }

    /// Whether what is held and promised is at the bound.
    pub(crate) fn over(&self) -> bool {
        self.held().saturating_add(self.promised()) >= self.limit
    }

    /// The level a connection at level `now` should announce: over from the limit until three
    /// quarters of it, under pressure from half until a quarter.
    pub(crate) fn level(&self, now: Level) -> Level {
        let held = self.held() + self.promised();
        let over = if now == Level::Over {
            held >= self.limit / 4 * 3
        } else {
            held >= self.limit
        };
        let pressed = if now == Level::Normal {
            held >= self.limit / 2
        } else {
            held >= self.limit / 4
        };
        match (over, pressed) {
            (true, _) => Level::Over,
            (false, true) => Level::Pressure,
            (false, false) => Level::Normal,
        }
    }

    pub(crate) fn count_reset(&self) {
        self.resets.inc();
    }

    pub(crate) fn count_shrink(&self) {
        self.shrinks.inc();
    }
}

impl Default for ResponseBudget {
    fn default() -> Self {
        ResponseBudget::new(DEFAULT_LIMIT)
    }
}

impl fmt::Debug for ResponseBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseBudget")
            .field("limit", &self.limit)
            .field("held", &self.held())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_begin_at_half_and_the_limit_and_end_below_a_quarter_and_three_quarters() {
        use Level::*;
        let b = ResponseBudget::new(1000);
        b.add(499);
        assert_eq!(b.level(Normal), Normal);
        b.add(1);
        assert_eq!(b.level(Normal), Pressure);
        b.add(500);
        assert_eq!(b.level(Normal), Over);
        assert_eq!(b.level(Pressure), Over);
        b.sub(251);
        assert_eq!(b.level(Over), Pressure, "749 held: below three quarters");
        assert_eq!(b.level(Pressure), Pressure);
        b.add(1);
        assert_eq!(b.level(Over), Over, "750 held: over goes on");
        b.sub(501);
        assert_eq!(b.level(Normal), Normal, "249 held: no new pressure");
        assert_eq!(
            b.level(Pressure),
            Normal,
            "249 held: below a quarter, pressure ends"
        );
        b.add(1);
        assert_eq!(b.level(Pressure), Pressure, "250 held: pressure goes on");
        // What open windows promise counts as what is held.
        b.promise(749);
        assert!(!b.over());
        b.promise(1);
        assert_eq!(b.level(Normal), Over);
        assert!(b.over());
    }

    #[test]
    fn zero_is_no_bound() {
        let b = ResponseBudget::new(0);
        b.add(1 << 40);
        assert!(!b.over());
        assert_eq!(b.level(Level::Normal), Level::Normal);
    }
}
