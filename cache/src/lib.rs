//! The stripefs cache engine: cache lines of 4K..256K with per-4K-sector valid and dirty bits,
//! in RAM or in a file on a fast device, in front of a core it reaches through `Backend`.
//! Knows no FUSE and no striping. Modes and their behaviour are Open CAS's (see `Mode`).
//!
//! Concurrency: one mutex guards the metadata; a line being worked on is marked busy, so each
//! line sees one operation at a time, while data moves (store and core I/O) outside the mutex.

mod attach;
mod cleaning;
mod clock;
mod engine;
mod eviction;
mod metadata;
mod mode;
mod promotion;
mod seq_cutoff;
mod stats;
mod store;

pub use attach::{cache_file, inspect, Inspection};
pub use clock::{Clock, ManualClock, SystemClock};
pub use engine::{Cache, CacheConfig, CacheError, DirtyRun, MetadataMemory, Purged, StoreKind};
pub use mode::{ClassConfig, Cleaner, CleaningPolicy, Mode, Policy, Promotion, SeqCutoff};
pub use stats::{CacheStats, ClassStats, Counters};
pub use store::defer_emulated_waits;

use std::io;

/// Size of the unit of validity and dirtiness inside a line.
pub const SECTOR: u64 = 4096;

/// A class of files sharing a cache setting: the volume default, or one folder target.
pub type ClassId = u16;
pub const DEFAULT_CLASS: ClassId = 0;

/// Makes the cache store behave like a slower device (for experiments): books each I/O and
/// says when the modelled device would have finished it.
pub trait Throttle: Send + Sync {
    fn book(&self, write: bool, offset: u64, len: u64) -> std::time::Instant;
    /// For reports: what is being modelled.
    fn describe(&self) -> String;
}

/// The core the cache sits in front of: object-addressed reads and writes.
pub trait Backend: Send + Sync {
    /// Reads `buf.len()` bytes of `object` at `offset`; unwritten bytes read as zeros.
    fn read(&self, object: u64, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    fn write(&self, object: u64, offset: u64, data: &[u8]) -> io::Result<()>;
    /// Makes what was written to `object` durable.
    fn sync(&self, object: u64) -> io::Result<()>;
}
