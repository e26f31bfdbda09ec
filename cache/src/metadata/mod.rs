//! What the cache keeps about each line (OCF's metadata), cut in shards so that requests to
//! different lines rarely meet on a lock: a line (object, line number) belongs to one shard
//! by a fixed hash, and so does the slot that holds it (each shard owns a range of slots).
//! A shard has the slots with their key, valid and dirty sectors and class; the index from
//! (object, line) to slot; the lines of each object it holds; the classes with their LRU lists
//! and counters. Every change of a line's dirtiness goes through `set_dirty`, which moves the
//! line between its class's clean and dirty lists. What the whole cache needs to know at once
//! (lines free, dirty, in use) is kept in `Totals`, outside any lock.

mod index;
mod slots;

pub(crate) use index::{Index, Objects};
pub(crate) use slots::{FreeList, Slot, Slots};

use crate::eviction::{Links, List};
use crate::mode::{ClassConfig, Policy};
use crate::promotion::PromotionPolicy;
use crate::stats::Counters;
use crate::store::{Record, EMPTY};
use crate::{ClassId, DEFAULT_CLASS, SECTOR};
use rustc_hash::FxHashMap as HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Counts over every shard, read without taking their locks.
#[derive(Default)]
pub(crate) struct Totals {
    pub(crate) free: AtomicUsize,
    pub(crate) dirty: AtomicUsize,
    pub(crate) occupied: AtomicUsize,
}

impl Totals {
    pub(crate) fn free(&self) -> usize {
        self.free.load(Ordering::Relaxed)
    }

    pub(crate) fn dirty(&self) -> usize {
        self.dirty.load(Ordering::Relaxed)
    }

    pub(crate) fn occupied(&self) -> usize {
        self.occupied.load(Ordering::Relaxed)
    }
}

/// Which shard a line belongs to: consecutive lines of an object go to consecutive shards, so
/// a sequential stream spreads over all of them; the object's hash staggers where files
/// start. Fixed for good: a cache file's lines are found in their slots by it.
pub(crate) fn shard_of(object: u64, line: u64, shards: usize) -> usize {
    if shards <= 1 {
        return 0;
    }
    (stagger(object).wrapping_add(line) % shards as u64) as usize
}

fn stagger(object: u64) -> u64 {
    object.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32
}

/// The first line from `from` on that belongs to shard `k` of `shards` (the next ones follow
/// every `shards` lines).
fn first_line_in(object: u64, from: u64, k: usize, shards: usize) -> u64 {
    let n = shards.max(1) as u64;
    let at = (stagger(object).wrapping_add(from)) % n;
    from + (k as u64 + n - at) % n
}

pub(crate) struct Class {
    pub(crate) cfg: ClassConfig,
    pub(crate) clean: List,
    pub(crate) dirty: List,
    pub(crate) counters: Counters,
}

impl Class {
    pub(crate) fn new(cfg: ClassConfig) -> Class {
        Class {
            cfg,
            clean: List::default(),
            dirty: List::default(),
            counters: Counters::default(),
        }
    }

    pub(crate) fn lines(&self) -> usize {
        self.clean.len() + self.dirty.len()
    }
}

/// The LRU list a slot of `class` is on.
pub(crate) fn list_of(classes: &mut [Option<Class>], class: ClassId, dirty: bool) -> &mut List {
    let c = classes[class as usize]
        .as_mut()
        .expect("a slot's class is live");
    if dirty {
        &mut c.dirty
    } else {
        &mut c.clean
    }
}

/// One shard of the line metadata (see the module's comment).
pub(crate) struct Shard {
    pub(crate) slots: Slots,
    free: FreeList,
    index: Index,
    objects: Objects,
    /// Lines held.
    pub(crate) occupied: usize,
    /// Which shard this is, of how many: its lines of an object are every `count`-th.
    place: (usize, usize),
    /// What slots' write times count from.
    pub(crate) epoch: Instant,
    /// Every class's lists and counters here; the settings are the same in every shard.
    pub(crate) classes: Vec<Option<Class>>,
    pub(crate) links: Links,
    pub(crate) dirty_lines: usize,
    /// Lines per ACP chunk (100 MiB of an object), and dirty lines per (object, chunk).
    pub(crate) chunk_lines: u64,
    pub(crate) dirty_chunks: HashMap<(u64, u64), u32>,
    pub(crate) totals: Arc<Totals>,
}

