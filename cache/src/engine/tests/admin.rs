//! casadm's controls on the engine: a mode switch that keeps dirty lines, counters reset,
//! purge of clean lines, the age of the oldest dirty line, the metadata's memory.

use super::*;
use crate::metadata::Slot;

#[test]
fn purge_drops_clean_lines_only_and_keeps_the_data() {
    let (core, cache) = ram(Mode::Wb);
    let line = 64 << 10;
    cache.write(1, 0, &vec![1u8; line], DEFAULT_CLASS).unwrap();
    cache.write(2, 0, &vec![2u8; line], DEFAULT_CLASS).unwrap();
    cache.flush_object(1).unwrap();
    assert_eq!(cache.lines_where(&|_, _| true), (1, 1));
    let p = cache.purge_where(&|_, _| true).unwrap();
    assert_eq!((p.lines, p.dirty_kept, p.busy), (1, 1, 0));
    assert_eq!(cache.lines_where(&|_, _| true), (0, 1));
    // The dropped line is read from the core again; the dirty one from the cache.
    let (reads, _) = core.counts();
    assert_eq!(read(&cache, 1, 0, line), vec![1u8; line]);
    assert_eq!(read(&cache, 2, 0, line), vec![2u8; line]);
    assert_eq!(core.counts().0, reads + 1);
}

#[test]
fn a_mode_switch_that_keeps_dirty_lines_leaves_them_to_the_cleaner() {
    let (core, cache) = ram(Mode::Wb);
    cache.write(1, 0, &[5u8; 8192], DEFAULT_CLASS).unwrap();
    let mut cfg = cache.class(DEFAULT_CLASS).unwrap();
    cfg.mode = Mode::Pt;
    cache.set_class_keeping_dirty(DEFAULT_CLASS, cfg).unwrap();
    assert_eq!(cache.stats().dirty_lines, 1);
    assert_eq!(core.counts().1, 0, "nothing written back");
    let (age, per_class) = cache.dirty_for();
    assert!(age.is_some());
    assert_eq!(per_class.len(), 1);
    // Pass-through reads the dirty sectors back first: right data, line clean after.
    assert_eq!(read(&cache, 1, 0, 8192), vec![5u8; 8192]);
    assert_eq!(cache.stats().dirty_lines, 0);
    assert_eq!(cache.dirty_for().0, None);
}

#[test]
fn counters_reset_and_metadata_memory_is_counted_per_line() {
    let (_, cache) = ram(Mode::Wt);
    cache.write(1, 0, &[1u8; 4096], DEFAULT_CLASS).unwrap();
    let _ = read(&cache, 1, 0, 4096);
    assert!(cache.stats().counters.read_hits > 0);
    cache.reset_counters();
    let s = cache.stats();
    assert_eq!(s.counters, Counters::default());
    assert!(s.classes.iter().all(|c| c.counters == Counters::default()));
    assert_eq!(s.occupancy_lines, 1, "what is cached stays");
    let m = cache.metadata_memory();
    let lines = s.lines;
    assert_eq!(
        std::mem::size_of::<Slot>(),
        48,
        "a line's state packs in 48 bytes"
    );
    assert!(m.slots_bytes >= lines * 48);
    assert_eq!(m.lru_bytes, lines * 8);
    assert_eq!(
        m.total_bytes,
        m.slots_bytes + m.lru_bytes + m.index_bytes + m.objects_bytes
    );
    assert_eq!(m.bytes_per_line, m.total_bytes / lines);
}
