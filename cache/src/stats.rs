//! What `casadm -P` shows: usage, request and block statistics, errors, per class.

use serde::Serialize;

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Counters {
    pub read_hits: u64,
    pub read_partial_misses: u64,
    pub read_full_misses: u64,
    pub write_hits: u64,
    pub write_partial_misses: u64,
    pub write_full_misses: u64,
    pub pass_through_reads: u64,
    pub pass_through_writes: u64,
    /// Bytes read from / written to the core (the backing devices).
    pub core_read_bytes: u64,
    pub core_write_bytes: u64,
    /// Bytes read from / written to the cache store.
    pub cache_read_bytes: u64,
    pub cache_write_bytes: u64,
    /// Bytes callers read and wrote.
    pub caller_read_bytes: u64,
    pub caller_write_bytes: u64,
    /// I/O errors: totals, and by device and direction.
    pub core_errors: u64,
    pub cache_errors: u64,
    pub core_read_errors: u64,
    pub core_write_errors: u64,
    pub cache_read_errors: u64,
    pub cache_write_errors: u64,
}

impl Counters {
    pub(crate) fn cache_error(&mut self, write: bool) {
        self.cache_errors += 1;
        if write {
            self.cache_write_errors += 1;
        } else {
            self.cache_read_errors += 1;
        }
    }

    pub(crate) fn core_error(&mut self, write: bool) {
        self.core_errors += 1;
        if write {
            self.core_write_errors += 1;
        } else {
            self.core_read_errors += 1;
        }
    }

    pub(crate) fn add(&mut self, o: &Counters) {
        macro_rules! sum {
            ($($f:ident),*) => { $( self.$f += o.$f; )* };
        }
        sum!(
            read_hits,
            read_partial_misses,
            read_full_misses,
            write_hits,
            write_partial_misses,
            write_full_misses,
            pass_through_reads,
            pass_through_writes,
            core_read_bytes,
            core_write_bytes,
            cache_read_bytes,
            cache_write_bytes,
            caller_read_bytes,
            caller_write_bytes,
            core_errors,
            cache_errors,
            core_read_errors,
            core_write_errors,
            cache_read_errors,
            cache_write_errors
        );
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct ClassStats {
    pub id: u16,
    pub name: String,
    pub mode: String,
    pub priority: u8,
    pub allocation: f64,
    pub pinned: bool,
    pub occupancy_lines: u64,
    pub dirty_lines: u64,
    pub counters: Counters,
}

#[derive(Clone, Debug, Serialize)]
pub struct CacheStats {
    pub store: String,
    /// The cache device failed; the cache runs pass-through.
    pub failed: bool,
    /// The device model the store is made to behave like, if emulated.
    pub emulated: Option<String>,
    pub path: Option<String>,
    pub default_mode: String,
    pub size_bytes: u64,
    pub line_size: u64,
    pub lines: u64,
    /// Metadata shards: requests to lines of different shards do not wait on each other.
    pub shards: u64,
    pub occupancy_lines: u64,
    pub free_lines: u64,
    pub clean_lines: u64,
    pub dirty_lines: u64,
    pub occupancy_bytes: u64,
    pub dirty_bytes: u64,
    pub counters: Counters,
    pub cleaner_passes: u64,
    pub cleaned_lines: u64,
    pub cleaner_errors: u64,
    /// The cleaning policy and its settings, in one line.
    pub cleaner: String,
    /// Requests that met a cache device error, and how many make the cache pass-through for
    /// good (0: never).
    pub error_requests: u64,
    pub error_threshold: u64,
    pub classes: Vec<ClassStats>,
}
