//! A line's state packed in one fixed-size slot (48 bytes: key, valid and dirty bitmaps, the
//! time of its last dirtying write, its hash chain, class and two flags), a shard's slots in
//! one array indexed by slot number, and the shard's free slots.

use super::Totals;
use crate::store::EMPTY;
use crate::{ClassId, DEFAULT_CLASS};
use std::ops::{Index, IndexMut};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) struct Slot {
    /// The line held: object and line number; `EMPTY` object when the slot is free.
    object: u64,
    line: u64,
    pub(crate) valid: u64,
    /// Changed only through `Shard::set_dirty` (it keeps the lists and counts in step).
    pub(crate) dirty: u64,
    /// The last write that left the line dirty (alru's staleness runs from it), in
    /// nanoseconds after the shard's epoch, plus one; 0: none.
    written: u64,
    /// The next slot in the same hash bucket (`NIL`: none).
    pub(super) chain: u32,
    pub(crate) class: ClassId,
    pub(crate) busy: bool,
    /// The durable record of this slot says dirty: it must be rewritten before reuse.
    pub(crate) disk_dirty: bool,
}

pub(crate) const NIL: u32 = u32::MAX;

impl Slot {
    fn free() -> Slot {
        Slot {
            object: EMPTY,
            line: EMPTY,
            valid: 0,
            dirty: 0,
            written: 0,
            chain: NIL,
            class: DEFAULT_CLASS,
            busy: false,
            disk_dirty: false,
        }
    }

    pub(crate) fn key(&self) -> Option<(u64, u64)> {
        (self.object != EMPTY).then_some((self.object, self.line))
    }

    pub(super) fn holds(&self, key: (u64, u64)) -> bool {
        self.object == key.0 && self.line == key.1
    }

    pub(super) fn set_key(&mut self, key: Option<(u64, u64)>) {
        (self.object, self.line) = key.unwrap_or((EMPTY, EMPTY));
    }

    pub(crate) fn last_write(&self, epoch: Instant) -> Option<Instant> {
        (self.written != 0).then(|| epoch + Duration::from_nanos(self.written - 1))
    }

    pub(super) fn set_last_write(&mut self, epoch: Instant, at: Option<Instant>) {
        self.written = at.map_or(0, |t| {
            let nanos = t.saturating_duration_since(epoch).as_nanos();
            u64::try_from(nanos).unwrap_or(u64::MAX - 1) + 1
        });
    }
}

/// A shard's slots, addressed by their number in the whole cache.
pub(crate) struct Slots {
    base: u32,
    v: Vec<Slot>,
}

impl Slots {
    pub(crate) fn new(base: u32, len: usize) -> Slots {
        let mut v = Vec::with_capacity(len);
        v.resize_with(len, Slot::free);
        Slots { base, v }
    }

    pub(crate) fn len(&self) -> usize {
        self.v.len()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.v.capacity()
    }

    /// The shard's slot numbers (in the whole cache).
    pub(crate) fn range(&self) -> std::ops::Range<u32> {
        self.base..self.base + self.v.len() as u32
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, &Slot)> {
        self.v
            .iter()
            .enumerate()
            .map(|(i, s)| (self.base + i as u32, s))
    }
}

impl Index<usize> for Slots {
    type Output = Slot;
    fn index(&self, s: usize) -> &Slot {
        &self.v[s - self.base as usize]
    }
}

impl IndexMut<usize> for Slots {
    fn index_mut(&mut self, s: usize) -> &mut Slot {
        &mut self.v[s - self.base as usize]
    }
}

/// A shard's free slots: a list threaded through their `chain` (a free slot is in no hash
/// bucket), so it costs no memory per line. The count over all shards follows it in `Totals`.
pub(crate) struct FreeList {
    head: u32,
    len: usize,
    totals: Arc<Totals>,
}

impl FreeList {
    pub(crate) fn new(totals: Arc<Totals>) -> FreeList {
        FreeList {
            head: NIL,
            len: 0,
            totals,
        }
    }

    pub(crate) fn push(&mut self, slots: &mut Slots, s: u32) {
        slots[s as usize].chain = self.head;
        self.head = s;
        self.len += 1;
        self.totals.free.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn pop(&mut self, slots: &mut Slots) -> Option<u32> {
        if self.head == NIL {
            return None;
        }
        let s = self.head;
        self.head = std::mem::replace(&mut slots[s as usize].chain, NIL);
        self.len -= 1;
        self.totals.free.fetch_sub(1, Ordering::Relaxed);
        Some(s)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for FreeList {
    fn drop(&mut self) {
        self.totals.free.fetch_sub(self.len, Ordering::Relaxed);
    }
}
