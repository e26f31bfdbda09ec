//! Each mode against a core that counts its I/O; eviction and cleaning under pressure against
//! a model; persistence, recovery and refusal of the file store.

use super::*;
use crate::mode::{Promotion, SeqCutoff};
use rustc_hash::FxHashMap as HashMap;

mod admin;
mod counters;
mod discard;
mod eviction;
mod lists;
mod modes;
mod probe;
mod review;
use std::sync::atomic::AtomicU64;

/// An in-memory core that counts what reaches it.
#[derive(Default)]
struct Core {
    data: Mutex<HashMap<u64, Vec<u8>>>,
    reads: AtomicU64,
    writes: AtomicU64,
    syncs: AtomicU64,
    /// Syncs still to fail (EIO), as a device's writeback error.
    failing_syncs: AtomicU64,
}

impl Backend for Core {
    fn read(&self, object: u64, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        buf.fill(0);
        if let Some(d) = self.data.lock().get(&object) {
            let from = (offset as usize).min(d.len());
            let to = (offset as usize + buf.len()).min(d.len());
            buf[..to - from].copy_from_slice(&d[from..to]);
        }
        Ok(())
    }

    fn write(&self, object: u64, offset: u64, data: &[u8]) -> io::Result<()> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        let mut all = self.data.lock();
        let d = all.entry(object).or_default();
        let end = offset as usize + data.len();
        if d.len() < end {
            d.resize(end, 0);
        }
        d[offset as usize..end].copy_from_slice(data);
        Ok(())
    }

    fn sync(&self, _object: u64) -> io::Result<()> {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        let failing = self.failing_syncs.load(Ordering::Relaxed);
        if failing > 0 {
            self.failing_syncs.store(failing - 1, Ordering::Relaxed);
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        Ok(())
    }
}

impl Core {
    fn counts(&self) -> (u64, u64) {
        (
            self.reads.load(Ordering::Relaxed),
            self.writes.load(Ordering::Relaxed),
        )
    }

    fn bytes(&self, object: u64, offset: usize, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        self.read(object, offset as u64, &mut b).unwrap();
        self.reads.fetch_sub(1, Ordering::Relaxed);
        b
    }
}

const UUID: [u8; 16] = [7; 16];

fn config(store: StoreKind, size: u64, line: u64, mode: Mode) -> CacheConfig {
    CacheConfig {
        store,
        size,
        line_size: line,
        default_mode: mode,
        default_priority: 1,
        policy: Policy {
            seq_cutoff: SeqCutoff::Never,
            ..Policy::default()
        },
        volume: UUID,
        reset: false,
        discard_dirty: false,
        generation: 0,
        bound: None,
        holds_dirty: false,
        on_first_dirty: None,
        throttle: None,
        file_in_memory: false,
        clock: None,
        // Several shards, so every test also checks that a request spanning them is whole.
        shards: 3,
    }
}

/// The config of a volume that last used the cache `id` and knows it may hold dirty data.
fn bound_to(store: StoreKind, id: [u8; 16]) -> CacheConfig {
    CacheConfig {
        bound: Some(id),
        holds_dirty: true,
        ..config(store, 1 << 20, 64 << 10, Mode::Wb)
    }
}

fn ram(mode: Mode) -> (Arc<Core>, Arc<Cache>) {
    let core = Arc::new(Core::default());
    let cache = Cache::open(
        config(StoreKind::Ram, 1 << 20, 64 << 10, mode),
        core.clone(),
    )
    .unwrap();
    (core, cache)
}

fn read(cache: &Cache, obj: u64, off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    cache.read(obj, off, &mut b, DEFAULT_CLASS).unwrap();
    b
}