/// What the cache keeps once, besides the shards: settings and what the policies remember.
pub(crate) struct Shared {
    /// Each class's mode, as the shards' settings have it: what every request asks first.
    pub(crate) class_modes: Vec<Option<crate::mode::Mode>>,
    /// The sequential streams seen lately (sequential cutoff).
    pub(crate) streams: crate::seq_cutoff::Streams,
    /// When the last read or write came (alru's activity threshold).
    pub(crate) last_io: Option<Instant>,
    /// Requests that met a cache device error (toward `policy.error_threshold`).
    pub(crate) error_requests: u64,
    /// Whether a missed line may be inserted now.
    pub(crate) promotion: Box<dyn PromotionPolicy>,
    pub(crate) policy: Policy,
    pub(crate) cleaner_passes: u64,
    pub(crate) cleaned_lines: u64,
    pub(crate) cleaner_errors: u64,
    /// Objects whose cleaned lines reached the core but whose core sync then failed: those
    /// lines are clean, so the loss is told to the object's next sync (fsync), as the kernel
    /// tells a writeback error to the next fsync of the file.
    pub(crate) unsynced: rustc_hash::FxHashSet<u64>,
}

impl Shard {
    pub(crate) fn new(
        place: (usize, usize),
        slots: std::ops::Range<u32>,
        default: ClassConfig,
        chunk_lines: u64,
        epoch: Instant,
        totals: Arc<Totals>,
    ) -> Shard {
        let len = (slots.end - slots.start) as usize;
        Shard {
            slots: Slots::new(slots.start, len),
            free: FreeList::new(totals.clone()),
            index: Index::new(len),
            objects: Objects::default(),
            occupied: 0,
            place,
            epoch,
            classes: vec![Some(Class::new(default))],
            links: Links::new(slots.start, len),
            dirty_lines: 0,
            chunk_lines,
            dirty_chunks: HashMap::default(),
            totals,
        }
    }

    pub(crate) fn class_mut(&mut self, id: ClassId) -> &mut Class {
        match self.classes.get(id as usize) {
            Some(Some(_)) => self.classes[id as usize].as_mut().unwrap(),
            _ => self.classes[DEFAULT_CLASS as usize]
                .as_mut()
                .expect("default class"),
        }
    }

    pub(crate) fn live_class(&self, id: ClassId) -> ClassId {
        if self.classes.get(id as usize).is_some_and(Option::is_some) {
            id
        } else {
            DEFAULT_CLASS
        }
    }

    /// A slot goes (back) on the free list.
    pub(crate) fn give_back(&mut self, s: u32) {
        self.free.push(&mut self.slots, s);
    }

    /// A free slot, if any.
    pub(crate) fn take_free(&mut self) -> Option<u32> {
        self.free.pop(&mut self.slots)
    }

    #[cfg(test)]
    pub(crate) fn free_lines(&self) -> usize {
        self.free.len()
    }

    /// The slot holding a line.
    pub(crate) fn lookup(&self, key: (u64, u64)) -> Option<u32> {
        self.index.get(&self.slots, key)
    }

