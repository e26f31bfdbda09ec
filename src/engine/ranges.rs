//! A file's ranges beyond read and write: where its data is (SEEK_DATA, SEEK_HOLE, st_blocks),
//! copy_file_range, a new size (truncate), and fallocate's reserving, punching, zeroing,
//! collapsing and inserting.

use super::{io_error, Caller, Engine};
use crate::error::{errno, Error, Result};
use crate::namespace::{Inode, Kind, SetAttr};
use mountcfg::Direction;
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use stripe::{Layout, Seek};

/// A file's data lock, held alone or shared.
fn hold(
    lock: &RwLock<()>,
    alone: bool,
) -> (
    Option<RwLockReadGuard<'_, ()>>,
    Option<RwLockWriteGuard<'_, ()>>,
) {
    if alone {
        (None, Some(lock.write()))
    } else {
        (Some(lock.read()), None)
    }
}

/// The most one copy_file_range request copies: the caller loops for the rest, and a FUSE
/// thread is not held for a whole large file.
const COPY_MAX: u64 = 128 << 20;

impl Engine {
    /// What a file takes (st_blocks * 512): its objects on the devices, and what only a
    /// write-back cache holds of it yet (so `tar --sparse` and `du` never see data as holes).
    pub fn allocated(&self, inode: &Inode) -> u64 {
        if inode.kind != Kind::File || inode.size == 0 {
            return 0;
        }
        let cached = self
            .cached()
            .map_or(0, |(_, cache)| cache.dirty_bytes(inode.object));
        self.volume.allocated_bytes(inode.object) + cached
    }

    /// lseek(2) SEEK_DATA / SEEK_HOLE (the kernel answers the other whences itself).
    pub fn seek(&self, ino: u64, offset: i64, whence: i32) -> Result<i64> {
        if self.config.mount.writeback_cache {
            // The kernel holds written data the daemon has not seen and does not write it
            // back before asking: ENOSYS makes it answer lseek itself from then on, with
            // the whole file as data, which is never wrong.
            return errno(libc::ENOSYS);
        }
        let which = match whence {
            libc::SEEK_DATA => Seek::Data,
            libc::SEEK_HOLE => Seek::Hole,
            _ => return errno(libc::EINVAL),
        };
        let Ok(offset) = u64::try_from(offset) else {
            return errno(libc::ENXIO);
        };
        let lock = self.io_lock(ino);
        let _shared = lock.read();
        let (inode, layout) = self.file(ino)?;
        if let Some((_, cache)) = self.cached() {
            // Data only the cache holds is data too: on the devices first.
            cache.flush_object(inode.object).map_err(io_error)?;
        }
        match self
            .volume
            .seek(inode.object, &layout, inode.size, offset, which)?
        {
            Some(at) => Ok(at as i64),
            None => errno(libc::ENXIO),
        }
    }

    /// copy_file_range(2) inside the volume: object to object with the backing filesystem's
    /// own copy_file_range when both files are striped alike and the offsets fall alike in a
    /// stripe row (XFS or btrfs devices then share extents), holes kept; else read and
    /// written here, through the cache when there is one. Returns the bytes copied (at most
    /// `COPY_MAX`).
    pub fn copy_range(
        &self,
        caller: Caller,
        from: u64,
        from_off: u64,
        to: u64,
        to_off: u64,
        len: u64,
    ) -> Result<u64> {
        // Data locks in inode order: two copies the other way round do not deadlock. The
        // destination's alone (as its inode lock on ext4): a failed copy past its end cuts it
        // back, which must not cut a write that landed there meanwhile.
        let (first, second) = (from.min(to), from.max(to));
        let (l1, l2) = (self.io_lock(first), self.io_lock(second));
        let _a = hold(&l1, first == to);
        let _b = (first != second).then(|| hold(&l2, second == to));
        let (src, src_layout) = self.file(from)?;
        let (dst, dst_layout) = self.file(to)?;
        let len = len.min(src.size.saturating_sub(from_off)).min(COPY_MAX);
        if len == 0 {
            return Ok(0);
        }
        let end = to_off.checked_add(len).ok_or(Error::Errno(libc::EFBIG))?;
        if from == to && from_off < end && to_off < from_off + len {
            return errno(libc::EINVAL);
        }
        self.check_size(&dst_layout, end)?;
        if end > dst.size {
            self.finish_cut(&dst, &dst_layout)?;
        }
        self.drop_setid(&dst, caller)?;
        let row = src_layout.stripe_size as u64 * src_layout.width as u64;
        let alike = (src_layout.stripe_size, src_layout.width)
            == (dst_layout.stripe_size, dst_layout.width);
        let copied = if self.cached().is_none() && alike && from_off % row == to_off % row {
            self.volume
                .copy_aligned(
                    src.object,
                    &src_layout,
                    from_off,
                    dst.object,
                    &dst_layout,
                    to_off,
                    len,
                )
                .map_err(Error::from)
        } else {
            self.copy_through(&src, &src_layout, from_off, &dst, &dst_layout, to_off, len)
        };
        if let Err(e) = copied {
            if end > dst.size {
                // Nothing may show past the old end.
                let _ = self.volume.truncate(dst.object, &dst_layout, dst.size);
            }
            return Err(e);
        }
        self.ns.note_write(to, end)?;
        Ok(len)
    }

