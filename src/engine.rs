//! A mounted volume without the FUSE wire: the namespace and the striped devices together,
//! with the data operations, durability (commit) and the control values built on them.

use crate::caching::Caching;
use crate::error::{errno, Error, Result};
use crate::janitor::Janitor;
use crate::namespace::{Inode, Kind, Namespace, RenameHow, SetAttr};
use parking_lot::RwLock;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use stripe::{Layout, Volume, WriteSource};

mod cache_threads;
mod data;
mod io_locks;
pub(crate) use cache_threads::this_is_a_ring_thread;
mod open;
mod ranges;
mod status;

pub use open::{check_meta_dir, controller_model, device_model, meta_dir, namespace_path, Options};
pub use status::{CacheSummary, DeviceStatus, LayoutInfo, ObjectShare, Status};

/// A write's data where it stays while the devices take it (a transport's request buffer).
pub type Kept = Box<dyn WriteSource>;

pub struct Engine {
    pub config: mountcfg::Config,
    pub volume: Arc<Volume>,
    pub ns: Arc<Namespace>,
    /// The cache in front of the devices, if the config has one.
    pub caching: Option<Caching>,
    io_locks: io_locks::IoLocks,
    /// Runs what must not wait on a completion thread.
    janitor: Janitor,
    /// Runs cache requests that may wait on the cache's devices (with a cache configured).
    cache_threads: Option<cache_threads::CacheThreads>,
    /// Runs control operations that wait for the kernel (which needs the FUSE threads, and
    /// may need the janitor, meanwhile): a collapse or insert and its page-cache invalidation.
    admin: Janitor,
    /// Serialises commits so the doomed-object deletes of one never race another's.
    commit_lock: parking_lot::Mutex<()>,
    /// Files whose cut past a durable new size failed: anything that would show what lies
    /// past the size (growing, writing past it) cuts first; while any is left the stop is not
    /// marked clean, so the next mount's sweep trims them.
    pending_cuts: parking_lot::Mutex<std::collections::HashSet<u64>>,
    /// Mounted, or since remounted, read-only (the kernel refuses writes; we write nothing).
    pub(crate) read_only: std::sync::atomic::AtomicBool,
    started: Instant,
    pub mountpoint: PathBuf,
    /// The FUSE transport INIT settled: for `status`.
    pub transport: std::sync::OnceLock<Transport>,
    /// The rebalance running in the daemon, if any, and how far it got.
    pub rebalancer: crate::volume_life::Rebalancer,
}

/// The FUSE transport INIT settled.
pub struct Transport {
    /// "io_uring" or "/dev/fuse".
    pub name: String,
    /// Why not io_uring, where it was wanted.
    pub why_not_uring: Option<String>,
    /// Over /dev/fuse: its workers with rings of their own now (`[mount] dev_wait`).
    pub dev_ring_workers: Option<Arc<std::sync::atomic::AtomicUsize>>,
    /// Over io_uring: its ring threads (`[mount] uring_threads`, settled at mount).
    pub ring_threads: Option<usize>,
}

/// Who asks for a data change: set-id bits fall when anyone but root changes a file's data.
#[derive(Clone, Copy, Debug)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
}

impl Caller {
    /// Whether the caller is in group `gid`: its own group, or one of its supplementary
    /// groups (read from /proc only in the rare case that asks).
    pub fn in_group(&self, gid: u32) -> bool {
        if gid == self.gid {
            return true;
        }
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid));
        status.is_ok_and(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Groups:"))
                .is_some_and(|g| g.split_whitespace().any(|x| x.parse() == Ok(gid)))
        })
    }

    /// The set-id bits of a file (`perm`, group `gid`) that a data change by this caller
    /// removes, as Linux has it (should_remove_suid, setattr_should_drop_sgid): none for root
    /// (CAP_FSETID); else set-user-ID, and set-group-ID when the group may execute the file or
    /// the caller is not in its group.
    fn kills_setid(&self, perm: u16, gid: u32) -> u16 {
        const SUID: u16 = libc::S_ISUID as u16;
        const SGID: u16 = libc::S_ISGID as u16;
        if self.uid == 0 || perm & (SUID | SGID) == 0 {
            return 0;
        }
        let mut kill = perm & SUID;
        if perm & SGID != 0 && (perm & libc::S_IXGRP as u16 != 0 || !self.in_group(gid)) {
            kill |= SGID;
        }
        kill
    }
}

