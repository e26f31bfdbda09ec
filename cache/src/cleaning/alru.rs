//! Approximately-LRU cleaning, as OCF's alru: a pass writes back up to `flush_max_buffers`
//! dirty lines whose last write is older than `staleness`, oldest first; a pass that cleaned
//! something runs the next at once, one that found nothing sleeps `wake_up`. While a request
//! came within `activity_threshold` nothing is cleaned (0: clean under load). Above
//! `dirty_ratio_threshold` percent dirty lines every dirty line is due, age regardless, until
//! the share is down to the threshold minus `dirty_ratio_inertia`.

use super::{dirty_lines, Cleaning, Ctx};
use crate::metadata::Shard;
use crate::mode::Cleaner;
use std::time::{Duration, Instant};

pub(crate) struct Alru {
    cfg: Cleaner,
    /// The dirty ratio went over the threshold and is not yet down to threshold - inertia.
    triggered: bool,
}

impl Alru {
    pub fn new(cfg: Cleaner) -> Alru {
        Alru {
            cfg,
            triggered: false,
        }
    }

    fn over_dirty_ratio(&mut self, dirty: usize, cx: &Ctx) -> bool {
        let pct = self.cfg.dirty_ratio_threshold as usize;
        if pct >= 100 || dirty == 0 {
            self.triggered = false;
            return false;
        }
        let high = cx.lines * pct / 100;
        self.triggered = if self.triggered {
            let inertia = (self.cfg.dirty_ratio_inertia / cx.line_size) as usize;
            dirty > high.saturating_sub(inertia)
        } else {
            dirty >= high
        };
        self.triggered
    }
}

impl Cleaning for Alru {
    fn pick(&mut self, shards: &[&Shard], cx: &Ctx) -> Vec<(u64, u64)> {
        let over = self.over_dirty_ratio(cx.dirty, cx);
        if !over {
            let busy = cx
                .last_io
                .is_some_and(|t| cx.now.saturating_duration_since(t) < self.cfg.activity_threshold);
            if busy {
                return Vec::new();
            }
        }
        let max = self.cfg.flush_max_buffers;
        let mut due: Vec<(Instant, (u64, u64))> = Vec::new();
        for (g, class) in shards
            .iter()
            .flat_map(|g| dirty_lines(g).map(move |c| (g, c)))
        {
            let mut taken = 0;
            for s in class {
                let sl = &g.slots[s as usize];
                let (Some(key), Some(written)) = (sl.key(), g.last_write(s)) else {
                    continue;
                };
                if sl.busy {
                    continue;
                }
                // The list is in order of last write: the first line not stale ends it.
                if !over && cx.now.saturating_duration_since(written) < self.cfg.staleness {
                    break;
                }
                due.push((written, key));
                taken += 1;
                if taken == max {
                    break;
                }
            }
        }
        due.sort_unstable_by_key(|d| d.0);
        due.into_iter().take(max).map(|d| d.1).collect()
    }

    fn wait(&self, cleaned: usize) -> Option<Duration> {
        Some(if cleaned > 0 {
            Duration::ZERO
        } else {
            self.cfg.wake_up
        })
    }
}
