//! Cleaning: which dirty lines the background cleaner writes back, and when it runs again
//! (OCF's cleaning policies: `alru`, `acp`, `nop`), one policy per file behind `Cleaning`.
//! Writing the chosen lines back, and the bandwidth limit (`Limiter`), are the engine's
//! (`engine::clean`). Every decision is taken at a `now` the engine reads from its `Clock`.

mod acp;
mod alru;
mod nop;

pub(crate) use acp::{Acp, CHUNK as ACP_CHUNK};
pub(crate) use alru::Alru;
pub(crate) use nop::Nop;

use crate::metadata::Shard;
use crate::mode::{Cleaner, CleaningPolicy};
use std::time::{Duration, Instant};

/// What a pass knows besides the metadata.
pub(crate) struct Ctx {
    /// Lines of the cache, and their size.
    pub lines: usize,
    pub line_size: u64,
    /// Dirty lines in the whole cache.
    pub dirty: usize,
    pub now: Instant,
    /// When the last read or write came.
    pub last_io: Option<Instant>,
}

pub(crate) trait Cleaning: Send {
    /// The lines to write back in this pass (none: nothing to do now), seeing every shard.
    fn pick(&mut self, shards: &[&Shard], cx: &Ctx) -> Vec<(u64, u64)>;
    /// How long the cleaner waits after a pass that wrote back `cleaned` lines; `None`: until
    /// it is woken (a setting changed, the cache stops).
    fn wait(&self, cleaned: usize) -> Option<Duration>;
}

/// The policy the settings ask for.
pub(crate) fn from_config(c: &Cleaner) -> Box<dyn Cleaning> {
    match c.policy {
        CleaningPolicy::Alru => Box::new(Alru::new(c.clone())),
        CleaningPolicy::Acp => Box::new(Acp::new(c.clone())),
        CleaningPolicy::Nop => Box::new(Nop),
    }
}

/// The write-back bandwidth limit: each pass books the time its bytes take at `mbps`
/// (10^6 bytes per second); the next pass waits until the booked time is over.
#[derive(Default)]
pub(crate) struct Limiter {
    free_at: Option<Instant>,
}

impl Limiter {
    /// Books `bytes` written back at `now`; returns how long the next pass must wait.
    pub fn book(&mut self, now: Instant, bytes: u64, mbps: u64) -> Duration {
        if mbps == 0 {
            self.free_at = None;
            return Duration::ZERO;
        }
        let start = self.free_at.map_or(now, |t| t.max(now));
        let end = start + Duration::from_secs_f64(bytes as f64 / (mbps as f64 * 1e6));
        self.free_at = Some(end);
        end.saturating_duration_since(now)
    }
}

/// The dirty lines of every class of a shard, oldest write first within a class.
pub(crate) fn dirty_lines<'a>(
    g: &'a Shard,
) -> impl Iterator<Item = impl Iterator<Item = u32> + 'a> {
    g.classes
        .iter()
        .flatten()
        .map(move |c| g.links.oldest_first(&c.dirty))
}

#[cfg(test)]
mod tests;
