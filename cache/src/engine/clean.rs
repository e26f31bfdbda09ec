//! Writing dirty lines back: the background cleaner (its choice of lines is the cleaning
//! policy's), flushes, and the write-back at unmount.

use super::request::Part;
use super::Cache;
use crate::cleaning::Ctx;
use crate::stats::Counters;
use crate::store::Header;
use crate::{ClassId, DEFAULT_CLASS};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

impl Cache {
    /// Writes back every dirty line that `pick(object, class)` selects.
    pub(super) fn flush_where(&self, pick: &dyn Fn(u64, ClassId) -> bool) -> io::Result<()> {
        let mut total = 0;
        self.flush_loop(pick, &mut |_, _| {}, &mut total)
    }

    pub(super) fn flush_loop(
        &self,
        pick: &dyn Fn(u64, ClassId) -> bool,
        progress: &mut dyn FnMut(u64, u64),
        done: &mut u64,
    ) -> io::Result<()> {
        loop {
            let mut batch: Vec<(u64, u64)> = Vec::new();
            for k in 0..self.shards.len() {
                let g = self.shard(k);
                batch.extend(
                    g.cached()
                        .filter(|&((o, _), s)| {
                            let sl = &g.slots[s as usize];
                            sl.dirty != 0 && pick(o, sl.class)
                        })
                        .map(|(k, _)| k)
                        .take(256 - batch.len()),
                );
                if batch.len() >= 256 {
                    break;
                }
            }
            if batch.is_empty() {
                return Ok(());
            }
            let left = self.totals.dirty() as u64;
            progress(*done, *done + left);
            *done += self.clean_keys(&batch)? as u64;
        }
    }

    /// Cleans the given lines (waiting for busy ones); returns how many it wrote back.
    pub(super) fn clean_keys(&self, keys: &[(u64, u64)]) -> io::Result<usize> {
        self.clean_keys_counted(keys).map(|(n, _)| n)
    }

    /// As `clean_keys`, with the bytes written to the core.
    fn clean_keys_counted(&self, keys: &[(u64, u64)]) -> io::Result<(usize, u64)> {
        let mut bytes = 0;
        let mut cleaned = Vec::new();
        let mut result = Ok(());
        for &(object, line) in keys {
            let mut parts = vec![Part::holding(line, self.shard_index(object, line))];
            self.acquire(object, &mut parts, DEFAULT_CLASS, false);
            let class = parts[0].class;
            let mut c = Counters::default();
            let r = match parts[0].slot {
                Some(s) if parts[0].dirty != 0 => {
                    self.clean_slot(object, line, s, parts[0].dirty, &mut c)
                }
                _ => Ok(()),
            };
            let now = self.now();
            self.settle(&parts, Some((class, &c)), |g, p| {
                if let (Ok(()), Some(s)) = (&r, p.slot) {
                    if p.dirty != 0 {
                        g.set_dirty(s, 0, now);
                        cleaned.push((object, s));
                    }
                }
            });
            bytes += c.core_write_bytes;
            if let Err(e) = &r {
                // Never dropped: the line stays dirty and is tried again.
                log::error!("write-back of object {object} line {line} failed: {e}");
                self.shared.lock().cleaner_errors += 1;
            }
            if r.is_err() && result.is_ok() {
                result = r;
            }
        }
        // Core first, then the records that say those lines are clean.
        let mut objects: Vec<u64> = cleaned.iter().map(|c| c.0).collect();
        objects.sort_unstable();
        objects.dedup();
        let mut synced = Ok(());
        for o in objects {
            if let Err(e) = self.backend.sync(o) {
                log::error!("write-back of object {o}: the core's sync failed: {e}");
                self.shared.lock().unsynced.insert(o);
                if synced.is_ok() {
                    synced = Err(e);
                }
            }
        }
        synced?;
        faultpoint::fault_point!("cache.clean-core-written");
        if self.store.persistent() && !cleaned.is_empty() {
            let slots: Vec<u32> = cleaned.iter().map(|c| c.1).collect();
            self.persist(&slots)?;
        }
        let n = cleaned.len();
        self.shared.lock().cleaned_lines += n as u64;
        result.map(|()| (n, bytes))
    }