/// Reads and writes of one 8K block, in each mode: what reaches the core.
#[test]
fn every_mode_routes_io_as_open_cas_defines() {
    let block = vec![0xABu8; 8192];
    let other = vec![0xCDu8; 8192];
    for mode in [Mode::Wt, Mode::Wb, Mode::Wa, Mode::Wi, Mode::Wo, Mode::Pt] {
        let (core, cache) = ram(mode);
        core.write(1, 0, &block).unwrap();
        let base = core.counts();
        // Read miss: always the core. Inserting modes keep it; the second read is a hit.
        assert_eq!(read(&cache, 1, 0, 8192), block, "{mode}");
        assert_eq!(
            core.counts().0,
            base.0 + 1,
            "{mode}: read miss goes to the core"
        );
        assert_eq!(read(&cache, 1, 0, 8192), block, "{mode}");
        let second_read_from_core = core.counts().0 == base.0 + 2;
        assert_eq!(
            second_read_from_core,
            matches!(mode, Mode::Wo | Mode::Pt),
            "{mode}: read hit"
        );
        // Write miss at another place.
        let before = core.counts();
        cache.write(2, 0, &other, DEFAULT_CLASS).unwrap();
        let core_written = core.counts().1 > before.1;
        let dirty = cache.stats().dirty_lines;
        match mode {
            Mode::Wb | Mode::Wo => assert!(
                !core_written && dirty == 1,
                "{mode}: write miss cached dirty"
            ),
            Mode::Wt => assert!(
                core_written && dirty == 0 && cache.stats().occupancy_lines == 2,
                "{mode}"
            ),
            Mode::Wa | Mode::Wi | Mode::Pt => {
                assert!(core_written && dirty == 0, "{mode}: core only")
            }
        }
        // Write hit on the block inserted by the read (where it was).
        let before = core.counts();
        let lines_before = cache.stats().occupancy_lines;
        cache.write(1, 0, &other, DEFAULT_CLASS).unwrap();
        let core_written = core.counts().1 > before.1;
        match mode {
            Mode::Wb => assert!(!core_written, "wb: write hit stays in cache"),
            Mode::Wo => assert!(!core_written, "wo: write is cached"),
            Mode::Wt | Mode::Wa => assert!(core_written, "{mode}: cache + core"),
            Mode::Wi => {
                assert!(core_written);
                assert_eq!(
                    cache.stats().occupancy_lines,
                    lines_before - 1,
                    "wi: line invalidated"
                );
            }
            Mode::Pt => assert!(core_written),
        }
        // Whatever the mode, reads see the newest data, and after a flush so does the core.
        assert_eq!(read(&cache, 1, 0, 8192), other, "{mode}");
        assert_eq!(read(&cache, 2, 0, 8192), other, "{mode}");
        cache.flush_all(&mut |_, _| {}).unwrap();
        assert_eq!(core.bytes(1, 0, 8192), other, "{mode}");
        assert_eq!(core.bytes(2, 0, 8192), other, "{mode}");
        assert_eq!(cache.stats().dirty_lines, 0);
    }
}

#[test]
fn write_only_reads_valid_sectors_from_cache_and_the_rest_from_core() {
    let (core, cache) = ram(Mode::Wo);
    core.write(5, 0, &[1u8; 65536]).unwrap();
    cache.write(5, 4096, &[2u8; 4096], DEFAULT_CLASS).unwrap();
    let got = read(&cache, 5, 0, 12288);
    assert!(got[..4096].iter().all(|&b| b == 1));
    assert!(
        got[4096..8192].iter().all(|&b| b == 2),
        "dirty sector from the cache"
    );
    assert!(got[8192..].iter().all(|&b| b == 1));
    let s = cache.stats();
    assert_eq!(s.counters.read_partial_misses, 1);
    assert_eq!(s.occupancy_lines, 1, "no insert on read");
}

#[test]
fn pass_through_cleans_dirty_sectors_before_reading_the_core() {
    let (core, cache) = ram(Mode::Wb);
    cache.write(3, 100, b"newest", DEFAULT_CLASS).unwrap();
    assert_eq!(core.counts().1, 0);
    cache
        .set_class(DEFAULT_CLASS, ClassConfig::new("default", Mode::Pt))
        .unwrap();
    // Leaving write-back wrote the dirty line back.
    assert_eq!(core.bytes(3, 100, 6), b"newest");
    assert_eq!(cache.stats().dirty_lines, 0);
    assert_eq!(read(&cache, 3, 100, 6), b"newest");
    assert!(cache.stats().counters.pass_through_reads >= 1);
}

#[test]
fn partial_sector_writes_fill_from_the_core() {
    let (core, cache) = ram(Mode::Wb);
    core.write(9, 0, &[7u8; 8192]).unwrap();
    cache.write(9, 10, b"abc", DEFAULT_CLASS).unwrap();
    let got = read(&cache, 9, 0, 8192);
    assert_eq!(&got[10..13], b"abc");
    assert!(got[..10].iter().chain(&got[13..]).all(|&b| b == 7));
    cache.flush_all(&mut |_, _| {}).unwrap();
    assert_eq!(core.bytes(9, 0, 8192), got);
}

#[test]
fn small_cache_under_pressure_matches_a_model_in_every_mode() {
    for mode in [Mode::Wb, Mode::Wt, Mode::Wa, Mode::Wi, Mode::Wo] {
        let core = Arc::new(Core::default());
        // 8 lines of 16K in front of 2 objects of 512K each.
        let cache = Cache::open(
            config(StoreKind::Ram, 128 << 10, 16 << 10, mode),
            core.clone(),
        )
        .unwrap();
        let mut model: HashMap<u64, Vec<u8>> = HashMap::default();
        let mut x = 0x1234_5678u64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for step in 0..3000 {
            let obj = rnd(2);
            let off = rnd(512 << 10);
            let len = 1 + rnd(40_000) as usize;
            let m = model.entry(obj).or_default();
            if m.len() < (off as usize + len) {
                m.resize(off as usize + len, 0);
            }
            if rnd(2) == 0 {
                let data: Vec<u8> = (0..len).map(|i| (i as u64 ^ step) as u8).collect();
                cache.write(obj, off, &data, DEFAULT_CLASS).unwrap();
                m[off as usize..off as usize + len].copy_from_slice(&data);
            } else {
                assert_eq!(
                    read(&cache, obj, off, len),
                    &m[off as usize..off as usize + len],
                    "{mode} step {step}"
                );
            }
            if step % 500 == 0 {
                cache.clean_pass().unwrap();
            }
        }
        let s = cache.stats();
        assert!(s.occupancy_lines <= 8);
        cache.flush_all(&mut |_, _| {}).unwrap();
        for (obj, m) in &model {
            assert!(
                core.bytes(*obj, 0, m.len()) == *m,
                "{mode}: core after flush"
            );
        }
    }
}

