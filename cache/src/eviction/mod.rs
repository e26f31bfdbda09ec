//! Eviction: which line makes room when a request needs one and no slot is free. The classes
//! a request may take from (`order`) are decided here for every policy; the line within a
//! class is the policy's choice (one policy per file, behind `Eviction`).

mod lru;

pub(crate) use lru::{Links, List, Lru};

use crate::metadata::Shard;
use crate::ClassId;

/// An eviction policy: the line of `class` to evict next, if it has an evictable one.
pub(crate) trait Eviction: Send + Sync {
    fn victim(&self, g: &Shard, class: ClassId) -> Option<u32>;
}

/// The classes a request of `class` may evict from, in the order to try them: only its own
/// when it is at its share, else every unpinned class as important as it or less (priority
/// numerically >= its own: 0 is kept longest, as OCF's) that holds more than its guaranteed
/// share (`min_allocation`, of each shard), the least important first. None of them with a
/// clean line: the request passes through.
pub(crate) fn order(g: &Shard, class: ClassId, over_share: bool) -> Vec<ClassId> {
    let own = g.classes[class as usize]
        .as_ref()
        .map_or(0, |c| c.cfg.priority);
    let lines = g.slots.len() as f64;
    let mut order: Vec<ClassId> = if over_share {
        vec![class]
    } else {
        (0..g.classes.len() as ClassId)
            .filter(|&c| {
                g.classes[c as usize].as_ref().is_some_and(|cl| {
                    let above_min = c == class || cl.lines() as f64 > cl.cfg.min_allocation * lines;
                    !cl.cfg.pinned && cl.cfg.priority >= own && above_min
                })
            })
            .collect()
    };
    order.sort_by_key(|&c| {
        std::cmp::Reverse(g.classes[c as usize].as_ref().map_or(0, |c| c.cfg.priority))
    });
    order
}
