//! What the cache keeps about each line (OCF's metadata): the slots with their key, valid and
//! dirty sectors and class; the index from (object, line) to slot; the lines of each object;
//! the classes with their LRU lists. Every change of a line's dirtiness goes through
//! `set_dirty`, which moves the line between its class's clean and dirty lists.

use crate::eviction::{Links, List};
use crate::mode::{ClassConfig, Policy};
use crate::promotion::PromotionPolicy;
use crate::stats::Counters;
use crate::store::{Record, EMPTY};
use crate::{ClassId, DEFAULT_CLASS};
use rustc_hash::FxHashMap as HashMap;
use std::collections::BTreeSet;
use std::time::Instant;

pub(crate) struct Slot {
    pub(crate) key: Option<(u64, u64)>,
    pub(crate) valid: u64,
    pub(crate) dirty: u64,
    pub(crate) class: ClassId,
    /// The last write that left the line dirty (alru's staleness runs from it).
    pub(crate) last_write: Option<Instant>,
    pub(crate) busy: bool,
    /// The durable record of this slot says dirty: it must be rewritten before reuse.
    pub(crate) disk_dirty: bool,
}

pub(crate) struct Class {
    pub(crate) cfg: ClassConfig,
    pub(crate) clean: List,
    pub(crate) dirty: List,
    pub(crate) counters: Counters,
}

impl Class {
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

pub(crate) struct Inner {
    pub(crate) slots: Vec<Slot>,
    pub(crate) free: Vec<u32>,
    pub(crate) index: HashMap<(u64, u64), u32>,
    pub(crate) objects: HashMap<u64, BTreeSet<u64>>,
    pub(crate) classes: Vec<Option<Class>>,
    pub(crate) links: Links,
    pub(crate) dirty_lines: usize,
    /// The sequential streams seen lately (sequential cutoff).
    pub(crate) streams: crate::seq_cutoff::Streams,
    /// When the last read or write came (alru's activity threshold).
    pub(crate) last_io: Option<Instant>,
    /// Lines per ACP chunk (100 MiB of an object), and dirty lines per (object, chunk).
    pub(crate) chunk_lines: u64,
    pub(crate) dirty_chunks: HashMap<(u64, u64), u32>,
    /// Requests that met a cache device error (toward `policy.error_threshold`).
    pub(crate) error_requests: u64,
    /// Whether a missed line may be inserted now.
    pub(crate) promotion: Box<dyn PromotionPolicy>,
    pub(crate) policy: Policy,
    pub(crate) cleaner_passes: u64,
    pub(crate) cleaned_lines: u64,
    pub(crate) cleaner_errors: u64,
}

impl Inner {
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

    pub(crate) fn record(&self, s: u32) -> Record {
        let sl = &self.slots[s as usize];
        match sl.key {
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
        sl.key = Some(key);
        sl.valid = 0;
        sl.dirty = 0;
        sl.class = class;
        sl.last_write = None;
        self.index.insert(key, s);
        self.objects.entry(key.0).or_default().insert(key.1);
        self.links
            .push_front(list_of(&mut self.classes, class, false), s);
    }

    pub(crate) fn detach(&mut self, s: u32) {
        let (key, class, dirty) = {
            let sl = &self.slots[s as usize];
            (sl.key, sl.class, sl.dirty != 0)
        };
        let Some(key) = key else { return };
        self.index.remove(&key);
        if let Some(lines) = self.objects.get_mut(&key.0) {
            lines.remove(&key.1);
            if lines.is_empty() {
                self.objects.remove(&key.0);
            }
        }
        self.links
            .remove(list_of(&mut self.classes, class, dirty), s);
        if dirty {
            self.dirty_lines -= 1;
            self.count_chunk(key, false);
        }
        let sl = &mut self.slots[s as usize];
        sl.key = None;
        sl.valid = 0;
        sl.dirty = 0;
        sl.last_write = None;
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
            self.slots[s as usize].last_write = Some(now);
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
        let (was, class) = {
            let sl = &self.slots[s as usize];
            (sl.dirty != 0, sl.class)
        };
        let is = dirty != 0;
        {
            let sl = &mut self.slots[s as usize];
            sl.dirty = dirty;
            if is && !was {
                sl.last_write = Some(now);
            } else if !is {
                sl.last_write = None;
            }
        }
        if is != was {
            self.links.remove(list_of(&mut self.classes, class, was), s);
            self.links
                .push_front(list_of(&mut self.classes, class, is), s);
            if is {
                self.dirty_lines += 1;
            } else {
                self.dirty_lines -= 1;
            }
            if let Some(key) = self.slots[s as usize].key {
                self.count_chunk(key, is);
            }
        }
    }
}
