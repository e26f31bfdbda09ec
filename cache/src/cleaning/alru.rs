//! Approximately-LRU cleaning: dirty lines older than the staleness time, oldest first, a batch
//! per wake-up; above the dirty-ratio threshold, any dirty line, age regardless.

use super::Cleaning;
use crate::metadata::Inner;
use std::time::{Duration, Instant};

pub(crate) struct Alru {
    /// A dirty line older than this is written back.
    pub staleness: Duration,
    pub wake_up: Duration,
    /// Lines per pass.
    pub batch: usize,
    /// Above this share of dirty lines, clean regardless of staleness.
    pub dirty_high: f64,
}

impl Cleaning for Alru {
    fn pick(&mut self, g: &Inner, lines: usize, now: Instant) -> Vec<(u64, u64)> {
        let urgent = g.dirty_lines as f64 > self.dirty_high * lines as f64;
        let mut dirty: Vec<(Instant, (u64, u64))> = g
            .index
            .iter()
            .filter_map(|(&k, &s)| {
                let sl = &g.slots[s as usize];
                let since = sl.dirty_since?;
                (sl.dirty != 0
                    && !sl.busy
                    && (urgent || now.saturating_duration_since(since) >= self.staleness))
                    .then_some((since, k))
            })
            .collect();
        dirty.sort_unstable_by_key(|d| d.0);
        dirty.into_iter().take(self.batch).map(|d| d.1).collect()
    }

    fn wait(&self) -> Duration {
        self.wake_up
    }
}