    /// A copy read and written here, through the cache when there is one.
    #[allow(clippy::too_many_arguments)]
    fn copy_through(
        &self,
        src: &Inode,
        src_layout: &Layout,
        from_off: u64,
        dst: &Inode,
        dst_layout: &Layout,
        to_off: u64,
        len: u64,
    ) -> Result<()> {
        const CHUNK: u64 = 1 << 20;
        let mut buf = vec![0u8; CHUNK.min(len) as usize];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(CHUNK) as usize;
            let (at, to) = (from_off + done, to_off + done);
            match self.cached() {
                Some((c, cache)) => {
                    let class = c.class_of(&self.ns, src.ino, src.size, Direction::Read);
                    cache
                        .read(src.object, at, &mut buf[..n], class)
                        .map_err(io_error)?;
                    if !dst.has_data {
                        self.volume.touch(dst.object, dst_layout)?;
                    }
                    let class = c.class_of(
                        &self.ns,
                        dst.ino,
                        dst.size.max(to + n as u64),
                        Direction::Write,
                    );
                    cache
                        .write(dst.object, to, &buf[..n], class)
                        .map_err(io_error)?;
                }
                None => {
                    self.volume
                        .read(src.object, src_layout, at, &mut buf[..n])?;
                    self.volume.write(dst.object, dst_layout, to, &buf[..n])?;
                }
            }
            done += n as u64;
        }
        Ok(())
    }

    /// FALLOC_FL_COLLAPSE_RANGE (`insert` false) or FALLOC_FL_INSERT_RANGE: whole stripe
    /// rows only (EINVAL otherwise, as ext4 wants whole blocks). The file is rebuilt into a
    /// new object (extents shared where the devices can) and switched to in one durable
    /// commit: a crash shows the file before or after, never shifted on some devices only.
    pub fn shift_range(
        &self,
        caller: Caller,
        ino: u64,
        offset: u64,
        len: u64,
        insert: bool,
    ) -> Result<()> {
        let lock = self.io_lock(ino);
        let _alone = lock.write();
        let (inode, layout) = self.file(ino)?;
        let row = layout.stripe_size as u64 * layout.width as u64;
        let end = offset.checked_add(len).ok_or(Error::Errno(libc::EFBIG))?;
        if len == 0 || !offset.is_multiple_of(row) || !len.is_multiple_of(row) {
            return errno(libc::EINVAL);
        }
        // As ext4: a collapse must end before the end of file, an insert start before it.
        let size = match insert {
            false if end < inode.size => inode.size - len,
            true if offset < inode.size => inode
                .size
                .checked_add(len)
                .ok_or(Error::Errno(libc::EFBIG))?,
            _ => return errno(libc::EINVAL),
        };
        self.check_size(&layout, size)?;
        self.finish_cut(&inode, &layout)?;
        self.drop_setid(&inode, caller)?;
        let object = inode.object;
        self.rebuild(&inode, layout, size, "engine.shift-copied", |to| {
            self.volume
                .shifted_copy(object, to, &layout, offset, len, insert)
        })
        .map(|_| ())
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
        // Alone on the file, as ext4 holds its inode lock (writes that do not hold the
        // kernel's, asynchronous direct I/O and writeback-cache flushes, reach the daemon
        // meanwhile): a punch or zeroing drops the range from the cache, so no write may land
        // in between; an allocation that fails gives back what it took past each object's old
        // end, which would cut a write that landed there during the call.
        let _alone = lock.write();
        let punch = mode & (PUNCH | ZERO) != 0;
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
}
