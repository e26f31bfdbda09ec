//! Every counter of every mode after one scripted sequence: requests counted by what the cache
//! held before them (hit, partial miss, full miss) or as pass-through, and the bytes moved.

use super::*;

const K: u64 = 1024;

/// The sequence, on a cache of 64K lines (16 sectors of 4K):
/// R1 read 0..8K (line 0), R2 the same, R3 read 4K..12K, R4 read 128K..132K (line 2),
/// W1 write 64K..68K (line 1), W2 write 0..4K, W3 write 128K..136K, R5 read 64K..68K,
/// R6 read 64K..72K.
fn run(mode: Mode) -> Counters {
    let (core, cache) = ram(mode);
    core.write(1, 0, &[1u8; 256 << 10]).unwrap();
    let r = |off: u64, len: u64| {
        read(&cache, 1, off, len as usize);
    };
    let w = |off: u64, len: u64| cache.write(1, off, &vec![2u8; len as usize], DEFAULT_CLASS);
    r(0, 8 * K);
    r(0, 8 * K);
    r(4 * K, 8 * K);
    r(128 * K, 4 * K);
    w(64 * K, 4 * K).unwrap();
    w(0, 4 * K).unwrap();
    w(128 * K, 8 * K).unwrap();
    r(64 * K, 4 * K);
    r(64 * K, 8 * K);
    let s = cache.stats();
    assert_eq!(s.classes[0].counters, s.counters, "{mode}: one class");
    s.counters
}

/// What every mode shares: the callers' bytes, no errors.
fn base() -> Counters {
    Counters {
        caller_read_bytes: 40 * K,
        caller_write_bytes: 16 * K,
        ..Counters::default()
    }
}

#[test]
fn write_through_counts() {
    // R2, R5 hit; R3, R6 partial; R1, R4 full. W2 hit, W3 partial, W1 full (inserted).
    let want = Counters {
        read_hits: 2,
        read_partial_misses: 2,
        read_full_misses: 2,
        write_hits: 1,
        write_partial_misses: 1,
        write_full_misses: 1,
        core_read_bytes: (8 + 4 + 4 + 4) * K,
        core_write_bytes: 16 * K,
        cache_read_bytes: (8 + 4 + 4 + 4) * K,
        cache_write_bytes: (8 + 4 + 4 + 4 + 4 + 8 + 4) * K,
        ..base()
    };
    assert_eq!(run(Mode::Wt), want);
}

#[test]
fn write_back_counts() {
    // As write-through, but no write reaches the core.
    let want = Counters {
        read_hits: 2,
        read_partial_misses: 2,
        read_full_misses: 2,
        write_hits: 1,
        write_partial_misses: 1,
        write_full_misses: 1,
        core_read_bytes: (8 + 4 + 4 + 4) * K,
        core_write_bytes: 0,
        cache_read_bytes: (8 + 4 + 4 + 4) * K,
        cache_write_bytes: (8 + 4 + 4 + 4 + 4 + 8 + 4) * K,
        ..base()
    };
    assert_eq!(run(Mode::Wb), want);
}

#[test]
fn write_around_counts() {
    // W1 is not inserted, so R5 is a full miss that inserts and R6 a partial one. W2 is a
    // full hit (cache and core); W1 (miss) and W3 (partial hit) pass through as WI.
    let want = Counters {
        read_hits: 1,
        read_partial_misses: 2,
        read_full_misses: 3,
        write_hits: 1,
        pass_through_writes: 2,
        core_read_bytes: (8 + 4 + 4 + 4 + 4) * K,
        core_write_bytes: 16 * K,
        cache_read_bytes: (8 + 4 + 4) * K,
        cache_write_bytes: (8 + 4 + 4 + 4 + 4 + 4) * K,
        ..base()
    };
    assert_eq!(run(Mode::Wa), want);
}

#[test]
fn write_invalidate_counts() {
    // Reads as write-around; every write passes through (core, then the written sectors
    // invalidated).
    let want = Counters {
        read_hits: 1,
        read_partial_misses: 2,
        read_full_misses: 3,
        pass_through_writes: 3,
        core_read_bytes: (8 + 4 + 4 + 4 + 4) * K,
        core_write_bytes: 16 * K,
        cache_read_bytes: (8 + 4 + 4) * K,
        cache_write_bytes: (8 + 4 + 4 + 4 + 4) * K,
        ..base()
    };
    assert_eq!(run(Mode::Wi), want);
}

#[test]
fn write_only_counts() {
    // Reads never insert: R1..R4 full misses; the writes insert (full misses, no line held
    // before), so R5 hits and R6 is partial.
    let want = Counters {
        read_hits: 1,
        read_partial_misses: 1,
        read_full_misses: 4,
        write_full_misses: 3,
        core_read_bytes: (8 + 8 + 8 + 4 + 4) * K,
        core_write_bytes: 0,
        cache_read_bytes: (4 + 4) * K,
        cache_write_bytes: 16 * K,
        ..base()
    };
    assert_eq!(run(Mode::Wo), want);
}

#[test]
fn pass_through_counts() {
    let want = Counters {
        pass_through_reads: 6,
        pass_through_writes: 3,
        core_read_bytes: 40 * K,
        core_write_bytes: 16 * K,
        ..base()
    };
    assert_eq!(run(Mode::Pt), want);
}

/// A read that should insert and may not (nhit: not yet) passed through; a cutoff stream too.
#[test]
fn reads_that_insert_nothing_pass_through() {
    let core = Arc::new(Core::default());
    let mut cfg = config(StoreKind::Ram, 1 << 20, 64 << 10, Mode::Wt);
    cfg.policy.promotion = Promotion::Nhit {
        insertion_threshold: 2,
        trigger_threshold: 0,
    };
    let cache = Cache::open(cfg, core.clone()).unwrap();
    read(&cache, 4, 0, 4096);
    read(&cache, 4, 0, 4096);
    read(&cache, 4, 0, 4096);
    let c = cache.stats().counters;
    assert_eq!(
        (c.pass_through_reads, c.read_full_misses, c.read_hits),
        (1, 1, 1),
        "{c:?}"
    );
}