#[test]
fn cleaner_writes_back_stale_lines() {
    let core = Arc::new(Core::default());
    let mut cfg = config(StoreKind::Ram, 1 << 20, 64 << 10, Mode::Wb);
    cfg.policy.cleaner.staleness = std::time::Duration::ZERO;
    let cache = Cache::open(cfg, core.clone()).unwrap();
    cache.write(1, 0, &[3u8; 100_000], DEFAULT_CLASS).unwrap();
    assert_eq!(cache.stats().dirty_lines, 2);
    assert_eq!(cache.clean_pass().unwrap(), 2);
    assert_eq!(cache.stats().dirty_lines, 0);
    assert_eq!(cache.stats().cleaned_lines, 2);
    assert_eq!(core.bytes(1, 0, 100_000), vec![3u8; 100_000]);
}

#[test]
fn classes_pin_share_and_prioritise() {
    let core = Arc::new(Core::default());
    let cache = Cache::open(
        config(StoreKind::Ram, 8 * 4096, 4096, Mode::Wt),
        core.clone(),
    )
    .unwrap();
    let pinned = cache.add_class(ClassConfig {
        pinned: true,
        ..ClassConfig::new("vm", Mode::Wt)
    });
    let capped = cache.add_class(ClassConfig {
        allocation: 0.25,
        ..ClassConfig::new("backup", Mode::Wt)
    });
    for i in 0..4 {
        cache.write(1, i * 4096, &[1u8; 4096], pinned).unwrap();
    }
    // The capped class streams through 2 lines at most; the pinned lines stay.
    for i in 0..20 {
        cache.write(2, i * 4096, &[2u8; 4096], capped).unwrap();
    }
    let s = cache.stats();
    let by = |id: u16| {
        s.classes
            .iter()
            .find(|c| c.id == id)
            .unwrap()
            .occupancy_lines
    };
    assert_eq!(by(pinned), 4);
    assert!(by(capped) <= 2, "{}", by(capped));
    // The default class fills the rest and evicts only unpinned lines.
    for i in 0..20 {
        cache
            .write(3, i * 4096, &[3u8; 4096], DEFAULT_CLASS)
            .unwrap();
    }
    assert_eq!(
        cache
            .stats()
            .classes
            .iter()
            .find(|c| c.id == pinned)
            .unwrap()
            .occupancy_lines,
        4
    );
    // Removing a class hands its lines to the default class.
    cache.remove_class(pinned).unwrap();
    assert!(cache.stats().classes.iter().all(|c| c.id != pinned));
    assert_eq!(cache.stats().occupancy_lines, 8);
}

#[test]
fn sequential_cutoff_and_nhit_promotion() {
    let core = Arc::new(Core::default());
    let mut cfg = config(StoreKind::Ram, 1 << 20, 64 << 10, Mode::Wb);
    cfg.policy.seq_cutoff = SeqCutoff::Always;
    cfg.policy.seq_threshold = 256 << 10;
    cfg.policy.seq_promotion_count = 2;
    let cache = Cache::open(cfg, core.clone()).unwrap();
    for i in 0..8u64 {
        cache
            .write(1, i * 65536, &[1u8; 65536], DEFAULT_CLASS)
            .unwrap();
    }
    let s = cache.stats();
    assert!(s.counters.pass_through_writes >= 4, "{:?}", s.counters);
    assert!(s.dirty_lines <= 4);
    assert_eq!(
        core.bytes(1, 7 * 65536, 65536),
        vec![1u8; 65536],
        "past the cutoff: core"
    );

    let core = Arc::new(Core::default());
    let mut cfg = config(StoreKind::Ram, 1 << 20, 64 << 10, Mode::Wt);
    cfg.policy.promotion = Promotion::Nhit {
        insertion_threshold: 2,
        trigger_threshold: 0,
    };
    let cache = Cache::open(cfg, core.clone()).unwrap();
    read(&cache, 4, 0, 4096);
    assert_eq!(cache.stats().occupancy_lines, 0, "first miss: not yet");
    read(&cache, 4, 0, 4096);
    assert_eq!(cache.stats().occupancy_lines, 1, "second miss: promoted");

    // OCF's default trigger (80 %): an empty cache inserts at the first miss.
    let core = Arc::new(Core::default());
    let mut cfg = config(StoreKind::Ram, 1 << 20, 64 << 10, Mode::Wt);
    cfg.policy.promotion = Promotion::nhit(3);
    let cache = Cache::open(cfg, core.clone()).unwrap();
    read(&cache, 4, 0, 4096);
    assert_eq!(cache.stats().occupancy_lines, 1, "below the trigger");
    // A request that has a line cached is let in whole, its missed line inserted.
    for l in 1..13 {
        read(&cache, 5, l * 65536, 4096);
    }
    assert_eq!(cache.stats().occupancy_lines, 13, "81 % in use now");
    read(&cache, 6, 0, 4096);
    assert_eq!(cache.stats().occupancy_lines, 13, "above it: counted");
    read(&cache, 4, 60 << 10, 8192); // line 0 cached, line 1 missed
    assert_eq!(
        cache.stats().occupancy_lines,
        14,
        "partially mapped: let in"
    );
}

