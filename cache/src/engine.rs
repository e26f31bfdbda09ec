//! The cache proper: line index, modes, eviction, cleaning, persistence and recovery.

use crate::attach::{attach, Attached};
use crate::lru::{Links, List};
use crate::mode::{ClassConfig, Mode, Policy, Promotion, SeqCutoff};
use crate::stats::{CacheStats, ClassStats, Counters};
use crate::store::{Header, Record, Store, EMPTY};
use crate::{Backend, ClassId, DEFAULT_CLASS, SECTOR};
use parking_lot::{Condvar, Mutex, MutexGuard};
use rustc_hash::FxHashMap as HashMap;
use std::collections::BTreeSet;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

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

struct Slot {
    key: Option<(u64, u64)>,
    valid: u64,
    dirty: u64,
    class: ClassId,
    dirty_since: Option<Instant>,
    busy: bool,
    /// The durable record of this slot says dirty: it must be rewritten before reuse.
    disk_dirty: bool,
}

struct Class {
    cfg: ClassConfig,
    clean: List,
    dirty: List,
    counters: Counters,
}

impl Class {
    fn lines(&self) -> usize {
        self.clean.len() + self.dirty.len()
    }
}

/// The LRU list a slot of `class` is on.
fn list_of(classes: &mut [Option<Class>], class: ClassId, dirty: bool) -> &mut List {
    let c = classes[class as usize]
        .as_mut()
        .expect("a slot's class is live");
    if dirty {
        &mut c.dirty
    } else {
        &mut c.clean
    }
}

struct Inner {
    slots: Vec<Slot>,
    free: Vec<u32>,
    index: HashMap<(u64, u64), u32>,
    objects: HashMap<u64, BTreeSet<u64>>,
    classes: Vec<Option<Class>>,
    links: Links,
    dirty_lines: usize,
    /// Per object: where the last request ended and how long the sequential run is.
    streams: HashMap<u64, (u64, u64)>,
    /// Misses per line not yet promoted (nhit promotion).
    misses: HashMap<(u64, u64), u32>,
    policy: Policy,
    cleaner_passes: u64,
    cleaned_lines: u64,
    cleaner_errors: u64,
}

