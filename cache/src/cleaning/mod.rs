//! Cleaning: which dirty lines the background cleaner writes back, and when it wakes up
//! (OCF's cleaning policies), one policy per file behind `Cleaning`. Writing the chosen lines
//! back is the engine's (`engine::clean`).

mod alru;

pub(crate) use alru::Alru;

use crate::metadata::Inner;
use crate::mode::Policy;
use std::time::{Duration, Instant};

pub(crate) trait Cleaning: Send {
    /// The lines to write back in this pass, at `now`; `lines` is the size of the cache.
    fn pick(&mut self, g: &Inner, lines: usize, now: Instant) -> Vec<(u64, u64)>;
    /// How long the cleaner sleeps before its next pass.
    fn wait(&self) -> Duration;
}

/// The policy the settings ask for.
pub(crate) fn from_policy(p: &Policy) -> Box<dyn Cleaning> {
    Box::new(Alru {
        staleness: p.staleness,
        wake_up: p.wake_up,
        batch: p.batch,
        dirty_high: p.dirty_high,
    })
}
