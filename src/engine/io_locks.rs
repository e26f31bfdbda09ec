//! Each file's data lock: reads and writes share it, truncate and migrate take it alone.

use dashmap::DashMap;
use parking_lot::RwLock;
use std::sync::Arc;

/// Locks nobody holds are dropped once the table has more than this many: a lock lives as
/// long as someone holds it, so a volume of millions of files touched once costs no memory
/// for them afterwards. Held ones are bounded by the requests in flight.
const KEPT: usize = 4096;

#[derive(Default)]
pub(crate) struct IoLocks {
    locks: DashMap<u64, Arc<RwLock<()>>>,
}

impl IoLocks {
    /// The data lock of `ino`: the same one for everyone who holds it meanwhile.
    pub(crate) fn of(&self, ino: u64) -> Arc<RwLock<()>> {
        // Every read and write asks: look under the shard's shared lock first.
        if let Some(lock) = self.locks.get(&ino) {
            return lock.clone();
        }
        let lock = self.locks.entry(ino).or_default().clone();
        // A lock's count goes from the table's alone to more only under its shard's lock
        // (here, above): one the table alone holds is held by nobody, and cannot be taken
        // while `retain` looks; whoever asks next makes a new one.
        if self.locks.len() > KEPT {
            self.locks.retain(|_, l| Arc::strong_count(l) > 1);
        }
        lock
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.locks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locks_nobody_holds_are_dropped_and_held_ones_stay_the_same() {
        let locks = IoLocks::default();
        let held = locks.of(7);
        let guard = held.write_arc();
        for ino in 100..100 + 3 * KEPT as u64 {
            drop(locks.of(ino));
        }
        assert!(locks.len() <= KEPT + 1, "{} locks kept", locks.len());
        // Still the one held: a writer there excludes readers of the same file.
        let again = locks.of(7);
        assert!(Arc::ptr_eq(&again, &held));
        assert!(again.try_read().is_none());
        drop(guard);
        assert!(again.try_read().is_some());
    }
}
