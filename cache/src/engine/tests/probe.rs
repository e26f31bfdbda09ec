//! `answers_from_memory`: a request it answers yes for reaches no device.

use super::*;
use crate::mode::{Cleaner, CleaningPolicy};

/// Random reads and writes of a few lines, half of them continuing the last one (so the
/// sequential cutoff cuts some), in every mode and cutoff policy, the cache full; each is
/// asked about first, and one said to need no device must leave the core's counts as they were.
#[test]
fn a_request_answered_from_memory_reaches_no_device() {
    for cutoff in [SeqCutoff::Never, SeqCutoff::Full, SeqCutoff::Always] {
        for mode in [Mode::Wt, Mode::Wb, Mode::Wa, Mode::Wi, Mode::Wo, Mode::Pt] {
            let core = Arc::new(Core::default());
            let mut cfg = config(StoreKind::Ram, 256 << 10, 16 << 10, mode);
            cfg.policy.seq_cutoff = cutoff;
            cfg.policy.seq_threshold = 32 << 10;
            cfg.policy.seq_promotion_count = 2;
            // No cleaner: its write-back would move the core's counts under a request.
            cfg.policy.cleaner = Cleaner {
                policy: CleaningPolicy::Nop,
                ..Cleaner::default()
            };
            let cache = Cache::open(cfg, core.clone()).unwrap();
            let (yes, no) = random_requests(&cache, &core, mode);
            let what = format!("{mode:?} {cutoff:?}: {yes} yes, {no} no");
            // Pass-through and the modes whose writes reach the core still answer read hits.
            assert!(mode == Mode::Pt || yes > 100, "{what}");
            assert!(no > 100, "{what}");
        }
    }
}

fn random_requests(cache: &Cache, core: &Core, mode: Mode) -> (u32, u32) {
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut step = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let (mut yes, mut no) = (0, 0);
    let mut last = (0u64, 0u64);
    for _ in 0..3000 {
        let r = step();
        let (object, offset) = if r & 32 == 0 {
            last
        } else {
            // Sector-aligned or not; 12 lines (of 16K) per object, 16 in the cache.
            let at = (step() % (12 * 16384)) & if r & 8 == 0 { !4095 } else { !0 };
            (r % 3, at)
        };
        let len = 1 + (step() % 20000) as usize;
        last = (object, offset + len as u64);
        let write = r & 16 == 0;
        let answered = cache.answers_from_memory(object, offset, len, DEFAULT_CLASS, write);
        let before = core.counts();
        if write {
            cache
                .write(object, offset, &vec![r as u8; len], DEFAULT_CLASS)
                .unwrap();
        } else {
            cache
                .read(object, offset, &mut vec![0; len], DEFAULT_CLASS)
                .unwrap();
        }
        if answered {
            yes += 1;
            let what = format!("{mode:?} write {write} {offset}+{len}");
            assert_eq!(core.counts(), before, "{what}");
        } else {
            no += 1;
        }
    }
    (yes, no)
}

/// A cache file's requests may wait on its device, hits too.
#[test]
fn a_cache_file_is_never_answered_from_memory() {
    let dir = tempfile::tempdir().unwrap();
    let core = Arc::new(Core::default());
    let cfg = config(
        StoreKind::File(dir.path().to_path_buf()),
        1 << 20,
        64 << 10,
        Mode::Wb,
    );
    let cache = Cache::open(cfg, core).unwrap();
    cache.write(1, 0, &[1; 8192], DEFAULT_CLASS).unwrap();
    assert!(!cache.in_memory());
    assert!(!cache.answers_from_memory(1, 0, 8192, DEFAULT_CLASS, false));
}
