//! Defects found in review of the sharded cache core (451f39b). Each test names its defect.

use super::*;

fn file_cache(dir: &std::path::Path, core: &Arc<Core>) -> Arc<Cache> {
    Cache::open(
        config(
            StoreKind::File(dir.to_path_buf()),
            1 << 20,
            64 << 10,
            Mode::Wb,
        ),
        core.clone(),
    )
    .unwrap()
}

/// DEFECT (truncate keeps a stale dirty record): a truncate that cuts dirty sectors off a
/// line it keeps (the line still holds sectors below the new size) leaves that line's
/// durable record saying the cut sectors are dirty; only a line emptied entirely gets its
/// record rewritten. When the file is later extended again without writing there (ftruncate
/// up: the cache is not told), a crash brings the truncated bytes back: recovery clips at the
/// file's size, which now covers them, and writes them back over the hole. Older than
/// 451f39b (the parent truncates the same way). Fixed in range.rs: the record is rewritten.
#[test]
fn truncate_that_keeps_part_of_a_line_cannot_be_undone_by_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let core = Arc::new(Core::default());
    let id = {
        let cache = file_cache(dir.path(), &core);
        cache.write(1, 0, &[5u8; 8192], DEFAULT_CLASS).unwrap();
        cache.sync_object(1).unwrap();
        // Shrink to 4K (sector 1 dropped, dirty), then the file grows back to 8K as a hole.
        cache.truncate(1, 4096).unwrap();
        cache.sync_records().unwrap();
        cache.id()
        // Crash.
    };
    let cache = Cache::open(
        bound_to(StoreKind::File(dir.path().to_path_buf()), id),
        core.clone(),
    )
    .unwrap();
    cache.recover(&|_| Some(8192)).unwrap();
    assert!(core.bytes(1, 0, 4096) == vec![5u8; 4096]);
    let back = core
        .bytes(1, 4096, 4096)
        .iter()
        .filter(|&&b| b != 0)
        .count();
    assert_eq!(back, 0, "truncated bytes came back after a crash");
}

/// Not a defect (a check of the new structures): one shard's index, free list, per-object
/// table and lists against a model, under random attach, detach, dirtying and class moves.
#[test]
fn a_shard_matches_a_model_under_random_operations() {
    use crate::metadata::Shard;
    use std::collections::BTreeMap;
    let totals = Arc::new(crate::metadata::Totals::default());
    let epoch = Instant::now();
    // The only shard of one: every line of an object may be here.
    let mut g = Shard::new(
        (0, 1),
        100..164,
        ClassConfig::new("default", Mode::Wb),
        7,
        epoch,
        totals.clone(),
    );
    for s in (100..164u32).rev() {
        g.give_back(s);
    }
    let mut model: BTreeMap<(u64, u64), (u32, u64)> = BTreeMap::new();
    let mut x = 12345u64;
    for step in 0..20000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let key = ((x >> 60) % 3, (x >> 40) % 40);
        match (x >> 20) % 4 {
            0 | 1 => {
                if let std::collections::btree_map::Entry::Vacant(e) = model.entry(key) {
                    if let Some(s) = g.take_free() {
                        g.attach(s, key, DEFAULT_CLASS);
                        g.slots[s as usize].valid = u64::MAX;
                        e.insert((s, 0));
                    }
                }
            }
            2 => {
                if let Some(&(s, _)) = model.get(&key) {
                    g.detach(s);
                    g.give_back(s);
                    model.remove(&key);
                }
            }
            _ => {
                if let Some(e) = model.get_mut(&key) {
                    let d = (x >> 8) & 0xffff;
                    g.set_dirty(e.0, d, epoch);
                    e.1 = d;
                }
            }
        }
        for o in 0..3u64 {
            let want: Vec<u64> = model.keys().filter(|k| k.0 == o).map(|k| k.1).collect();
            assert_eq!(
                g.lines_of(o, 0, u64::MAX),
                want,
                "step {step}: lines of {o}"
            );
            let lo = (x >> 5) % 40;
            let hi = lo + (x >> 13) % 10;
            let part: Vec<u64> = want
                .iter()
                .copied()
                .filter(|l| (lo..=hi).contains(l))
                .collect();
            assert_eq!(
                g.lines_of(o, lo, hi),
                part,
                "step {step}: lines of {o} in {lo}..={hi}"
            );
            let sectors: u64 = model
                .iter()
                .filter(|(k, _)| k.0 == o)
                .map(|(_, v)| v.1.count_ones() as u64)
                .sum();
            assert_eq!(
                g.dirty_bytes(o),
                sectors * SECTOR,
                "step {step}: dirty bytes of {o}"
            );
        }
        for (&k, &(s, _)) in &model {
            assert_eq!(g.lookup(k), Some(s), "step {step}: lookup {k:?}");
        }
        assert_eq!(g.free_lines() + model.len(), 64, "step {step}");
        assert_eq!(totals.free(), g.free_lines(), "step {step}");
        assert_eq!(totals.occupied(), model.len(), "step {step}");
        let dirty = model.values().filter(|v| v.1 != 0).count();
        assert_eq!(totals.dirty(), dirty, "step {step}");
        assert_eq!(g.dirty_lines, dirty, "step {step}");
        let chunks: u32 = g.dirty_chunks.values().sum();
        assert_eq!(chunks as usize, dirty, "step {step}: chunks");
    }
}

