//! The connection's share of the response budget (`upstream/budget.rs`): what its streams hold
//! and what their windows still promise the apiserver may send, counted in the budget; the
//! initial stream window it announces, following the budget's level; and the small window given
//! on demand to a stream that its client has emptied.

use h2::frame::{Settings, WindowUpdate};

use super::state::LinkState;
use crate::http2core::Window;
use crate::upstream::budget::SMALL_WINDOW;

/// A smaller initial window announced and not yet acknowledged: the streams opened before it
/// (ids below `from_id`) are held to it once the apiserver acknowledges it, those opened after
/// were given it at once (the apiserver reads the SETTINGS before their HEADERS).
#[derive(Clone, Copy, Debug)]
pub(super) struct Shrink {
    size: u32,
    before: u32,
    from_id: u32,
}

impl LinkState {
    /// Queues skewgate's SETTINGS, to be acknowledged; `shrink` when it carries a smaller window.
    pub(super) fn push_settings(&mut self, settings: Settings, shrink: Option<Shrink>) {
        self.conn.push_settings(settings, shrink);
    }

    /// The apiserver acknowledged skewgate's oldest SETTINGS (`Conn::recv`): a smaller window it
    /// carried holds now for the streams opened before it.
    pub(super) fn on_settings_ack(&mut self, shrink: Option<Shrink>) {
        if let Some(shrink) = shrink {
            let delta = i64::from(shrink.size) - i64::from(shrink.before);
            self.move_windows(delta, shrink.from_id);
        }
    }

    /// Follows the budget: announces the stream window of its level when that changes. A smaller
    /// one goes out at once (and holds for older streams once acknowledged: the apiserver may send
    /// by the larger until then, RFC 9113, 6.9.2); a larger one waits until every SETTINGS before
    /// it was acknowledged, and until what it would add to the streams' windows leaves the budget
    /// below where the present level began (or the windows it gives back would press the budget
    /// again at once), then holds at once.
    pub(super) fn follow_pressure(&mut self) {
        let level = self.budget.level(self.level);
        if level == self.level {
            return;
        }
        let (before, size) = (self.level.window(), level.window());
        if size > before {
            if self.conn.settings_unacked().next().is_some() {
                return;
            }
            let receiving = self.streams.iter().filter(|(_, s)| s.receiving()).count();
            let growth = receiving * (size - before) as usize;
            if !self.budget.below_entry(self.level, growth) {
                return;
            }
        }
        self.level = level;
        let mut settings = Settings::default();
        settings.set_initial_window_size(Some(size));
        if size < before {
            self.budget.count_shrink();
            let from_id = self.conn.next_local();
            let shrink = Shrink {
                size,
                before,
                from_id,
            };
            self.push_settings(settings, Some(shrink));
        } else {
            self.push_settings(settings, None);
            self.move_windows(i64::from(size) - i64::from(before), u32::MAX);
        }
    }

    /// The initial window moved by `delta` for the streams opened before `from_id`: each still
    /// receiving moves by as much.
    fn move_windows(&mut self, delta: i64, from_id: u32) {
        let keys: Vec<usize> = self
            .streams
            .iter()
            .filter(|(_, s)| u32::from(s.id) < from_id && s.receiving())
            .map(|(key, _)| key)
            .collect();
        for key in keys {
            if let Some(s) = self.streams.get_mut(key) {
                // Skewgate's own window, moved by what it announced: never past the largest.
                let _ = s.recv.window.shift(delta);
            }
            self.recount(key);
        }
    }

    /// The window a stream is given back up to: smaller under pressure, none when over.
    pub(super) fn target(&self) -> u32 {
        self.level.window()
    }

    /// Stream `key`'s client took all the stream held and asks for more: a stream shut by a
    /// smaller window (the budget under pressure or over) is given the small window if the budget
    /// has room for it, so that clients that read go on at every level (`budget.rs`); else
    /// `waker` waits for room, and the connection stalled longest may be cut (`stalls.rs`).
    pub(super) fn demand(&mut self, key: usize, waker: &std::task::Waker) {
        let Some(s) = self.streams.get_mut(key) else {
            return;
        };
        if !s.recv.window.is_shut() || !s.receiving() || s.recv.held() > 0 {
            return;
        }
        if !self.budget.has_room(SMALL_WINDOW as usize) {
            let now = std::time::Instant::now();
            if self.budget.stalls().wait(waker, now) {
                self.budget.count_cut();
            }
            return;
        }
        let grant = i64::from(SMALL_WINDOW) - s.recv.window.size();
        let Some(increment) = u32::try_from(grant)
            .ok()
            .filter(|i| i64::from(*i) <= Window::MAX)
        else {
            return;
        };
        s.recv.window.grant(increment as usize);
        s.recv.released = 0;
        let id = s.id;
        self.push(WindowUpdate::new(id, increment).into());
        self.recount(key);
    }

    /// `len` bytes of response data were taken (or dropped) off a stream.
    pub(super) fn taken(&mut self, len: usize) {
        self.held -= len;
        self.budget.sub(len);
    }

    /// Counts again what stream `key` may still be sent: its window while it receives, else
    /// nothing.
    pub(super) fn recount(&mut self, key: usize) {
        let Some(s) = self.streams.get_mut(key) else {
            return;
        };
        let now = if !s.receiving() {
            0
        } else {
            u32::try_from(s.recv.window.size().clamp(0, Window::MAX)).unwrap_or(0)
        };
        let before = std::mem::replace(&mut s.role.promised, now);
        if now != before {
            self.promised = self.promised + now as usize - before as usize;
            self.budget.promise(i64::from(now) - i64::from(before));
        }
    }

    /// `recount` for every stream.
    pub(super) fn recount_all(&mut self) {
        let keys = self.streams.keys();
        for key in keys {
            self.recount(key);
        }
    }

    /// What a stream no longer here promised.
    pub(super) fn unpromise(&mut self, promised: usize) {
        self.promised -= promised;
        self.budget
            .promise(-i64::try_from(promised).unwrap_or(i64::MAX));
    }
}
