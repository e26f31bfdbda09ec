//! Every missed line is inserted.

use super::PromotionPolicy;

pub(crate) struct Always;

impl PromotionPolicy for Always {
    fn promote(&mut self, _key: (u64, u64)) -> bool {
        true
    }
}
