//! The line metadata stays within 64 bytes per line of the cache, counted by the allocator
//! itself (every live heap byte the cache holds once it is full), at 4K and at 64K lines.

use cache::{Backend, Cache, CacheConfig, Mode, Policy, SeqCutoff, StoreKind};
use std::alloc::{GlobalAlloc, Layout, System};
use std::io;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// A core that keeps nothing (reads are zeros): only the cache's own memory is counted.
struct Null;

impl Backend for Null {
    fn read(&self, _object: u64, _offset: u64, buf: &mut [u8]) -> io::Result<()> {
        buf.fill(0);
        Ok(())
    }
    fn write(&self, _object: u64, _offset: u64, _data: &[u8]) -> io::Result<()> {
        Ok(())
    }
    fn sync(&self, _object: u64) -> io::Result<()> {
        Ok(())
    }
}

/// Live heap bytes per line of a full cache file of `lines` lines of `line` bytes, the lines
/// spread over 16 files, half of them dirty.
fn bytes_per_line(line: u64, lines: u64) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let cfg = CacheConfig {
        store: StoreKind::File(dir.path().join("cache")),
        size: line * lines,
        line_size: line,
        default_mode: Mode::Wb,
        default_priority: 1,
        policy: Policy {
            seq_cutoff: SeqCutoff::Never,
            ..Policy::default()
        },
        volume: [1; 16],
        reset: false,
        discard_dirty: false,
        generation: 1,
        bound: None,
        holds_dirty: false,
        on_first_dirty: None,
        throttle: None,
        file_in_memory: false,
        clock: None,
        shards: 0,
    };
    let data = vec![7u8; 4096];
    let mut buf = vec![0u8; 4096];
    let before = LIVE.load(Ordering::Relaxed);
    let cache = Cache::open(cfg, Arc::new(Null)).unwrap();
    for i in 0..lines {
        let (object, at) = (i % 16, (i / 16) * line);
        if i % 2 == 0 {
            cache.write(object, at, &data, 0).unwrap();
        } else {
            cache.read(object, at, &mut buf, 0).unwrap();
        }
    }
    let st = cache.stats();
    assert_eq!(st.occupancy_lines, lines, "the cache is full");
    assert_eq!(st.dirty_lines, lines / 2);
    let after = LIVE.load(Ordering::Relaxed);
    let per_line = (after - before) as f64 / lines as f64;
    let reported = cache.metadata_memory();
    eprintln!(
        "{}K lines: {per_line:.1} B/line live heap; stats report {} B/line",
        line >> 10,
        reported.bytes_per_line
    );
    assert!(
        reported.bytes_per_line <= 64,
        "stats report {} B/line",
        reported.bytes_per_line
    );
    drop(cache);
    per_line
}

#[test]
fn line_metadata_takes_at_most_64_bytes_per_line() {
    for line in [4096, 64 << 10] {
        let per_line = bytes_per_line(line, 16384);
        assert!(
            per_line <= 64.0,
            "{}K lines: {per_line:.1} bytes per line",
            line >> 10
        );
    }
}
