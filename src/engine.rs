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
use stripe::{IoBuf, Layout, ReadTarget, Volume, WriteSource};

mod cache_threads;
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

/// Where a data request runs: on the thread that took it from the transport, which must not
/// wait on a device, or on a thread that may.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Here {
    MustNotWait,
    MayWait,
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

/// A file's data lock held shared until a request completes (on whichever thread).
type DataGuard = parking_lot::ArcRwLockReadGuard<parking_lot::RawRwLock, ()>;

/// A write to the devices, as its end needs it: the file's size before it and where it ends.
#[derive(Clone, Copy)]
struct DeviceWrite {
    ino: u64,
    end: u64,
    old_size: u64,
    layout: Layout,
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

    /// Reads up to `size` bytes at `offset` into `into` (at least `size` long), stopping at
    /// end of file, and hands it back to `done` with the length read: when the devices answer,
    /// or from the cache (at once, or when an emulated cache device would have finished).
    /// The file's data lock is held (shared) until then, so no truncate or migrate runs
    /// under a read in flight.
    pub fn read<T: ReadTarget>(
        self: &Arc<Self>,
        ino: u64,
        offset: u64,
        size: u32,
        into: T,
        done: impl FnOnce(T, Result<usize>) + Send + 'static,
    ) {
        let Some(shared) = self.io_lock(ino).try_read_arc() else {
            // The file is being truncated or migrated: the request waits on the janitor,
            // not on a FUSE thread (a few of those serve the whole mount).
            let me = self.clone();
            return self.janitor.run(move || {
                let shared = me.io_lock(ino).read_arc();
                me.read_locked(shared, Here::MustNotWait, ino, offset, size, into, done)
            });
        };
        self.read_locked(shared, Here::MustNotWait, ino, offset, size, into, done)
    }

    #[allow(clippy::too_many_arguments)]
    fn read_locked<T: ReadTarget>(
        self: &Arc<Self>,
        shared: DataGuard,
        here: Here,
        ino: u64,
        offset: u64,
        size: u32,
        mut into: T,
        done: impl FnOnce(T, Result<usize>) + Send + 'static,
    ) {
        let (inode, layout) = match self.file(ino) {
            Ok(f) => f,
            Err(e) => return done(into, Err(e)),
        };
        if offset >= inode.size {
            return done(into, Ok(0));
        }
        let len = (inode.size - offset).min(size as u64) as usize;
        if let Some((c, cache)) = self.cached() {
            let class = c.class_of(&self.ns, ino, inode.size, mountcfg::Direction::Read);
            if here == Here::MustNotWait
                && !self.cache_answers_at_once(
                    &cache,
                    &layout,
                    inode.object,
                    offset,
                    len,
                    class,
                    false,
                )
            {
                drop(cache);
                let me = self.clone();
                return self.on_cache_thread(move || {
                    me.read_locked(shared, Here::MayWait, ino, offset, size, into, done)
                });
            }
            let buf = &mut into.target()[..len];
            // The target may hold another request's bytes: none may show through.
            buf.fill(0);
            let (r, until) =
                cache::defer_emulated_waits(|| cache.read(inode.object, offset, buf, class));
            drop(cache);
            if r.is_ok() {
                self.ns.note_read_of(&inode);
            }
            return self.answer_at(until, move || {
                drop(shared);
                done(into, r.map(|()| len).map_err(io_error))
            });
        }
        // Most reads change no access time: the namespace goes along only for one that may.
        let atime = self.ns.atime_due(&inode).then(|| self.ns.clone());
        let object = inode.object;
        self.volume
            .read_async_into(object, &layout, offset, len, into, move |into, r| {
                if let (Ok(()), Some(ns)) = (&r, atime) {
                    ns.note_read_of(&inode);
                }
                drop(shared);
                done(into, r.map(|()| len).map_err(Error::from))
            });
    }

