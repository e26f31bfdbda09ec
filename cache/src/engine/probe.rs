//! Whether a request would be answered from memory alone: a hint for the caller's threading.
//! A request that may wait on a device (a miss, a write the core takes, a cache file's
//! durability work) goes to a thread that may block; one that cannot is answered where it
//! arrived. Only a hint: the cache may change before the request runs, and a request that
//! then misses waits where it is, as it would have anyway.

use super::Cache;
use crate::mode::SeqCutoff;
use crate::ClassId;

impl Cache {
    /// Every request, misses too, may be answered where it arrives: the store is RAM, whose
    /// I/O is a copy (one emulating a slower device adds its modelled wait, which a caller
    /// that must not wait defers: [`crate::defer_emulated_waits`]). A cache file, even on a
    /// RAM disk, may wait on the disks for what a miss brings (records, evicting lines dirty
    /// in the file).
    pub fn in_memory(&self) -> bool {
        self.store.in_memory() && !self.store.persistent()
    }

    /// True when the store's data I/O is a copy (RAM, or a cache file on a RAM disk) and
    /// every line the request touches is cached, not busy, with what it needs: a read every
    /// sector it touches; a write in a write-back mode, not continuing a stream the
    /// sequential cutoff may cut, the sectors it covers only in part (a write to the core, a
    /// new line or a sector fetched from the core may wait on a device).
    pub fn answers_from_memory(
        &self,
        object: u64,
        offset: u64,
        len: usize,
        class: ClassId,
        write: bool,
    ) -> bool {
        if !self.store.in_memory() || self.failed() || len == 0 {
            return false;
        }
        // A cache file's first dirty line of the mount is declared to the volume first, a
        // durable commit on its devices.
        if write && self.store.persistent() && !*self.dirty_declared.lock() {
            return false;
        }
        {
            let g = self.shared.lock();
            let Some(mode) = g.class_modes.get(class as usize).copied().flatten() else {
                return false;
            };
            let rules = mode.rules();
            // A write that continues a stream may be cut and go to the core (with `full`
            // only while free lines run short, which a full cache's are).
            let may_be_cut = g.policy.seq_cutoff != SeqCutoff::Never
                && g.streams.continues(object, true, offset);
            if rules.pass_through || (write && (!rules.write_back || may_be_cut)) {
                return false;
            }
        }
        self.plan(object, offset, len).iter().all(|p| {
            let g = self.shard(p.shard);
            let Some(s) = g.lookup((object, p.line)) else {
                return false;
            };
            let slot = &g.slots[s as usize];
            let needs = if write {
                p.touched & !p.full
            } else {
                p.touched
            };
            !slot.busy && needs & !slot.valid == 0
        })
    }
}
