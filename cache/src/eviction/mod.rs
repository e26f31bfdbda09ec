//! Eviction: which line makes room when a request needs one and no slot is free. The classes
//! a request may take from (`order`) are decided here for every policy; the line within a
//! class is the policy's choice (one policy per file, behind `Eviction`).

mod lru;

pub(crate) use lru::{Links, List, Lru};

use crate::metadata::Inner;
use crate::ClassId;

/// An eviction policy: the line of `class` to evict next, if it has an evictable one.
pub(crate) trait Eviction: Send + Sync {
    fn victim(&self, g: &Inner, class: ClassId) -> Option<u32>;
}

/// The classes a request of `class` may evict from, in the order to try them: only its own
/// when it is at its share, else every unpinned class as important as it or less (priority
/// numerically >= its own: 0 is kept longest, as OCF's), the least important first. None of
/// them with a clean line: the request passes through.
pub(crate) fn order(g: &Inner, class: ClassId, over_share: bool) -> Vec<ClassId> {
    let own = g.classes[class as usize]
        .as_ref()
        .map_or(0, |c| c.cfg.priority);
    let mut order: Vec<ClassId> = if over_share {
        vec![class]
    } else {
        (0..g.classes.len() as ClassId)
            .filter(|&c| {
                g.classes[c as usize]
                    .as_ref()
                    .is_some_and(|c| !c.cfg.pinned && c.cfg.priority >= own)
            })
            .collect()
    };
    order.sort_by_key(|&c| {
        std::cmp::Reverse(g.classes[c as usize].as_ref().map_or(0, |c| c.cfg.priority))
    });
    order
}