    /// A cache request is answered on the thread that took it when it cannot wait on a
    /// device there: everything it may touch is in memory, or the cache holds what it needs
    /// in memory (RAM, or a file on a RAM disk; an emulated cache device's modelled wait is
    /// deferred, `answer_at`). Otherwise it goes to a cache thread, so the transport's thread
    /// (one ring thread per CPU over io_uring) takes the next request meanwhile.
    #[allow(clippy::too_many_arguments)]
    fn cache_answers_at_once(
        &self,
        cache: &cache::Cache,
        layout: &Layout,
        object: u64,
        offset: u64,
        len: usize,
        class: cache::ClassId,
        write: bool,
    ) -> bool {
        (cache.in_memory() && self.volume.completes_inline(layout))
            || cache.answers_from_memory(object, offset, len, class, write)
    }

    /// Runs `answer` now, or at `until` when an emulated cache device would only then have
    /// finished the request's I/O: the data has moved already, and no thread waits meanwhile.
    fn answer_at(&self, until: Option<std::time::Instant>, answer: impl FnOnce() + Send + 'static) {
        match until {
            Some(t) if t > std::time::Instant::now() => self.volume.run_at(t, answer),
            _ => answer(),
        }
    }

    /// Runs `job`, which may wait on the cache's devices, where `CacheThreads` says (here
    /// without a cache).
    pub(crate) fn on_cache_thread(&self, job: impl FnOnce() + Send + 'static) {
        match &self.cache_threads {
            Some(t) => t.run(job),
            None => job(),
        }
    }

    /// Writes `data` at `offset` and tells `done` the file as it then is: when every device
    /// has the data, or at once when this thread does the write (through the cache, to devices
    /// in memory, or to an idle engine), which needs no copy of `data` first (through an
    /// emulated cache device, the answer waits for the modelled end, not the thread). `kept`,
    /// when given, holds the same bytes where they stay while the devices take them: no copy
    /// either.
    pub fn write(
        self: &Arc<Self>,
        caller: Caller,
        ino: u64,
        offset: u64,
        data: &[u8],
        kept: Option<Kept>,
        done: impl FnOnce(Result<Inode>) + Send + 'static,
    ) {
        let Some(end) = offset.checked_add(data.len() as u64) else {
            return done(Err(Error::Errno(libc::EFBIG)));
        };
        let Some(shared) = self.io_lock(ino).try_read_arc() else {
            // As in `read`: wait for the truncate or migrate on the janitor.
            let (me, data) = (self.clone(), data.to_vec());
            return self.janitor.run(move || {
                let shared = me.io_lock(ino).read_arc();
                me.write_locked(shared, caller, ino, offset, &data, None, end, done)
            });
        };
        self.write_locked(shared, caller, ino, offset, data, kept, end, done)
    }

    #[allow(clippy::too_many_arguments)]
    fn write_locked(
        self: &Arc<Self>,
        shared: DataGuard,
        caller: Caller,
        ino: u64,
        offset: u64,
        data: &[u8],
        kept: Option<Kept>,
        end: u64,
        done: impl FnOnce(Result<Inode>) + Send + 'static,
    ) {
        let (inode, layout) = match self.file(ino) {
            Ok(f) => f,
            Err(e) => return done(Err(e)),
        };
        let ready = self.check_size(&layout, end).and_then(|()| {
            if end > inode.size {
                // Nothing past the old end may show through the new one.
                self.finish_cut(&inode, &layout)?;
            }
            self.drop_setid(&inode, caller)
        });
        if let Err(e) = ready {
            return done(Err(e));
        }
        self.write_ready(
            shared,
            Here::MustNotWait,
            ino,
            inode,
            layout,
            offset,
            data,
            kept,
            end,
            done,
        )
    }

