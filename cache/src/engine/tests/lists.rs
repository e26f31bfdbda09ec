//! The clean and dirty LRU lists stay exact through every operation: each cached line is on
//! exactly one list, its class's dirty list if and only if it holds dirty sectors, so the
//! tail of a clean list is always a clean victim (nothing to scan past).

use super::*;

fn check_lists(cache: &Cache, when: &str) {
    let mut seen = vec![false; cache.nslots];
    let (mut dirty_total, mut dirty_counted) = (0, 0);
    for g in cache.all_shards() {
        for (id, c) in g.classes.iter().enumerate() {
            let Some(c) = c else { continue };
            for (list, dirty) in [(&c.clean, false), (&c.dirty, true)] {
                let members: Vec<u32> = g.links.oldest_first(list).collect();
                assert_eq!(members.len(), list.len(), "{when}: list length");
                for s in members {
                    let sl = &g.slots[s as usize];
                    assert!(!seen[s as usize], "{when}: slot {s} on two lists");
                    seen[s as usize] = true;
                    assert!(sl.key().is_some(), "{when}: a free slot on a list");
                    assert_eq!(sl.class as usize, id, "{when}: on its class's list");
                    assert_eq!(sl.dirty != 0, dirty, "{when}: slot {s} on the wrong list");
                    assert_eq!(sl.dirty & !sl.valid, 0, "{when}: dirty but not valid");
                    let (o, l) = sl.key().unwrap();
                    assert_eq!(
                        cache.shard_index(o, l),
                        cache.shard_of_slot(s),
                        "{when}: slot {s} outside its line's shard"
                    );
                }
                if dirty {
                    dirty_total += list.len();
                }
            }
        }
        for (s, sl) in g.slots.iter() {
            assert_eq!(
                sl.key().is_some(),
                seen[s as usize],
                "{when}: slot {s} cached but on no list"
            );
        }
        dirty_counted += g.dirty_lines;
        assert_eq!(
            g.occupied + g.free_lines(),
            g.slots.len(),
            "{when}: free list"
        );
    }
    assert_eq!(dirty_total, dirty_counted, "{when}: dirty line count");
    assert_eq!(dirty_total, cache.totals.dirty(), "{when}: dirty total");
    assert_eq!(
        cache.totals.free() + cache.totals.occupied(),
        cache.nslots,
        "{when}: free and occupied totals"
    );
}

#[test]
fn every_operation_keeps_the_lru_lists_exact() {
    let core = Arc::new(Core::default());
    let cache = Cache::open(
        config(StoreKind::Ram, 16 * (16 << 10), 16 << 10, Mode::Wb),
        core.clone(),
    )
    .unwrap();
    let modes = [Mode::Wb, Mode::Wt, Mode::Wa, Mode::Wi, Mode::Wo, Mode::Pt];
    let classes: Vec<ClassId> = (0..3)
        .map(|i| {
            cache.add_class(ClassConfig {
                priority: i as u8,
                ..ClassConfig::new(&format!("c{i}"), modes[i])
            })
        })
        .chain([DEFAULT_CLASS])
        .collect();
    let mut x = 0x9E37_79B9u64;
    let mut rnd = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    for step in 0..4000 {
        let obj = rnd(3);
        let off = rnd(400 << 10);
        let len = 1 + rnd(50_000);
        let class = classes[rnd(classes.len() as u64) as usize];
        let what = match rnd(20) {
            0..=6 => {
                cache
                    .write(obj, off, &vec![step as u8; len as usize], class)
                    .unwrap();
                "write"
            }
            7..=13 => {
                let mut b = vec![0u8; len as usize];
                cache.read(obj, off, &mut b, class).unwrap();
                "read"
            }
            14 | 15 => {
                cache
                    .discard(obj, off, len, || -> io::Result<()> {
                        core.write(obj, off, &vec![0u8; len as usize])
                    })
                    .unwrap();
                "discard"
            }
            16 => {
                cache.truncate(obj, off).unwrap();
                "truncate"
            }
            17 => {
                let id = classes[rnd(3) as usize];
                let mut cfg = cache.class(id).unwrap();
                cfg.mode = modes[rnd(6) as usize];
                cache.set_class(id, cfg).unwrap();
                "mode change"
            }
            18 => {
                cache.clean_pass().unwrap();
                "clean pass"
            }
            _ => {
                cache.flush_object(obj).unwrap();
                "flush"
            }
        };
        check_lists(&cache, &format!("step {step} ({what})"));
    }
}

