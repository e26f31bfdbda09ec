//! What every request shares: its plan (one part per line), taking its lines (busy marks,
//! allocation through promotion and eviction), the mode it runs in (sequential cutoff), and
//! the I/O to the core and of one line's dirty sectors.

use super::Cache;
use crate::metadata::Shard;
use crate::mode::{Mode, SeqCutoff};
use crate::stats::Counters;
use crate::store::{Record, EMPTY};
use crate::{eviction, promotion, seq_cutoff, ClassId, SECTOR};
use std::io;

/// One line's share of a request.
pub(crate) struct Part {
    pub(super) line: u64,
    /// The metadata shard of the line.
    pub(super) shard: usize,
    pub(super) slot: Option<u32>,
    /// The class of its slot when taken.
    pub(super) class: ClassId,
    /// Byte range inside the line.
    pub(super) a: u64,
    pub(super) b: u64,
    /// Where in the caller's buffer it starts.
    pub(super) buf: usize,
    /// Sector masks: touched, and fully covered.
    pub(super) touched: u64,
    pub(super) full: u64,
    /// Valid and dirty bits when planned (stable while the slot is busy).
    pub(super) valid: u64,
    pub(super) dirty: u64,
}

impl Part {
    /// A line taken whole, touching nothing: what cleaning and truncating hold a line by.
    pub(super) fn holding(line: u64, shard: usize) -> Part {
        Part {
            line,
            shard,
            slot: None,
            class: crate::DEFAULT_CLASS,
            a: 0,
            b: 0,
            buf: 0,
            touched: 0,
            full: 0,
            valid: 0,
            dirty: 0,
        }
    }
}

/// What the cache held of a request before it ran, by sectors: what its counters say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Found {
    Hit,
    PartialMiss,
    FullMiss,
}

impl Found {
    /// From the parts as `acquire` planned them (valid bits as the cache had them).
    pub(super) fn of(parts: &[Part]) -> Found {
        let need: u32 = parts.iter().map(|p| p.touched.count_ones()).sum();
        let had: u32 = parts
            .iter()
            .map(|p| (p.touched & p.valid).count_ones())
            .sum();
        if had == need {
            Found::Hit
        } else if had > 0 {
            Found::PartialMiss
        } else {
            Found::FullMiss
        }
    }
}

/// The request's outcome in the counters: pass-through, or what it found.
pub(super) fn count(c: &mut Counters, write: bool, pass_through: bool, found: Found) {
    let slot = match (write, pass_through, found) {
        (false, true, _) => &mut c.pass_through_reads,
        (true, true, _) => &mut c.pass_through_writes,
        (false, false, Found::Hit) => &mut c.read_hits,
        (false, false, Found::PartialMiss) => &mut c.read_partial_misses,
        (false, false, Found::FullMiss) => &mut c.read_full_misses,
        (true, false, Found::Hit) => &mut c.write_hits,
        (true, false, Found::PartialMiss) => &mut c.write_partial_misses,
        (true, false, Found::FullMiss) => &mut c.write_full_misses,
    };
    *slot += 1;
}

pub(crate) fn mask(from: u64, to: u64) -> u64 {
    if to <= from {
        return 0;
    }
    let n = to - from;
    let bits = if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
    bits << from
}

/// Runs of set bits: (first sector, end sector).
pub(crate) fn runs(m: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < 64 {
        if m & (1 << i) != 0 {
            let start = i;
            while i < 64 && m & (1 << i) != 0 {
                i += 1;
            }
            out.push((start, i));
        } else {
            i += 1;
        }
    }
    out
}

impl Cache {
    pub(super) fn plan(&self, object: u64, offset: u64, len: usize) -> Vec<Part> {
        let mut parts = Vec::new();
        let end = offset + len as u64;
        let mut pos = offset;
        while pos < end {
            let line = pos / self.line;
            let a = pos % self.line;
            let b = (end - line * self.line).min(self.line);
            parts.push(Part {
                line,
                shard: self.shard_index(object, line),
                slot: None,
                class: crate::DEFAULT_CLASS,
                a,
                b,
                buf: (pos - offset) as usize,
                touched: mask(a / SECTOR, b.div_ceil(SECTOR)),
                full: mask(a.div_ceil(SECTOR), b / SECTOR),
                valid: 0,
                dirty: 0,
            });
            pos = line * self.line + b;
        }
        parts
    }

