//! The cleaning policies, pass by pass, on a clock the tests move (no sleeping).

use super::Limiter;
use crate::clock::ManualClock;
use crate::mode::{Cleaner, CleaningPolicy, Mode, Policy, SeqCutoff};
use crate::{Backend, Cache, CacheConfig, StoreKind, DEFAULT_CLASS};
use parking_lot::Mutex;
use rustc_hash::FxHashMap as HashMap;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Default)]
struct Core {
    data: Mutex<HashMap<(u64, u64), u8>>,
}

impl Backend for Core {
    fn read(&self, _object: u64, _offset: u64, buf: &mut [u8]) -> io::Result<()> {
        buf.fill(0);
        Ok(())
    }
    fn write(&self, object: u64, offset: u64, data: &[u8]) -> io::Result<()> {
        self.data.lock().insert((object, offset), data[0]);
        Ok(())
    }
    fn sync(&self, _object: u64) -> io::Result<()> {
        Ok(())
    }
}

const S: Duration = Duration::from_secs(1);

/// A write-back cache of `lines` 4K lines with this cleaner, on a manual clock.
fn cache(lines: u64, line: u64, cleaner: Cleaner) -> (Arc<Cache>, Arc<ManualClock>, Arc<Core>) {
    let clock = Arc::new(ManualClock::new());
    let core = Arc::new(Core::default());
    let cfg = CacheConfig {
        store: StoreKind::Ram,
        size: lines * line,
        line_size: line,
        default_mode: Mode::Wb,
        default_priority: 1,
        policy: Policy {
            seq_cutoff: SeqCutoff::Never,
            cleaner,
            ..Policy::default()
        },
        volume: [1; 16],
        reset: false,
        discard_dirty: false,
        generation: 0,
        bound: None,
        holds_dirty: false,
        on_first_dirty: None,
        throttle: None,
        file_in_memory: false,
        clock: Some(clock.clone()),
        shards: 0,
    };
    (Cache::open(cfg, core.clone()).unwrap(), clock, core)
}

fn alru() -> Cleaner {
    Cleaner {
        dirty_ratio_threshold: 100,
        ..Cleaner::alru()
    }
}

fn dirty(c: &Cache, object: u64, line: u64) {
    let l = c.line_size();
    c.write(
        object,
        line * l,
        &vec![object as u8; l as usize],
        DEFAULT_CLASS,
    )
    .unwrap();
}

fn pass(c: &Cache) -> usize {
    c.clean_pass().unwrap()
}

#[test]
fn alru_staleness_runs_from_the_last_write() {
    let (c, clock, _) = cache(
        64,
        4096,
        Cleaner {
            staleness: 10 * S,
            ..alru()
        },
    );
    dirty(&c, 1, 0);
    dirty(&c, 1, 1);
    clock.advance(6 * S);
    dirty(&c, 1, 0); // written again: stale 10 s after this write, not the first
    clock.advance(5 * S);
    // 11 s after line 1's write, 5 s after line 0's last one.
    assert_eq!(pass(&c), 1);
    assert_eq!(c.stats().dirty_lines, 1);
    assert_eq!(pass(&c), 0, "line 0 is not stale yet");
    clock.advance(5 * S);
    assert_eq!(pass(&c), 1);
    assert_eq!(c.stats().dirty_lines, 0);
}

#[test]
fn alru_waits_for_the_activity_threshold_unless_it_is_zero() {
    let (c, clock, _) = cache(
        64,
        4096,
        Cleaner {
            staleness: Duration::ZERO,
            activity_threshold: 10 * S,
            ..alru()
        },
    );
    dirty(&c, 1, 0);
    clock.advance(9 * S);
    assert_eq!(pass(&c), 0, "a request came 9 s ago");
    let mut b = [0u8; 4096];
    c.read(1, 0, &mut b, DEFAULT_CLASS).unwrap(); // a read is activity too
    clock.advance(9 * S);
    assert_eq!(pass(&c), 0);
    clock.advance(S);
    assert_eq!(pass(&c), 1, "10 s idle");
    // Activity threshold 0: cleans under load, right after the write.
    let (c, _, _) = cache(
        64,
        4096,
        Cleaner {
            staleness: Duration::ZERO,
            activity_threshold: Duration::ZERO,
            ..alru()
        },
    );
    dirty(&c, 1, 0);
    assert_eq!(pass(&c), 1);
}