/// `full` cuts once the free lines are fewer than the request needs plus the reserve (an
/// eighth of this 16-line cache: 2), not only at none.
#[test]
fn full_cutoff_keeps_a_reserve_of_free_lines() {
    let core = Arc::new(Core::default());
    let mut cfg = config(StoreKind::Ram, 1 << 20, 64 << 10, Mode::Wb);
    cfg.policy.seq_cutoff = SeqCutoff::Full;
    cfg.policy.seq_threshold = 64 << 10;
    cfg.policy.seq_promotion_count = 2;
    let cache = Cache::open(cfg, core.clone()).unwrap();
    for i in 0..16u64 {
        cache
            .write(1, i * 65536, &[1u8; 65536], DEFAULT_CLASS)
            .unwrap();
    }
    let s = cache.stats();
    // Request k finds 16 - k lines free: cut once 16 - k < 1 + 2.
    assert_eq!(s.occupancy_lines, 14, "{:?}", s.counters);
    assert_eq!(s.counters.pass_through_writes, 2);
    assert_eq!(core.bytes(1, 15 * 65536, 65536), vec![1u8; 65536]);
}

#[test]
fn truncate_and_forget_drop_cached_data() {
    let (core, cache) = ram(Mode::Wb);
    cache.write(1, 0, &[9u8; 200_000], DEFAULT_CLASS).unwrap();
    cache.truncate(1, 70_000).unwrap();
    let got = read(&cache, 1, 60_000, 20_000);
    assert!(got[..10_000].iter().all(|&b| b == 9));
    assert!(
        got[10_000..].iter().all(|&b| b == 0),
        "past the new end: zeros"
    );
    cache.forget(1).unwrap();
    assert_eq!(cache.stats().occupancy_lines, 0);
    cache.flush_all(&mut |_, _| {}).unwrap();
    assert_eq!(
        core.counts().1,
        0,
        "nothing of a deleted file reaches the core"
    );
}

/// A write-back whose lines reached the core but whose core sync failed leaves those lines
/// clean: the file's next fsync is told (EIO, once), as the kernel tells a writeback error.
#[test]
fn a_failed_core_sync_during_write_back_fails_the_files_next_fsync() {
    let core = Arc::new(Core::default());
    let cache = Cache::open(
        config(StoreKind::Ram, 1 << 20, 64 << 10, Mode::Wb),
        core.clone(),
    )
    .unwrap();
    cache.write(1, 0, &[5u8; 100_000], DEFAULT_CLASS).unwrap();
    cache.write(2, 0, &[6u8; 10_000], DEFAULT_CLASS).unwrap();
    core.failing_syncs.store(1, Ordering::Relaxed);
    assert!(cache.flush_all(&mut |_, _| {}).is_err());
    let told = [1, 2].map(|o| cache.sync_object(o).is_err());
    assert_eq!(told.iter().filter(|&&t| t).count(), 1, "{told:?}");
    cache.sync_object(1).unwrap();
    cache.sync_object(2).unwrap();
    // Written to the core all the same.
    assert_eq!(core.bytes(1, 0, 100_000), vec![5u8; 100_000]);
    // Met by the fsync's own write-back: told to that fsync, and only to it.
    cache.write(1, 0, &[7u8; 4096], DEFAULT_CLASS).unwrap();
    core.failing_syncs.store(1, Ordering::Relaxed);
    assert!(cache.sync_object(1).is_err());
    cache.sync_object(1).unwrap();
    // A file gone: nothing left to tell.
    cache.write(2, 0, &[8u8; 4096], DEFAULT_CLASS).unwrap();
    core.failing_syncs.store(1, Ordering::Relaxed);
    assert!(cache.flush_all(&mut |_, _| {}).is_err());
    cache.forget(2).unwrap();
    cache.sync_object(2).unwrap();
}

