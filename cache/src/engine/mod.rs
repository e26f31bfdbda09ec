//! The cache proper, as the volume sees it: the `Cache` type and its public API. The request
//! path lives beside it: `read`, `write`, `range` (truncate, forget), `clean` (write-back,
//! flush, the cleaner thread) and `durability` (records of a file store, recovery). What is
//! kept about each line is in `crate::metadata`; which line goes, which is inserted and which
//! is cleaned are the policies of `crate::eviction`, `crate::promotion` and `crate::cleaning`.

use crate::attach::{attach, Attached};
use crate::cleaning::{self, Cleaning, Limiter};
use crate::clock::{Clock, SystemClock};
use crate::eviction::{Eviction, Lru};
use crate::metadata::{shard_of, Class, Shard, Shared, Totals};
use crate::mode::{ClassConfig, Cleaner, Mode, Policy, Promotion};
use crate::promotion;
use crate::stats::{CacheStats, ClassStats, Counters};
use crate::store::{Store, EMPTY};
use crate::{Backend, ClassId, DEFAULT_CLASS, SECTOR};
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

mod admin;
mod clean;
mod durability;
mod probe;
mod range;
mod read;
mod request;
mod rescue;
#[cfg(test)]
mod tests;
mod write;

pub use admin::{MetadataMemory, Purged};
pub(crate) use request::runs;
pub use rescue::DirtyRun;

#[derive(Clone, Debug, PartialEq)]
pub enum StoreKind {
    Ram,
    /// A cache file at this path (a directory on the fast device, or the file itself).
    File(PathBuf),
}

#[derive(Clone)]
pub struct CacheConfig {
    pub store: StoreKind,
    pub size: u64,
    pub line_size: u64,
    pub default_mode: Mode,
    /// Eviction priority of the volume default's class (files outside every target): 0 is
    /// kept longest; a class evicts only lines of classes numbered the same or higher.
    pub default_priority: u8,
    pub policy: Policy,
    /// The volume the cache belongs to; a file store of another volume is refused.
    pub volume: [u8; 16],
    /// Discard an existing cache file (foreign, or made with other settings), unless it
    /// holds unwritten data and `discard_dirty` is not given.
    pub reset: bool,
    /// Drop unwritten (dirty) data where a cache cannot be used as it is.
    pub discard_dirty: bool,
    /// The volume generation now: a cache file of another generation holds stale lines.
    pub generation: u64,
    /// The cache (by id) the volume last used, whose lines may still be current.
    pub bound: Option<[u8; 16]>,
    /// The volume knows that its bound cache holds data not yet on the core: that cache
    /// missing, replaced or damaged refuses to open.
    pub holds_dirty: bool,
    /// Called once, before the first dirty line becomes durable in a cache file: the owner
    /// records that the cache now holds data the core lacks.
    pub on_first_dirty: Option<Arc<dyn Fn() -> io::Result<()> + Send + Sync>>,
    /// A model that makes the store behave like a slower device.
    pub throttle: Option<Arc<dyn crate::Throttle>>,
    /// A file store's file lives in memory (tmpfs, ramfs): its I/O is a copy, never a wait
    /// on a device (but for `throttle`'s modelled one).
    pub file_in_memory: bool,
    /// The time the cleaner decides by; `None`: the system's.
    pub clock: Option<Arc<dyn Clock>>,
    /// Metadata shards of a new store (0: by its size, see `auto_shards`); a cache file keeps
    /// the number it was made with.
    pub shards: usize,
}

/// Shards for a cache of `lines` lines: one per 1024 lines, 1 to 16 (a small cache stays one
/// LRU; a large one lets requests of different lines go on in parallel).
pub fn auto_shards(lines: u64) -> usize {
    (lines / 1024).clamp(1, 16) as usize
}

