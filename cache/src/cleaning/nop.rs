//! nop: the cleaner never writes anything back. Dirty lines leave by flush, a mode change or
//! unmount; once every line is dirty, nothing can be evicted and requests that need a line
//! pass through to the core (counted as pass-through).

use super::{Cleaning, Ctx};
use crate::metadata::Shard;
use std::time::Duration;

pub(crate) struct Nop;

impl Cleaning for Nop {
    fn pick(&mut self, _shards: &[&Shard], _cx: &Ctx) -> Vec<(u64, u64)> {
        Vec::new()
    }

    fn wait(&self, _cleaned: usize) -> Option<Duration> {
        None
    }
}
