//! Promotion: whether a missed line is inserted now (OCF's promotion policies), one policy per
//! file behind `PromotionPolicy`.

mod always;
mod nhit;

pub(crate) use always::Always;
pub(crate) use nhit::Nhit;

use crate::mode::Promotion;

pub(crate) trait PromotionPolicy: Send {
    /// A request missed `key` and could insert it: whether it may.
    fn promote(&mut self, key: (u64, u64)) -> bool;
}

/// The policy a setting asks for.
pub(crate) fn from_setting(p: Promotion) -> Box<dyn PromotionPolicy> {
    match p {
        Promotion::Always => Box::new(Always),
        Promotion::Nhit(n) => Box::new(Nhit::new(n)),
    }
}