#[test]
fn alru_cleans_above_the_dirty_ratio_down_to_threshold_minus_inertia() {
    // 100 lines of 4K; over 50 % dirty, clean (5 per pass, age regardless) down to 30.
    let (c, _, _) = cache(
        100,
        4096,
        Cleaner {
            staleness: 3600 * S,
            flush_max_buffers: 5,
            dirty_ratio_threshold: 50,
            dirty_ratio_inertia: 20 * 4096,
            ..Cleaner::alru()
        },
    );
    for l in 0..49 {
        dirty(&c, 1, l);
    }
    assert_eq!(pass(&c), 0, "49 % dirty, nothing stale");
    dirty(&c, 1, 49);
    let mut passes = 0;
    while pass(&c) > 0 {
        passes += 1;
        assert!(passes < 100);
    }
    assert_eq!(c.stats().dirty_lines, 30);
    assert_eq!(passes, 4, "50 -> 30 at 5 lines a pass");
    // Back under the threshold, below it: nothing until it is crossed again.
    for l in 50..69 {
        dirty(&c, 1, l);
    }
    assert_eq!(c.stats().dirty_lines, 49);
    assert_eq!(pass(&c), 0);
    // Oldest writes first: the lines cleaned were 0..20.
    dirty(&c, 1, 69);
    assert_eq!(pass(&c), 5);
    let left: Vec<bool> = (0..25).map(|l| c.is_dirty(1, l)).collect();
    assert!(left[..25].iter().all(|&d| !d), "{left:?}");
}

#[test]
fn a_productive_alru_pass_runs_the_next_at_once_and_an_empty_one_sleeps_wake_up() {
    let (c, _, _) = cache(
        64,
        4096,
        Cleaner {
            staleness: Duration::ZERO,
            wake_up: 3600 * S,
            flush_max_buffers: 4,
            ..alru()
        },
    );
    for l in 0..10 {
        dirty(&c, 1, l);
    }
    let mut steps = Vec::new();
    loop {
        let (n, wait) = c.cleaner_step();
        let n = n.unwrap();
        steps.push((n, wait));
        if n == 0 {
            break;
        }
    }
    assert_eq!(
        steps,
        [
            (4, Some(Duration::ZERO)),
            (4, Some(Duration::ZERO)),
            (2, Some(Duration::ZERO)),
            (0, Some(3600 * S))
        ]
    );
}

/// The cleaner thread itself: a wake-up of an hour, and yet 64 lines at 4 a pass are all
/// written back (a productive pass does not wait for the next wake-up).
#[test]
fn the_cleaner_thread_reruns_productive_passes_without_waiting() {
    let (c, _, _) = cache(
        128,
        4096,
        Cleaner {
            staleness: Duration::ZERO,
            wake_up: 3600 * S,
            flush_max_buffers: 4,
            ..alru()
        },
    );
    for l in 0..64 {
        dirty(&c, 1, l);
    }
    // Its first pass runs at once; the next ones follow while they clean something.
    let thread = c.start_cleaner();
    let deadline = Instant::now() + 60 * S;
    while c.stats().dirty_lines > 0 {
        assert!(Instant::now() < deadline, "{:?}", c.stats().dirty_lines);
        std::thread::yield_now();
    }
    assert!(c.stats().cleaner_passes >= 16);
    c.shutdown().unwrap();
    thread.join().unwrap();
}

