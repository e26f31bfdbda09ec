//! The write path: what each mode does with a write hit and a write miss, and the records a
//! file store keeps in step with it.

use super::request::{count, mask, runs, Found, Part};
use super::Cache;
use crate::mode::Mode;
use crate::stats::Counters;
use crate::{ClassId, SECTOR};
use std::io;
use std::sync::atomic::Ordering;

/// What a write does with the lines it finds (OCF: the engine its mode routes it to).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Route {
    /// wb, wo: the cache takes every touched sector, dirty; the core nothing.
    Back,
    /// wt: the cache takes every touched sector, the core the whole write.
    Through,
    /// wa full hit, and a stream past the sequential cutoff: the cache updates the sectors it
    /// holds (and fully written ones of its lines), the core takes the whole write.
    Around,
    /// wi, pt, and wa unless all of it is cached: the core takes the write and the cache drops
    /// the written sectors (the rest of each line stays, dirty sectors included).
    Invalidate,
}

impl Cache {
    pub fn write(&self, object: u64, offset: u64, data: &[u8], class: ClassId) -> io::Result<()> {
        self.write_as(object, offset, data, class, false)
    }

    /// A write; `pass_through`: in pass-through whatever the mode (a request served again
    /// after a cache device error).
    fn write_as(
        &self,
        object: u64,
        offset: u64,
        data: &[u8],
        class: ClassId,
        pass_through: bool,
    ) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let mut c = Counters {
            caller_write_bytes: data.len() as u64,
            ..Counters::default()
        };
        let mut parts = self.plan(object, offset, data.len());
        let (mode, cutoff) = if pass_through {
            (Mode::Pt, false)
        } else {
            self.effective_mode(object, offset, data.len() as u64, class, true)
        };
        let rules = mode.rules();
        let inserts = !cutoff && rules.write_inserts;
        self.acquire(object, &mut parts, class, inserts);
        let found = Found::of(&parts);
        let route = if cutoff {
            Route::Around
        } else if rules.write_back {
            Route::Back
        } else if rules.write_inserts {
            Route::Through
        } else if rules.write_invalidates || found != Found::Hit {
            // Write-around with a partial hit or a miss is write-invalidate (as OCF's).
            Route::Invalidate
        } else {
            Route::Around
        };
        // Counted by what the cache held before. Invalidating writes pass through; so does
        // one that should have inserted a line and got none (the core took that part).
        let unmapped = inserts && parts.iter().any(|p| p.slot.is_none());
        let pass_through = cutoff || unmapped || route == Route::Invalidate;
        count(&mut c, true, pass_through, found);
        let result = self.write_parts(object, offset, data, &mut parts, route, &mut c);
        // A cache file's records follow the write (below, under the lock): a line left dirty
        // gets its record, so a crash of the daemon finds every write the namespace may show
        // (the store is synced by fsync and commits); a line the write invalidated whose
        // record said dirty gets an empty one, synced before the write completes, so recovery
        // cannot write its old data back over what the core got since.
        let mut record_failed = if self.store.persistent()
            && parts
                .iter()
                .any(|p| p.slot.is_some() && p.valid != 0 && p.dirty != 0)
        {
            self.declare_dirty().err()
        } else {
            None
        };
        let mut wiped = false;
        let now = self.now();
        let failed_before = record_failed.is_some();
        if failed_before {
            c.cache_error(true);
        }
        let counted = c.clone();
        self.settle(&parts, Some((class, &counted)), |g, p| {
            let Some(s) = p.slot else { return };
            if p.valid == 0 {
                g.set_dirty(s, 0, now);
                g.detach(s);
                if g.slots[s as usize].disk_dirty && record_failed.is_none() {
                    record_failed = faultpoint::check("cache.record-wipe");
                    if record_failed.is_none() {
                        record_failed = self.record_locked(g, s).err();
                        wiped = true;
                    }
                }
                g.give_back(s);
                return;
            }
            // Dirty sectors the write invalidated: if the durable record has them, it is
            // rewritten and synced before the write completes.
            let dropped = g.slots[s as usize].dirty & !p.dirty != 0;
            let disk_dirty = g.slots[s as usize].disk_dirty;
            g.slots[s as usize].valid = p.valid;
            g.set_dirty(s, p.dirty, now);
            if p.dirty & p.touched != 0 {
                g.written(s, now);
            }
            g.touch(s, class, true);
            if (p.dirty != 0 || disk_dirty) && record_failed.is_none() {
                record_failed = self.record_locked(g, s).err();
                wiped |= disk_dirty && dropped;
            }
        });
        if !failed_before && record_failed.is_some() {
            // A record write failed while settling: its class counts the cache error too.
            let mut e = Counters::default();
            e.cache_error(true);
            self.settle(&[], Some((class, &e)), |_, _| {});
            c.cache_error(true);
        }
        if self.totals.dirty() >= self.wake_at_dirty.load(Ordering::Relaxed) {
            self.wake.notify_one();
        }
        if wiped && record_failed.is_none() {
            record_failed = self.store.sync().err();
        }
        let result = match record_failed {
            Some(e) if result.is_ok() => Err(e),
            _ => result,
        };
        if result.is_err() && c.cache_errors > 0 && mode != Mode::Pt {
            // The cache device failed under this write: once more, pass-through.
            self.cache_error_request();
            return self.write_as(object, offset, data, class, true);
        }
        result
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn write_parts(
        &self,
        object: u64,
        offset: u64,
        data: &[u8],
        parts: &mut [Part],
        route: Route,
        c: &mut Counters,
    ) -> io::Result<()> {
        let to_cache_only = route == Route::Back;
        for p in parts.iter_mut() {
            let base = p.line * self.line;
            let bytes = &data[p.buf..p.buf + (p.b - p.a) as usize];
            let Some(s) = p.slot else {
                // No line (not cached, or no room): the core takes it.
                if to_cache_only {
                    self.core_write(object, base + p.a, bytes, c)?;
                }
                continue;
            };
            if route == Route::Invalidate {
                // A dirty sector the write covers only in part holds bytes the core lacks:
                // written back first, the write goes over it.
                let partly = p.dirty & p.touched & !p.full;
                if partly != 0 {
                    self.clean_slot(object, p.line, s, partly, c)?;
                }
                p.valid &= !p.touched;
                p.dirty &= !p.touched;
                continue;
            }
            // Which sectors the cache takes: all touched ones for inserting modes, else
            // (write-around hit, cutoff) only those it already holds or that are fully written.
            let take = if matches!(route, Route::Back | Route::Through) {
                p.touched
            } else {
                p.touched & (p.valid | p.full)
            };
            // Partly written sectors the cache does not hold yet are filled from the core.
            let fill = take & !p.full & !p.valid;
            for (s0, s1) in runs(take) {
                let from = s0 * SECTOR;
                let to = s1 * SECTOR;
                let mut sector_buf: Vec<u8>;
                let chunk: &[u8] = if (fill & mask(s0, s1)) != 0 {
                    sector_buf = vec![0u8; (to - from) as usize];
                    for (f0, f1) in runs(fill & mask(s0, s1)) {
                        let r = &mut sector_buf
                            [((f0 - s0) * SECTOR) as usize..((f1 - s0) * SECTOR) as usize];
                        self.core_read(object, base + f0 * SECTOR, r, c)?;
                    }
                    for (v0, v1) in runs(take & p.valid & !p.full & mask(s0, s1)) {
                        let r = &mut sector_buf
                            [((v0 - s0) * SECTOR) as usize..((v1 - s0) * SECTOR) as usize];
                        self.store
                            .read(s, v0 * SECTOR, r)
                            .inspect_err(|_| c.cache_error(false))?;
                    }
                    let lo = from.max(p.a);
                    let hi = to.min(p.b);
                    sector_buf[(lo - from) as usize..(hi - from) as usize]
                        .copy_from_slice(&bytes[(lo - p.a) as usize..(hi - p.a) as usize]);
                    &sector_buf
                } else {
                    let lo = from.max(p.a);
                    let hi = to.min(p.b);
                    // Fully covered sectors, or partial ones already valid: write the bytes.
                    self.store
                        .write(s, lo, &bytes[(lo - p.a) as usize..(hi - p.a) as usize])
                        .inspect_err(|_| c.cache_error(true))?;
                    c.cache_write_bytes += hi - lo;
                    continue;
                };
                self.store
                    .write(s, from, chunk)
                    .inspect_err(|_| c.cache_error(true))?;
                c.cache_write_bytes += chunk.len() as u64;
            }
            p.valid |= take;
            if to_cache_only {
                p.dirty |= take;
            } else {
                // The core gets these bytes too: fully written sectors are clean now; a partly
                // written dirty sector keeps bytes the core has not seen.
                p.dirty &= !p.full;
            }
        }
        if !to_cache_only {
            self.core_write(object, offset, data, c)?;
        }
        Ok(())
    }
}