/// Deleted bytes worth a commit at once on a device short of space.
const RECLAIM_NOW: u64 = 1 << 20;

/// A cache I/O error as the caller sees it: EIO unless the device said more (ENOSPC).
pub(crate) fn io_error(e: std::io::Error) -> Error {
    Error::Errno(e.raw_os_error().unwrap_or(libc::EIO))
}

impl Engine {
    /// The attached cache, held for one request (a detach waits for it), with the caching
    /// that classifies the request. `None` without a cache or while it is detached.
    pub(crate) fn cached(
        &self,
    ) -> Option<(
        &Caching,
        parking_lot::MappedRwLockReadGuard<'_, Arc<cache::Cache>>,
    )> {
        let c = self.caching.as_ref()?;
        Some((c, c.cache()?))
    }

    /// The layout the volume gives new files: the config's, on the ring new files use. Its
    /// width, when the config leaves it to the volume (all devices), follows devices added
    /// since.
    pub fn volume_layout(&self) -> Layout {
        let (ring, len) = self.volume.current_ring();
        Layout {
            ring,
            ..Layout::new(
                self.config.volume.stripe_size,
                self.config.volume.width.unwrap_or(len).min(len),
                0,
            )
        }
    }

    /// `layout` (its `first_device` a device id, as users give it) on the ring new files
    /// use, checked against it.
    pub fn on_current_ring(&self, layout: Layout) -> std::result::Result<Layout, String> {
        let (ring, _) = self.volume.current_ring();
        let rings = self.volume.rings();
        let place = rings
            .ring(ring)
            .and_then(|r| r.iter().position(|&d| d == layout.first_device))
            .ok_or_else(|| {
                format!(
                    "first_device {} is not a device of the volume ({} devices)",
                    layout.first_device,
                    self.volume.device_count()
                )
            })?;
        let on = Layout {
            ring,
            first_device: place as u32,
            ..layout
        };
        rings.validate(&on)?;
        Ok(on)
    }

    /// The data lock of `ino`: reads and writes share it, truncate and migrate take it alone.
    pub fn io_lock(&self, ino: u64) -> Arc<RwLock<()>> {
        self.io_locks.of(ino)
    }

    pub(crate) fn file(&self, ino: u64) -> Result<(Inode, Layout)> {
        let inode = self.ns.get(ino)?;
        match (inode.kind, inode.layout) {
            (Kind::File, Some(l)) => {
                // The cache reaches the devices by object alone: keep its layout known.
                if self.caching.is_some() {
                    self.volume.set_layout(inode.object, l);
                }
                Ok((inode, l))
            }
            (Kind::Dir, _) => errno(libc::EISDIR),
            _ => errno(libc::EINVAL),
        }
    }

    /// A data change by `caller` drops the set-id bits Linux drops, on every path (the kernel
    /// does it for buffered writes, not for direct I/O nor fallocate).
    fn drop_setid(&self, inode: &Inode, caller: Caller) -> Result<()> {
        let kill = caller.kills_setid(inode.perm, inode.gid);
        if kill != 0 {
            let perm = SetAttr {
                perm: Some(inode.perm & !kill),
                ..SetAttr::default()
            };
            self.ns.setattr(inode.ino, &perm)?;
        }
        Ok(())
    }

    /// Cuts the cache and the objects of a file whose cut is pending down to its size, once
    /// that size is durable (cut before, a crash would show the old size over zeros).
    fn finish_cut(&self, inode: &Inode, layout: &Layout) -> Result<()> {
        if !self.pending_cuts.lock().contains(&inode.ino) {
            return Ok(());
        }
        self.commit()?;
        if let Some((_, cache)) = self.cached() {
            cache.truncate(inode.object, inode.size).map_err(io_error)?;
        }
        self.volume.truncate(inode.object, layout, inode.size)?;
        self.pending_cuts.lock().remove(&inode.ino);
        Ok(())
    }

    /// EFBIG for a file end that some object of `layout` could not reach on its device.
    fn check_size(&self, layout: &Layout, end: u64) -> Result<()> {
        if end > self.volume.max_file_size(layout) {
            return errno(libc::EFBIG);
        }
        Ok(())
    }