/// Not a defect (a check): a small file store of three shards under eviction, cleaning and
/// purges; after the last fsync of every file a crash loses nothing and brings nothing old back.
#[test]
fn a_sharded_file_store_loses_nothing_fsync_acknowledged() {
    for seed in 1..40u64 {
        let discards = seed >= 20;
        let dir = tempfile::tempdir().unwrap();
        let store = StoreKind::File(dir.path().to_path_buf());
        let core = Arc::new(Core::default());
        let mut model: HashMap<u64, Vec<u8>> = HashMap::default();
        let id = {
            let cache = Cache::open(
                config(store.clone(), 16 * 4096, 4096, Mode::Wb),
                core.clone(),
            )
            .unwrap();
            let mut x = seed;
            for _ in 0..600 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let obj = 1 + (x >> 61) % 3;
                let off = (x >> 30) % (24 * 4096);
                let len = 1 + ((x >> 12) % 9000) as usize;
                match (x >> 6) % 10 {
                    0..=5 => {
                        let b = (x >> 50) as u8 | 1;
                        cache.write(obj, off, &vec![b; len], DEFAULT_CLASS).unwrap();
                        let m = model.entry(obj).or_default();
                        if m.len() < off as usize + len {
                            m.resize(off as usize + len, 0);
                        }
                        m[off as usize..off as usize + len].fill(b);
                    }
                    6 => {
                        let mut b = vec![0u8; len];
                        cache.read(obj, off, &mut b, DEFAULT_CLASS).unwrap();
                    }
                    7 => cache.sync_object(obj).unwrap(),
                    8 => {
                        cache.clean_pass().unwrap();
                    }
                    9 if discards => {
                        let core2 = core.clone();
                        cache
                            .discard(obj, off, len as u64, move || {
                                let mut all = core2.data.lock();
                                if let Some(d) = all.get_mut(&obj) {
                                    let end = (off as usize + len).min(d.len());
                                    if (off as usize) < end {
                                        d[off as usize..end].fill(0);
                                    }
                                }
                                Ok::<(), io::Error>(())
                            })
                            .unwrap();
                        let m = model.entry(obj).or_default();
                        let end = (off as usize + len).min(m.len());
                        if (off as usize) < end {
                            m[off as usize..end].fill(0);
                        }
                    }
                    _ => {
                        cache.purge_where(&|o, _| o == obj).unwrap();
                    }
                }
            }
            for obj in 1..4 {
                cache.sync_object(obj).unwrap();
            }
            // After the last fsync: no writes, only what moves lines around.
            cache.purge_where(&|_, _| true).unwrap();
            let mut b = vec![0u8; 4096 * 24];
            for obj in 1..4 {
                cache.read(obj, 0, &mut b, DEFAULT_CLASS).unwrap();
            }
            cache.id()
            // Crash.
        };
        let cache = Cache::open(
            CacheConfig {
                bound: Some(id),
                holds_dirty: true,
                ..config(store.clone(), 16 * 4096, 4096, Mode::Wb)
            },
            core.clone(),
        )
        .unwrap();
        let sizes: HashMap<u64, u64> = model.iter().map(|(&o, v)| (o, v.len() as u64)).collect();
        cache.recover(&|o| sizes.get(&o).copied()).unwrap();
        for (&obj, want) in &model {
            let got = core.bytes(obj, 0, want.len());
            let bad = got.iter().zip(want).position(|(a, b)| a != b);
            assert_eq!(
                bad, None,
                "seed {seed}: object {obj} differs at byte {bad:?}"
            );
        }
    }
}