/// One shard's metadata and the signal that one of its lines was released.
struct ShardLock {
    meta: Mutex<Shard>,
    released: Condvar,
}

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("cache: {0}")]
    Io(#[from] io::Error),
    #[error("cache file {path} belongs to another volume{}; --cache-reset replaces it{}", held(*dirty_lines), lost(*dirty_lines))]
    Foreign { path: String, dirty_lines: usize },
    #[error("cache file {path} was made with line size {line_size} and {slots} lines; the config asks for {want}. Mount with the settings it was made with and unmount (that writes its data back), or --cache-reset replaces it (refused while it holds unwritten data)")]
    Mismatch {
        path: String,
        line_size: u64,
        slots: u64,
        want: String,
    },
    #[error("cache file {0} is missing, but the volume records that its cache holds data not yet written to the devices (acknowledged writes). Make it reachable (is its device mounted?) and mount again; --cache-reset --discard-dirty mounts without it and LOSES that data")]
    Missing(String),
    #[error("cache file {0} is not the cache that holds this volume's unwritten data (another file is in its place). Put the right one back and mount again; --cache-reset --discard-dirty LOSES that data")]
    NotBound(String),
    #[error("cache file {path} is damaged: {what}. Its unwritten data cannot be trusted; `stripefs fsck` names the files it may hold; --cache-reset --discard-dirty drops it (that data is LOST)")]
    Damaged { path: String, what: String },
    #[error("cache file {0} has format 1 (an older stripefs) and was not stopped clean: mount it with that version and unmount, or --cache-reset --discard-dirty drops what it holds (LOST)")]
    Format1(String),
    #[error("{0} exists and is not a stripefs cache file; it is neither used nor replaced: point the config's cache store elsewhere")]
    NotCache(String),
    #[error("--cache-reset would drop cache file {path}, which holds {dirty_lines} line(s) of data not yet written to the devices{}. Mount without --cache-reset (that writes them back), or add --discard-dirty to drop them (LOST)", if *damaged > 0 { format!(" and {damaged} damaged record(s)") } else { String::new() })]
    DirtyReset {
        path: String,
        dirty_lines: usize,
        damaged: usize,
    },
    #[error("cache: {0}")]
    Config(String),
}

pub struct Cache {
    backend: Arc<dyn Backend>,
    store: Store,
    line: u64,
    nslots: usize,
    shards: Box<[ShardLock]>,
    /// Slots per shard (the last shard takes the rest).
    per_shard: u32,
    totals: Arc<Totals>,
    shared: Mutex<Shared>,
    /// The promotion policy is `always` (no request needs to ask it).
    promotes_always: AtomicBool,
    /// Dirty lines at which a write wakes the cleaner (alru's dirty ratio threshold).
    wake_at_dirty: AtomicUsize,
    /// Which dirty lines the cleaner writes back, and when; and its bandwidth limit.
    cleaning: Mutex<(Box<dyn Cleaning>, Limiter)>,
    clock: Arc<dyn Clock>,
    /// Which clean line makes room.
    eviction: Box<dyn Eviction>,
    /// Wakes the cleaner early (it waits on `shared`).
    wake: Condvar,
    stop: AtomicBool,
    volume: [u8; 16],
    /// Made when the cache file was: the volume names the cache holding its dirty data by it.
    id: [u8; 16],
    generation: u64,
    /// The owner knows the cache may hold dirty data (`on_first_dirty` was called, or the
    /// volume knew it at open).
    dirty_declared: Mutex<bool>,
    on_first_dirty: Option<Arc<dyn Fn() -> io::Result<()> + Send + Sync>>,
    /// The cache device failed: everything runs pass-through; dirty lines stay where they are.
    failed: AtomicBool,
}

fn held(dirty_lines: usize) -> String {
    if dirty_lines > 0 {
        format!(" and holds {dirty_lines} line(s) of its unwritten data")
    } else {
        String::new()
    }
}

fn lost(dirty_lines: usize) -> &'static str {
    if dirty_lines > 0 {
        " only with --discard-dirty (that volume LOSES that data)"
    } else {
        ""
    }
}

