//! What is left when dirty lines cannot be written back at unmount: their data, read out of
//! the store, so the owner can keep it somewhere durable (a RAM store dies with the daemon).

use super::{runs, Cache};
use crate::SECTOR;
use std::io;

/// One run of dirty sectors: (object, byte offset in the object, data).
pub type DirtyRun = (u64, u64, Vec<u8>);

impl Cache {
    /// Every dirty sector run still in the cache, read from the store.
    pub fn dirty_runs(&self) -> io::Result<Vec<DirtyRun>> {
        let mut lines: Vec<(u64, u64, u32, u64)> = Vec::new();
        self.each_shard(|g| {
            lines.extend(g.cached().filter_map(|((object, line), s)| {
                let dirty = g.slots[s as usize].dirty;
                (dirty != 0).then_some((object, line, s, dirty))
            }))
        });
        let mut out = Vec::new();
        for (object, line, slot, dirty) in lines {
            for (s0, s1) in runs(dirty) {
                let mut data = vec![0u8; ((s1 - s0) * SECTOR) as usize];
                self.store.read(slot, s0 * SECTOR, &mut data)?;
                out.push((object, line * self.line + s0 * SECTOR, data));
            }
        }
        Ok(out)
    }
}