    /// The shards a request's parts are in, ascending: the order every request takes them.
    fn shard_order(parts: &[Part]) -> Vec<usize> {
        let mut order: Vec<usize> = parts.iter().map(|p| p.shard).collect();
        order.sort_unstable();
        order.dedup();
        order
    }

    /// Marks the request's existing lines busy (waiting while another operation holds one),
    /// and allocates lines where `alloc` says so. Shards are taken in ascending order and all
    /// of a request's lines in one shard at once, so two requests never wait on each other in
    /// a cycle.
    pub(super) fn acquire(&self, object: u64, parts: &mut [Part], class: ClassId, alloc: bool) {
        let alloc = alloc && self.promotes(object, parts);
        for k in Self::shard_order(parts) {
            let lock = &self.shards[k];
            let mut g = lock.meta.lock();
            loop {
                let busy = parts.iter().filter(|p| p.shard == k).any(|p| {
                    g.lookup((object, p.line))
                        .is_some_and(|s| g.slots[s as usize].busy)
                });
                if !busy {
                    break;
                }
                lock.released.wait(&mut g);
            }
            for p in parts.iter_mut().filter(|p| p.shard == k) {
                let key = (object, p.line);
                let mut slot = g.lookup(key);
                if slot.is_none() && alloc {
                    slot = self.allocate(&mut g, class);
                    if let Some(s) = slot {
                        g.attach(s, key, class);
                    }
                }
                if let Some(s) = slot {
                    let sl = &mut g.slots[s as usize];
                    sl.busy = true;
                    p.valid = sl.valid;
                    p.dirty = sl.dirty;
                    p.class = sl.class;
                }
                p.slot = slot;
            }
        }
    }