#[test]
fn file_store_survives_a_crash_and_stays_warm_after_a_clean_stop() {
    let dir = tempfile::tempdir().unwrap();
    let store = StoreKind::File(dir.path().to_path_buf());
    let core = Arc::new(Core::default());
    let id = {
        let cache = Cache::open(
            config(store.clone(), 1 << 20, 64 << 10, Mode::Wb),
            core.clone(),
        )
        .unwrap();
        cache.write(1, 0, &[5u8; 100_000], DEFAULT_CLASS).unwrap();
        cache.write(2, 0, b"not synced", DEFAULT_CLASS).unwrap();
        cache.sync_object(1).unwrap();
        // Crash: no shutdown, nothing written back.
        cache.id()
    };
    assert_eq!(core.counts().1, 0);
    {
        let cache = Cache::open(bound_to(store.clone(), id), core.clone()).unwrap();
        // Object 1 exists with its size; object 2 was never made durable.
        let recovered = cache.recover(&|o| (o == 1).then_some(100_000)).unwrap();
        assert_eq!(recovered, 2);
        assert_eq!(core.bytes(1, 0, 100_000), vec![5u8; 100_000]);
        cache.write(3, 0, &[6u8; 4096], DEFAULT_CLASS).unwrap();
        cache.shutdown().unwrap();
    }
    assert_eq!(
        core.bytes(3, 0, 4096),
        vec![6u8; 4096],
        "unmount wrote everything back"
    );
    let cache = Cache::open(bound_to(store.clone(), id), core.clone()).unwrap();
    let reads = core.counts().0;
    assert_eq!(read(&cache, 3, 0, 4096), vec![6u8; 4096]);
    assert_eq!(core.counts().0, reads, "warm after a clean stop: a hit");
    drop(cache);
    // Another volume's cache file is refused, unless reset.
    let mut foreign = config(store.clone(), 1 << 20, 64 << 10, Mode::Wb);
    foreign.volume = [9; 16];
    assert!(matches!(
        Cache::open(foreign.clone(), core.clone()),
        Err(CacheError::Foreign { .. })
    ));
    let mut other_shape = bound_to(store.clone(), id);
    other_shape.size = 2 << 20;
    assert!(matches!(
        Cache::open(other_shape.clone(), core.clone()),
        Err(CacheError::Mismatch { .. })
    ));
    other_shape.reset = true;
    assert!(Cache::open(other_shape, core.clone()).is_ok());
}

#[test]
fn concurrent_writers_and_readers_keep_data_whole() {
    let (core, cache) = ram(Mode::Wb);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let cache = cache.clone();
            s.spawn(move || {
                for i in 0..200u64 {
                    let off = ((t * 200 + i) % 64) * 16384;
                    cache
                        .write(t, off, &[t as u8 + 1; 16384], DEFAULT_CLASS)
                        .unwrap();
                    let mut b = vec![0u8; 16384];
                    cache.read(t, off, &mut b, DEFAULT_CLASS).unwrap();
                    assert!(b.iter().all(|&x| x == t as u8 + 1));
                }
            });
        }
        let cache = cache.clone();
        s.spawn(move || {
            for _ in 0..20 {
                cache.clean_pass().unwrap();
            }
        });
    });
    cache.flush_all(&mut |_, _| {}).unwrap();
    for t in 0..4u64 {
        assert!(core
            .bytes(t, 0, 64 * 16384)
            .iter()
            .all(|&x| x == t as u8 + 1));
    }
}

#[test]
fn bad_shapes_are_refused() {
    let core = Arc::new(Core::default());
    assert!(Cache::open(
        config(StoreKind::Ram, 1 << 20, 3000, Mode::Wb),
        core.clone()
    )
    .is_err());
    assert!(Cache::open(config(StoreKind::Ram, 1000, 4096, Mode::Wb), core.clone()).is_err());
    assert!(Cache::open(config(StoreKind::Ram, 1 << 20, 512 << 10, Mode::Wb), core).is_err());
}

