//! A file's data requests: reads and writes, each through the cache or to the devices, and
//! answered from wherever its I/O completes (the transport's thread, a cache thread, the
//! engine's completion or timer), with the file's data lock held until then.

use super::{io_error, Caller, Engine, Kept};
use crate::error::{Error, Result};
use crate::namespace::Inode;
use std::sync::Arc;
use stripe::{IoBuf, Layout, ReadTarget};

/// Where a data request runs: on the thread that took it from the transport, which must not
/// wait on a device, or on a thread that may.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Here {
    MustNotWait,
    MayWait,
}

/// A file's data lock held shared until a request completes (on whichever thread).
type DataGuard = parking_lot::ArcRwLockReadGuard<parking_lot::RawRwLock, ()>;

/// A write to the devices, as its end needs it: the file's size before it and where it ends.
#[derive(Clone, Copy)]
struct DeviceWrite {
    ino: u64,
    end: u64,
    old_size: u64,
}

impl Engine {
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
        let DeviceWrite { ino, end, old_size } = write;
        match r {
            Ok(()) => {
                let now = self.ns.note_write(ino, end);
                drop(shared);
                done(now)
            }
            Err(e) if end > old_size => {
                drop(shared);
                self.trim_after_failed_write(ino, move || done(Err(e)))
            }
            Err(e) => {
                drop(shared);
                done(Err(e))
            }
        }
    }

    /// Part of a failed write past the end may have reached some devices: cut it off before
    /// the caller hears of the failure, alone on the file so no other writer is past the
    /// recorded size meanwhile. Waiting for the file's data lock must not hold up a
    /// completion, so the janitor thread does it.
    /// The file's object and layout are taken then, not from the write: a migrate (or a
    /// rebalance, a replace) may have moved the file to a new object since.
    fn trim_after_failed_write(self: &Arc<Self>, ino: u64, then: impl FnOnce() + Send + 'static) {
        let me = self.clone();
        self.janitor.run(move || {
            {
                let lock = me.io_lock(ino);
                let _alone = lock.write();
                if let Ok((now, layout)) = me.file(ino) {
                    let _ = me.volume.truncate(now.object, &layout, now.size);
                }
            }
            then()
        });
    }
}