    /// Whether the request's missed lines may be inserted: promotion decides for the request
    /// as a whole (OCF's), from a look at the lines it misses now.
    fn promotes(&self, object: u64, parts: &[Part]) -> bool {
        if self
            .promotes_always
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return true;
        }
        let mut missing: Vec<(u64, u64)> = Vec::new();
        for k in Self::shard_order(parts) {
            let g = self.shard(k);
            missing.extend(
                parts
                    .iter()
                    .filter(|p| p.shard == k)
                    .map(|p| (object, p.line))
                    .filter(|&key| g.lookup(key).is_none()),
            );
        }
        if missing.is_empty() {
            return true;
        }
        let req = promotion::Request {
            missing: &missing,
            mapped: parts.len() - missing.len(),
            occupied: self.totals.occupied(),
            lines: self.nslots,
        };
        self.shared.lock().promotion.promote(&req)
    }

    /// Ends a request: for each of its shards in turn, `each` updates the metadata of the
    /// request's parts there, then their lines are released. The request's counters go to
    /// its class in the first shard.
    pub(super) fn settle(
        &self,
        parts: &[Part],
        counted: Option<(ClassId, &Counters)>,
        mut each: impl FnMut(&mut Shard, &Part),
    ) {
        let mut counted = counted;
        for k in Self::shard_order(parts) {
            let lock = &self.shards[k];
            let mut g = lock.meta.lock();
            for p in parts.iter().filter(|p| p.shard == k) {
                each(&mut g, p);
            }
            if let Some((class, c)) = counted.take() {
                g.class_mut(class).counters.add(c);
            }
            for s in parts.iter().filter(|p| p.shard == k).filter_map(|p| p.slot) {
                g.slots[s as usize].busy = false;
            }
            drop(g);
            lock.released.notify_all();
        }
        if let Some((class, c)) = counted {
            // A request with no parts (nothing to settle) still counts.
            self.shard(0).class_mut(class).counters.add(c);
        }
    }

    /// A free slot, or an evicted clean one (the eviction policy's choice).
    pub(super) fn allocate(&self, g: &mut Shard, class: ClassId) -> Option<u32> {
        let class = g.live_class(class);
        let own = g.classes.get(class as usize)?.as_ref()?;
        // A class at its share (of each shard, so of the cache) replaces its own lines, even
        // while others are free.
        let over_share = own.lines() as f64 >= own.cfg.allocation * g.slots.len() as f64;
        let free = if over_share { None } else { g.take_free() };
        if let Some(s) = free {
            // A freed slot whose durable record still says dirty is wiped before reuse.
            if g.slots[s as usize].disk_dirty {
                if self.write_empty_record(s).is_err() {
                    g.give_back(s);
                    return None;
                }
                g.slots[s as usize].disk_dirty = false;
            }
            return Some(s);
        }
        for c in eviction::order(g, class, over_share) {
            if let Some(s) = self.eviction.victim(g, c) {
                if g.slots[s as usize].disk_dirty {
                    // Clean in memory, dirty in its record: written back, but the core may
                    // not have it durably yet (the write-back syncs it after releasing the
                    // line). The core first, then the record that no longer holds it.
                    let object = g.slots[s as usize].key().map(|k| k.0);
                    if object.is_some_and(|o| self.backend.sync(o).is_err())
                        || self.write_empty_record(s).is_err()
                    {
                        continue;
                    }
                    g.slots[s as usize].disk_dirty = false;
                }
                // A victim is a cached line: never on the free list.
                g.detach(s);
                return Some(s);
            }
        }
        // Everything evictable is dirty: let the cleaner catch up.
        self.wake.notify_one();
        None
    }

    pub(super) fn write_empty_record(&self, slot: u32) -> io::Result<()> {
        if !self.store.persistent() {
            return Ok(());
        }
        faultpoint::fault_point!("cache.record-wipe");
        self.store.write_record(
            slot,
            &Record {
                object: EMPTY,
                line: EMPTY,
                valid: 0,
                dirty: 0,
            },
        )?;
        self.store.sync()
    }

    /// The mode a request runs in, with the sequential cutoff applied (OCF's: streams by
    /// object, direction and next offset; see `crate::seq_cutoff`). Every request counts as
    /// activity for the cleaner.
    pub(super) fn effective_mode(
        &self,
        object: u64,
        offset: u64,
        len: u64,
        class: ClassId,
        write: bool,
    ) -> (Mode, bool) {
        let mut g = self.shared.lock();
        g.last_io = Some(self.now());
        let mode = g.class_modes.get(class as usize).copied().flatten();
        let mode = mode.unwrap_or(Mode::Pt);
        if self.failed() {
            return (Mode::Pt, false);
        }
        let p = &g.policy;
        if p.seq_cutoff == SeqCutoff::Never || mode == Mode::Pt {
            return (mode, false);
        }
        let (threshold, count, promote) = (
            p.seq_threshold,
            p.seq_promotion_count,
            p.seq_promotion_threshold,
        );
        let (stream, continued) = g.streams.update(object, write, offset, len);
        let sequential = seq_cutoff::cuts(&stream, continued, threshold, count, promote);
        let cut = match g.policy.seq_cutoff {
            SeqCutoff::Never => false,
            SeqCutoff::Always => sequential,
            SeqCutoff::Full => {
                // Free lines below what the request needs plus a reserve.
                let need = (offset + len).div_ceil(self.line) - offset / self.line;
                let reserve = seq_cutoff::full_reserve(self.nslots) as u64;
                sequential && (self.totals.free() as u64) < need + reserve
            }
        };
        (mode, cut)
    }

    pub(super) fn core_read(
        &self,
        object: u64,
        offset: u64,
        buf: &mut [u8],
        c: &mut Counters,
    ) -> io::Result<()> {
        faultpoint::fault_point!("cache.core-read");
        self.backend
            .read(object, offset, buf)
            .inspect_err(|_| c.core_error(false))?;
        c.core_read_bytes += buf.len() as u64;
        Ok(())
    }

    pub(super) fn core_write(
        &self,
        object: u64,
        offset: u64,
        data: &[u8],
        c: &mut Counters,
    ) -> io::Result<()> {
        self.backend
            .write(object, offset, data)
            .inspect_err(|_| c.core_error(true))?;
        c.core_write_bytes += data.len() as u64;
        Ok(())
    }

    /// Writes a busy slot's dirty sectors back to the core.
    pub(super) fn clean_slot(
        &self,
        object: u64,
        line: u64,
        slot: u32,
        dirty: u64,
        c: &mut Counters,
    ) -> io::Result<()> {
        for (s0, s1) in runs(dirty) {
            let mut buf = vec![0u8; ((s1 - s0) * SECTOR) as usize];
            self.store
                .read(slot, s0 * SECTOR, &mut buf)
                .inspect_err(|_| c.cache_error(false))?;
            c.cache_read_bytes += buf.len() as u64;
            self.core_write(object, line * self.line + s0 * SECTOR, &buf, c)?;
        }
        Ok(())
    }
}

impl Shard {
    /// A line a request left with nothing valid is given back.
    pub(super) fn drop_if_empty(&mut self, s: u32) {
        let sl = &self.slots[s as usize];
        if sl.key().is_some() && sl.valid == 0 {
            self.detach(s);
            self.give_back(s);
        }
    }
}