/// Dirty lines at which a write wakes the cleaner early.
fn wake_at_dirty(cleaner: &Cleaner, lines: usize) -> usize {
    let pct = cleaner.dirty_ratio_threshold as usize;
    if pct < 100 {
        lines * pct / 100
    } else {
        usize::MAX
    }
}

fn io_err(msg: String) -> io::Error {
    io::Error::other(msg)
}

impl Cache {
    /// Opens a cache. A file store finds the lines it held: all of them after a clean stop,
    /// only the dirty ones after a crash (those are written back by `recover`).
    pub fn open(cfg: CacheConfig, backend: Arc<dyn Backend>) -> Result<Arc<Cache>, CacheError> {
        let line = cfg.line_size;
        if !line.is_power_of_two() || !(SECTOR..=64 * SECTOR).contains(&line) {
            return Err(CacheError::Config(format!(
                "line size {line} must be a power of two from 4K to 256K"
            )));
        }
        let nslots = cfg.size / line;
        if nslots == 0 {
            return Err(CacheError::Config(format!(
                "cache size {} is smaller than one line ({line})",
                cfg.size
            )));
        }
        let Attached {
            mut store,
            records,
            id,
            shards: nshards,
        } = attach(&cfg, line, nslots)?;
        store.throttle = cfg.throttle.clone();
        store.medium_in_memory |= cfg.file_in_memory;
        let mut default = ClassConfig::new("default", cfg.default_mode);
        default.priority = cfg.default_priority;
        let nshards = nshards.clamp(1, nslots as usize);
        let per_shard = (nslots / nshards as u64) as u32;
        let totals = Arc::new(Totals::default());
        let chunk_lines = (cleaning::ACP_CHUNK / line).max(1);
        let clock = cfg.clock.clone().unwrap_or_else(|| Arc::new(SystemClock));
        let now = clock.now();
        let mut shards: Vec<Shard> = (0..nshards)
            .map(|k| {
                let base = k as u32 * per_shard;
                let end = if k + 1 == nshards {
                    nslots as u32
                } else {
                    base + per_shard
                };
                Shard::new(
                    (k, nshards),
                    base..end,
                    default.clone(),
                    chunk_lines,
                    now,
                    totals.clone(),
                )
            })
            .collect();
        let shard_of_slot = |s: u32| ((s / per_shard) as usize).min(nshards - 1);
        for (i, r) in records.iter().enumerate() {
            if r.object == EMPTY || r.valid == 0 {
                continue;
            }
            let s = i as u32;
            let g = &mut shards[shard_of_slot(s)];
            let damaged = |what: String| CacheError::Damaged {
                path: store
                    .path
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                what,
            };
            if shard_of(r.object, r.line, nshards) != shard_of_slot(s) {
                // Not where this geometry looks for it (a damaged record): the store's check
                // at attach keeps this from happening to a file made by this code.
                return Err(damaged(format!("slot {s} holds a line of another shard")));
            }
            if let Some(other) = g.lookup((r.object, r.line)) {
                // Two records of one line (a record that could not be wiped when the cache
                // device failed): which is newer cannot be told, so neither is trusted.
                return Err(damaged(format!(
                    "slots {other} and {s} both hold line {} of object {}",
                    r.line, r.object
                )));
            }
            g.attach(s, (r.object, r.line), DEFAULT_CLASS);
            let slot = &mut g.slots[s as usize];
            slot.valid = r.valid;
            slot.disk_dirty = r.dirty != 0;
            g.set_dirty(s, r.dirty & r.valid, now);
        }
        for g in &mut shards {
            // The lowest free slot is taken first.
            for s in g.slots.range().rev() {
                if g.slots[s as usize].key().is_none() {
                    g.give_back(s);
                }
            }
        }
        Ok(Arc::new(Cache {
            backend,
            store,
            line,
            nslots: nslots as usize,
            shards: shards
                .into_iter()
                .map(|meta| ShardLock {
                    meta: Mutex::new(meta),
                    released: Condvar::new(),
                })
                .collect(),
            per_shard,
            totals,
            shared: Mutex::new(Shared {
                class_modes: vec![Some(cfg.default_mode)],
                streams: Default::default(),
                last_io: None,
                error_requests: 0,
                promotion: promotion::from_setting(cfg.policy.promotion, nslots as usize),
                policy: cfg.policy.clone(),
                cleaner_passes: 0,
                cleaned_lines: 0,
                cleaner_errors: 0,
                unsynced: Default::default(),
            }),
            promotes_always: AtomicBool::new(cfg.policy.promotion == Promotion::Always),
            wake_at_dirty: AtomicUsize::new(wake_at_dirty(&cfg.policy.cleaner, nslots as usize)),
            cleaning: Mutex::new((
                cleaning::from_config(&cfg.policy.cleaner),
                Limiter::default(),
            )),
            clock,
            eviction: Box::new(Lru),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
            volume: cfg.volume,
            id,
            generation: cfg.generation,
            dirty_declared: Mutex::new(cfg.holds_dirty && cfg.bound == Some(id)),
            on_first_dirty: cfg.on_first_dirty.clone(),
            failed: AtomicBool::new(false),
        }))
    }

