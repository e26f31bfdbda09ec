//! Aggressive cleaning, as OCF's acp: the core is cut in chunks of 100 MiB (here: of each
//! object); a pass writes back up to `flush_max_buffers` dirty lines of one chunk in address
//! order, the chunk with the most dirty lines, staying on it until it is clean; passes follow
//! each other every `wake_up` (10 ms by default), and a second when nothing is dirty.

use super::{Cleaning, Ctx};
use crate::metadata::Shard;
use crate::mode::Cleaner;
use rustc_hash::FxHashMap as HashMap;
use std::time::Duration;

/// Bytes of an object per chunk.
pub(crate) const CHUNK: u64 = 100 << 20;
/// The wait when nothing is dirty (OCF's ACP_BACKOFF_TIME_MS).
const BACKOFF: Duration = Duration::from_secs(1);

pub(crate) struct Acp {
    cfg: Cleaner,
    /// The chunk being cleaned: (object, chunk number).
    current: Option<(u64, u64)>,
}

impl Acp {
    pub fn new(cfg: Cleaner) -> Acp {
        Acp { cfg, current: None }
    }
}

impl Cleaning for Acp {
    fn pick(&mut self, shards: &[&Shard], _cx: &Ctx) -> Vec<(u64, u64)> {
        let dirty_in = |c: &(u64, u64)| shards.iter().any(|g| g.dirty_chunks.contains_key(c));
        let chunk = match self.current {
            Some(c) if dirty_in(&c) => c,
            _ => {
                let mut chunks: HashMap<(u64, u64), u32> = HashMap::default();
                for g in shards {
                    for (&k, &n) in &g.dirty_chunks {
                        *chunks.entry(k).or_default() += n;
                    }
                }
                // The most dirty lines; on a tie the lowest address, for a stable order.
                let best = chunks
                    .iter()
                    .max_by_key(|(&k, &n)| (n, std::cmp::Reverse(k)))
                    .map(|(&k, _)| k);
                match best {
                    Some(c) => c,
                    None => {
                        self.current = None;
                        return Vec::new();
                    }
                }
            }
        };
        self.current = Some(chunk);
        let (object, n) = chunk;
        let mut lines: Vec<u64> = Vec::new();
        for g in shards {
            let per = g.chunk_lines.max(1);
            let held = g.lines_of(object, n * per, (n + 1) * per - 1);
            lines.extend(held.into_iter().filter(|&l| {
                g.lookup((object, l)).is_some_and(|s| {
                    let sl = &g.slots[s as usize];
                    sl.dirty != 0 && !sl.busy
                })
            }));
        }
        // Address order over the shards.
        lines.sort_unstable();
        lines
            .into_iter()
            .take(self.cfg.flush_max_buffers)
            .map(|l| (object, l))
            .collect()
    }

    fn wait(&self, cleaned: usize) -> Option<Duration> {
        Some(if cleaned > 0 || self.current.is_some() {
            self.cfg.wake_up
        } else {
            BACKOFF
        })
    }
}
