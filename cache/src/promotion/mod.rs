//! Promotion: whether a request's missed lines are inserted now (OCF's promotion policies),
//! one policy per file behind `PromotionPolicy`.

mod always;
mod nhit;

pub(crate) use always::Always;
pub(crate) use nhit::Nhit;

use crate::mode::Promotion;

/// What a promotion policy sees of a request and of the cache.
pub(crate) struct Request<'a> {
    /// The request's lines the cache does not hold.
    pub missing: &'a [(u64, u64)],
    /// How many of its lines the cache holds.
    pub mapped: usize,
    /// Lines in use, and lines of the cache.
    pub occupied: usize,
    pub lines: usize,
}

pub(crate) trait PromotionPolicy: Send {
    /// A request missed lines and could insert them: whether it may (all of them, or none).
    fn promote(&mut self, req: &Request) -> bool;
}

/// The policy a setting asks for, for a cache of `lines` lines.
pub(crate) fn from_setting(p: Promotion, lines: usize) -> Box<dyn PromotionPolicy> {
    match p {
        Promotion::Always => Box::new(Always),
        Promotion::Nhit {
            insertion_threshold,
            trigger_threshold,
        } => Box::new(Nhit::new(
            insertion_threshold,
            trigger_threshold,
            Nhit::capacity_for(lines),
        )),
    }
}
