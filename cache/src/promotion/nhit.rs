//! nhit, as OCF's: below `trigger_threshold` percent occupancy every miss inserts; above it a
//! request inserts its lines once each was missed `insertion_threshold` times, and a request
//! the cache already holds part of is let in (rejecting it would only make it pass through and
//! invalidate). The miss counts live in a table of bounded size whose oldest entry makes room
//! for a new one (OCF's ring), so it is never cleared wholesale.

use super::{PromotionPolicy, Request};
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;

pub(crate) struct Nhit {
    insertion_threshold: u32,
    /// Percent of the cache in use from which misses are counted.
    trigger_threshold: u8,
    capacity: usize,
    /// Misses per line, with the sequence number of the entry.
    misses: HashMap<(u64, u64), (u32, u64)>,
    /// Entries in order of insertion (an entry removed since leaves a stale pair).
    order: VecDeque<((u64, u64), u64)>,
    seq: u64,
}

impl Nhit {
    pub fn new(insertion_threshold: u32, trigger_threshold: u8, capacity: usize) -> Nhit {
        Nhit {
            insertion_threshold,
            trigger_threshold,
            capacity: capacity.max(1),
            misses: HashMap::default(),
            order: VecDeque::new(),
            seq: 0,
        }
    }

    /// As OCF sizes its table: one entry per cache line, from 1024 to 1 Mi entries.
    pub fn capacity_for(lines: usize) -> usize {
        lines.clamp(1024, 1 << 20)
    }

    /// Counts a miss of `key`; whether it has been missed often enough.
    fn missed(&mut self, key: (u64, u64)) -> bool {
        if let Some(e) = self.misses.get_mut(&key) {
            e.0 = e.0.saturating_add(1);
            return e.0 >= self.insertion_threshold;
        }
        while self.misses.len() >= self.capacity {
            let Some((old, seq)) = self.order.pop_front() else {
                break;
            };
            if self.misses.get(&old).is_some_and(|e| e.1 == seq) {
                self.misses.remove(&old);
            }
        }
        self.seq += 1;
        self.misses.insert(key, (1, self.seq));
        self.order.push_back((key, self.seq));
        // Stale pairs are dropped now and then so the ring stays bounded too.
        if self.order.len() > 2 * self.capacity {
            let misses = &self.misses;
            self.order
                .retain(|(k, s)| misses.get(k).is_some_and(|e| e.1 == *s));
        }
        1 >= self.insertion_threshold
    }

    #[cfg(test)]
    pub fn tracked(&self) -> usize {
        self.misses.len()
    }
}

impl PromotionPolicy for Nhit {
    fn promote(&mut self, req: &Request) -> bool {
        let trigger = (req.lines * self.trigger_threshold as usize).div_ceil(100);
        if req.occupied < trigger {
            return true;
        }
        // Every line is counted (no early exit), as OCF does.
        let mut all = true;
        for &key in req.missing {
            all &= self.missed(key);
        }
        if all {
            // Inserted now: their counts start again should they be evicted.
            for key in req.missing {
                self.misses.remove(key);
            }
        }
        all || req.mapped > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(missing: &[(u64, u64)], mapped: usize, occupied: usize) -> Request<'_> {
        Request {
            missing,
            mapped,
            occupied,
            lines: 100,
        }
    }

    #[test]
    fn below_the_trigger_every_miss_inserts() {
        let mut n = Nhit::new(3, 80, 1024);
        assert!(n.promote(&req(&[(1, 0)], 0, 0)), "empty cache");
        assert!(n.promote(&req(&[(1, 1)], 0, 79)), "79 % in use");
        assert_eq!(n.tracked(), 0, "nothing counted below the trigger");
        assert!(!n.promote(&req(&[(1, 2)], 0, 80)), "from 80 %: counted");
        // Trigger 0: counted from the first miss.
        let mut n = Nhit::new(2, 0, 1024);
        assert!(!n.promote(&req(&[(1, 0)], 0, 0)));
        assert!(n.promote(&req(&[(1, 0)], 0, 0)));
    }

    #[test]
    fn a_line_is_inserted_at_the_insertion_threshold() {
        let mut n = Nhit::new(3, 0, 1024);
        let k = [(4, 7)];
        assert!(!n.promote(&req(&k, 0, 90)));
        assert!(!n.promote(&req(&k, 0, 90)));
        assert!(n.promote(&req(&k, 0, 90)), "third miss");
        assert!(!n.promote(&req(&k, 0, 90)), "evicted again: counted anew");
        // A request inserts only when all of its missed lines are due.
        let mut n = Nhit::new(2, 0, 1024);
        assert!(!n.promote(&req(&[(1, 0)], 0, 90)));
        assert!(
            !n.promote(&req(&[(1, 0), (1, 1)], 0, 90)),
            "(1,1) missed once"
        );
        assert!(n.promote(&req(&[(1, 0), (1, 1)], 0, 90)));
    }

    #[test]
    fn a_partially_mapped_request_is_let_in() {
        let mut n = Nhit::new(5, 0, 1024);
        assert!(
            n.promote(&req(&[(1, 1)], 1, 90)),
            "one line of it is cached"
        );
        assert!(
            !n.promote(&req(&[(1, 2)], 0, 90)),
            "nothing cached: counted"
        );
    }

    #[test]
    fn the_miss_table_is_bounded_and_forgets_its_oldest_entries_only() {
        let mut n = Nhit::new(2, 0, 64);
        let hot = (9, 9);
        assert!(!n.promote(&req(&[hot], 0, 90)));
        for i in 0..10_000u64 {
            assert!(!n.promote(&req(&[(1, i)], 0, 90)));
            assert!(n.tracked() <= 64);
            assert!(n.order.len() <= 2 * 64 + 1);
            if i % 32 == 0 {
                // The hot line is missed again now and then: refreshed in place, it stays
                // counted, so its second miss inserts it.
                assert!(n.promote(&req(&[hot], 0, 90)), "at {i}");
                assert!(!n.promote(&req(&[hot], 0, 90)));
            }
        }
        // The newest entries are still there: a second miss of the last line inserts it.
        assert!(n.promote(&req(&[(1, 9_999)], 0, 90)));
        // The oldest are gone: a line missed long ago counts from 1 again.
        assert!(!n.promote(&req(&[(1, 0)], 0, 90)));
    }
}
