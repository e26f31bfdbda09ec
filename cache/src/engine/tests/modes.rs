//! Writes that invalidate (wi, pt, and wa unless all of it is cached) drop only the sectors
//! they write: the rest of the line stays, its dirty sectors included; a dirty sector the
//! write covers in part is written back before the write goes over it.

use super::*;

const K: u64 = 1024;

/// (valid, dirty) of a line, or None when it is not cached.
fn line_state(cache: &Cache, object: u64, line: u64) -> Option<(u64, u64)> {
    let g = cache.shard(cache.shard_index(object, line));
    let s = g.lookup((object, line))?;
    let sl = &g.slots[s as usize];
    Some((sl.valid, sl.dirty))
}

fn invalidating_write_keeps_the_rest_of_the_line(mode: Mode) {
    let core = Arc::new(Core::default());
    let cache = Cache::open(
        config(StoreKind::Ram, 1 << 20, 64 << 10, Mode::Wt),
        core.clone(),
    )
    .unwrap();
    let wb = cache.add_class(ClassConfig::new("wb", Mode::Wb));
    let m = cache.add_class(ClassConfig::new("m", mode));
    core.write(1, 0, &[0x11; 64 << 10]).unwrap();
    // Line 0: sectors 0..3 read in (clean), 1 and 3 overwritten dirty, 8 written dirty.
    let mut b = vec![0u8; 16 << 10];
    cache.read(1, 0, &mut b, wb).unwrap();
    cache.write(1, 4 * K, &[0x22; 4096], wb).unwrap();
    cache.write(1, 12 * K, &[0x33; 4096], wb).unwrap();
    cache.write(1, 32 * K, &[0x88; 4096], wb).unwrap();
    assert_eq!(
        line_state(&cache, 1, 0),
        Some((0b1_0000_1111, 0b1_0000_1010))
    );
    // 5K..20K: sector 1 in part (dirty), 2 and 3 whole (3 dirty), 4 in part (not cached).
    cache.write(1, 5 * K, &[0x55; 15 << 10], m).unwrap();
    assert_eq!(
        line_state(&cache, 1, 0),
        Some((0b1_0000_0001, 0b1_0000_0000)),
        "{mode}: only the written sectors dropped"
    );
    let mut want = vec![0x11u8; 64 << 10];
    want[4 << 10..5 << 10].fill(0x22);
    want[5 << 10..20 << 10].fill(0x55);
    // The core: the partly written dirty sector's old bytes, then the write; sector 8's dirty
    // data is still only in the cache, and sector 3's was dropped, not written back.
    assert!(core.bytes(1, 0, 64 << 10) == want, "{mode}: core");
    want[32 << 10..36 << 10].fill(0x88);
    assert!(read(&cache, 1, 0, 64 << 10) == want, "{mode}: read");
    let class_m = cache
        .stats()
        .classes
        .into_iter()
        .find(|c| c.id == m)
        .unwrap();
    assert_eq!(
        (
            class_m.counters.pass_through_writes,
            class_m.counters.write_hits,
            class_m.counters.write_partial_misses
        ),
        (1, 0, 0),
        "{mode}: counted as a pass-through write"
    );
    cache.flush_all(&mut |_, _| {}).unwrap();
    assert!(
        core.bytes(1, 0, 64 << 10) == want,
        "{mode}: after the flush"
    );
}

#[test]
fn write_invalidate_drops_only_the_written_sectors() {
    invalidating_write_keeps_the_rest_of_the_line(Mode::Wi);
}

#[test]
fn pass_through_write_drops_only_the_written_sectors() {
    invalidating_write_keeps_the_rest_of_the_line(Mode::Pt);
}

#[test]
fn write_around_partial_hit_is_write_invalidate() {
    invalidating_write_keeps_the_rest_of_the_line(Mode::Wa);
}

/// Write-around with everything cached is write-through: cache and core, a write hit.
#[test]
fn write_around_full_hit_updates_cache_and_core() {
    let (core, cache) = ram(Mode::Wa);
    core.write(1, 0, &[0x11; 16 << 10]).unwrap();
    read(&cache, 1, 0, 16 << 10);
    cache
        .write(1, 4 * K, &[0x22; 8 << 10], DEFAULT_CLASS)
        .unwrap();
    assert_eq!(line_state(&cache, 1, 0), Some((0b1111, 0)));
    let before = core.counts().0;
    let got = read(&cache, 1, 0, 16 << 10);
    assert_eq!(core.counts().0, before, "served by the cache");
    assert!(got[4 << 10..12 << 10].iter().all(|&x| x == 0x22));
    assert_eq!(core.bytes(1, 4 << 10, 8 << 10), vec![0x22; 8 << 10]);
    let c = cache.stats().counters;
    assert_eq!((c.write_hits, c.pass_through_writes), (1, 0));
}

/// A file store: a write-invalidate or pass-through write that drops some of a line's dirty
/// sectors rewrites its record, so recovery after a crash writes back only the dirty sectors
/// left, never the dropped ones over what the core got since.
#[test]
fn dropped_dirty_sectors_are_not_written_back_by_recovery() {
    for mode in [Mode::Pt, Mode::Wi, Mode::Wa] {
        let dir = tempfile::tempdir().unwrap();
        let store = StoreKind::File(dir.path().to_path_buf());
        let core = Arc::new(Core::default());
        let id = {
            let cache = Cache::open(
                config(store.clone(), 1 << 20, 64 << 10, Mode::Wb),
                core.clone(),
            )
            .unwrap();
            // Object 1: sectors 0 and 2 dirty. Object 2: sector 0 dirty, sector 2 clean.
            cache.write(1, 0, &[1u8; 4096], DEFAULT_CLASS).unwrap();
            cache.write(1, 8 * K, &[3u8; 4096], DEFAULT_CLASS).unwrap();
            cache.write(2, 0, &[1u8; 4096], DEFAULT_CLASS).unwrap();
            read(&cache, 2, 8 * K, 4096);
            cache.sync_object(1).unwrap();
            cache.sync_object(2).unwrap();
            let class = cache.add_class(ClassConfig::new("other", mode));
            // Sectors 0 and 1: a partial hit for write-around too.
            cache.write(1, 0, &[2u8; 8192], class).unwrap();
            cache.write(2, 0, &[2u8; 8192], class).unwrap();
            assert_eq!(line_state(&cache, 1, 0), Some((0b100, 0b100)), "{mode}");
            assert_eq!(line_state(&cache, 2, 0), Some((0b100, 0)), "{mode}");
            cache.id()
            // Crash: no fsync, no unmount.
        };
        let cache = Cache::open(bound_to(store, id), core.clone()).unwrap();
        cache.recover(&|_| Some(12 << 10)).unwrap();
        let mut want = vec![2u8; 8192];
        want.extend([3u8; 4096]);
        assert!(core.bytes(1, 0, 12 << 10) == want, "{mode}: object 1");
        assert!(
            core.bytes(2, 0, 8 << 10) == vec![2u8; 8192],
            "{mode}: object 2"
        );
    }
}