    /// fsync: the file's data, then everything in the namespace, durable.
    pub fn fsync(&self, ino: u64) -> Result<()> {
        if let Ok(inode) = self.ns.get(ino) {
            if inode.kind == Kind::File {
                match self.cached() {
                    Some((_, cache)) => cache.sync_object(inode.object).map_err(io_error)?,
                    None => self.volume.sync(inode.object)?,
                }
            }
        }
        faultpoint::fault_point!("engine.fsync-data-synced");
        self.commit()
    }

    /// Runs `job` on the admin thread, off the FUSE threads and the janitor.
    pub fn run_admin(&self, job: impl FnOnce() + Send + 'static) {
        self.admin.run(job);
    }

    /// `fsync`, on the janitor (a completion must not block), then `done`.
    pub fn fsync_then(self: &Arc<Self>, ino: u64, done: impl FnOnce(Result<()>) + Send + 'static) {
        let me = self.clone();
        self.janitor.run(move || done(me.fsync(ino)));
    }

    /// Deleted files' objects go with the next commit. When they hold more than a device has
    /// left, that commit comes now, so the next write finds their room, as ext4 reuses a
    /// deleted file's blocks.
    pub fn reclaim_if_short(&self) {
        let freed = self.ns.freed_by_commit();
        if freed < RECLAIM_NOW {
            return;
        }
        let short = |s: &stripe::SpaceInfo| s.avail_bytes < freed;
        if self.volume.space().iter().any(short) {
            if let Err(e) = self.commit() {
                log::warn!("could not commit to free deleted files' space: {e}");
            }
        }
    }

    /// Makes the namespace durable, then deletes objects whose inodes are durably gone.
    pub fn commit(&self) -> Result<()> {
        let _one = self.commit_lock.lock();
        let doomed = self.ns.sync()?;
        faultpoint::fault_point!("engine.commit-before-deletes");
        for object in doomed {
            // A commit may come under a request's hold of the cache (fallocate's).
            let cache = self.caching.as_ref().and_then(|c| c.cache_nested());
            if let Some(cache) = cache {
                if let Err(e) = cache.forget(object) {
                    log::warn!("could not drop the cached lines of object {object}: {e}");
                }
            }
            if let Err(e) = self.volume.remove(object) {
                log::warn!("could not delete object {object}: {e}");
            }
        }
        Ok(())
    }

    /// Everything written so far to the devices and the cache file, then the names, durable:
    /// data before the sizes that show it.
    pub fn sync_all(&self) -> Result<()> {
        self.volume.sync_all()?;
        if let Some((_, cache)) = self.cached() {
            cache.sync_records().map_err(io_error)?;
        }
        self.commit()
    }

    /// Unmount: the cache writes every dirty line back, then everything is made durable and
    /// the volume marked cleanly stopped.
    pub fn shutdown(&self) -> Result<()> {
        // Paused, not forgotten: the next mount goes on with it.
        self.rebalancer.pause();
        let cached = match &self.caching {
            Some(c) => c.shutdown(
                &self.ns,
                &crate::rescue::path(&namespace_path(&self.config)),
            ),
            None => Ok(()),
        };
        let synced = self.sync_all();
        cached.and(synced)?;
        if self.config.mount.read_only {
            return Ok(());
        }
        if !self.pending_cuts.lock().is_empty() {
            log::warn!("a truncate could not cut its objects: the next mount trims them");
            return Ok(());
        }
        faultpoint::fault_point!("namespace.mark-clean");
        self.ns.set_clean(true)
    }

    pub fn rename(
        &self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        how: RenameHow,
    ) -> Result<()> {
        // What is renamed, and what a name over it loses: their classes follow their names.
        let moved = self.caching.as_ref().map(|_| {
            let kind_of = |p, n| self.ns.lookup(p, n).map(|i| (i.ino, i.kind)).ok();
            (kind_of(parent, name), kind_of(newparent, newname))
        });
        self.ns.rename_how(parent, name, newparent, newname, how)?;
        if let (Some(c), Some((src, dst))) = (&self.caching, moved) {
            for (ino, kind) in [src, dst].into_iter().flatten() {
                match kind {
                    // A folder takes its files along: every class is worked out again.
                    Kind::Dir => c.tree_changed(),
                    _ => c.names_changed(ino),
                }
            }
        }
        self.reclaim_if_short();
        Ok(())
    }

