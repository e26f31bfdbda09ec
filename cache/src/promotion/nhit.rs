//! A line is inserted once it was missed `hits` times.

use super::PromotionPolicy;
use rustc_hash::FxHashMap as HashMap;

pub(crate) struct Nhit {
    hits: u32,
    /// Misses per line not yet promoted.
    misses: HashMap<(u64, u64), u32>,
}

impl Nhit {
    pub fn new(hits: u32) -> Nhit {
        Nhit {
            hits,
            misses: HashMap::default(),
        }
    }
}

impl PromotionPolicy for Nhit {
    fn promote(&mut self, key: (u64, u64)) -> bool {
        if self.misses.len() > 1 << 16 {
            self.misses.clear();
        }
        let seen = self.misses.entry(key).or_insert(0);
        *seen += 1;
        if *seen >= self.hits {
            self.misses.remove(&key);
            true
        } else {
            false
        }
    }
}