    /// The write once its size is allowed and what it uncovers is cut: through the cache
    /// (here or on a cache thread) or to the devices.
    #[allow(clippy::too_many_arguments)]
    fn write_ready(
        self: &Arc<Self>,
        shared: DataGuard,
        here: Here,
        ino: u64,
        inode: Inode,
        layout: Layout,
        offset: u64,
        data: &[u8],
        kept: Option<Kept>,
        end: u64,
        done: impl FnOnce(Result<Inode>) + Send + 'static,
    ) {
        if let Some((c, cache)) = self.cached() {
            // A write counts by the size the file has with it.
            let class = c.class_of(
                &self.ns,
                ino,
                end.max(inode.size),
                mountcfg::Direction::Write,
            );
            // A file without data has its object made first (below), on the devices.
            if here == Here::MustNotWait
                && !(inode.has_data
                    && self.cache_answers_at_once(
                        &cache,
                        &layout,
                        inode.object,
                        offset,
                        data.len(),
                        class,
                        true,
                    ))
            {
                drop(cache);
                let (me, data) = (self.clone(), data.to_vec());
                return self.on_cache_thread(move || {
                    me.write_ready(
                        shared,
                        Here::MayWait,
                        ino,
                        inode,
                        layout,
                        offset,
                        &data,
                        None,
                        end,
                        done,
                    )
                });
            }
            if !inode.has_data {
                // The devices see this data only when the cache writes it back, which a
                // truncate can forestall: the object is made now, as a write to the devices
                // would, so fsck can tell a sparse file from lost data.
                if let Err(e) = self.volume.touch(inode.object, &layout) {
                    drop(shared);
                    return done(Err(e.into()));
                }
            }
            let (r, until) =
                cache::defer_emulated_waits(|| cache.write(inode.object, offset, data, class));
            drop(cache);
            let now = r
                .map_err(io_error)
                .and_then(|()| self.ns.note_write(ino, end));
            return self.answer_at(until, move || {
                drop(shared);
                done(now)
            });
        }
        let write = DeviceWrite {
            ino,
            end,
            old_size: inode.size,
            layout,
        };
        // Written on this thread either way (RAM-backed devices, or an idle engine): no copy,
        // unless O_DIRECT device I/O needs a page-aligned buffer that the request's data is
        // not kept in.
        let on_this_thread = self.volume.completes_inline(&layout)
            || (self.volume.idle() && !self.config.volume.direct_device_io);
        if on_this_thread {
            let r = self.volume.write(inode.object, &layout, offset, data);
            return self.device_write_ended(write, r.map_err(Error::from), shared, done);
        }
        let me = self.clone();
        let done = move |r: stripe::Result<()>| {
            me.device_write_ended(write, r.map_err(Error::from), shared, done)
        };
        match kept {
            Some(kept) if std::ptr::eq(kept.source(), data) => {
                self.volume
                    .write_async(inode.object, &layout, offset, kept, done)
            }
            _ => self
                .volume
                .write_async(inode.object, &layout, offset, IoBuf::copy_of(data), done),
        }
    }

