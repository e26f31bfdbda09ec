//! Where a cache request that may wait on a device runs. Alone, on the /dev/fuse thread that
//! took it, as a blocking `pread` would: no hand-off at queue depth 1. With others in progress,
//! or taken by a FUSE-over-io_uring ring thread (the one thread of its CPU's queue), on a pool
//! of cache threads: the transport's threads go back for the next request, and the cache
//! device and the core see the application's queue depth.

use crate::janitor::Janitor;
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

thread_local! {
    /// This thread takes a FUSE-over-io_uring queue's requests (all of its CPU's).
    static RING_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as a ring thread: it hands every request that may wait off.
pub(crate) fn this_is_a_ring_thread() {
    RING_THREAD.with(|r| r.set(true));
}

/// Enough for the deepest queue CrystalDiskMark and KDiskMark ask for (Q32).
const THREADS: usize = 32;

pub(crate) struct CacheThreads {
    pool: Janitor,
    /// Requests that may wait on a device, from their hand-off to their end.
    in_progress: Arc<AtomicUsize>,
}

struct InProgress(Arc<AtomicUsize>);

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.fetch_sub(1, SeqCst);
    }
}

impl CacheThreads {
    pub(crate) fn start() -> std::io::Result<CacheThreads> {
        Ok(CacheThreads {
            pool: Janitor::pool("cache-io", THREADS)?,
            in_progress: Default::default(),
        })
    }

    /// Runs `job`, a request that may wait on a device: here when it is alone and this is
    /// not a ring thread, else on a cache thread.
    pub(crate) fn run(&self, job: impl FnOnce() + Send + 'static) {
        let alone = self.in_progress.fetch_add(1, SeqCst) == 0;
        let counted = InProgress(self.in_progress.clone());
        if alone && !RING_THREAD.with(Cell::get) {
            job();
            drop(counted);
        } else {
            self.pool.run(move || {
                job();
                drop(counted);
            });
        }
    }
}