/// OCF's fallback_pt_error_threshold: requests that meet a cache device error are served by
/// the core, and the cache goes pass-through for good only at the threshold'th of them.
#[test]
fn a_failed_cache_device_goes_pass_through_at_the_error_threshold_and_keeps_dirty_lines() {
    let core = Arc::new(Core::default());
    let mut cfg = config(StoreKind::Ram, 1 << 20, 64 << 10, Mode::Wb);
    cfg.policy.error_threshold = 3;
    let cache = Cache::open(cfg, core.clone()).unwrap();
    core.write(1, 0, &[1u8; 65536]).unwrap();
    assert_eq!(read(&cache, 1, 0, 65536), vec![1u8; 65536]); // cached, clean
    cache.write(2, 0, &[2u8; 4096], DEFAULT_CLASS).unwrap(); // dirty
    cache.fail_store();
    // Clean data: served from the core, the call succeeds; the cache is still in use.
    assert_eq!(read(&cache, 1, 0, 65536), vec![1u8; 65536]);
    assert_eq!(read(&cache, 1, 0, 65536), vec![1u8; 65536]);
    let s = cache.stats();
    assert!(!s.failed, "2 error requests of 3");
    assert_eq!((s.error_requests, s.error_threshold), (2, 3));
    assert_eq!(s.counters.cache_read_errors, 2);
    assert_eq!(s.counters.cache_write_errors, 0);
    // A write miss that cannot reach the cache goes to the core: the third error request.
    cache.write(3, 0, &[3u8; 4096], DEFAULT_CLASS).unwrap();
    assert_eq!(core.bytes(3, 0, 4096), vec![3u8; 4096]);
    let s = cache.stats();
    assert!(s.failed, "the threshold is reached");
    assert_eq!(s.counters.cache_write_errors, 1);
    assert_eq!(s.counters.cache_errors, 3);
    assert_eq!(
        (s.counters.core_read_errors, s.counters.core_write_errors),
        (0, 0)
    );
    // From now on nothing goes to the cache: no more cache errors for clean data.
    cache.write(4, 0, &[4u8; 4096], DEFAULT_CLASS).unwrap();
    assert_eq!(read(&cache, 1, 0, 4096), vec![1u8; 4096]);
    assert_eq!(cache.stats().counters.cache_errors, 3);
    // The dirty line cannot be read back: EIO for it, and it is not dropped.
    let mut b = vec![0u8; 4096];
    assert!(cache.read(2, 0, &mut b, DEFAULT_CLASS).is_err());
    assert_eq!(cache.stats().dirty_lines, 1);
    assert!(cache.flush_all(&mut |_, _| {}).is_err());
    assert_eq!(cache.stats().dirty_lines, 1);

    // Threshold 1: the first error request (stripefs's behaviour before the threshold).
    let mut cfg = config(StoreKind::Ram, 1 << 20, 64 << 10, Mode::Wt);
    cfg.policy.error_threshold = 1;
    let cache = Cache::open(cfg, core.clone()).unwrap();
    read(&cache, 1, 0, 4096);
    cache.fail_store();
    assert_eq!(read(&cache, 1, 0, 4096), vec![1u8; 4096]);
    assert!(cache.failed());
    // Threshold 0: never; every request is served, by the core.
    let mut cfg = config(StoreKind::Ram, 1 << 20, 64 << 10, Mode::Wt);
    cfg.policy.error_threshold = 0;
    let cache = Cache::open(cfg, core.clone()).unwrap();
    read(&cache, 1, 0, 4096);
    cache.fail_store();
    for _ in 0..50 {
        assert_eq!(read(&cache, 1, 0, 4096), vec![1u8; 4096]);
    }
    let s = cache.stats();
    assert!(!s.failed);
    assert_eq!(s.error_requests, 50);
}

/// Recovery that cuts a line's dirty sectors past the committed size leaves the line on the
/// clean list: every later hit, write and eviction finds the LRU lists whole.
#[test]
fn recovery_that_cuts_dirty_sectors_keeps_the_lru_lists_whole() {
    let dir = tempfile::tempdir().unwrap();
    let store = StoreKind::File(dir.path().to_path_buf());
    let core = Arc::new(Core::default());
    let id = {
        let cache = Cache::open(
            config(store.clone(), 1 << 20, 64 << 10, Mode::Wb),
            core.clone(),
        )
        .unwrap();
        cache.write(1, 0, &[1u8; 4096], DEFAULT_CLASS).unwrap();
        cache.flush_object(1).unwrap();
        cache.write(1, 4096, &[2u8; 4096], DEFAULT_CLASS).unwrap();
        cache.sync_object(1).unwrap();
        // Crash with the file's committed size at 4096: the second sector's data is past it.
        cache.id()
    };
    let cache = Cache::open(bound_to(store, id), core.clone()).unwrap();
    cache.recover(&|o| (o == 1).then_some(4096)).unwrap();
    assert_eq!(read(&cache, 1, 0, 4096), vec![1u8; 4096]);
    cache.write(1, 0, &[3u8; 4096], DEFAULT_CLASS).unwrap();
    for g in cache.all_shards() {
        let c = g.classes[DEFAULT_CLASS as usize].as_ref().unwrap();
        let clean: Vec<u32> = g.links.oldest_first(&c.clean).collect();
        let dirty: Vec<u32> = g.links.oldest_first(&c.dirty).collect();
        assert_eq!((clean.len(), dirty.len()), (c.clean.len(), c.dirty.len()));
        for s in &clean {
            assert_eq!(g.slots[*s as usize].dirty, 0);
        }
        for s in &dirty {
            assert_ne!(g.slots[*s as usize].dirty, 0);
        }
        assert_eq!(dirty.len(), g.dirty_lines);
    }
}

/// A cache file's lines count only for the volume generation that used it last: a mount
/// without it (the owner advances the generation) makes every line stale.
#[test]
fn a_cache_file_is_trusted_only_by_the_generation_and_volume_that_used_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = StoreKind::File(dir.path().to_path_buf());
    let core = Arc::new(Core::default());
    let cache = Cache::open(
        config(store.clone(), 1 << 20, 64 << 10, Mode::Wt),
        core.clone(),
    )
    .unwrap();
    cache.write(1, 0, &[1u8; 4096], DEFAULT_CLASS).unwrap();
    let id = cache.id();
    cache.shutdown().unwrap();
    drop(cache);
    // Meanwhile, without the cache, the core got newer data.
    core.write(1, 0, &[2u8; 4096]).unwrap();
    let mut later = bound_to(store.clone(), id);
    later.generation = 1;
    let cache = Cache::open(later, core.clone()).unwrap();
    assert_eq!(
        read(&cache, 1, 0, 4096),
        vec![2u8; 4096],
        "no stale line served"
    );
    assert_eq!(cache.id(), id, "the same cache, emptied");
}