    /// Every line held, with its slot.
    pub(crate) fn cached(&self) -> impl Iterator<Item = ((u64, u64), u32)> + '_ {
        self.slots.iter().filter_map(|(s, sl)| Some((sl.key()?, s)))
    }

    /// The lines of `object` held here from `from` to `to` (inclusive), ascending: by lookup
    /// when the span is small, else by a pass over the slots.
    pub(crate) fn lines_of(&self, object: u64, from: u64, to: u64) -> Vec<u64> {
        let Some(o) = self.objects.get(object) else {
            return Vec::new();
        };
        let (from, to) = (from.max(o.first), to.min(o.last));
        if from > to {
            return Vec::new();
        }
        let (k, n) = self.place;
        let start = first_line_in(object, from, k, n);
        let mut lines: Vec<u64> = if (to - from) / n as u64 <= self.slots.len() as u64 {
            (start..=to.max(start))
                .step_by(n)
                .filter(|&l| l <= to && self.lookup((object, l)).is_some())
                .collect()
        } else {
            self.cached()
                .filter(|&((o, l), _)| o == object && (from..=to).contains(&l))
                .map(|((_, l), _)| l)
                .collect()
        };
        lines.sort_unstable();
        lines
    }

    /// Bytes of `object` held here that only the cache has (its dirty sectors).
    pub(crate) fn dirty_bytes(&self, object: u64) -> u64 {
        self.objects
            .get(object)
            .map_or(0, |o| o.dirty_sectors * SECTOR)
    }

    /// When the line was last written dirty.
    pub(crate) fn last_write(&self, s: u32) -> Option<Instant> {
        self.slots[s as usize].last_write(self.epoch)
    }

    /// Heap bytes of the index and the per-object table.
    pub(crate) fn index_bytes(&self) -> (usize, usize) {
        (self.index.bytes(), self.objects.bytes())
    }

    pub(crate) fn record(&self, s: u32) -> Record {
        let sl = &self.slots[s as usize];
        match sl.key() {
            Some((object, line)) => Record {
                object,
                line,
                valid: sl.valid,
                dirty: sl.dirty,
            },
            None => Record {
                object: EMPTY,
                line: EMPTY,
                valid: 0,
                dirty: 0,
            },
        }
    }

    pub(crate) fn attach(&mut self, s: u32, key: (u64, u64), class: ClassId) {
        let class = self.live_class(class);
        let sl = &mut self.slots[s as usize];
        sl.set_key(Some(key));
        sl.valid = 0;
        sl.dirty = 0;
        sl.class = class;
        sl.set_last_write(self.epoch, None);
        self.index.insert(&mut self.slots, key, s);
        self.occupied += 1;
        self.totals.occupied.fetch_add(1, Ordering::Relaxed);
        self.objects.added(key.0, key.1);
        self.links
            .push_front(list_of(&mut self.classes, class, false), s);
    }

    pub(crate) fn detach(&mut self, s: u32) {
        let (key, class, dirty) = {
            let sl = &self.slots[s as usize];
            (sl.key(), sl.class, sl.dirty)
        };
        let Some(key) = key else { return };
        self.index.remove(&mut self.slots, key, s);
        self.occupied -= 1;
        self.totals.occupied.fetch_sub(1, Ordering::Relaxed);
        self.objects.dirty_changed(key.0, dirty, 0);
        self.objects.removed(key.0);
        self.links
            .remove(list_of(&mut self.classes, class, dirty != 0), s);
        if dirty != 0 {
            self.dirty_lines -= 1;
            self.totals.dirty.fetch_sub(1, Ordering::Relaxed);
            self.count_chunk(key, false);
        }
        let sl = &mut self.slots[s as usize];
        sl.set_key(None);
        sl.valid = 0;
        sl.dirty = 0;
        sl.set_last_write(self.epoch, None);
    }

    /// Recently used, and by the class of its latest caller. A dirty line moves to the head
    /// of its list only for a write (`write`): its list is in order of last write.
    pub(crate) fn touch(&mut self, s: u32, class: ClassId, write: bool) {
        let class = self.live_class(class);
        if self.slots[s as usize].class != class {
            self.move_class(s, class);
        }
        let dirty = self.slots[s as usize].dirty != 0;
        if dirty && !write {
            return;
        }
        let list = list_of(&mut self.classes, class, dirty);
        self.links.remove(list, s);
        self.links.push_front(list, s);
    }

    /// A write made the (dirty) line recent: it goes to the head of its dirty list, which is
    /// kept in order of last write (OCF's ALRU list); reads do not reorder dirty lines.
    pub(crate) fn written(&mut self, s: u32, now: Instant) {
        if self.slots[s as usize].dirty != 0 {
            let epoch = self.epoch;
            self.slots[s as usize].set_last_write(epoch, Some(now));
        }
    }

    fn count_chunk(&mut self, key: (u64, u64), dirty: bool) {
        let chunk = (key.0, key.1 / self.chunk_lines.max(1));
        if dirty {
            *self.dirty_chunks.entry(chunk).or_insert(0) += 1;
        } else if let Some(n) = self.dirty_chunks.get_mut(&chunk) {
            *n -= 1;
            if *n == 0 {
                self.dirty_chunks.remove(&chunk);
            }
        }
    }

    pub(crate) fn move_class(&mut self, s: u32, to: ClassId) {
        let (from, dirty) = {
            let sl = &self.slots[s as usize];
            (sl.class, sl.dirty != 0)
        };
        self.links
            .remove(list_of(&mut self.classes, from, dirty), s);
        self.links
            .push_front(list_of(&mut self.classes, to, dirty), s);
        self.slots[s as usize].class = to;
    }

    pub(crate) fn set_dirty(&mut self, s: u32, dirty: u64, now: Instant) {
        let (before, class, key) = {
            let sl = &self.slots[s as usize];
            (sl.dirty, sl.class, sl.key())
        };
        let (was, is) = (before != 0, dirty != 0);
        let epoch = self.epoch;
        {
            let sl = &mut self.slots[s as usize];
            sl.dirty = dirty;
            if is && !was {
                sl.set_last_write(epoch, Some(now));
            } else if !is {
                sl.set_last_write(epoch, None);
            }
        }
        if let Some(key) = key {
            self.objects.dirty_changed(key.0, before, dirty);
        }
        if is != was {
            self.links.remove(list_of(&mut self.classes, class, was), s);
            self.links
                .push_front(list_of(&mut self.classes, class, is), s);
            if is {
                self.dirty_lines += 1;
                self.totals.dirty.fetch_add(1, Ordering::Relaxed);
            } else {
                self.dirty_lines -= 1;
                self.totals.dirty.fetch_sub(1, Ordering::Relaxed);
            }
            if let Some(key) = key {
                self.count_chunk(key, is);
            }
        }
    }
}
