//! The time decisions are made at: the system clock in production, a hand-moved one in tests.

use std::fmt::Debug;
use std::time::SystemTime;

/// A source of the current time.
pub trait Clock: Send + Sync + Debug + 'static {
    /// Now.
    fn now(&self) -> SystemTime;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

#[cfg(any(test, feature = "test-util"))]
pub use manual::{ManualClock, OffsetClock};

#[cfg(any(test, feature = "test-util"))]
mod manual {
    use std::sync::Mutex;
    use std::time::{Duration, SystemTime};

    use super::Clock;

    /// A clock that moves only when told to, for tests of schedules and pin moves.
    #[derive(Debug)]
    pub struct ManualClock(Mutex<SystemTime>);

    impl ManualClock {
        /// A clock standing at `start`.
        pub fn new(start: SystemTime) -> ManualClock {
            ManualClock(Mutex::new(start))
        }

        /// Moves the clock forward.
        pub fn advance(&self, by: Duration) {
            let mut t = self.0.lock().unwrap_or_else(|e| e.into_inner());
            *t += by;
        }

        /// Sets the clock.
        pub fn set(&self, to: SystemTime) {
            *self.0.lock().unwrap_or_else(|e| e.into_inner()) = to;
        }
    }

    impl Clock for ManualClock {
        fn now(&self) -> SystemTime {
            *self.0.lock().unwrap_or_else(|e| e.into_inner())
        }
    }

    /// The system clock set ahead by a fixed amount: a replica whose clock is off.
    #[derive(Debug)]
    pub struct OffsetClock(pub Duration);

    impl Clock for OffsetClock {
        fn now(&self) -> SystemTime {
            SystemTime::now() + self.0
        }
    }
}