    /// A new name for a file; its class follows its names.
    pub fn link(&self, ino: u64, newparent: u64, newname: &[u8]) -> Result<Inode> {
        let linked = self.ns.link(ino, newparent, newname)?;
        if let Some(c) = &self.caching {
            c.names_changed(ino);
        }
        Ok(linked)
    }

    /// A name goes; the file's class follows the names it has left.
    pub fn unlink(&self, parent: u64, name: &[u8]) -> Result<()> {
        let ino = match &self.caching {
            Some(_) => self.ns.lookup(parent, name).ok().map(|i| i.ino),
            None => None,
        };
        self.ns.unlink(parent, name)?;
        if let (Some(c), Some(ino)) = (&self.caching, ino) {
            c.names_changed(ino);
        }
        self.reclaim_if_short();
        Ok(())
    }

    pub fn rmdir(&self, parent: u64, name: &[u8]) -> Result<()> {
        let dir = self.ns.lookup(parent, name).map(|i| i.ino);
        self.ns.rmdir(parent, name)?;
        if let (Some(c), Ok(dir)) = (&self.caching, dir) {
            if c.is_target(dir) {
                c.remove_target(&self.ns, dir)?;
            }
        }
        Ok(())
    }

    /// Restripes a file with its content unchanged; readers and writers wait meanwhile, so no
    /// one sees a mix. A crash leaves either the old or the new copy, never a blend.
    pub fn migrate(&self, ino: u64, to: Layout) -> Result<Inode> {
        self.migrate_paced(ino, to, &mut |_| true)
    }

    /// `migrate`, with `pace` told each chunk before it is copied (see `Volume::copy_to`).
    pub fn migrate_paced(
        &self,
        ino: u64,
        to: Layout,
        pace: &mut dyn FnMut(u64) -> bool,
    ) -> Result<Inode> {
        self.volume
            .validate(&to)
            .map_err(|_| Error::Errno(libc::EINVAL))?;
        let lock = self.io_lock(ino);
        let _alone = lock.write();
        let (inode, from) = self.file(ino)?;
        if from == to {
            return Ok(inode);
        }
        self.rebuild(&inode, to, inode.size, "engine.migrate-copied", |object| {
            self.volume
                .copy_to(inode.object, &from, inode.size, object, &to, pace)
        })
    }

    /// Gives the file `inode` (its data lock held alone) a new object, made by `copy` into
    /// the object id it is handed, with `layout` and `size`, switched to in one durable commit:
    /// a crash shows the old file or the new, never a blend. `point` is the fault point
    /// between the copy and the switch.
    pub(crate) fn rebuild(
        &self,
        inode: &Inode,
        layout: Layout,
        size: u64,
        #[cfg_attr(not(feature = "failpoints"), allow(unused_variables))] point: &'static str,
        copy: impl FnOnce(u64) -> stripe::Result<()>,
    ) -> Result<Inode> {
        if let Some((_, cache)) = self.cached() {
            // The copy reads the devices: they must hold everything first.
            cache.flush_object(inode.object).map_err(io_error)?;
            cache.forget(inode.object).map_err(io_error)?;
        }
        let object = self.ns.new_object_id()?;
        self.volume.set_layout(object, layout);
        let switched = copy(object).map_err(Error::from).and_then(|()| {
            faultpoint::fault_point!(point);
            self.ns.switch_object(inode.ino, object, layout, size)
        });
        let out = match switched {
            Ok(out) => out,
            Err(e) => {
                // The file still has its old object: the copy goes.
                let _ = self.volume.remove(object);
                self.ns.discard_object(object);
                return Err(e);
            }
        };
        if let Err(e) = self.commit() {
            // The file has its new contents in memory; like any change not yet durable, the
            // next durable point (fsync, unmount) reports the failure. An error here would
            // invite a retry that shifts the file twice.
            log::warn!("inode {}: rebuilt, not yet durable: {e}", inode.ino);
        }
        Ok(out)
    }
}
