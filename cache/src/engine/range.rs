//! Operations on a range of a file: truncate (and forget, a truncate to nothing).

use super::request::{mask, Part};
use super::Cache;
use crate::{DEFAULT_CLASS, SECTOR};
use std::io;
use std::time::Instant;

impl Cache {
    /// A file shrank to `size`: lines past it go, the tail of the last one reads as zeros.
    pub fn truncate(&self, object: u64, size: u64) -> io::Result<()> {
        let lines: Vec<u64> = {
            let g = self.inner.lock();
            g.objects
                .get(&object)
                .map(|l| l.range(size / self.line..).copied().collect())
                .unwrap_or_default()
        };
        let mut wiped = false;
        for line in lines {
            let mut parts = vec![Part {
                line,
                slot: None,
                a: 0,
                b: 0,
                buf: 0,
                touched: 0,
                full: 0,
                valid: 0,
                dirty: 0,
            }];
            let g = self.acquire(object, &mut parts, DEFAULT_CLASS, false);
            drop(g);
            let Some(s) = parts[0].slot else {
                self.release(&mut self.inner.lock(), &parts);
                continue;
            };
            let start = line * self.line;
            let keep = size.saturating_sub(start);
            let mut r = Ok(());
            if keep > 0
                && !keep.is_multiple_of(SECTOR)
                && parts[0].valid & mask(keep / SECTOR, keep / SECTOR + 1) != 0
            {
                let tail = vec![0u8; (SECTOR - keep % SECTOR) as usize];
                r = self.store.write(s, keep, &tail);
            }
            let cut = !mask(0, keep.div_ceil(SECTOR));
            let mut g = self.inner.lock();
            let disk_dirty = g.slots[s as usize].disk_dirty;
            {
                let sl = &mut g.slots[s as usize];
                sl.valid &= !cut;
            }
            let dirty = g.slots[s as usize].dirty & !cut;
            g.set_dirty(s, dirty, Instant::now());
            let emptied = g.slots[s as usize].valid == 0;
            if emptied {
                g.detach(s);
                // Wiped (durably before truncate returns), so a crash cannot bring the
                // dropped data back.
                if disk_dirty && r.is_ok() {
                    r = match faultpoint::check("cache.record-wipe") {
                        Some(e) => Err(e),
                        None => self.record_locked(&mut g, s),
                    };
                    wiped = true;
                }
                g.free.push(s);
            }
            self.release(&mut g, &parts);
            drop(g);
            r?;
        }
        if wiped {
            self.store.sync()?;
        }
        Ok(())
    }

    /// A file is gone: its lines are dropped, dirty or not.
    pub fn forget(&self, object: u64) -> io::Result<()> {
        self.truncate(object, 0)
    }
}
