//! The read path: hit, partial miss, full miss or pass-through, and insertion.

use super::request::{count, mask, runs, Found, Part};
use super::Cache;
use crate::mode::Mode;
use crate::stats::Counters;
use crate::{ClassId, SECTOR};
use std::io;

impl Cache {
    pub fn read(&self, object: u64, offset: u64, buf: &mut [u8], class: ClassId) -> io::Result<()> {
        self.read_as(object, offset, buf, class, false)
    }

    /// A read; `pass_through`: in pass-through whatever the mode (a request served again after
    /// a cache device error).
    fn read_as(
        &self,
        object: u64,
        offset: u64,
        buf: &mut [u8],
        class: ClassId,
        pass_through: bool,
    ) -> io::Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let mut c = Counters {
            caller_read_bytes: buf.len() as u64,
            ..Counters::default()
        };
        let mut parts = self.plan(object, offset, buf.len());
        let (mode, cutoff) = if pass_through {
            (Mode::Pt, false)
        } else {
            self.effective_mode(object, offset, buf.len() as u64, class, false)
        };
        let insert = !cutoff && mode.rules().read_inserts;
        self.acquire(object, &mut parts, class, insert);
        // Counted by what the cache held before: a read that should have inserted a line and
        // got none (promotion said no, or nothing it may evict) passed through, as in OCF.
        let found = Found::of(&parts);
        let unmapped = insert && parts.iter().any(|p| p.slot.is_none());
        let pass_through = mode.rules().pass_through || cutoff || unmapped;
        count(&mut c, false, pass_through, found);
        let result = self.read_parts(object, offset, buf, &mut parts, mode, insert, &mut c);
        let now = self.now();
        self.settle(&parts, Some((class, &c)), |g, p| {
            if let Some(s) = p.slot {
                g.slots[s as usize].valid = p.valid;
                // Pass-through cleaned what it read.
                g.set_dirty(s, p.dirty, now);
                g.touch(s, class, false);
                g.drop_if_empty(s);
            }
        });
        if result.is_err() && c.cache_errors > 0 && mode != Mode::Pt {
            // The cache device failed under this read: once more, pass-through.
            self.cache_error_request();
            return self.read_as(object, offset, buf, class, true);
        }
        result
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn read_parts(
        &self,
        object: u64,
        offset: u64,
        buf: &mut [u8],
        parts: &mut [Part],
        mode: Mode,
        insert: bool,
        c: &mut Counters,
    ) -> io::Result<()> {
        if mode.rules().pass_through {
            for p in parts.iter_mut() {
                if let Some(s) = p.slot {
                    if p.dirty != 0 {
                        self.clean_slot(object, p.line, s, p.dirty, c)?;
                        p.dirty = 0;
                    }
                }
            }
            return self.core_read(object, offset, buf, c);
        }
        // Core ranges (file offsets) for what the cache cannot give; whole sectors where the
        // line will keep them.
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for p in parts.iter() {
            let missing = p.touched & !p.valid;
            let base = p.line * self.line;
            for (s0, s1) in runs(missing) {
                let (from, to) = if insert && p.slot.is_some() {
                    (base + s0 * SECTOR, base + s1 * SECTOR)
                } else {
                    (base + (s0 * SECTOR).max(p.a), base + (s1 * SECTOR).min(p.b))
                };
                match ranges.last_mut() {
                    Some(last) if last.1 == from => last.1 = to,
                    _ => ranges.push((from, to)),
                }
            }
        }
        let mut fetched: Vec<(u64, Vec<u8>)> = Vec::with_capacity(ranges.len());
        for (from, to) in ranges {
            let mut data = vec![0u8; (to - from) as usize];
            self.core_read(object, from, &mut data, c)?;
            fetched.push((from, data));
        }
        let core_bytes = |at: u64, len: u64| -> &[u8] {
            let i = fetched.partition_point(|(start, _)| *start <= at) - 1;
            let (start, data) = &fetched[i];
            &data[(at - start) as usize..(at - start + len) as usize]
        };
        for p in parts.iter_mut() {
            let base = p.line * self.line;
            let out = &mut buf[p.buf..p.buf + (p.b - p.a) as usize];
            // Cached sectors (they may be dirty: the cache wins over the core).
            if let Some(s) = p.slot {
                for (s0, s1) in runs(p.touched & p.valid) {
                    let from = (s0 * SECTOR).max(p.a);
                    let to = (s1 * SECTOR).min(p.b);
                    let dst = &mut out[(from - p.a) as usize..(to - p.a) as usize];
                    self.store
                        .read(s, from, dst)
                        .inspect_err(|_| c.cache_error(false))?;
                    c.cache_read_bytes += to - from;
                }
            }
            for (s0, s1) in runs(p.touched & !p.valid) {
                let from = (s0 * SECTOR).max(p.a);
                let to = (s1 * SECTOR).min(p.b);
                out[(from - p.a) as usize..(to - p.a) as usize]
                    .copy_from_slice(core_bytes(base + from, to - from));
                if let (true, Some(s)) = (insert, p.slot) {
                    let whole = core_bytes(base + s0 * SECTOR, (s1 - s0) * SECTOR);
                    self.store
                        .write(s, s0 * SECTOR, whole)
                        .inspect_err(|_| c.cache_error(false))?;
                    c.cache_write_bytes += whole.len() as u64;
                    p.valid |= mask(s0, s1);
                }
            }
        }
        Ok(())
    }
}