/// Not a defect (a check): every path that takes shards (requests, fsync's persist, the
/// cleaner's pick over all shards, flushes, purges, class changes, statistics) at once on a
/// file store, with a watchdog: none waits on another in a cycle.
#[test]
fn every_shard_taking_path_at_once_never_deadlocks() {
    let dir = tempfile::tempdir().unwrap();
    let core = Arc::new(Core::default());
    let cache = Cache::open(
        CacheConfig {
            shards: 4,
            ..config(
                StoreKind::File(dir.path().to_path_buf()),
                32 * 4096,
                4096,
                Mode::Wb,
            )
        },
        core.clone(),
    )
    .unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let done = done.clone();
        std::thread::spawn(move || {
            for _ in 0..600 {
                if done.load(Ordering::Relaxed) {
                    return true;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            false
        })
    };
    let runner = {
        let cache = cache.clone();
        let done = done.clone();
        std::thread::spawn(move || {
            std::thread::scope(|s| {
                for t in 0..6u64 {
                    let cache = cache.clone();
                    s.spawn(move || {
                        let mut x = t * 7 + 1;
                        for _ in 0..1500 {
                            x = x
                                .wrapping_mul(6364136223846793005)
                                .wrapping_add(1442695040888963407);
                            let obj = 1 + (x >> 62);
                            let off = (x >> 33) % (40 * 4096);
                            let len = 1 + ((x >> 20) % (6 * 4096)) as usize;
                            match (x >> 8) % 12 {
                                0..=3 => cache
                                    .write(obj, off, &vec![t as u8; len], DEFAULT_CLASS)
                                    .unwrap(),
                                4 => {
                                    let mut b = vec![0u8; len];
                                    cache.read(obj, off, &mut b, DEFAULT_CLASS).unwrap();
                                }
                                5 => cache
                                    .discard(obj, off, len as u64, || Ok::<(), io::Error>(()))
                                    .unwrap(),
                                6 => cache.truncate(obj, off + 30 * 4096).unwrap(),
                                7 => cache.sync_object(obj).unwrap(),
                                8 => {
                                    cache.purge_where(&|o, _| o == obj).unwrap();
                                }
                                9 => cache.flush_object(obj).unwrap(),
                                10 => {
                                    let _ = cache.stats();
                                    let _ = cache.dirty_bytes(obj);
                                    let _ = cache.dirty_for();
                                }
                                _ => {
                                    cache.clean_pass().unwrap();
                                }
                            }
                        }
                    });
                }
                let cache = cache.clone();
                s.spawn(move || {
                    for i in 0..30 {
                        let id = cache.add_class(ClassConfig::new("c", Mode::Wb));
                        cache.write(9, i * 4096, &[1u8; 4096], id).unwrap();
                        cache.remove_class(id).unwrap();
                    }
                });
            });
            done.store(true, Ordering::Relaxed);
        })
    };
    assert!(
        watchdog.join().unwrap(),
        "deadlock: the threads did not finish in 60 s"
    );
    runner.join().unwrap();
    cache.flush_all(&mut |_, _| {}).unwrap();
    assert_eq!(cache.stats().dirty_lines, 0);
}

/// DEFECT (recovery's clipping keeps a stale dirty record): recovery clips a line at the
/// file's size in memory only. A line whose dirty sectors all lay past the end is left clean
/// (and attached with nothing valid) while its durable record still says those sectors are
/// dirty, and nothing rewrites it. The file then grows back over that range (ftruncate up:
/// a hole); a second crash makes the next recovery write the dropped bytes into the hole.
/// Older than 451f39b. Fixed in durability.rs: the record follows, an emptied line is freed.
#[test]
fn recovery_that_clips_a_line_cannot_be_undone_by_a_second_crash() {
    let dir = tempfile::tempdir().unwrap();
    let store = StoreKind::File(dir.path().to_path_buf());
    let core = Arc::new(Core::default());
    let id = {
        let cache = file_cache(dir.path(), &core);
        cache.write(1, 0, &[4u8; 4096], DEFAULT_CLASS).unwrap();
        cache.flush_all(&mut |_, _| {}).unwrap();
        // Past the end the namespace will know after the crash (4K).
        cache.write(1, 4096, &[9u8; 4096], DEFAULT_CLASS).unwrap();
        cache.sync_object(1).unwrap();
        cache.id()
        // Crash 1.
    };
    {
        let cache = Cache::open(bound_to(store.clone(), id), core.clone()).unwrap();
        cache.recover(&|_| Some(4096)).unwrap();
        assert_eq!(cache.stats().dirty_lines, 0);
        // The file grows to 8K (a hole); the namespace commits, the cache syncs its records.
        cache.sync_records().unwrap();
        // Crash 2.
    }
    let cache = Cache::open(bound_to(store, id), core.clone()).unwrap();
    cache.recover(&|_| Some(8192)).unwrap();
    let back = core
        .bytes(1, 4096, 4096)
        .iter()
        .filter(|&&b| b != 0)
        .count();
    assert_eq!(back, 0, "bytes recovery dropped came back in the hole");
}

/// A core whose writes are lost at a power cut until `sync` makes them durable; `on_sync`
/// runs first at each sync (the test's crash point).
#[derive(Default)]
struct PowerCore {
    volatile: Mutex<HashMap<u64, Vec<u8>>>,
    durable: Mutex<HashMap<u64, Vec<u8>>>,
    on_sync: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl Backend for PowerCore {
    fn read(&self, object: u64, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        buf.fill(0);
        if let Some(d) = self.volatile.lock().get(&object) {
            let from = (offset as usize).min(d.len());
            let to = (offset as usize + buf.len()).min(d.len());
            buf[..to - from].copy_from_slice(&d[from..to]);
        }
        Ok(())
    }

    fn write(&self, object: u64, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut all = self.volatile.lock();
        let d = all.entry(object).or_default();
        let end = offset as usize + data.len();
        if d.len() < end {
            d.resize(end, 0);
        }
        d[offset as usize..end].copy_from_slice(data);
        Ok(())
    }

    fn sync(&self, object: u64) -> io::Result<()> {
        let hook = self.on_sync.lock().take();
        if let Some(hook) = hook {
            hook();
        }
        let v = self.volatile.lock().get(&object).cloned();
        if let Some(v) = v {
            self.durable.lock().insert(object, v);
        }
        Ok(())
    }
}

/// DEFECT (eviction or purge wipes a cleaned line's record before the core made it durable): the
/// write-back of a dirty line marks it clean in memory and releases it, then syncs the core,
/// then rewrites its record ("core first, then the records that say those lines are clean").
/// In between, the line is clean and evictable: a request that needs a slot evicts it and
/// wipes its record durably (`write_empty_record`) while the core has not synced the written
/// back data; a purge does the same. A power cut there loses data an fsync acknowledged: the core never got it
/// durably and the cache no longer says it holds it. Older than 451f39b (power cut only: a
/// daemon crash keeps the core's page cache). Fixed: the core object is synced first.
#[test]
fn eviction_between_write_back_and_core_sync_loses_nothing_fsync_acknowledged() {
    for purge in [false, true] {
        power_cut_after_write_back(purge);
    }
}

fn power_cut_after_write_back(purge: bool) {
    let dir = tempfile::tempdir().unwrap();
    let store = StoreKind::File(dir.path().to_path_buf());
    let core = Arc::new(PowerCore::default());
    let cfg = CacheConfig {
        shards: 1,
        ..config(store.clone(), 4 * 4096, 4096, Mode::Wb)
    };
    let cache = Cache::open(cfg, core.clone()).unwrap();
    cache.write(1, 0, &[7u8; 4096], DEFAULT_CLASS).unwrap();
    for l in 0..3u64 {
        cache
            .write(2, l * 4096, &[2u8; 4096], DEFAULT_CLASS)
            .unwrap();
    }
    cache.sync_object(1).unwrap();
    cache.sync_object(2).unwrap();
    let snapshot = tempfile::tempdir().unwrap();
    type Durable = HashMap<u64, Vec<u8>>;
    let crashed: Arc<Mutex<Option<Durable>>> = Arc::default();
    {
        let cache = cache.clone();
        let core2 = core.clone();
        let from = crate::attach::cache_file(&store).unwrap();
        let to = snapshot.path().join(from.file_name().unwrap());
        let crashed = crashed.clone();
        *core.on_sync.lock() = Some(Box::new(move || {
            // Object 1's line was written back and is clean in memory; its core write is
            // not durable yet. Another request needs a slot: only that line is clean.
            if purge {
                // Or a purge (clean lines only) drops it.
                cache.purge_where(&|o, _| o == 1).unwrap();
            } else {
                cache.write(3, 0, &[3u8; 4096], DEFAULT_CLASS).unwrap();
            }
            // Power cut.
            std::fs::copy(&from, &to).unwrap();
            *crashed.lock() = Some(core2.durable.lock().clone());
        }));
    }
    let id = cache.id();
    cache.flush_object(1).unwrap();
    let durable = crashed.lock().take().expect("the crash point was reached");
    drop(cache);
    let after = Arc::new(Core::default());
    *after.data.lock() = durable;
    let cache = Cache::open(
        CacheConfig {
            store: StoreKind::File(snapshot.path().to_path_buf()),
            bound: Some(id),
            holds_dirty: true,
            ..config(StoreKind::Ram, 4 * 4096, 4096, Mode::Wb)
        },
        after.clone(),
    )
    .unwrap();
    cache.recover(&|_| Some(4096)).unwrap();
    let kept = after.bytes(1, 0, 4096).iter().filter(|&&b| b == 7).count();
    assert_eq!(
        kept, 4096,
        "object 1's fsynced data was lost at the power cut (purge: {purge})"
    );
}

/// Not a defect (a check): alru and acp over several shards pick as over one: alru the
/// oldest writes of the whole cache, acp the dirtiest chunk in address order.
#[test]
fn cleaning_across_shards_picks_as_over_one() {
    use crate::clock::ManualClock;
    use crate::mode::Cleaner;
    for acp in [false, true] {
        let clock = Arc::new(ManualClock::new());
        let core = Arc::new(Core::default());
        let cleaner = Cleaner {
            flush_max_buffers: 3,
            staleness: std::time::Duration::from_secs(5),
            dirty_ratio_threshold: 100,
            ..if acp { Cleaner::acp() } else { Cleaner::alru() }
        };
        let cache = Cache::open(
            CacheConfig {
                shards: 4,
                clock: Some(clock.clone()),
                policy: Policy {
                    seq_cutoff: SeqCutoff::Never,
                    cleaner,
                    ..Policy::default()
                },
                ..config(StoreKind::Ram, 64 * 4096, 4096, Mode::Wb)
            },
            core.clone(),
        )
        .unwrap();
        assert_eq!(cache.shard_count(), 4);
        // Lines 7, 6, ..., 0 of object 1, a second apart (line 7 oldest); then 2 of object 2.
        for l in (0..8u64).rev() {
            cache
                .write(1, l * 4096, &[1u8; 4096], DEFAULT_CLASS)
                .unwrap();
            clock.advance(std::time::Duration::from_secs(1));
        }
        for l in 0..2u64 {
            cache
                .write(2, l * 4096, &[1u8; 4096], DEFAULT_CLASS)
                .unwrap();
        }
        clock.advance(std::time::Duration::from_secs(20));
        assert_eq!(cache.clean_pass().unwrap(), 3);
        let left: Vec<u64> = {
            let mut k: Vec<(u64, u64)> = cache.dirty_keys();
            k.sort_unstable();
            k.into_iter().filter(|k| k.0 == 1).map(|k| k.1).collect()
        };
        if acp {
            // The dirtiest chunk (object 1's), lowest lines first.
            assert_eq!(left, [3, 4, 5, 6, 7], "acp");
        } else {
            // The oldest writes: lines 7, 6, 5.
            assert_eq!(left, [0, 1, 2, 3, 4], "alru");
        }
    }
}
