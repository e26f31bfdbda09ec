//! Eviction: a clean victim behind any number of dirty lines, and class priorities (a class
//! evicts only from classes as important as it or less; the default class's priority is set).

use super::*;

/// A clean line is found for eviction however many dirty lines are older (the old scan looked
/// at the 256 oldest only, and stopped inserting reads once those were all dirty).
#[test]
fn a_clean_victim_is_found_behind_any_number_of_dirty_lines() {
    let core = Arc::new(Core::default());
    // 1024 lines of 4K; the cleaner is not started, so dirty lines stay dirty. One shard:
    // which line goes is decided per shard, and this fills the cache to the last line.
    let cache = Cache::open(
        CacheConfig {
            shards: 1,
            ..config(StoreKind::Ram, 4 << 20, 4096, Mode::Wb)
        },
        core.clone(),
    )
    .unwrap();
    // The 1000 oldest lines dirty, then 24 clean ones.
    for i in 0..1000u64 {
        cache
            .write(1, i * 4096, &[1u8; 4096], DEFAULT_CLASS)
            .unwrap();
    }
    for i in 0..24u64 {
        read(&cache, 2, i * 4096, 4096);
    }
    assert_eq!(cache.stats().occupancy_lines, 1024);
    // A new read still gets a line: a clean one is evicted, no dirty one is lost.
    read(&cache, 3, 0, 4096);
    let st = cache.stats();
    assert_eq!(st.occupancy_lines, 1024);
    assert_eq!(st.dirty_lines, 1000);
    let before = core.counts().0;
    read(&cache, 3, 0, 4096);
    assert_eq!(
        core.counts().0,
        before,
        "the new line was inserted and now hits"
    );
}

/// A class evicts only lines of classes as important as it or less (priority numerically >=
/// its own): a priority-5 class meets a cache full of priority-1 lines and passes through;
/// a priority-1 class takes a priority-5 class's lines.
#[test]
fn a_class_never_evicts_a_more_important_one() {
    for (filler, requester) in [(1u8, 5u8), (5, 1)] {
        let core = Arc::new(Core::default());
        let cache = Cache::open(
            CacheConfig {
                shards: 1,
                ..config(StoreKind::Ram, 8 * 4096, 4096, Mode::Wt)
            },
            core.clone(),
        )
        .unwrap();
        let class = |p: u8, name: &str| {
            cache.add_class(ClassConfig {
                priority: p,
                ..ClassConfig::new(name, Mode::Wt)
            })
        };
        let (f, r) = (class(filler, "filler"), class(requester, "requester"));
        core.write(1, 0, &[1u8; 8 * 4096]).unwrap();
        core.write(2, 0, &[2u8; 4096]).unwrap();
        let mut b = vec![0u8; 4096];
        for i in 0..8 {
            cache.read(1, i * 4096, &mut b, f).unwrap();
        }
        cache.read(2, 0, &mut b, r).unwrap();
        assert_eq!(b, vec![2u8; 4096]);
        let s = cache.stats();
        let of = |id: ClassId| s.classes.iter().find(|c| c.id == id).unwrap().clone();
        let (fs, rs) = (of(f), of(r));
        if requester > filler {
            assert_eq!((fs.occupancy_lines, rs.occupancy_lines), (8, 0));
            assert_eq!(
                (rs.counters.pass_through_reads, rs.counters.read_full_misses),
                (1, 0),
                "counted as pass-through"
            );
        } else {
            assert_eq!((fs.occupancy_lines, rs.occupancy_lines), (7, 1));
            assert_eq!(
                (rs.counters.pass_through_reads, rs.counters.read_full_misses),
                (0, 1)
            );
        }
    }
}

/// The volume default's priority comes from the config, and ranks it like any class: with
/// priority 3, a priority-2 target evicts its lines, and it cannot evict the target's.
#[test]
fn the_default_class_has_the_configured_priority() {
    let core = Arc::new(Core::default());
    let mut cfg = config(StoreKind::Ram, 4 * 4096, 4096, Mode::Wt);
    cfg.default_priority = 3;
    let cache = Cache::open(cfg, core.clone()).unwrap();
    assert_eq!(cache.class(DEFAULT_CLASS).unwrap().priority, 3);
    assert_eq!(cache.stats().classes[0].priority, 3);
    let target = cache.add_class(ClassConfig {
        priority: 2,
        ..ClassConfig::new("target", Mode::Wt)
    });
    for i in 0..4 {
        read(&cache, 1, i * 4096, 4096);
    }
    for i in 0..4 {
        let mut b = vec![0u8; 4096];
        cache.read(2, i * 4096, &mut b, target).unwrap();
    }
    let by = |id: ClassId| {
        cache
            .stats()
            .classes
            .iter()
            .find(|c| c.id == id)
            .unwrap()
            .occupancy_lines
    };
    assert_eq!((by(DEFAULT_CLASS), by(target)), (0, 4));
    read(&cache, 1, 0, 4096);
    assert_eq!((by(DEFAULT_CLASS), by(target)), (0, 4));
    assert_eq!(cache.stats().classes[0].counters.pass_through_reads, 1);
}

/// A class's guaranteed share (`min_allocation`) is not evicted by other classes: a class of
/// the same priority takes its lines only down to that share, then replaces its own.
#[test]
fn a_class_keeps_its_minimum_share() {
    let core = Arc::new(Core::default());
    let cache = Cache::open(
        CacheConfig {
            shards: 1,
            ..config(StoreKind::Ram, 8 * 4096, 4096, Mode::Wt)
        },
        core.clone(),
    )
    .unwrap();
    let kept = cache.add_class(ClassConfig {
        priority: 5,
        min_allocation: 0.5,
        ..ClassConfig::new("kept", Mode::Wt)
    });
    let other = cache.add_class(ClassConfig {
        priority: 5,
        ..ClassConfig::new("other", Mode::Wt)
    });
    let mut b = vec![0u8; 4096];
    for i in 0..8 {
        cache.read(1, i * 4096, &mut b, kept).unwrap();
    }
    for i in 0..8 {
        cache.read(2, i * 4096, &mut b, other).unwrap();
    }
    let by = |id: ClassId| {
        let s = cache.stats();
        s.classes
            .iter()
            .find(|c| c.id == id)
            .unwrap()
            .occupancy_lines
    };
    assert_eq!((by(kept), by(other)), (4, 4), "half kept, half replaced");
    // Its newest lines are the ones kept.
    let reads = core.counts().0;
    for i in 4..8 {
        cache.read(1, i * 4096, &mut b, kept).unwrap();
    }
    assert_eq!(core.counts().0, reads);
}