    /// The new size is recorded under the file's data lock, so no truncate or migrate comes
    /// between the data and its size; a failed write is trimmed without it.
    fn device_write_ended(
        self: &Arc<Self>,
        write: DeviceWrite,
        r: Result<()>,
        shared: DataGuard,
        done: impl FnOnce(Result<Inode>) + Send + 'static,
    ) {
        let DeviceWrite {
            ino,
            end,
            old_size,
            layout,
        } = write;
        match r {
            Ok(()) => {
                let now = self.ns.note_write(ino, end);
                drop(shared);
                done(now)
            }
            Err(e) if end > old_size => {
                drop(shared);
                self.trim_after_failed_write(ino, layout, move || done(Err(e)))
            }
            Err(e) => {
                drop(shared);
                done(Err(e))
            }
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

    /// Part of a failed write past the end may have reached some devices: cut it off before
    /// the caller hears of the failure, alone on the file so no other writer is past the
    /// recorded size meanwhile. Waiting for the file's data lock must not hold up a
    /// completion, so the janitor thread does it.
    fn trim_after_failed_write(
        self: &Arc<Self>,
        ino: u64,
        layout: Layout,
        then: impl FnOnce() + Send + 'static,
    ) {
        let me = self.clone();
        self.janitor.run(move || {
            {
                let lock = me.io_lock(ino);
                let _alone = lock.write();
                if let Ok(now) = me.ns.get(ino) {
                    let _ = me.volume.truncate(now.object, &layout, now.size);
                }
            }
            then()
        });
    }

    /// Sets a file's size (`attrs.size`) with the other attribute changes of the same call.
    /// A shrink makes the new size durable before the cache and the objects are cut: a crash
    /// in between leaves the new size with data past it, which the next mount's sweep trims,
    /// never the old size over data already cut.
    pub fn set_size(&self, ino: u64, attrs: &SetAttr) -> Result<Inode> {
        let Some(size) = attrs.size else {
            return self.ns.setattr(ino, attrs);
        };
        let lock = self.io_lock(ino);
        let _alone = lock.write();
        let (inode, layout) = self.file(ino)?;
        self.check_size(&layout, size)?;
        self.finish_cut(&inode, &layout)?;
        let now = self.ns.setattr(ino, attrs)?;
        if size < inode.size {
            // Pending from the moment the new size stands in memory: if it cannot be made
            // durable now, whatever grows the file later makes it durable and cuts first, so
            // the old bytes never show past the new end.
            self.pending_cuts.lock().insert(ino);
            self.commit()?;
            faultpoint::fault_point!("engine.truncate-size-durable");
            self.finish_cut(&now, &layout)?;
        }
        Ok(now)
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

    pub fn fallocate(
        &self,
        caller: Caller,
        ino: u64,
        offset: u64,
        len: u64,
        mode: i32,
    ) -> Result<()> {
        use libc::{
            FALLOC_FL_COLLAPSE_RANGE as COLLAPSE, FALLOC_FL_INSERT_RANGE as INSERT,
            FALLOC_FL_KEEP_SIZE as KEEP_SIZE, FALLOC_FL_PUNCH_HOLE as PUNCH,
            FALLOC_FL_ZERO_RANGE as ZERO,
        };
        if mode & !(KEEP_SIZE | PUNCH | ZERO | COLLAPSE | INSERT) != 0 {
            return errno(libc::EOPNOTSUPP);
        }
        // The combinations fallocate(2) allows.
        match mode {
            COLLAPSE | INSERT => {
                return self.shift_range(caller, ino, offset, len, mode == INSERT);
            }
            0 | KEEP_SIZE | ZERO => {}
            m if m == PUNCH | KEEP_SIZE || m == ZERO | KEEP_SIZE => {}
            _ => return errno(libc::EINVAL),
        }
        let end = offset.checked_add(len).ok_or(Error::Errno(libc::EFBIG))?;
        let lock = self.io_lock(ino);
        // A punch or zeroing drops the range from the cache: alone, so no write (mmap or
        // writeback-cache flushes do not hold the kernel's inode lock) lands in between.
        let punch = mode & (PUNCH | ZERO) != 0;
        let (_shared, _alone) = if punch {
            (None, Some(lock.write()))
        } else {
            (Some(lock.read()), None)
        };
        let (inode, layout) = self.file(ino)?;
        self.check_size(&layout, end)?;
        if end > inode.size {
            self.finish_cut(&inode, &layout)?;
        }
        self.drop_setid(&inode, caller)?;
        // Punching past the end of file changes nothing.
        let end_in_file = if mode & PUNCH != 0 {
            end.min(inode.size)
        } else {
            end
        };
        let devices = || -> Result<()> {
            if end_in_file <= offset {
                return Ok(());
            }
            let apply = |mode| {
                self.volume
                    .fallocate(inode.object, &layout, offset, end_in_file - offset, mode)
            };
            match apply(mode) {
                // The space of deleted files comes back with the next commit: take it now,
                // as ext4 reuses freed blocks at once, and try again.
                Err(e) if e.errno() == libc::ENOSPC && mode & PUNCH == 0 => {
                    self.commit()?;
                    apply(mode)?;
                }
                // A device's filesystem without ZERO_RANGE (tmpfs): a hole, then blocks.
                Err(e) if e.errno() == libc::EOPNOTSUPP && mode & ZERO != 0 => {
                    apply(PUNCH | KEEP_SIZE)?;
                    apply(KEEP_SIZE)?;
                }
                r => r?,
            }
            Ok(())
        };
        match (self.cached(), punch) {
            // Only the range leaves the cache (its dirty sectors dropped, not written back),
            // its lines held while the devices punch it, so nothing refills the hole.
            (Some((_, cache)), true) => cache.discard(
                inode.object,
                offset,
                end_in_file.saturating_sub(offset),
                devices,
            )?,
            _ => devices()?,
        }
        if mode & KEEP_SIZE == 0 && end > inode.size {
            self.ns.note_write(ino, end)?;
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
