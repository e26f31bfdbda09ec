//! Durability of a file store: the records that find each line after a crash, written in the
//! order their states were made; fsync of a file; and recovery after an unclean stop.

use super::request::mask;
use super::Cache;
use crate::metadata::Shard;
use crate::SECTOR;
use std::io;

impl Cache {
    /// After a crash: drops lines of objects that no longer exist, clips the rest to the
    /// object's size, and writes every dirty line back. `size_of` answers for each object.
    pub fn recover(&self, size_of: &dyn Fn(u64) -> Option<u64>) -> io::Result<usize> {
        let now = self.now();
        let mut r = Ok(());
        self.each_shard(|g| {
            let found: Vec<(u64, u64, u32)> = g.cached().map(|((o, l), s)| (o, l, s)).collect();
            for (o, l, s) in found {
                if r.is_err() {
                    return;
                }
                r = self.recover_line(g, l, s, size_of(o).unwrap_or(0), now);
            }
        });
        r?;
        self.store.sync()?;
        // Every dirty line is tried; one that cannot be written back (its device failed)
        // stays dirty in the cache, durable, for the cleaner to retry: the volume mounts.
        let mut dirty: Vec<(u64, u64)> = Vec::new();
        self.each_shard(|g| {
            dirty.extend(
                g.cached()
                    .filter(|&(_, s)| g.slots[s as usize].dirty != 0)
                    .map(|(k, _)| k),
            )
        });
        let mut written = 0;
        for chunk in dirty.chunks(256) {
            match self.clean_keys(chunk) {
                Ok(n) => written += n,
                Err(e) => log::error!(
                    "recovery: dirty lines that cannot be written back stay in the cache: {e}"
                ),
            }
        }
        Ok(written)
    }

    /// After a crash, one line of an object (now `size` bytes): dropped past the end, clipped
    /// at it.
    fn recover_line(
        &self,
        g: &mut Shard,
        l: u64,
        s: u32,
        size: u64,
        now: std::time::Instant,
    ) -> io::Result<()> {
        let keep_to = size.div_ceil(SECTOR) * SECTOR;
        let start = l * self.line;
        if keep_to <= start {
            g.detach(s);
            if g.slots[s as usize].disk_dirty {
                self.record_locked(g, s)?;
            }
            g.give_back(s);
            return Ok(());
        }
        if keep_to < start + self.line {
            let cut = !mask(0, (keep_to - start) / SECTOR);
            let cut_dirty = g.slots[s as usize].dirty & cut != 0;
            let dirty = g.slots[s as usize].dirty & !cut;
            g.slots[s as usize].valid &= !cut;
            // Through set_dirty: a line left clean moves to its clean list.
            g.set_dirty(s, dirty, now);
            if g.slots[s as usize].valid == 0 {
                g.detach(s);
                if g.slots[s as usize].disk_dirty {
                    self.record_locked(g, s)?;
                }
                g.give_back(s);
                return Ok(());
            }
            // The record follows (synced by `recover`): one that still said the clipped
            // sectors are dirty would bring them back at the next crash once the file grows.
            if cut_dirty && g.slots[s as usize].disk_dirty {
                self.record_locked(g, s)?;
            }
        }
        // The sector holding the end of file: what lies past the end reads as zeros (it was
        // written before a shrink that the crash cut short).
        let tail = size % SECTOR;
        let eof_sector = (size / SECTOR).checked_sub(start / SECTOR);
        if let (true, Some(k)) = (tail != 0, eof_sector) {
            if k < self.line / SECTOR && g.slots[s as usize].valid & (1 << k) != 0 {
                let zeros = vec![0u8; (SECTOR - tail) as usize];
                self.store.write(s, size - start, &zeros)?;
            }
        }
        Ok(())
    }

    /// Writes the records of `slots` and syncs the store.
    pub(super) fn persist(&self, slots: &[u32]) -> io::Result<()> {
        let mut by_shard: Vec<Vec<u32>> = vec![Vec::new(); self.shards.len()];
        for &s in slots {
            by_shard[self.shard_of_slot(s)].push(s);
        }
        for (k, slots) in by_shard.iter().enumerate().filter(|(_, v)| !v.is_empty()) {
            loop {
                let mut g = self.shard(k);
                let dirty = slots.iter().any(|&s| g.slots[s as usize].dirty != 0);
                if dirty && !*self.dirty_declared.lock() {
                    // Declared with no lock held (it makes the owner's store durable).
                    drop(g);
                    self.declare_dirty()?;
                    continue;
                }
                faultpoint::fault_point!("cache.records-before-write");
                for &s in slots {
                    self.record_locked(&mut g, s)?;
                }
                break;
            }
        }
        faultpoint::fault_point!("cache.records-before-sync");
        self.store.sync()
    }

    /// Writes slot `s`'s record as memory has it now. Every record is written this way, under
    /// the lock: records reach the file in the order their states were made, so an older
    /// state (another file's line, since evicted and reused) never lands on a newer one.
    pub(super) fn record_locked(&self, g: &mut Shard, s: u32) -> io::Result<()> {
        if !self.store.persistent() {
            return Ok(());
        }
        let r = g.record(s);
        self.store.write_record(s, &r)?;
        g.slots[s as usize].disk_dirty = r.dirty != 0;
        Ok(())
    }

    /// Makes every record written so far durable (a cache file's part of a volume commit).
    pub fn sync_records(&self) -> io::Result<()> {
        self.store.sync()
    }

    /// Tells the owner, once, that dirty lines are about to become durable in the store.
    pub(super) fn declare_dirty(&self) -> io::Result<()> {
        let mut declared = self.dirty_declared.lock();
        if !*declared {
            faultpoint::fault_point!("cache.declare-dirty");
            if let Some(hook) = &self.on_first_dirty {
                hook()?;
            }
            *declared = true;
        }
        Ok(())
    }

    /// fsync of a file: RAM store, its dirty lines go to the core; file store, they are made
    /// durable on the cache device with their records. EIO, once, if a write-back of its
    /// lines since the last one was written to the core but not made durable there.
    pub fn sync_object(&self, object: u64) -> io::Result<()> {
        let flushed = self.sync_lines(object);
        let synced = flushed.and_then(|()| self.backend.sync(object));
        // A failed write-back sync is told once: here, whether this call met it or an
        // earlier write-back did.
        if self.shared.lock().unsynced.remove(&object) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        synced
    }

    /// The object's dirty lines made durable: on the cache device with their records (file
    /// store), or written back to the core (RAM store).
    fn sync_lines(&self, object: u64) -> io::Result<()> {
        if self.store.persistent() {
            let mut slots: Vec<u32> = Vec::new();
            self.each_shard(|g| {
                let lines = g.lines_of(object, 0, u64::MAX);
                slots.extend(lines.iter().filter_map(|&l| g.lookup((object, l))));
            });
            self.persist(&slots)?;
        } else {
            self.flush_where(&|o, _| o == object)?;
        }
        Ok(())
    }
}
