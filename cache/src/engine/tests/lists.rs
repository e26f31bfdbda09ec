//! The clean and dirty LRU lists stay exact through every operation: each cached line is on
//! exactly one list, its class's dirty list if and only if it holds dirty sectors, so the
//! tail of a clean list is always a clean victim (nothing to scan past).

use super::*;

fn check_lists(cache: &Cache, when: &str) {
    let g = cache.inner.lock();
    let mut seen = vec![false; g.slots.len()];
    let mut dirty_total = 0;
    for (id, c) in g.classes.iter().enumerate() {
        let Some(c) = c else { continue };
        for (list, dirty) in [(&c.clean, false), (&c.dirty, true)] {
            let members: Vec<u32> = g.links.oldest_first(list).collect();
            assert_eq!(members.len(), list.len(), "{when}: list length");
            for s in members {
                let sl = &g.slots[s as usize];
                assert!(!seen[s as usize], "{when}: slot {s} on two lists");
                seen[s as usize] = true;
                assert!(sl.key.is_some(), "{when}: a free slot on a list");
                assert_eq!(sl.class as usize, id, "{when}: on its class's list");
                assert_eq!(sl.dirty != 0, dirty, "{when}: slot {s} on the wrong list");
                assert_eq!(sl.dirty & !sl.valid, 0, "{when}: dirty but not valid");
            }
            if dirty {
                dirty_total += list.len();
            }
        }
    }
    for (s, sl) in g.slots.iter().enumerate() {
        assert_eq!(
            sl.key.is_some(),
            seen[s],
            "{when}: slot {s} cached but on no list"
        );
    }
    assert_eq!(dirty_total, g.dirty_lines, "{when}: dirty line count");
    assert_eq!(
        g.index.len() + g.free.len(),
        g.slots.len(),
        "{when}: free list"
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