    /// Writes back the dirty lines of one object.
    pub fn flush_object(&self, object: u64) -> io::Result<()> {
        self.flush_where(&|o, _| o == object)
    }

    /// Writes back everything dirty; `progress(done, total)` hears how far it is.
    pub fn flush_all(&self, progress: &mut dyn FnMut(u64, u64)) -> io::Result<()> {
        let mut done = 0;
        self.flush_loop(&|_, _| true, progress, &mut done)?;
        progress(done, done);
        Ok(())
    }

    /// One pass of the background cleaner: the lines the cleaning policy picks, at the time
    /// of the cache's clock.
    pub fn clean_pass(&self) -> io::Result<usize> {
        self.cleaner_step().0
    }

    /// One pass, and how long the cleaner waits before the next (`None`: until woken): the
    /// policy's wait, or longer if the bandwidth limit asks for it. A pass that fails waits as
    /// one that found nothing.
    pub fn cleaner_step(&self) -> (io::Result<usize>, Option<std::time::Duration>) {
        let mut state = self.cleaning.lock();
        let now = self.now();
        let last_io = self.shared.lock().last_io;
        let keys = {
            let guards = self.all_shards();
            let shards: Vec<&crate::metadata::Shard> = guards.iter().map(|g| &**g).collect();
            let cx = Ctx {
                lines: self.nslots,
                line_size: self.line,
                dirty: self.totals.dirty(),
                now,
                last_io,
            };
            state.0.pick(&shards, &cx)
        };
        let result = if keys.is_empty() {
            Ok((0, 0))
        } else {
            self.clean_keys_counted(&keys)
        };
        let mbps = {
            let mut g = self.shared.lock();
            g.cleaner_passes += 1;
            g.policy.cleaner.max_mbps
        };
        let (n, bytes) = *result.as_ref().unwrap_or(&(0, 0));
        let limit = state.1.book(self.now(), bytes, mbps);
        let wait = state.0.wait(n).map(|w| w.max(limit));
        (result.map(|r| r.0), wait)
    }

    /// Starts the background cleaner; it stops with `shutdown`. Each pass is followed by the
    /// wait `cleaner_step` says (none after a productive alru pass).
    pub fn start_cleaner(self: &Arc<Self>) -> std::thread::JoinHandle<()> {
        let cache = self.clone();
        std::thread::Builder::new()
            .name("cache-cleaner".into())
            .spawn(move || {
                let mut wait = Some(Duration::ZERO);
                while !cache.stop.load(Ordering::Relaxed) {
                    if wait != Some(Duration::ZERO) {
                        let mut g = cache.shared.lock();
                        if !cache.stop.load(Ordering::Relaxed) {
                            // Woken early by a setting change, dirty pressure or the stop.
                            cache
                                .wake
                                .wait_for(&mut g, wait.unwrap_or(Duration::from_secs(3600)));
                        }
                    }
                    if cache.stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let (result, next) = cache.cleaner_step();
                    if let Err(e) = result {
                        log::error!("cache cleaner: {e}");
                    }
                    wait = next;
                }
            })
            .expect("cleaner thread")
    }

    /// Unmount: everything dirty written back, and a file store marked clean so its lines are
    /// trusted at the next mount.
    pub fn shutdown(&self) -> io::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        // Under the lock the cleaner checks `stop` with: it is either before its check or
        // waiting, never in between.
        drop(self.shared.lock());
        self.wake.notify_all();
        self.flush_all(&mut |_, _| {})?;
        if self.store.persistent() {
            let all: Vec<u32> = (0..self.nslots as u32).collect();
            self.persist(&all)?;
            faultpoint::fault_point!("cache.header-clean");
            self.store.write_header(&Header {
                volume: self.volume,
                id: self.id,
                generation: self.generation,
                line_size: self.line,
                slots: self.nslots as u64,
                clean: true,
                shards: self.shards.len() as u16,
            })?;
        }
        Ok(())
    }
}