pub struct Cache {
    backend: Arc<dyn Backend>,
    store: Store,
    line: u64,
    nslots: usize,
    inner: Mutex<Inner>,
    /// Signalled whenever a busy line is released.
    released: Condvar,
    /// Wakes the cleaner early.
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

/// One line's share of a request.
struct Part {
    line: u64,
    slot: Option<u32>,
    /// Byte range inside the line.
    a: u64,
    b: u64,
    /// Where in the caller's buffer it starts.
    buf: usize,
    /// Sector masks: touched, and fully covered.
    touched: u64,
    full: u64,
    /// Valid and dirty bits when planned (stable while the slot is busy).
    valid: u64,
    dirty: u64,
}

fn mask(from: u64, to: u64) -> u64 {
    if to <= from {
        return 0;
    }
    let n = to - from;
    let bits = if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
    bits << from
}

/// Runs of set bits: (first sector, end sector).
fn runs(m: u64) -> Vec<(u64, u64)> {
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
        } = attach(&cfg, line, nslots)?;
        store.throttle = cfg.throttle.clone();
        let mut default = ClassConfig::new("default", cfg.default_mode);
        default.priority = 1;
        let mut inner = Inner {
            slots: (0..nslots)
                .map(|_| Slot {
                    key: None,
                    valid: 0,
                    dirty: 0,
                    class: DEFAULT_CLASS,
                    dirty_since: None,
                    busy: false,
                    disk_dirty: false,
                })
                .collect(),
            free: Vec::new(),
            index: HashMap::default(),
            objects: HashMap::default(),
            classes: vec![Some(Class {
                cfg: default,
                clean: List::default(),
                dirty: List::default(),
                counters: Counters::default(),
            })],
            links: Links::new(nslots as usize),
            dirty_lines: 0,
            streams: HashMap::default(),
            misses: HashMap::default(),
            policy: cfg.policy.clone(),
            cleaner_passes: 0,
            cleaned_lines: 0,
            cleaner_errors: 0,
        };
        let now = Instant::now();
        for (i, r) in records.iter().enumerate() {
            if r.object == EMPTY || r.valid == 0 {
                continue;
            }
            let s = i as u32;
            inner.attach(s, (r.object, r.line), DEFAULT_CLASS);
            let slot = &mut inner.slots[s as usize];
            slot.valid = r.valid;
            slot.disk_dirty = r.dirty != 0;
            inner.set_dirty(s, r.dirty & r.valid, now);
        }
        inner.free = (0..nslots as u32)
            .rev()
            .filter(|&s| inner.slots[s as usize].key.is_none())
            .collect();
        Ok(Arc::new(Cache {
            backend,
            store,
            line,
            nslots: nslots as usize,
            inner: Mutex::new(inner),
            released: Condvar::new(),
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

    /// After a crash: drops lines of objects that no longer exist, clips the rest to the
    /// object's size, and writes every dirty line back. `size_of` answers for each object.
    pub fn recover(&self, size_of: &dyn Fn(u64) -> Option<u64>) -> io::Result<usize> {
        let found: Vec<(u64, u64, u32)> = {
            let g = self.inner.lock();
            g.index.iter().map(|(&(o, l), &s)| (o, l, s)).collect()
        };
        {
            let mut g = self.inner.lock();
            for (o, l, s) in found {
                let size = size_of(o).unwrap_or(0);
                let keep_to = size.div_ceil(SECTOR) * SECTOR;
                let start = l * self.line;
                if keep_to <= start {
                    g.detach(s);
                    if g.slots[s as usize].disk_dirty {
                        self.record_locked(&mut g, s)?;
                    }
                    g.free.push(s);
                    continue;
                }
                if keep_to < start + self.line {
                    let cut = !mask(0, (keep_to - start) / SECTOR);
                    let dirty = g.slots[s as usize].dirty & !cut;
                    g.slots[s as usize].valid &= !cut;
                    // Through set_dirty: a line left clean moves to its clean list.
                    g.set_dirty(s, dirty, Instant::now());
                }
                // The sector holding the end of file: what lies past the end reads as zeros
                // (it was written before a shrink that the crash cut short).
                let tail = size % SECTOR;
                let eof_sector = (size / SECTOR).checked_sub(start / SECTOR);
                if let (true, Some(k)) = (tail != 0, eof_sector) {
                    if k < self.line / SECTOR && g.slots[s as usize].valid & (1 << k) != 0 {
                        let zeros = vec![0u8; (SECTOR - tail) as usize];
                        self.store.write(s, size - start, &zeros)?;
                    }
                }
            }
        }
        self.store.sync()?;
        // Every dirty line is tried; one that cannot be written back (its device failed)
        // stays dirty in the cache, durable, for the cleaner to retry: the volume mounts.
        let dirty: Vec<(u64, u64)> = {
            let g = self.inner.lock();
            g.index
                .iter()
                .filter(|(_, &s)| g.slots[s as usize].dirty != 0)
                .map(|(&k, _)| k)
                .collect()
        };
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

    // ----- classes -----

    /// Adds a class; returns its id.
    pub fn add_class(&self, cfg: ClassConfig) -> ClassId {
        let mut g = self.inner.lock();
        let class = Class {
            cfg,
            clean: List::default(),
            dirty: List::default(),
            counters: Counters::default(),
        };
        match g.classes.iter().position(Option::is_none) {
            Some(i) => {
                g.classes[i] = Some(class);
                i as ClassId
            }
            None => {
                g.classes.push(Some(class));
                (g.classes.len() - 1) as ClassId
            }
        }
    }

    /// Changes a class; leaving a mode that holds dirty data writes its dirty lines back first.
    pub fn set_class(&self, id: ClassId, cfg: ClassConfig) -> io::Result<()> {
        let leaving_dirty = {
            let g = self.inner.lock();
            let c = g.classes.get(id as usize).and_then(Option::as_ref);
            let old = c
                .map(|c| c.cfg.mode)
                .ok_or_else(|| io_err(format!("no class {id}")))?;
            old.holds_dirty() && !cfg.mode.holds_dirty()
        };
        if leaving_dirty {
            self.flush_where(&|_, class| class == id)?;
        }
        let mut g = self.inner.lock();
        g.class_mut(id).cfg = cfg;
        Ok(())
    }

    pub fn class(&self, id: ClassId) -> Option<ClassConfig> {
        let g = self.inner.lock();
        g.classes.get(id as usize)?.as_ref().map(|c| c.cfg.clone())
    }

    /// Removes a class: its dirty lines are written back and its lines join the default class.
    pub fn remove_class(&self, id: ClassId) -> io::Result<()> {
        if id == DEFAULT_CLASS {
            return Err(io_err("the default class cannot be removed".into()));
        }
        self.flush_where(&|_, class| class == id)?;
        let mut g = self.inner.lock();
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
        Ok(())
    }

    pub fn default_mode(&self) -> Mode {
        self.inner.lock().class_mut(DEFAULT_CLASS).cfg.mode
    }

    // ----- data -----

    fn plan(&self, offset: u64, len: usize) -> Vec<Part> {
        let mut parts = Vec::new();
        let end = offset + len as u64;
        let mut pos = offset;
        while pos < end {
            let line = pos / self.line;
            let a = pos % self.line;
            let b = (end - line * self.line).min(self.line);
            parts.push(Part {
                line,
                slot: None,
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

    /// Marks the request's existing lines busy (waiting while another operation holds one),
    /// and allocates lines where `alloc` says so. Lines are taken in ascending order, so two
    /// requests never wait on each other in a cycle.
    fn acquire<'a>(
        &'a self,
        object: u64,
        parts: &mut [Part],
        class: ClassId,
        alloc: bool,
    ) -> MutexGuard<'a, Inner> {
        let mut g = self.inner.lock();
        loop {
            let busy = parts.iter().any(|p| {
                g.index
                    .get(&(object, p.line))
                    .is_some_and(|&s| g.slots[s as usize].busy)
            });
            if !busy {
                break;
            }
            self.released.wait(&mut g);
        }
        for p in parts.iter_mut() {
            let key = (object, p.line);
            let mut slot = g.index.get(&key).copied();
            if slot.is_none() && alloc && g.promote(key) {
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
            }
            p.slot = slot;
        }
        g
    }

    fn release(&self, g: &mut Inner, parts: &[Part]) {
        for s in parts.iter().filter_map(|p| p.slot) {
            g.slots[s as usize].busy = false;
        }
        self.released.notify_all();
    }

    /// A free slot, or an evicted clean one: the lowest-priority class's least recently used.
    fn allocate(&self, g: &mut Inner, class: ClassId) -> Option<u32> {
        let class = g.live_class(class);
        let own = g.classes.get(class as usize)?.as_ref()?;
        // A class at its share replaces its own lines, even while others are free.
        let over_share = own.lines() as f64 >= own.cfg.allocation * self.nslots as f64;
        let free = if over_share { None } else { g.free.pop() };
        if let Some(s) = free {
            // A freed slot whose durable record still says dirty is wiped before reuse.
            if g.slots[s as usize].disk_dirty {
                if self.write_empty_record(s).is_err() {
                    g.free.push(s);
                    return None;
                }
                g.slots[s as usize].disk_dirty = false;
            }
            return Some(s);
        }
        let mut order: Vec<ClassId> = if over_share {
            vec![class]
        } else {
            (0..g.classes.len() as ClassId)
                .filter(|&c| {
                    g.classes[c as usize]
                        .as_ref()
                        .is_some_and(|c| !c.cfg.pinned)
                })
                .collect()
        };
        order.sort_by_key(|&c| {
            std::cmp::Reverse(g.classes[c as usize].as_ref().map_or(0, |c| c.cfg.priority))
        });
        for c in order {
            // The least recently used clean line that no request holds.
            let victim = g.classes[c as usize].as_ref().and_then(|cl| {
                g.links.oldest_first(&cl.clean).find(|&s| {
                    let sl = &g.slots[s as usize];
                    !sl.busy && sl.dirty == 0
                })
            });
            if let Some(s) = victim {
                if g.slots[s as usize].disk_dirty {
                    if self.write_empty_record(s).is_err() {
                        continue;
                    }
                    g.slots[s as usize].disk_dirty = false;
                }
                g.detach(s);
                g.free.retain(|&f| f != s);
                return Some(s);
            }
        }
        // Everything evictable is dirty: let the cleaner catch up.
        self.wake.notify_one();
        None
    }

    fn write_empty_record(&self, slot: u32) -> io::Result<()> {
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

    /// Makes the store fail every I/O, as a dead cache device would (drills and tests).
    pub fn fail_store(&self) {
        self.store.broken.store(true, Ordering::Relaxed);
    }

    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    fn mark_failed(&self) {
        if !self.failed.swap(true, Ordering::Relaxed) {
            let dirty = self.inner.lock().dirty_lines;
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

    /// The mode a request runs in, with the sequential cutoff applied.
    fn effective_mode(
        &self,
        g: &mut Inner,
        object: u64,
        offset: u64,
        len: u64,
        class: ClassId,
    ) -> (Mode, bool) {
        let mode = g
            .classes
            .get(class as usize)
            .and_then(Option::as_ref)
            .map_or(Mode::Pt, |c| c.cfg.mode);
        if self.failed() {
            return (Mode::Pt, false);
        }
        if g.streams.len() > 4096 {
            g.streams.clear();
        }
        let run = match g.streams.get(&object) {
            Some(&(next, run)) if next == offset => run + len,
            _ => len,
        };
        g.streams.insert(object, (offset + len, run));
        let full = g.free.is_empty();
        let cut = match g.policy.seq_cutoff {
            SeqCutoff::Never => false,
            SeqCutoff::Always => run > g.policy.seq_threshold,
            SeqCutoff::Full => full && run > g.policy.seq_threshold,
        };
        (mode, cut && mode != Mode::Pt)
    }

    fn core_read(
        &self,
        object: u64,
        offset: u64,
        buf: &mut [u8],
        c: &mut Counters,
    ) -> io::Result<()> {
        self.backend
            .read(object, offset, buf)
            .inspect_err(|_| c.core_errors += 1)?;
        c.core_read_bytes += buf.len() as u64;
        Ok(())
    }

    fn core_write(
        &self,
        object: u64,
        offset: u64,
        data: &[u8],
        c: &mut Counters,
    ) -> io::Result<()> {
        self.backend
            .write(object, offset, data)
            .inspect_err(|_| c.core_errors += 1)?;
        c.core_write_bytes += data.len() as u64;
        Ok(())
    }

    /// Writes a busy slot's dirty sectors back to the core.
    fn clean_slot(
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
                .inspect_err(|_| c.cache_errors += 1)?;
            c.cache_read_bytes += buf.len() as u64;
            self.core_write(object, line * self.line + s0 * SECTOR, &buf, c)?;
        }
        Ok(())
    }

    pub fn read(&self, object: u64, offset: u64, buf: &mut [u8], class: ClassId) -> io::Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let mut c = Counters {
            caller_read_bytes: buf.len() as u64,
            ..Counters::default()
        };
        let mut parts = self.plan(offset, buf.len());
        let (mode, cutoff) = {
            let mut g = self.inner.lock();
            self.effective_mode(&mut g, object, offset, buf.len() as u64, class)
        };
        let insert = !cutoff && mode.read_inserts();
        drop(self.acquire(object, &mut parts, class, insert));
        let result = self.read_parts(object, offset, buf, &mut parts, mode, insert, &mut c);
        let mut g = self.inner.lock();
        let need: u32 = parts.iter().map(|p| p.touched.count_ones()).sum();
        let had: u32 = parts
            .iter()
            .map(|p| (p.touched & p.valid).count_ones())
            .sum();
        if mode == Mode::Pt || cutoff {
            c.pass_through_reads += 1;
        } else if had == need {
            c.read_hits += 1;
        } else if had > 0 {
            c.read_partial_misses += 1;
        } else {
            c.read_full_misses += 1;
        }
        let now = Instant::now();
        for p in &parts {
            if let Some(s) = p.slot {
                g.slots[s as usize].valid = p.valid;
                // Pass-through cleaned what it read.
                g.set_dirty(s, p.dirty, now);
                g.touch(s, class);
            }
        }
        g.drop_empty(&parts);
        g.class_mut(class).counters.add(&c);
        self.release(&mut g, &parts);
        drop(g);
        if result.is_err() && c.cache_errors > 0 && mode != Mode::Pt {
            // The cache device failed under this read: once more, pass-through.
            self.mark_failed();
            return self.read(object, offset, buf, class);
        }
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn read_parts(
        &self,
        object: u64,
        offset: u64,
        buf: &mut [u8],
        parts: &mut [Part],
        mode: Mode,
        insert: bool,
        c: &mut Counters,
    ) -> io::Result<()> {
        if mode == Mode::Pt {
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
                        .inspect_err(|_| c.cache_errors += 1)?;
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
                        .inspect_err(|_| c.cache_errors += 1)?;
                    c.cache_write_bytes += whole.len() as u64;
                    p.valid |= mask(s0, s1);
                }
            }
        }
        Ok(())
    }

    pub fn write(&self, object: u64, offset: u64, data: &[u8], class: ClassId) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let mut c = Counters {
            caller_write_bytes: data.len() as u64,
            ..Counters::default()
        };
        let mut parts = self.plan(offset, data.len());
        let (mode, cutoff) = {
            let mut g = self.inner.lock();
            self.effective_mode(&mut g, object, offset, data.len() as u64, class)
        };
        let inserts = !cutoff && matches!(mode, Mode::Wb | Mode::Wo | Mode::Wt);
        drop(self.acquire(object, &mut parts, class, inserts));
        let need: u32 = parts.iter().map(|p| p.touched.count_ones()).sum();
        let had: u32 = parts
            .iter()
            .map(|p| (p.touched & p.valid).count_ones())
            .sum();
        let result = self.write_parts(object, offset, data, &mut parts, mode, cutoff, &mut c);
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
        let mut g = self.inner.lock();
        if mode == Mode::Pt || cutoff {
            c.pass_through_writes += 1;
        } else if had == need {
            c.write_hits += 1;
        } else if had > 0 {
            c.write_partial_misses += 1;
        } else {
            c.write_full_misses += 1;
        }
        let now = Instant::now();
        for p in &parts {
            let Some(s) = p.slot else { continue };
            if p.valid == 0 {
                g.set_dirty(s, 0, now);
                g.detach(s);
                if g.slots[s as usize].disk_dirty && record_failed.is_none() {
                    record_failed = faultpoint::check("cache.record-wipe");
                    if record_failed.is_none() {
                        record_failed = self.record_locked(&mut g, s).err();
                        wiped = true;
                    }
                }
                g.free.push(s);
                continue;
            }
            g.slots[s as usize].valid = p.valid;
            g.set_dirty(s, p.dirty, now);
            g.touch(s, class);
            if p.dirty != 0 && record_failed.is_none() {
                record_failed = self.record_locked(&mut g, s).err();
            }
        }
        if record_failed.is_some() {
            c.cache_errors += 1;
        }
        g.class_mut(class).counters.add(&c);
        self.release(&mut g, &parts);
        if g.dirty_lines as f64 > g.policy.dirty_high * self.nslots as f64 {
            self.wake.notify_one();
        }
        drop(g);
        if wiped && record_failed.is_none() {
            record_failed = self.store.sync().err();
        }
        let result = match record_failed {
            Some(e) if result.is_ok() => Err(e),
            _ => result,
        };
        if result.is_err() && c.cache_errors > 0 && mode != Mode::Pt {
            // The cache device failed under this write: once more, pass-through.
            self.mark_failed();
            return self.write(object, offset, data, class);
        }
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn write_parts(
        &self,
        object: u64,
        offset: u64,
        data: &[u8],
        parts: &mut [Part],
        mode: Mode,
        cutoff: bool,
        c: &mut Counters,
    ) -> io::Result<()> {
        let to_cache_only = !cutoff && mode.holds_dirty();
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
            let invalidate = !cutoff && matches!(mode, Mode::Wi | Mode::Pt);
            if invalidate {
                if p.dirty != 0 {
                    self.clean_slot(object, p.line, s, p.dirty, c)?;
                }
                p.valid = 0;
                p.dirty = 0;
                continue;
            }
            // Which sectors the cache takes: all touched ones for inserting modes, else
            // (write-around, cutoff) only those it already holds or that are fully written.
            let inserting = !cutoff && matches!(mode, Mode::Wb | Mode::Wo | Mode::Wt);
            let take = if inserting {
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
                            .inspect_err(|_| c.cache_errors += 1)?;
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
                        .inspect_err(|_| c.cache_errors += 1)?;
                    c.cache_write_bytes += hi - lo;
                    continue;
                };
                self.store
                    .write(s, from, chunk)
                    .inspect_err(|_| c.cache_errors += 1)?;
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

    // ----- cleaning, flushing, durability -----

    /// Writes back every dirty line that `pick(object, class)` selects.
    fn flush_where(&self, pick: &dyn Fn(u64, ClassId) -> bool) -> io::Result<()> {
        let mut total = 0;
        self.flush_loop(pick, &mut |_, _| {}, &mut total)
    }

    fn flush_loop(
        &self,
        pick: &dyn Fn(u64, ClassId) -> bool,
        progress: &mut dyn FnMut(u64, u64),
        done: &mut u64,
    ) -> io::Result<()> {
        loop {
            let batch: Vec<(u64, u64)> = {
                let g = self.inner.lock();
                g.index
                    .iter()
                    .filter(|(&(o, _), &s)| {
                        let sl = &g.slots[s as usize];
                        sl.dirty != 0 && pick(o, sl.class)
                    })
                    .map(|(&k, _)| k)
                    .take(256)
                    .collect()
            };
            if batch.is_empty() {
                return Ok(());
            }
            let left = self.inner.lock().dirty_lines as u64;
            progress(*done, *done + left);
            *done += self.clean_keys(&batch)? as u64;
        }
    }

    /// Cleans the given lines (waiting for busy ones); returns how many it wrote back.
    fn clean_keys(&self, keys: &[(u64, u64)]) -> io::Result<usize> {
        let mut cleaned = Vec::new();
        let mut result = Ok(());
        for &(object, line) in keys {
            let mut parts = vec![Part {
                line,
                slot: None,
                a: 0,
                b: 0,
                buf: 0,
                touched: 0,
                full: 0,
                valid: 0,
                dirty: 0,
            }];
            let g = self.acquire(object, &mut parts, DEFAULT_CLASS, false);
            let class = parts[0]
                .slot
                .map(|s| g.slots[s as usize].class)
                .unwrap_or(DEFAULT_CLASS);
            drop(g);
            let mut c = Counters::default();
            let r = match parts[0].slot {
                Some(s) if parts[0].dirty != 0 => {
                    self.clean_slot(object, line, s, parts[0].dirty, &mut c)
                }
                _ => Ok(()),
            };
            let mut g = self.inner.lock();
            match &r {
                Ok(()) => {
                    if let Some(s) = parts[0].slot {
                        if parts[0].dirty != 0 {
                            g.set_dirty(s, 0, Instant::now());
                            cleaned.push((object, s));
                        }
                    }
                }
                Err(e) => {
                    // Never dropped: the line stays dirty and is tried again.
                    log::error!("write-back of object {object} line {line} failed: {e}");
                    g.cleaner_errors += 1;
                }
            }
            g.class_mut(class).counters.add(&c);
            self.release(&mut g, &parts);
            drop(g);
            if r.is_err() && result.is_ok() {
                result = r;
            }
        }
        // Core first, then the records that say those lines are clean.
        let mut objects: Vec<u64> = cleaned.iter().map(|c| c.0).collect();
        objects.sort_unstable();
        objects.dedup();
        for o in objects {
            self.backend.sync(o)?;
        }
        faultpoint::fault_point!("cache.clean-core-written");
        if self.store.persistent() && !cleaned.is_empty() {
            let slots: Vec<u32> = cleaned.iter().map(|c| c.1).collect();
            self.persist(&slots)?;
        }
        let n = cleaned.len();
        self.inner.lock().cleaned_lines += n as u64;
        result.map(|()| n)
    }

    /// Writes the records of `slots` and syncs the store.
    fn persist(&self, slots: &[u32]) -> io::Result<()> {
        loop {
            let mut g = self.inner.lock();
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
        faultpoint::fault_point!("cache.records-before-sync");
        self.store.sync()
    }

    /// Writes slot `s`'s record as memory has it now. Every record is written this way, under
    /// the lock: records reach the file in the order their states were made, so an older
    /// state (another file's line, since evicted and reused) never lands on a newer one.
    fn record_locked(&self, g: &mut Inner, s: u32) -> io::Result<()> {
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
    fn declare_dirty(&self) -> io::Result<()> {
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
    /// durable on the cache device with their records.
    pub fn sync_object(&self, object: u64) -> io::Result<()> {
        if self.store.persistent() {
            let slots: Vec<u32> = {
                let g = self.inner.lock();
                g.objects
                    .get(&object)
                    .map(|lines| {
                        lines
                            .iter()
                            .filter_map(|&l| g.index.get(&(object, l)).copied())
                            .collect()
                    })
                    .unwrap_or_default()
            };
            self.persist(&slots)?;
        } else {
            self.flush_where(&|o, _| o == object)?;
        }
        self.backend.sync(object)
    }

    /// Writes back the dirty lines of one object.
    pub fn flush_object(&self, object: u64) -> io::Result<()> {
        self.flush_where(&|o, _| o == object)
    }

    /// Writes back everything dirty; `progress(done, total)` hears how far it is.
    pub fn flush_all(&self, progress: &mut dyn FnMut(u64, u64)) -> io::Result<()> {
        let mut done = 0;
        self.flush_loop(&|_, _| true, progress, &mut done)?;
        progress(done, done);
        Ok(())
    }

    /// One pass of the background cleaner: stale dirty lines, or any when too many are dirty.
    pub fn clean_pass(&self) -> io::Result<usize> {
        let keys: Vec<(u64, u64)> = {
            let g = self.inner.lock();
            let urgent = g.dirty_lines as f64 > g.policy.dirty_high * self.nslots as f64;
            let stale = g.policy.staleness;
            let mut dirty: Vec<(Instant, (u64, u64))> = g
                .index
                .iter()
                .filter_map(|(&k, &s)| {
                    let sl = &g.slots[s as usize];
                    let since = sl.dirty_since?;
                    (sl.dirty != 0 && !sl.busy && (urgent || since.elapsed() >= stale))
                        .then_some((since, k))
                })
                .collect();
            dirty.sort_unstable_by_key(|d| d.0);
            dirty
                .into_iter()
                .take(g.policy.batch)
                .map(|d| d.1)
                .collect()
        };
        let n = if keys.is_empty() {
            0
        } else {
            self.clean_keys(&keys)?
        };
        self.inner.lock().cleaner_passes += 1;
        Ok(n)
    }

    /// Starts the background cleaner; it stops with `shutdown`.
    pub fn start_cleaner(self: &Arc<Self>) -> std::thread::JoinHandle<()> {
        let cache = self.clone();
        std::thread::Builder::new()
            .name("cache-cleaner".into())
            .spawn(move || {
                while !cache.stop.load(Ordering::Relaxed) {
                    {
                        let mut g = cache.inner.lock();
                        let wait = g.policy.wake_up;
                        cache.wake.wait_for(&mut g, wait);
                    }
                    if cache.stop.load(Ordering::Relaxed) {
                        break;
                    }
                    if let Err(e) = cache.clean_pass() {
                        log::error!("cache cleaner: {e}");
                    }
                }
            })
            .expect("cleaner thread")
    }

    /// Unmount: everything dirty written back, and a file store marked clean so its lines are
    /// trusted at the next mount.
    pub fn shutdown(&self) -> io::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        self.wake.notify_all();
        self.flush_all(&mut |_, _| {})?;
        if self.store.persistent() {
            let all: Vec<u32> = (0..self.nslots as u32).collect();
            self.persist(&all)?;
            faultpoint::fault_point!("cache.header-clean");
            self.store.write_header(&Header {
                volume: self.volume,
                id: self.id,
                generation: self.generation,
                line_size: self.line,
                slots: self.nslots as u64,
                clean: true,
            })?;
        }
        Ok(())
    }

    /// A file shrank to `size`: lines past it go, the tail of the last one reads as zeros.
    pub fn truncate(&self, object: u64, size: u64) -> io::Result<()> {
        let lines: Vec<u64> = {
            let g = self.inner.lock();
            g.objects
                .get(&object)
                .map(|l| l.range(size / self.line..).copied().collect())
                .unwrap_or_default()
        };
        let mut wiped = false;
        for line in lines {
            let mut parts = vec![Part {
                line,
                slot: None,
                a: 0,
                b: 0,
                buf: 0,
                touched: 0,
                full: 0,
                valid: 0,
                dirty: 0,
            }];
            let g = self.acquire(object, &mut parts, DEFAULT_CLASS, false);
            drop(g);
            let Some(s) = parts[0].slot else {
                self.release(&mut self.inner.lock(), &parts);
                continue;
            };
            let start = line * self.line;
            let keep = size.saturating_sub(start);
            let mut r = Ok(());
            if keep > 0
                && !keep.is_multiple_of(SECTOR)
                && parts[0].valid & mask(keep / SECTOR, keep / SECTOR + 1) != 0
            {
                let tail = vec![0u8; (SECTOR - keep % SECTOR) as usize];
                r = self.store.write(s, keep, &tail);
            }
            let cut = !mask(0, keep.div_ceil(SECTOR));
            let mut g = self.inner.lock();
            let disk_dirty = g.slots[s as usize].disk_dirty;
            {
                let sl = &mut g.slots[s as usize];
                sl.valid &= !cut;
            }
            let dirty = g.slots[s as usize].dirty & !cut;
            g.set_dirty(s, dirty, Instant::now());
            let emptied = g.slots[s as usize].valid == 0;
            if emptied {
                g.detach(s);
                // Wiped (durably before truncate returns), so a crash cannot bring the
                // dropped data back.
                if disk_dirty && r.is_ok() {
                    r = match faultpoint::check("cache.record-wipe") {
                        Some(e) => Err(e),
                        None => self.record_locked(&mut g, s),
                    };
                    wiped = true;
                }
                g.free.push(s);
            }
            self.release(&mut g, &parts);
            drop(g);
            r?;
        }
        if wiped {
            self.store.sync()?;
        }
        Ok(())
    }

    /// A file is gone: its lines are dropped, dirty or not.
    pub fn forget(&self, object: u64) -> io::Result<()> {
        self.truncate(object, 0)
    }

    pub fn set_policy(&self, policy: Policy) {
        self.inner.lock().policy = policy;
    }

    pub fn stats(&self) -> CacheStats {
        let g = self.inner.lock();
        let mut total = Counters::default();
        let classes: Vec<ClassStats> = g
            .classes
            .iter()
            .enumerate()
            .filter_map(|(id, c)| {
                let c = c.as_ref()?;
                total.add(&c.counters);
                Some(ClassStats {
                    id: id as u16,
                    name: c.cfg.name.clone(),
                    mode: c.cfg.mode.name().into(),
                    priority: c.cfg.priority,
                    allocation: c.cfg.allocation,
                    pinned: c.cfg.pinned,
                    occupancy_lines: c.lines() as u64,
                    dirty_lines: c.dirty.len() as u64,
                    counters: c.counters.clone(),
                })
            })
            .collect();
        let occupied = g.index.len() as u64;
        let dirty_bytes: u64 = g
            .index
            .values()
            .map(|&s| g.slots[s as usize].dirty.count_ones() as u64 * SECTOR)
            .sum();
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
            default_mode: g.classes[0]
                .as_ref()
                .map(|c| c.cfg.mode.name())
                .unwrap_or("pt")
                .into(),
            size_bytes: self.nslots as u64 * self.line,
            line_size: self.line,
            lines: self.nslots as u64,
            occupancy_lines: occupied,
            free_lines: self.nslots as u64 - occupied,
            clean_lines: occupied - g.dirty_lines as u64,
            dirty_lines: g.dirty_lines as u64,
            occupancy_bytes: occupied * self.line,
            dirty_bytes,
            counters: total,
            cleaner_passes: g.cleaner_passes,
            cleaned_lines: g.cleaned_lines,
            cleaner_errors: g.cleaner_errors,
            classes,
        }
    }
}

impl Inner {
    fn class_mut(&mut self, id: ClassId) -> &mut Class {
        match self.classes.get(id as usize) {
            Some(Some(_)) => self.classes[id as usize].as_mut().unwrap(),
            _ => self.classes[DEFAULT_CLASS as usize]
                .as_mut()
                .expect("default class"),
        }
    }

    fn live_class(&self, id: ClassId) -> ClassId {
        if self.classes.get(id as usize).is_some_and(Option::is_some) {
            id
        } else {
            DEFAULT_CLASS
        }
    }

    fn record(&self, s: u32) -> Record {
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

    /// Whether a missed line may be inserted now (promotion policy).
    fn promote(&mut self, key: (u64, u64)) -> bool {
        match self.policy.promotion {
            Promotion::Always => true,
            Promotion::Nhit(n) => {
                if self.misses.len() > 1 << 16 {
                    self.misses.clear();
                }
                let seen = self.misses.entry(key).or_insert(0);
                *seen += 1;
                if *seen >= n {
                    self.misses.remove(&key);
                    true
                } else {
                    false
                }
            }
        }
    }

    fn attach(&mut self, s: u32, key: (u64, u64), class: ClassId) {
        let class = self.live_class(class);
        let sl = &mut self.slots[s as usize];
        sl.key = Some(key);
        sl.valid = 0;
        sl.dirty = 0;
        sl.class = class;
        sl.dirty_since = None;
        self.index.insert(key, s);
        self.objects.entry(key.0).or_default().insert(key.1);
        self.links
            .push_front(list_of(&mut self.classes, class, false), s);
    }

    fn detach(&mut self, s: u32) {
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
        }
        let sl = &mut self.slots[s as usize];
        sl.key = None;
        sl.valid = 0;
        sl.dirty = 0;
        sl.dirty_since = None;
    }

    /// Recently used, and by the class of its latest caller.
    fn touch(&mut self, s: u32, class: ClassId) {
        let class = self.live_class(class);
        if self.slots[s as usize].class != class {
            self.move_class(s, class);
        }
        let dirty = self.slots[s as usize].dirty != 0;
        let list = list_of(&mut self.classes, class, dirty);
        self.links.remove(list, s);
        self.links.push_front(list, s);
    }

    fn move_class(&mut self, s: u32, to: ClassId) {
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

    fn set_dirty(&mut self, s: u32, dirty: u64, now: Instant) {
        let (was, class) = {
            let sl = &self.slots[s as usize];
            (sl.dirty != 0, sl.class)
        };
        let is = dirty != 0;
        {
            let sl = &mut self.slots[s as usize];
            sl.dirty = dirty;
            if is && !was {
                sl.dirty_since = Some(now);
            } else if !is {
                sl.dirty_since = None;
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
        }
    }

    /// Lines a request left with nothing valid are given back.
    fn drop_empty(&mut self, parts: &[Part]) {
        for s in parts.iter().filter_map(|p| p.slot) {
            let sl = &self.slots[s as usize];
            if sl.key.is_some() && sl.valid == 0 {
                self.detach(s);
                self.free.push(s);
            }
        }
    }
}

mod rescue;
#[cfg(test)]
mod tests;

pub use rescue::DirtyRun;