    /// The shard a line belongs to.
    pub(crate) fn shard_index(&self, object: u64, line: u64) -> usize {
        shard_of(object, line, self.shards.len())
    }

    /// The shard that owns a slot.
    pub(crate) fn shard_of_slot(&self, s: u32) -> usize {
        ((s / self.per_shard) as usize).min(self.shards.len() - 1)
    }

    /// Locks one shard.
    pub(crate) fn shard(&self, k: usize) -> MutexGuard<'_, Shard> {
        self.shards[k].meta.lock()
    }

    /// Locks every shard, in order (what needs the whole cache at once: the cleaner's pick).
    pub(crate) fn all_shards(&self) -> Vec<MutexGuard<'_, Shard>> {
        self.shards.iter().map(|s| s.meta.lock()).collect()
    }

    /// Runs `f` on each shard in turn, one lock at a time.
    pub(crate) fn each_shard(&self, mut f: impl FnMut(&mut Shard)) {
        for s in self.shards.iter() {
            f(&mut s.meta.lock());
        }
    }

    /// How many metadata shards the cache has.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    pub fn line_size(&self) -> u64 {
        self.line
    }

    /// The cache's identity (made with its file; a RAM store's is new at every mount).
    pub fn id(&self) -> [u8; 16] {
        self.id
    }

    /// Whether the store outlives the daemon (a cache file).
    pub fn persistent(&self) -> bool {
        self.store.persistent()
    }

    // ----- classes -----

    /// Adds a class (to every shard, at the same id); returns its id.
    pub fn add_class(&self, cfg: ClassConfig) -> ClassId {
        let mut all = self.all_shards();
        let id = all[0]
            .classes
            .iter()
            .position(Option::is_none)
            .unwrap_or(all[0].classes.len());
        for g in all.iter_mut() {
            if id == g.classes.len() {
                g.classes.push(None);
            }
            g.classes[id] = Some(Class::new(cfg.clone()));
        }
        drop(all);
        self.refresh_modes();
        id as ClassId
    }

    /// Copies the classes' modes where requests read them (after any class change).
    pub(super) fn refresh_modes(&self) {
        let modes = self
            .shard(0)
            .classes
            .iter()
            .map(|c| c.as_ref().map(|c| c.cfg.mode))
            .collect();
        self.shared.lock().class_modes = modes;
    }

    /// Changes a class; leaving a mode that holds dirty data writes its dirty lines back first.
    pub fn set_class(&self, id: ClassId, cfg: ClassConfig) -> io::Result<()> {
        let old = self
            .class(id)
            .ok_or_else(|| io_err(format!("no class {id}")))?;
        if old.mode.holds_dirty() && !cfg.mode.holds_dirty() {
            self.flush_where(&|_, class| class == id)?;
        }
        self.each_shard(|g| g.class_mut(id).cfg = cfg.clone());
        self.refresh_modes();
        Ok(())
    }

    pub fn class(&self, id: ClassId) -> Option<ClassConfig> {
        let g = self.shard(0);
        g.classes.get(id as usize)?.as_ref().map(|c| c.cfg.clone())
    }

    /// Removes a class: its dirty lines are written back and its lines join the default class.
    pub fn remove_class(&self, id: ClassId) -> io::Result<()> {
        if id == DEFAULT_CLASS {
            return Err(io_err("the default class cannot be removed".into()));
        }
        self.flush_where(&|_, class| class == id)?;
        self.each_shard(|g| {
            let slots: Vec<u32> = g
                .classes
                .get(id as usize)
                .and_then(Option::as_ref)
                .map(|c| {
                    g.links
                        .oldest_first(&c.clean)
                        .chain(g.links.oldest_first(&c.dirty))
                        .collect()
                })
                .unwrap_or_default();
            for s in slots {
                g.move_class(s, DEFAULT_CLASS);
            }
            if let Some(c) = g.classes.get_mut(id as usize) {
                // Keep what it counted in the default class's totals.
                if let Some(old) = c.take() {
                    g.class_mut(DEFAULT_CLASS).counters.add(&old.counters);
                }
            }
        });
        self.refresh_modes();
        Ok(())
    }

    pub fn default_mode(&self) -> Mode {
        self.shard(0).class_mut(DEFAULT_CLASS).cfg.mode
    }

    // ----- failure of the cache device -----

    /// Makes the store fail every I/O, as a dead cache device would (drills and tests).
    pub fn fail_store(&self) {
        self.store.broken.store(true, Ordering::Relaxed);
    }

    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    /// A request met a cache device error (it is served again pass-through): counted, and at
    /// `error_threshold` such requests the cache goes pass-through for good.
    pub(super) fn cache_error_request(&self) {
        let (n, threshold) = {
            let mut g = self.shared.lock();
            g.error_requests += 1;
            (g.error_requests, g.policy.error_threshold)
        };
        if threshold > 0 && n >= threshold {
            self.mark_failed();
        } else if n.is_power_of_two() {
            log::warn!(
                "cache device error ({n} request(s) so far{}): this request served by the core",
                if threshold > 0 {
                    format!("; pass-through for good at {threshold}")
                } else {
                    String::new()
                }
            );
        }
    }

    pub(super) fn mark_failed(&self) {
        if !self.failed.swap(true, Ordering::Relaxed) {
            let dirty = self.totals.dirty();
            log::error!(
                "CACHE DEVICE FAILED{}: running pass-through from now on; {dirty} dirty lines \
                 stay in the cache and are written back if it can still be read",
                self.store
                    .path
                    .as_ref()
                    .map(|p| format!(" ({})", p.display()))
                    .unwrap_or_default()
            );
        }
    }

    // ----- settings and statistics -----

    pub fn set_policy(&self, policy: Policy) {
        self.set_cleaner(policy.cleaner.clone());
        let mut g = self.shared.lock();
        self.apply_params(&mut g, policy);
    }

    /// Changes every setting but the cleaner's from what they are now, in one step: `change`
    /// sees the current settings (two changes at once never undo each other's words).
    pub fn update_params<E>(
        &self,
        change: impl FnOnce(&Policy) -> Result<Policy, E>,
    ) -> Result<Policy, E> {
        let mut g = self.shared.lock();
        let mut new = change(&g.policy)?;
        new.cleaner = g.policy.cleaner.clone();
        self.apply_params(&mut g, new.clone());
        Ok(new)
    }

    fn apply_params(&self, g: &mut Shared, policy: Policy) {
        if g.policy.promotion != policy.promotion {
            g.promotion = promotion::from_setting(policy.promotion, self.nslots);
        }
        self.promotes_always
            .store(policy.promotion == Promotion::Always, Ordering::Relaxed);
        g.policy = policy;
    }

    pub fn policy(&self) -> Policy {
        self.shared.lock().policy.clone()
    }

    /// Changes the cleaning policy or its settings, live; the cleaner takes them at once.
    pub fn set_cleaner(&self, cleaner: Cleaner) {
        {
            let mut c = self.cleaning.lock();
            let mut g = self.shared.lock();
            if g.policy.cleaner != cleaner {
                c.0 = cleaning::from_config(&cleaner);
                self.wake_at_dirty
                    .store(wake_at_dirty(&cleaner, self.nslots), Ordering::Relaxed);
                g.policy.cleaner = cleaner;
            }
        }
        self.wake.notify_all();
    }

    /// The dirty lines, by (object, line) (tests).
    #[cfg(test)]
    pub(crate) fn dirty_keys(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        self.each_shard(|g| {
            out.extend(
                g.cached()
                    .filter(|&(_, s)| g.slots[s as usize].dirty != 0)
                    .map(|(k, _)| k),
            )
        });
        out
    }

    #[cfg(test)]
    pub(crate) fn is_dirty(&self, object: u64, line: u64) -> bool {
        self.dirty_keys().contains(&(object, line))
    }

    /// The time as the cache's clock has it.
    pub(crate) fn now(&self) -> Instant {
        self.clock.now()
    }

    pub fn stats(&self) -> CacheStats {
        let mut classes: Vec<Option<ClassStats>> = Vec::new();
        let mut dirty_bytes = 0;
        let mut occupied = 0;
        let mut dirty_lines = 0;
        self.each_shard(|g| {
            occupied += g.occupied as u64;
            dirty_lines += g.dirty_lines as u64;
            dirty_bytes += g
                .cached()
                .map(|(_, s)| g.slots[s as usize].dirty.count_ones() as u64 * SECTOR)
                .sum::<u64>();
            classes.resize(classes.len().max(g.classes.len()), None);
            for (id, c) in g.classes.iter().enumerate() {
                let Some(c) = c else { continue };
                let e = classes[id].get_or_insert_with(|| ClassStats {
                    id: id as u16,
                    name: c.cfg.name.clone(),
                    mode: c.cfg.mode.name().into(),
                    priority: c.cfg.priority,
                    allocation: c.cfg.allocation,
                    pinned: c.cfg.pinned,
                    occupancy_lines: 0,
                    dirty_lines: 0,
                    counters: Counters::default(),
                });
                e.occupancy_lines += c.lines() as u64;
                e.dirty_lines += c.dirty.len() as u64;
                e.counters.add(&c.counters);
            }
        });
        let classes: Vec<ClassStats> = classes.into_iter().flatten().collect();
        let mut total = Counters::default();
        for c in &classes {
            total.add(&c.counters);
        }
        let g = self.shared.lock();
        CacheStats {
            failed: self.failed(),
            emulated: self.store.throttle.as_ref().map(|t| t.describe()),
            store: if self.store.persistent() {
                "file"
            } else {
                "ram"
            }
            .into(),
            path: self.store.path.as_ref().map(|p| p.display().to_string()),
            default_mode: classes
                .first()
                .map(|c| c.mode.clone())
                .unwrap_or_else(|| "pt".into()),
            size_bytes: self.nslots as u64 * self.line,
            line_size: self.line,
            lines: self.nslots as u64,
            shards: self.shards.len() as u64,
            occupancy_lines: occupied,
            free_lines: self.nslots as u64 - occupied,
            clean_lines: occupied - dirty_lines,
            dirty_lines,
            occupancy_bytes: occupied * self.line,
            dirty_bytes,
            counters: total,
            cleaner_passes: g.cleaner_passes,
            cleaned_lines: g.cleaned_lines,
            cleaner_errors: g.cleaner_errors,
            cleaner: g.policy.cleaner.summary(),
            error_requests: g.error_requests,
            error_threshold: g.policy.error_threshold,
            classes,
        }
    }
}