#[test]
fn acp_cleans_the_dirtiest_chunk_in_address_order() {
    // 64K lines: a chunk of 100 MiB is 1600 lines.
    let (c, _, _) = cache(
        64,
        64 << 10,
        Cleaner {
            flush_max_buffers: 2,
            ..Cleaner::acp()
        },
    );
    for l in [5, 3, 1] {
        dirty(&c, 1, l);
    }
    dirty(&c, 2, 2000); // object 2, chunk 1
    dirty(&c, 2, 0); // object 2, chunk 0
    let keys = |c: &Cache| {
        let before: Vec<(u64, u64)> = c.dirty_keys();
        pass(c);
        let after = c.dirty_keys();
        let mut gone: Vec<_> = before.into_iter().filter(|k| !after.contains(k)).collect();
        gone.sort();
        gone
    };
    assert_eq!(
        keys(&c),
        [(1, 1), (1, 3)],
        "the densest chunk, lowest addresses"
    );
    assert_eq!(keys(&c), [(1, 5)], "it stays on its chunk");
    assert_eq!(keys(&c), [(2, 0)], "a tie: the lowest address");
    assert_eq!(keys(&c), [(2, 2000)]);
    assert_eq!(keys(&c), []);
    // Every 10 ms while there is work, a second when nothing is dirty.
    dirty(&c, 3, 0);
    assert_eq!(c.cleaner_step().1, Some(Duration::from_millis(10)));
    assert_eq!(c.cleaner_step().1, Some(S));
    // Staleness and activity do not hold acp back: a line written now goes at the next pass.
    dirty(&c, 3, 1);
    assert_eq!(pass(&c), 1);
}

#[test]
fn nop_never_cleans_and_a_cache_full_of_dirty_lines_passes_requests_through() {
    let (c, _, core) = cache(
        4,
        4096,
        Cleaner {
            policy: CleaningPolicy::Nop,
            ..Cleaner::alru()
        },
    );
    for l in 0..4 {
        dirty(&c, 1, l);
    }
    let (n, wait) = c.cleaner_step();
    assert_eq!((n.unwrap(), wait), (0, None), "sleeps until woken");
    // No clean line to evict: the write of a new line goes to the core, counted pass-through.
    dirty(&c, 2, 0);
    let s = c.stats();
    assert_eq!(s.dirty_lines, 4);
    assert_eq!(s.counters.pass_through_writes, 1);
    assert_eq!(core.data.lock().get(&(2, 0)), Some(&2));
    assert!(!core.data.lock().contains_key(&(1, 0)));
    // Flush still writes back.
    c.flush_all(&mut |_, _| {}).unwrap();
    assert_eq!(c.stats().dirty_lines, 0);
    assert_eq!(core.data.lock().get(&(1, 3 * 4096)), Some(&1));
}

#[test]
fn the_bandwidth_limit_books_the_time_of_each_pass() {
    let t = Instant::now();
    let mut l = Limiter::default();
    assert_eq!(l.book(t, 500_000, 1), S / 2);
    assert_eq!(l.book(t, 500_000, 1), S, "booked after the first");
    assert_eq!(
        l.book(t + 3 * S, 0, 1),
        Duration::ZERO,
        "idle time is not saved up"
    );
    assert_eq!(
        l.book(t + 3 * S, 2_000_000, 0),
        Duration::ZERO,
        "0: no limit"
    );
    // In the cleaner: a productive alru pass would run the next at once; at 1 MB/s, 8 lines
    // of 64K (524288 bytes) make it wait 0.52 s.
    let (c, _, _) = cache(
        64,
        64 << 10,
        Cleaner {
            staleness: Duration::ZERO,
            flush_max_buffers: 8,
            max_mbps: 1,
            ..alru()
        },
    );
    for l in 0..8 {
        dirty(&c, 1, l);
    }
    let (n, wait) = c.cleaner_step();
    assert_eq!(n.unwrap(), 8);
    assert_eq!(wait, Some(Duration::from_secs_f64(524_288.0 / 1e6)));
}

#[test]
fn the_cleaning_policy_changes_live() {
    let (c, _, _) = cache(
        64,
        4096,
        Cleaner {
            staleness: Duration::ZERO,
            ..alru()
        },
    );
    dirty(&c, 1, 0);
    c.set_cleaner(Cleaner {
        policy: CleaningPolicy::Nop,
        ..Cleaner::alru()
    });
    assert_eq!(pass(&c), 0);
    assert_eq!(c.policy().cleaner.policy, CleaningPolicy::Nop);
    assert!(c.stats().cleaner.starts_with("nop"));
    c.set_cleaner(Cleaner::acp());
    assert_eq!(pass(&c), 1);
    assert!(c.stats().cleaner.starts_with("acp"));
}