/// Requests of several lines take their shards one at a time, in order: threads writing,
/// reading, punching and truncating overlapping ranges of one file, with the cleaner
/// running, never wait on each other in a cycle, and leave every list exact. The last writes
/// (one writer per range) are what the file reads after all.
#[test]
fn overlapping_requests_across_shards_never_deadlock() {
    let core = Arc::new(Core::default());
    let cache = Cache::open(
        CacheConfig {
            shards: 4,
            ..config(StoreKind::Ram, 48 * 4096, 4096, Mode::Wb)
        },
        core.clone(),
    )
    .unwrap();
    assert_eq!(cache.shard_count(), 4);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let cache = cache.clone();
            s.spawn(move || {
                let mut x = t + 1;
                for _ in 0..2000 {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let off = (x >> 33) % (40 * 4096);
                    let len = 1 + ((x >> 20) % (6 * 4096)) as usize;
                    match (x >> 8) % 6 {
                        0..=2 => cache
                            .write(1, off, &vec![t as u8; len], DEFAULT_CLASS)
                            .unwrap(),
                        3 => {
                            let mut b = vec![0u8; len];
                            cache.read(1, off, &mut b, DEFAULT_CLASS).unwrap();
                        }
                        4 => cache
                            .discard(1, off, len as u64, || Ok::<(), io::Error>(()))
                            .unwrap(),
                        _ => cache.truncate(1, off + 30 * 4096).unwrap(),
                    }
                }
            });
        }
        let cache = cache.clone();
        s.spawn(move || {
            for _ in 0..50 {
                cache.clean_pass().unwrap();
            }
        });
    });
    check_lists(&cache, "after the threads");
    for t in 0..4u64 {
        cache
            .write(1, t * 40960, &[t as u8 + 9; 40960], DEFAULT_CLASS)
            .unwrap();
    }
    for t in 0..4u64 {
        assert_eq!(read(&cache, 1, t * 40960, 40960), vec![t as u8 + 9; 40960]);
    }
    cache.flush_all(&mut |_, _| {}).unwrap();
    assert_eq!(core.bytes(1, 0, 4 * 40960), {
        let mut v = Vec::new();
        for t in 0..4u8 {
            v.extend(std::iter::repeat_n(t + 9, 40960));
        }
        v
    });
    check_lists(&cache, "after the flush");
}

/// An object's lines are found in every shard, by lookups of every n-th line when the span is
/// small and by a pass over the slots when it is not: the same lines either way.
#[test]
fn an_objects_lines_are_found_across_shards() {
    for shards in [1, 3, 4, 5] {
        let core = Arc::new(Core::default());
        let cache = Cache::open(
            CacheConfig {
                shards,
                ..config(StoreKind::Ram, 200 * 4096, 4096, Mode::Wb)
            },
            core,
        )
        .unwrap();
        // A span far wider than a shard's slots too (found by the pass over them).
        let mut held: Vec<u64> = (0..60).map(|i| i * 7 % 61 + 1000).collect();
        held.push(5_000_000);
        for &l in &held {
            cache
                .write(42, l * 4096, &[1u8; 4096], DEFAULT_CLASS)
                .unwrap();
        }
        let mut want = held.clone();
        want.sort_unstable();
        assert_eq!(cache.lines_of(42, 0, u64::MAX), want, "{shards} shards");
        let some: Vec<u64> = want
            .iter()
            .copied()
            .filter(|l| (1010..=1030).contains(l))
            .collect();
        assert_eq!(cache.lines_of(42, 1010, 1030), some, "{shards} shards");
        assert!(cache.lines_of(43, 0, u64::MAX).is_empty());
    }
}