/// The owner hears, once, before the first dirty record is written to a cache file.
#[test]
fn the_owner_hears_of_dirty_data_before_it_becomes_durable() {
    let dir = tempfile::tempdir().unwrap();
    let store = StoreKind::File(dir.path().to_path_buf());
    let core = Arc::new(Core::default());
    let heard = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut cfg = config(store, 1 << 20, 64 << 10, Mode::Wb);
    let h = heard.clone();
    cfg.on_first_dirty = Some(Arc::new(move || {
        h.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }));
    let cache = Cache::open(cfg, core).unwrap();
    assert_eq!(heard.load(std::sync::atomic::Ordering::SeqCst), 0);
    // A dirty record is written with the write (the kernel may flush it any time after).
    cache.write(1, 0, &[1u8; 4096], DEFAULT_CLASS).unwrap();
    assert_eq!(heard.load(std::sync::atomic::Ordering::SeqCst), 1);
    cache.sync_object(1).unwrap();
    cache.write(2, 0, &[1u8; 4096], DEFAULT_CLASS).unwrap();
    cache.sync_object(2).unwrap();
    assert_eq!(heard.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// A cache holding dirty data is never silently replaced: missing, another file in its place,
/// a damaged record, or --cache-reset without --discard-dirty are all refused.
#[test]
fn a_cache_holding_dirty_data_is_never_silently_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("stripefs.cache");
    let store = StoreKind::File(file.clone());
    let core = Arc::new(Core::default());
    let cache = Cache::open(
        config(store.clone(), 1 << 20, 64 << 10, Mode::Wb),
        core.clone(),
    )
    .unwrap();
    cache.write(1, 0, &[7u8; 8192], DEFAULT_CLASS).unwrap();
    cache.sync_object(1).unwrap();
    let id = cache.id();
    drop(cache);
    let saved = std::fs::read(&file).unwrap();

    let mut reset = bound_to(store.clone(), id);
    reset.reset = true;
    assert!(matches!(
        Cache::open(reset.clone(), core.clone()),
        Err(CacheError::DirtyReset { dirty_lines: 1, .. })
    ));
    assert!(matches!(
        Cache::open(bound_to(store.clone(), [3; 16]), core.clone()),
        Err(CacheError::NotBound(_))
    ));
    // One flipped bit in the record area.
    let mut damaged = saved.clone();
    let records = 4096..4096 + 16 * 64;
    let at = records
        .clone()
        .step_by(64)
        .find(|&r| damaged[r..r + 8] != [0xff; 8])
        .unwrap();
    damaged[at + 1] ^= 0x10;
    std::fs::write(&file, &damaged).unwrap();
    let err = Cache::open(bound_to(store.clone(), id), core.clone())
        .err()
        .unwrap();
    assert!(matches!(err, CacheError::Damaged { .. }), "{err}");
    assert!(err.to_string().contains("slot"), "{err}");
    // Truncated.
    std::fs::write(&file, &saved[..8192]).unwrap();
    assert!(matches!(
        Cache::open(bound_to(store.clone(), id), core.clone()),
        Err(CacheError::Damaged { .. })
    ));
    std::fs::remove_file(&file).unwrap();
    assert!(matches!(
        Cache::open(bound_to(store.clone(), id), core.clone()),
        Err(CacheError::Missing(_))
    ));
    assert_eq!(core.counts().1, 0, "nothing reached the core on the way");
    // Put back, the data is all there.
    std::fs::write(&file, &saved).unwrap();
    let cache = Cache::open(bound_to(store.clone(), id), core.clone()).unwrap();
    cache.recover(&|_| Some(8192)).unwrap();
    assert_eq!(core.bytes(1, 0, 8192), vec![7u8; 8192]);
    drop(cache);
    // Given up on purpose, it goes.
    std::fs::write(&file, &saved).unwrap();
    reset.discard_dirty = true;
    let cache = Cache::open(reset, core.clone()).unwrap();
    assert_ne!(cache.id(), id, "a new cache");
    // Never replaces what is not a cache file.
    drop(cache);
    std::fs::write(&file, b"precious").unwrap();
    let mut any = config(store, 1 << 20, 64 << 10, Mode::Wb);
    any.reset = true;
    any.discard_dirty = true;
    assert!(matches!(
        Cache::open(any, core),
        Err(CacheError::NotCache(_))
    ));
    assert_eq!(std::fs::read(&file).unwrap(), b"precious");
}

/// A pass-through or write-invalidate write that drops a line whose durable record says
/// dirty wipes that record before it completes: a crash then cannot bring the old data back.
#[test]
fn an_invalidating_write_cannot_be_undone_by_recovery() {
    for mode in [Mode::Pt, Mode::Wi] {
        let dir = tempfile::tempdir().unwrap();
        let store = StoreKind::File(dir.path().to_path_buf());
        let core = Arc::new(Core::default());
        let id = {
            let cache = Cache::open(
                config(store.clone(), 1 << 20, 64 << 10, Mode::Wb),
                core.clone(),
            )
            .unwrap();
            cache.write(1, 0, &[1u8; 4096], DEFAULT_CLASS).unwrap();
            cache.sync_object(1).unwrap();
            let class = cache.add_class(ClassConfig::new("other", mode));
            cache.write(1, 0, &[2u8; 4096], class).unwrap();
            cache.sync_object(1).unwrap();
            cache.id()
            // Crash.
        };
        assert_eq!(core.bytes(1, 0, 4096), vec![2u8; 4096]);
        let cache = Cache::open(bound_to(store, id), core.clone()).unwrap();
        cache.recover(&|_| Some(4096)).unwrap();
        assert_eq!(
            core.bytes(1, 0, 4096),
            vec![2u8; 4096],
            "{mode:?}: old data came back"
        );
    }
}

/// A cache file keeps the shards its lines were placed by: one made before shards (0 in its
/// header) opens as one shard, whatever the size would choose today, and finds its lines.
#[test]
fn a_cache_file_keeps_the_shards_it_was_made_with() {
    let dir = tempfile::tempdir().unwrap();
    let store = StoreKind::File(dir.path().to_path_buf());
    let core = Arc::new(Core::default());
    // 4096 lines: 4 shards by size today.
    let made = |shards| CacheConfig {
        shards,
        ..config(store.clone(), 16 << 20, 4096, Mode::Wb)
    };
    let id = {
        let cache = Cache::open(made(1), core.clone()).unwrap();
        for i in 0..64u64 {
            cache
                .write(1, i * 4096, &[i as u8; 4096], DEFAULT_CLASS)
                .unwrap();
        }
        cache.sync_object(1).unwrap();
        cache.id()
    };
    // As an older stripefs wrote it: no shard count in the header.
    let path = crate::attach::cache_file(&store).unwrap();
    let file = crate::store::Store::open_existing(&path, 4096, 4096).unwrap();
    let mut h = file.read_header().ok().unwrap();
    h.shards = 0;
    file.write_header(&h).unwrap();
    drop(file);
    let reopen = |shards| CacheConfig {
        bound: Some(id),
        holds_dirty: true,
        ..made(shards)
    };
    let cache = Cache::open(reopen(0), core.clone()).unwrap();
    assert_eq!(cache.shard_count(), 1);
    assert_eq!(cache.stats().dirty_lines, 64, "every dirty line found");
    for i in 0..64u64 {
        assert_eq!(read(&cache, 1, i * 4096, 4096), vec![i as u8; 4096]);
    }
    assert_eq!(core.counts().0, 0, "all of it from the cache");
    cache.shutdown().unwrap();
    drop(cache);
    // A new file takes the shards its size gives, and keeps them.
    let other = tempfile::tempdir().unwrap();
    let fresh = CacheConfig {
        store: StoreKind::File(other.path().to_path_buf()),
        shards: 0,
        ..config(store.clone(), 16 << 20, 4096, Mode::Wb)
    };
    let cache = Cache::open(fresh.clone(), core.clone()).unwrap();
    assert_eq!(cache.shard_count(), 4);
    let id = cache.id();
    cache.write(7, 0, &[7u8; 8192], DEFAULT_CLASS).unwrap();
    cache.shutdown().unwrap();
    drop(cache);
    let cache = Cache::open(
        CacheConfig {
            shards: 2,
            bound: Some(id),
            ..fresh
        },
        core.clone(),
    )
    .unwrap();
    assert_eq!(cache.shard_count(), 4, "the file's own count wins");
    let reads = core.counts().0;
    assert_eq!(read(&cache, 7, 0, 8192), vec![7u8; 8192]);
    assert_eq!(core.counts().0, reads, "its lines are found: hits");
}

/// Two records of one line in a cache file (one that could not be wiped while the cache device
/// failed) are refused as damage, naming both slots: which is newer cannot be told.
#[test]
fn two_records_of_one_line_are_refused_as_damage() {
    let dir = tempfile::tempdir().unwrap();
    let store = StoreKind::File(dir.path().to_path_buf());
    let core = Arc::new(Core::default());
    let cfg = CacheConfig {
        shards: 1,
        ..config(store.clone(), 1 << 20, 64 << 10, Mode::Wb)
    };
    let id = {
        let cache = Cache::open(cfg.clone(), core.clone()).unwrap();
        cache.write(1, 0, &[5u8; 4096], DEFAULT_CLASS).unwrap();
        cache.sync_object(1).unwrap();
        cache.id()
    };
    let path = crate::attach::cache_file(&store).unwrap();
    let file = crate::store::Store::open_existing(&path, 64 << 10, 16).unwrap();
    file.write_record(
        9,
        &crate::store::Record {
            object: 1,
            line: 0,
            valid: 1,
            dirty: 1,
        },
    )
    .unwrap();
    file.sync().unwrap();
    drop(file);
    let reopen = CacheConfig {
        bound: Some(id),
        holds_dirty: true,
        ..cfg
    };
    match Cache::open(reopen, core) {
        Err(CacheError::Damaged { what, .. }) => {
            assert!(what.contains("both hold line 0 of object 1"), "{what}")
        }
        other => panic!("{:?}", other.err()),
    }
}
