//! Administration, as casadm's: a mode switch that leaves dirty lines where they are, counters
//! reset, clean lines purged, and what `stats` shows beyond the counters (the age of the
//! oldest dirty line, the policy, the memory the line metadata takes).

use super::Cache;
use crate::metadata::Slot;
use crate::mode::ClassConfig;
use crate::stats::Counters;
use crate::ClassId;
use std::io;
use std::mem::size_of;
use std::time::{Duration, Instant};

/// What a purge did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Purged {
    /// Clean lines dropped.
    pub lines: u64,
    /// Dirty lines it left (they hold data the core lacks: a flush writes them back).
    pub dirty_kept: u64,
    /// Clean lines in use by a request at that moment, left.
    pub busy: u64,
}

/// The bytes the line metadata takes, and how they are made up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MetadataMemory {
    /// Slots (one per line of the cache, 48 B): key, valid and dirty bitmaps, class, the time
    /// of the last dirtying write, hash chain.
    pub slots_bytes: u64,
    /// The LRU links (two u32 per slot).
    pub lru_bytes: u64,
    /// The hash index (object, line) -> slot: a u32 bucket head per one to two slots.
    pub index_bytes: u64,
    /// Per object with cached lines: their count, span and dirty sectors.
    pub objects_bytes: u64,
    pub total_bytes: u64,
    /// `total_bytes` per line of the cache.
    pub bytes_per_line: u64,
}

impl Cache {
    /// Changes a class without writing its dirty lines back, whatever the modes: they stay
    /// and the cleaner writes them back later (casadm -Q -f no). Any mode serves dirty lines
    /// correctly (pass-through cleans the dirty sectors it reads first).
    pub fn set_class_keeping_dirty(&self, id: ClassId, cfg: ClassConfig) -> io::Result<()> {
        if self.class(id).is_none() {
            return Err(io::Error::other(format!("no class {id}")));
        }
        self.each_shard(|g| {
            if let Some(c) = g.classes.get_mut(id as usize).and_then(Option::as_mut) {
                c.cfg = cfg.clone();
            }
        });
        self.refresh_modes();
        self.wake.notify_all();
        Ok(())
    }

    /// Undoes the stop of `shutdown` after it failed, so the cache can serve on (a detach
    /// that could not finish); the caller starts the cleaner again.
    pub fn resume(&self) {
        self.stop.store(false, std::sync::atomic::Ordering::Relaxed);
    }

    /// Every class's id and setting.
    pub fn class_configs(&self) -> Vec<(ClassId, ClassConfig)> {
        let g = self.shard(0);
        g.classes
            .iter()
            .enumerate()
            .filter_map(|(id, c)| Some((id as ClassId, c.as_ref()?.cfg.clone())))
            .collect()
    }

    /// Every request counter to zero, per class and so in total, and the cleaner's counts.
    pub fn reset_counters(&self) {
        self.each_shard(|g| {
            for c in g.classes.iter_mut().flatten() {
                c.counters = Counters::default();
            }
        });
        let mut g = self.shared.lock();
        g.cleaner_passes = 0;
        g.cleaned_lines = 0;
        g.cleaner_errors = 0;
    }

    /// Drops the clean lines that `pick(object, class)` selects; dirty lines are kept (and
    /// counted), and so are lines a request is using. A file store's records of dropped
    /// lines that still said dirty are emptied durably before this returns, so a crash cannot
    /// bring their old data back.
    pub fn purge_where(&self, pick: &dyn Fn(u64, ClassId) -> bool) -> io::Result<Purged> {
        let mut out = Purged::default();
        let mut wiped = false;
        let mut r = Ok(());
        self.each_shard(|g| {
            let chosen: Vec<u32> = g
                .cached()
                .filter(|&((o, _), s)| pick(o, g.slots[s as usize].class))
                .map(|(_, s)| s)
                .collect();
            for s in chosen {
                let (dirty, busy, disk_dirty) = {
                    let sl = &g.slots[s as usize];
                    (sl.dirty != 0, sl.busy, sl.disk_dirty)
                };
                if dirty {
                    out.dirty_kept += 1;
                    continue;
                }
                if busy {
                    out.busy += 1;
                    continue;
                }
                if disk_dirty {
                    // Written back, its record not yet rewritten: the core may not hold it
                    // durably yet. The core first, then the record that drops it.
                    let object = g.slots[s as usize].key().map(|k| k.0);
                    if let Some(Err(e)) = object.map(|o| self.backend.sync(o)) {
                        if r.is_ok() {
                            r = Err(e);
                        }
                        out.dirty_kept += 1;
                        continue;
                    }
                }
                g.detach(s);
                g.give_back(s);
                out.lines += 1;
                if disk_dirty && r.is_ok() {
                    r = self.record_locked(g, s);
                    wiped = true;
                }
            }
        });
        r?;
        if wiped {
            self.store.sync()?;
        }
        Ok(out)
    }

    /// (clean, dirty) lines that `pick(object, class)` selects.
    pub fn lines_where(&self, pick: &dyn Fn(u64, ClassId) -> bool) -> (u64, u64) {
        let mut out = (0, 0);
        self.each_shard(|g| {
            for ((o, _), s) in g.cached() {
                let sl = &g.slots[s as usize];
                if pick(o, sl.class) {
                    if sl.dirty != 0 {
                        out.1 += 1;
                    } else {
                        out.0 += 1;
                    }
                }
            }
        });
        out
    }

    /// Writes back the dirty lines of one class.
    pub fn flush_class(&self, id: ClassId) -> io::Result<()> {
        self.flush_where(&|_, class| class == id)
    }

    /// How long ago the least recently written dirty line was written, in total and per class
    /// (by class id): how long the oldest unwritten data has waited.
    pub fn dirty_for(&self) -> (Option<Duration>, Vec<(ClassId, Duration)>) {
        let now = self.clock.now();
        let mut per: Vec<Option<Instant>> = Vec::new();
        self.each_shard(|g| {
            per.resize(per.len().max(g.classes.len()), None);
            for (_, s) in g.cached() {
                let sl = &g.slots[s as usize];
                if let (Some(since), true) = (g.last_write(s), sl.dirty != 0) {
                    let last = per.len() - 1;
                    let e = &mut per[(sl.class as usize).min(last)];
                    *e = Some(e.map_or(since, |t| t.min(since)));
                }
            }
        });
        let classes: Vec<(ClassId, Duration)> = per
            .iter()
            .enumerate()
            .filter_map(|(id, t)| t.map(|t| (id as ClassId, now.duration_since(t))))
            .collect();
        let total = classes.iter().map(|c| c.1).max();
        (total, classes)
    }

    /// What the line metadata takes in memory: each structure's element size times the
    /// elements it has room for (its capacity, not only what is in use).
    pub fn metadata_memory(&self) -> MetadataMemory {
        let n = self.nslots as u64;
        let (mut slots_bytes, mut index_bytes, mut objects_bytes) = (0, 0, 0);
        self.each_shard(|g| {
            slots_bytes += g.slots.capacity() as u64 * size_of::<Slot>() as u64;
            let (index, objects) = g.index_bytes();
            index_bytes += index as u64;
            objects_bytes += objects as u64;
        });
        let lru_bytes = n * 2 * size_of::<u32>() as u64;
        let total_bytes = slots_bytes + lru_bytes + index_bytes + objects_bytes;
        MetadataMemory {
            slots_bytes,
            lru_bytes,
            index_bytes,
            objects_bytes,
            total_bytes,
            bytes_per_line: total_bytes / n.max(1),
        }
    }
}
