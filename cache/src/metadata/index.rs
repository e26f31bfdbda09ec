//! Finding lines in a shard: a compact hash from (object, line) to slot (one u32 bucket head
//! per one to two slots, chained through the slots), and per object the count and span of its
//! lines and its dirty sectors, so range operations (truncate, discard, fsync, ACP's chunks)
//! find an object's lines without a list per line.

use super::slots::{Slots, NIL};
use rustc_hash::FxHashMap as HashMap;

/// The hash index of a shard.
pub(crate) struct Index {
    buckets: Vec<u32>,
}

fn hash(key: (u64, u64)) -> u64 {
    (key.0 ^ key.1.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

impl Index {
    /// For a shard of `slots` slots: the largest power of two of buckets not above it (at
    /// most 4 bytes per slot; chains of one to two slots when full).
    pub(crate) fn new(slots: usize) -> Index {
        let n = if slots <= 1 {
            1
        } else {
            1 << (usize::BITS - 1 - slots.leading_zeros())
        };
        Index {
            buckets: vec![NIL; n],
        }
    }

    fn bucket(&self, key: (u64, u64)) -> usize {
        // The high bits: the multiplication mixes every key bit into them.
        let bits = self.buckets.len().trailing_zeros();
        if bits == 0 {
            return 0;
        }
        (hash(key) >> (64 - bits)) as usize
    }

    pub(crate) fn get(&self, slots: &Slots, key: (u64, u64)) -> Option<u32> {
        let mut s = self.buckets[self.bucket(key)];
        while s != NIL {
            let sl = &slots[s as usize];
            if sl.holds(key) {
                return Some(s);
            }
            s = sl.chain;
        }
        None
    }

    pub(crate) fn insert(&mut self, slots: &mut Slots, key: (u64, u64), s: u32) {
        let b = self.bucket(key);
        slots[s as usize].chain = self.buckets[b];
        self.buckets[b] = s;
    }

    pub(crate) fn remove(&mut self, slots: &mut Slots, key: (u64, u64), s: u32) {
        let b = self.bucket(key);
        let next = slots[s as usize].chain;
        slots[s as usize].chain = NIL;
        if self.buckets[b] == s {
            self.buckets[b] = next;
            return;
        }
        let mut at = self.buckets[b];
        while at != NIL {
            let chain = slots[at as usize].chain;
            if chain == s {
                slots[at as usize].chain = next;
                return;
            }
            at = chain;
        }
    }

    pub(crate) fn bytes(&self) -> usize {
        self.buckets.capacity() * std::mem::size_of::<u32>()
    }
}

/// What a shard holds of one object.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ObjectLines {
    pub(crate) lines: u32,
    pub(crate) dirty_sectors: u64,
    /// The lowest and highest line it held since it last held none (a bound, not exact).
    pub(crate) first: u64,
    pub(crate) last: u64,
}

/// Per object, its lines in a shard.
#[derive(Default)]
pub(crate) struct Objects {
    map: HashMap<u64, ObjectLines>,
}

impl Objects {
    pub(crate) fn get(&self, object: u64) -> Option<&ObjectLines> {
        self.map.get(&object)
    }

    pub(crate) fn added(&mut self, object: u64, line: u64) {
        let e = self.map.entry(object).or_insert(ObjectLines {
            lines: 0,
            dirty_sectors: 0,
            first: line,
            last: line,
        });
        e.lines += 1;
        e.first = e.first.min(line);
        e.last = e.last.max(line);
    }

    pub(crate) fn removed(&mut self, object: u64) {
        if let Some(e) = self.map.get_mut(&object) {
            e.lines -= 1;
            if e.lines == 0 {
                self.map.remove(&object);
            }
        }
    }

    pub(crate) fn dirty_changed(&mut self, object: u64, before: u64, after: u64) {
        if let Some(e) = self.map.get_mut(&object) {
            e.dirty_sectors =
                e.dirty_sectors + after.count_ones() as u64 - before.count_ones() as u64;
        }
    }

    pub(crate) fn bytes(&self) -> usize {
        // hashbrown: an entry and a control byte per bucket, buckets 8/7 of the capacity.
        (self.map.capacity() * 8).div_ceil(7) * (std::mem::size_of::<(u64, ObjectLines)>() + 1)
    }
}
