//! A flow-control window (RFC 9113, 6.9): how much more a peer may send on a stream or
//! connection, or how much more skewgate may. It may go below 0 when SETTINGS_INITIAL_WINDOW_SIZE
//! shrinks it (6.9.2), never above 2^31-1 (6.9.1).

use h2::Reason;

/// A flow-control window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Window(i64);

impl Window {
    /// The largest window HTTP/2 allows (RFC 9113, 6.9.1).
    pub(crate) const MAX: i64 = (1 << 31) - 1;

    /// A window of `size`, as SETTINGS_INITIAL_WINDOW_SIZE (or the default 65,535) gives it.
    pub(crate) const fn new(size: u32) -> Window {
        Window(size as i64)
    }

    /// What the window allows now; below 0 after a shrinking SETTINGS.
    pub(crate) fn size(self) -> i64 {
        self.0
    }

    /// Whether nothing may be sent within it now.
    pub(crate) fn is_shut(self) -> bool {
        self.0 <= 0
    }

    /// A WINDOW_UPDATE's `increment`: 0 is a PROTOCOL_ERROR (6.9), a window taken past 2^31-1 a
    /// FLOW_CONTROL_ERROR (6.9.1); the caller makes either the stream's or the connection's error.
    pub(crate) fn widen(&mut self, increment: u32) -> Result<(), Reason> {
        if increment == 0 {
            return Err(Reason::PROTOCOL_ERROR);
        }
        self.0 += i64::from(increment);
        if self.0 > Window::MAX {
            return Err(Reason::FLOW_CONTROL_ERROR);
        }
        Ok(())
    }

    /// SETTINGS_INITIAL_WINDOW_SIZE moved by `delta`: every stream's window moves as much (6.9.2),
    /// and one taken past 2^31-1 is the connection's FLOW_CONTROL_ERROR.
    pub(crate) fn shift(&mut self, delta: i64) -> Result<(), Reason> {
        self.0 += delta;
        if self.0 > Window::MAX {
            return Err(Reason::FLOW_CONTROL_ERROR);
        }
        Ok(())
    }

    /// `n` bytes received: past what was granted, a FLOW_CONTROL_ERROR (6.9.1).
    pub(crate) fn receive(&mut self, n: usize) -> Result<(), Reason> {
        self.0 -= i64::try_from(n).unwrap_or(i64::MAX);
        if self.0 < 0 {
            return Err(Reason::FLOW_CONTROL_ERROR);
        }
        Ok(())
    }

    /// `n` bytes sent within the window.
    pub(crate) fn spend(&mut self, n: usize) {
        self.0 -= i64::try_from(n).unwrap_or(i64::MAX);
    }

    /// `n` bytes granted by skewgate (its own WINDOW_UPDATE, or received data given back).
    pub(crate) fn grant(&mut self, n: usize) {
        self.0 += i64::try_from(n).unwrap_or(i64::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updates_are_checked_as_rfc_9113_asks() {
        let mut w = Window::new(65_535);
        assert_eq!(w.widen(0), Err(Reason::PROTOCOL_ERROR));
        assert_eq!(w.widen((Window::MAX - 65_535) as u32), Ok(()));
        assert_eq!(w.size(), Window::MAX);
        assert_eq!(w.widen(1), Err(Reason::FLOW_CONTROL_ERROR));
    }

    #[test]
    fn a_shrinking_setting_may_take_a_window_below_zero_and_a_growing_one_not_past_the_largest() {
        let mut w = Window::new(65_535);
        w.spend(60_000);
        assert_eq!(w.shift(-65_535), Ok(()));
        assert!(w.is_shut());
        assert_eq!(w.size(), -60_000);
        let mut full = Window::new(u32::MAX >> 1);
        assert_eq!(full.shift(1), Err(Reason::FLOW_CONTROL_ERROR));
    }

    #[test]
    fn data_past_the_window_is_a_flow_control_error() {
        let mut w = Window::new(10);
        assert_eq!(w.receive(10), Ok(()));
        assert_eq!(w.receive(1), Err(Reason::FLOW_CONTROL_ERROR));
        w.grant(11);
        assert_eq!(w.size(), 10);
    }
}
