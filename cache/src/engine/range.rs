//! Operations on a range of a file: truncate (and forget, a truncate to nothing), and discard
//! (a hole punched or zeroed: only that range leaves the cache).

use super::request::{mask, runs, Part};
use super::Cache;
use crate::{DEFAULT_CLASS, SECTOR};
use std::io;

impl Cache {
    /// Bytes of `object` that only this cache holds (dirty sectors): a file's st_blocks
    /// counts them, as ext4 counts blocks of delayed allocation.
    pub fn dirty_bytes(&self, object: u64) -> u64 {
        let mut bytes = 0;
        self.each_shard(|g| bytes += g.dirty_bytes(object));
        bytes
    }

    /// The lines of `object` the cache holds from `from` to `to` (inclusive), ascending.
    pub(super) fn lines_of(&self, object: u64, from: u64, to: u64) -> Vec<u64> {
        let mut lines = Vec::new();
        self.each_shard(|g| lines.extend(g.lines_of(object, from, to)));
        lines.sort_unstable();
        lines
    }

    /// A file shrank to `size`: lines past it go, the tail of the last one reads as zeros.
    pub fn truncate(&self, object: u64, size: u64) -> io::Result<()> {
        let lines = self.lines_of(object, size / self.line, u64::MAX);
        let mut wiped = false;
        for line in lines {
            let mut parts = vec![Part::holding(line, self.shard_index(object, line))];
            self.acquire(object, &mut parts, DEFAULT_CLASS, false);
            let Some(s) = parts[0].slot else {
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
            let now = self.now();
            self.settle(&parts, None, |g, _| {
                let disk_dirty = g.slots[s as usize].disk_dirty;
                let cut_dirty = g.slots[s as usize].dirty & cut != 0;
                g.slots[s as usize].valid &= !cut;
                let dirty = g.slots[s as usize].dirty & !cut;
                g.set_dirty(s, dirty, now);
                if g.slots[s as usize].valid != 0 {
                    // A line kept in part: a record that says the cut sectors are dirty is
                    // rewritten too (durably before truncate returns), or a crash after the
                    // file grows back over them would write them into the hole.
                    if disk_dirty && cut_dirty && r.is_ok() {
                        r = match faultpoint::check("cache.record-wipe") {
                            Some(e) => Err(e),
                            None => self.record_locked(g, s),
                        };
                        wiped = true;
                    }
                } else {
                    g.detach(s);
                    // Wiped (durably before truncate returns), so a crash cannot bring the
                    // dropped data back.
                    if disk_dirty && r.is_ok() {
                        r = match faultpoint::check("cache.record-wipe") {
                            Some(e) => Err(e),
                            None => self.record_locked(g, s),
                        };
                        wiped = true;
                    }
                    g.give_back(s);
                }
            });
            r?;
        }
        if wiped {
            self.store.sync()?;
        }
        Ok(())
    }

    /// A file is gone: its lines are dropped, dirty or not.
    pub fn forget(&self, object: u64) -> io::Result<()> {
        // Nobody is left to tell of a write-back of it that failed.
        self.shared.lock().unsynced.remove(&object);
        self.truncate(object, 0)
    }

    /// A hole punched (or a range zeroed) in `object`: `punch` does it on the core while the
    /// cached lines of the range are held, so neither the cleaner nor anyone else writes
    /// their old data there meanwhile. Then the range leaves the cache: sectors wholly inside
    /// are dropped, dirty or not (never written back), lines wholly inside are freed, and the
    /// cached bytes of sectors it covers in part read as zeros. A file store's records say so
    /// durably before this returns, so recovery never writes dropped data over the hole.
    /// If `punch` fails, the clean sectors of the range are dropped (the core may hold either
    /// data there now) and the dirty ones kept: they are the file's newest data.
    pub fn discard<E: From<io::Error>>(
        &self,
        object: u64,
        offset: u64,
        len: u64,
        punch: impl FnOnce() -> Result<(), E>,
    ) -> Result<(), E> {
        let end = offset.saturating_add(len);
        if len == 0 {
            return punch();
        }
        let (first, last) = (offset / self.line, (end - 1) / self.line);
        let mut parts: Vec<Part> = self
            .lines_of(object, first, last)
            .into_iter()
            .map(|line| {
                let start = line * self.line;
                let a = offset.max(start) - start;
                let b = end.min(start + self.line) - start;
                Part {
                    line,
                    shard: self.shard_index(object, line),
                    slot: None,
                    class: DEFAULT_CLASS,
                    a,
                    b,
                    buf: 0,
                    touched: mask(a / SECTOR, b.div_ceil(SECTOR)),
                    full: mask(a.div_ceil(SECTOR), b / SECTOR),
                    valid: 0,
                    dirty: 0,
                }
            })
            .collect();
        self.acquire(object, &mut parts, DEFAULT_CLASS, false);
        let punched = punch();
        let mut r: io::Result<()> = Ok(());
        let mut sync = false;
        if punched.is_ok() {
            // Sectors covered in part keep their other bytes: the punched ones become zeros.
            for p in parts.iter().filter(|p| p.slot.is_some()) {
                let s = p.slot.unwrap();
                for (s0, s1) in runs(p.touched & !p.full & p.valid) {
                    for k in s0..s1 {
                        let from = p.a.max(k * SECTOR);
                        let to = p.b.min((k + 1) * SECTOR);
                        if r.is_ok() {
                            r = self.store.write(s, from, &vec![0u8; (to - from) as usize]);
                        }
                    }
                    sync |= self.store.persistent() && p.dirty & mask(s0, s1) != 0;
                }
            }
        }
        let now = self.now();
        self.settle(&parts, None, |g, p| {
            let Some(s) = p.slot else { return };
            let gone = match (&punched, &r) {
                (Ok(()), Ok(())) => p.full,
                (Ok(()), Err(_)) => p.full | (p.touched & !p.dirty),
                (Err(_), _) => p.touched & !p.dirty,
            };
            let disk_dirty = g.slots[s as usize].disk_dirty;
            g.slots[s as usize].valid = p.valid & !gone;
            g.set_dirty(s, p.dirty & !gone, now);
            // A record that says dirty for what is gone is rewritten (emptied with its line).
            let stale_record = disk_dirty && (p.dirty & gone != 0 || p.valid & !gone == 0);
            if g.slots[s as usize].valid == 0 {
                g.detach(s);
                g.give_back(s);
            }
            if stale_record && r.is_ok() {
                r = match faultpoint::check("cache.record-wipe") {
                    Some(e) => Err(e),
                    None => self.record_locked(g, s),
                };
                sync = true;
            }
        });
        if sync && r.is_ok() {
            r = self.store.sync();
        }
        punched?;
        r.map_err(E::from)
    }
}
