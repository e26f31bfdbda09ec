//! A punched or zeroed range leaves the cache, and only it: dirty sectors in it are dropped
//! (never written back), lines wholly inside are freed, sectors covered in part read zeros
//! where punched; the records of a file store say so before the punch returns.

use super::*;

const K: u64 = 1024;

/// The core's side of a punch: zeros over the range.
fn punch_core(core: &Core, object: u64, offset: u64, len: u64) -> io::Result<()> {
    core.write(object, offset, &vec![0u8; len as usize])
}

/// Lines of 16K (4 sectors). Object 1: 64K of 0x11 on the core, 0..64K written dirty (0x22)
/// in the cache. Punch 6K..40K: line 0 loses sector 2 and 3 wholly, sector 1 from 6K; line 1
/// (16K..32K) goes; line 2 loses sectors 0 and 1; line 3 is untouched.
fn punched(cache: &Cache, core: &Core) -> Vec<u8> {
    core.write(1, 0, &[0x11; 64 << 10]).unwrap();
    cache.write(1, 0, &[0x22; 64 << 10], DEFAULT_CLASS).unwrap();
    assert_eq!(cache.stats().dirty_lines, 4);
    cache
        .discard(1, 6 * K, 34 * K, || punch_core(core, 1, 6 * K, 34 * K))
        .unwrap();
    let mut want = vec![0x22u8; 64 << 10];
    want[6 << 10..40 << 10].fill(0);
    want
}

#[test]
fn a_punch_drops_only_its_range_and_never_writes_it_back() {
    let core = Arc::new(Core::default());
    let cache = Cache::open(
        config(StoreKind::Ram, 1 << 20, 16 << 10, Mode::Wb),
        core.clone(),
    )
    .unwrap();
    let want = punched(&cache, &core);
    let s = cache.stats();
    assert_eq!(
        (s.occupancy_lines, s.dirty_lines),
        (3, 3),
        "line 1 freed, the others dirty"
    );
    {
        let state = |line: u64| {
            let g = cache.shard(cache.shard_index(1, line));
            let s = g.lookup((1, line)).unwrap();
            (g.slots[s as usize].valid, g.slots[s as usize].dirty)
        };
        assert_eq!(state(0), (0b0011, 0b0011));
        assert_eq!(state(2), (0b1100, 0b1100));
        assert_eq!(state(3), (0b1111, 0b1111));
    }
    assert!(
        read(&cache, 1, 0, 64 << 10) == want,
        "read through the cache"
    );
    cache.flush_all(&mut |_, _| {}).unwrap();
    assert!(
        core.bytes(1, 0, 64 << 10) == want,
        "the dropped dirty sectors were not written back over the hole"
    );
    assert!(read(&cache, 1, 0, 64 << 10) == want, "after the flush");
}

/// A punch that fails on the core keeps the dirty sectors (the file's newest data) and drops
/// the clean ones of the range.
#[test]
fn a_failed_punch_keeps_the_dirty_data() {
    let core = Arc::new(Core::default());
    let cache = Cache::open(
        config(StoreKind::Ram, 1 << 20, 16 << 10, Mode::Wb),
        core.clone(),
    )
    .unwrap();
    core.write(1, 0, &[0x11; 32 << 10]).unwrap();
    read(&cache, 1, 0, 16 << 10); // line 0 clean
    cache
        .write(1, 16 * K, &[0x22; 16 << 10], DEFAULT_CLASS)
        .unwrap(); // line 1 dirty
    let r = cache.discard(1, 0, 32 * K, || Err(io::Error::other("device failed")));
    assert!(r.is_err());
    let s = cache.stats();
    assert_eq!((s.occupancy_lines, s.dirty_lines), (1, 1));
    assert_eq!(read(&cache, 1, 16 * K, 16 << 10), vec![0x22; 16 << 10]);
}

/// A file store: after the punch returns, a crash and recovery write back the dirty sectors
/// outside the hole and nothing inside it.
#[test]
fn recovery_after_a_punch_writes_nothing_into_the_hole() {
    let dir = tempfile::tempdir().unwrap();
    let store = StoreKind::File(dir.path().to_path_buf());
    let core = Arc::new(Core::default());
    let (id, want) = {
        let cache = Cache::open(
            config(store.clone(), 1 << 20, 16 << 10, Mode::Wb),
            core.clone(),
        )
        .unwrap();
        core.write(1, 0, &[0x11; 64 << 10]).unwrap();
        cache.write(1, 0, &[0x22; 64 << 10], DEFAULT_CLASS).unwrap();
        cache.sync_object(1).unwrap();
        cache
            .discard(1, 6 * K, 34 * K, || punch_core(&core, 1, 6 * K, 34 * K))
            .unwrap();
        let mut want = vec![0x22u8; 64 << 10];
        want[6 << 10..40 << 10].fill(0);
        (cache.id(), want)
        // Crash: no fsync since the punch, no unmount.
    };
    let reopen = CacheConfig {
        line_size: 16 << 10,
        ..bound_to(store, id)
    };
    let cache = Cache::open(reopen, core.clone()).unwrap();
    let written = cache.recover(&|_| Some(64 << 10)).unwrap();
    assert_eq!(written, 3, "lines 0, 2 and 3; line 1 was freed");
    assert!(core.bytes(1, 0, 64 << 10) == want);
    assert!(read(&cache, 1, 0, 64 << 10) == want);
}
