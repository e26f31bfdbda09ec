//! `stripefs cache detach` and `attach`, with the volume online.
//!
//! Detach: every class goes pass-through with its dirty lines kept (nothing new becomes dirty
//! or is inserted, and pass-through serves dirty lines correctly), everything is written back
//! while I/O goes on; then, alone (requests in flight finish, new ones wait), what is still
//! dirty is written back, the cache is stopped clean, and only then the volume records that no
//! cache holds its data and advances its generation, so the cache file's lines are stale from
//! then on. From that point requests go to the devices. A crash before the record mounts with
//! the cache file as it was (all written back, its lines current: the devices got nothing
//! past it); after it, the cache file's lines are stale and dropped at the next mount.
//!
//! Attach: the cache opens as at mount (an empty one: a detached volume's cache file is
//! stale), is bound to the volume, gets the targets' and IO classes' settings again, and is
//! then handed to requests.

use super::{open_cache, CacheReset, Caching};
use crate::error::{Error, Result};
use crate::namespace::{CacheBinding, Namespace};
use cache::{Mode, DEFAULT_CLASS};
use std::path::PathBuf;

/// What `detach` did.
#[derive(Debug, serde::Serialize)]
pub struct Detached {
    /// Dirty lines written back by the detach.
    pub written_back: u64,
    /// The cache file it released, if a file store.
    pub path: Option<String>,
}

/// A store for `attach` other than the config's.
#[derive(Debug, Default)]
pub struct AttachWith {
    pub path: Option<PathBuf>,
    pub size: Option<u64>,
}

fn refused(errno: i32, why: String) -> Error {
    Error::Refused(errno, why)
}

impl Caching {
    pub fn is_attached(&self) -> bool {
        self.cache.read().is_some()
    }

    /// Writes every dirty line back and runs the volume without its cache; see the module.
    pub fn detach(&self, ns: &Namespace) -> Result<Detached> {
        let _one = self.opened.lock();
        let Some(cache) = self.cache.read().clone() else {
            return Err(refused(
                libc::EALREADY,
                "the cache is detached already".into(),
            ));
        };
        let dirty_before = cache.stats().dirty_lines;
        let saved = cache.class_configs();
        let restore = |why: String| {
            for (id, cfg) in &saved {
                let _ = cache.set_class_keeping_dirty(*id, cfg.clone());
            }
            Err(refused(libc::EIO, why))
        };
        for (id, cfg) in &saved {
            let mut pt = cfg.clone();
            pt.mode = Mode::Pt;
            cache
                .set_class_keeping_dirty(*id, pt)
                .map_err(|e| refused(libc::EIO, e.to_string()))?;
        }
        if let Err(e) = cache.flush_all(&mut |_, _| {}) {
            return restore(format!(
                "writing the dirty lines back failed: {e}; the cache stays attached, in the \
                 modes it had, with {} dirty lines",
                cache.stats().dirty_lines
            ));
        }
        faultpoint::fault_point!("cache.detach-flushed");
        let mut slot = self.cache.write();
        // What requests in flight before the switch to pass-through left dirty.
        if let Err(e) = cache.flush_all(&mut |_, _| {}) {
            drop(slot);
            return restore(format!("writing the last dirty lines back failed: {e}"));
        }
        // Nothing is dirty and no request runs: the stop writes the records and the clean
        // header (a failure there leaves a file whose lines the generation makes stale).
        if let Err(e) = cache.shutdown() {
            log::warn!("detach: marking the cache file clean failed: {e}");
        }
        let path = cache.stats().path;
        if cache.persistent() {
            let binding = ns.cache_binding()?;
            let detached = CacheBinding {
                generation: binding.generation + 1,
                ..CacheBinding::default()
            };
            if let Err(e) = ns.set_cache_binding(&detached) {
                cache.resume();
                *self.cleaner.lock() = Some(cache.start_cleaner());
                drop(slot);
                return restore(format!(
                    "recording on the volume that no cache holds its data failed: {e}"
                ));
            }
        }
        faultpoint::fault_point!("cache.detach-recorded");
        *self.detached_default.lock() = saved
            .iter()
            .find(|(id, _)| *id == DEFAULT_CLASS)
            .map(|(_, c)| c.clone());
        *slot = None;
        drop(slot);
        let cleaner = self.cleaner.lock().take();
        if let Some(h) = cleaner {
            let _ = h.join();
        }
        let written_back = dirty_before;
        log::warn!(
            "cache detached{}: {written_back} dirty lines written back; the volume runs \
             without a cache",
            path.as_ref().map(|p| format!(" ({p})")).unwrap_or_default()
        );
        Ok(Detached { written_back, path })
    }

    /// Brings a cache back: the config's, or the given store.
    pub fn attach(&self, with: AttachWith) -> Result<()> {
        let mut opened = self.opened.lock();
        if self.cache.read().is_some() {
            return Err(refused(
                libc::EALREADY,
                "the cache is attached already".into(),
            ));
        }
        let mut section = opened.section.clone();
        if let Some(p) = with.path {
            section.store = mountcfg::CacheStore::File(p);
        }
        if let Some(size) = with.size {
            section.size = size;
        }
        let cache = open_cache(
            &section,
            self.target_mode,
            opened.volume.clone(),
            &opened.ns,
            CacheReset::Keep,
        )
        .map_err(|e| refused(libc::EINVAL, e.to_string()))?;
        let detached_default = self.detached_default.lock().take();
        if let Some(d) = detached_default {
            cache
                .set_class_keeping_dirty(DEFAULT_CLASS, d)
                .map_err(|e| refused(libc::EIO, e.to_string()))?;
        }
        for (dir, t) in self.targets.write().iter_mut() {
            t.class = cache.add_class(t.setting.class(format!("dir {dir}")));
        }
        for c in self.classes.write().iter_mut() {
            c.class = cache.add_class(c.setting.config(format!("class {}", c.name)));
        }
        // Every memo names the old cache's classes.
        self.class_of.clear();
        self.tree_changed();
        *self.cleaner.lock() = Some(cache.start_cleaner());
        let path = cache.stats().path;
        *self.cache.write() = Some(cache);
        opened.section = section;
        log::warn!(
            "cache attached{}",
            path.map(|p| format!(" ({p})")).unwrap_or_default()
        );
        Ok(())
    }
}
