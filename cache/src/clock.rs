//! Time as the cache sees it: the cleaner's decisions (staleness, activity, wake-ups, the
//! bandwidth limit) are taken on a `Clock`, so tests move time instead of sleeping.

use parking_lot::Mutex;
use std::time::{Duration, Instant};

pub trait Clock: Send + Sync {
    fn now(&self) -> Instant;
}

/// The real monotonic clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that moves only when told to (tests).
pub struct ManualClock {
    at: Mutex<Instant>,
}

impl ManualClock {
    pub fn new() -> ManualClock {
        ManualClock {
            at: Mutex::new(Instant::now()),
        }
    }

    pub fn advance(&self, by: Duration) {
        *self.at.lock() += by;
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        *self.at.lock()
    }
}
