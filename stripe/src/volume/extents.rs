//! A file's byte ranges as extents of its objects: which parts hold data (SEEK_DATA,
//! SEEK_HOLE, allocated blocks), and ranges moved object to object with the backing
//! filesystem's copy_file_range (XFS and btrfs share the extents instead of copying), holes
//! kept as holes.

use super::*;

/// Whence for `Volume::seek`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seek {
    Data,
    Hole,
}

impl Volume {
    /// Bytes the inode's objects take on their devices (st_blocks * 512).
    pub fn allocated_bytes(&self, object: u64) -> u64 {
        self.object_info(object).iter().map(|o| o.allocated).sum()
    }

    /// SEEK_DATA or SEEK_HOLE from `offset` in a file of `size` bytes; `None` when there is
    /// no data at or past `offset` (ENXIO). The end of the file counts as a hole, as lseek(2)
    /// says. Each device's answer, mapped back to a file offset: the first of them is the
    /// file's, since every file offset past `offset` lies on one device, at or after that
    /// device's answer.
    pub fn seek(
        &self,
        ino: u64,
        layout: &Layout,
        size: u64,
        offset: u64,
        whence: Seek,
    ) -> Result<Option<u64>> {
        if offset >= size {
            return Ok(None);
        }
        let objs = self.objects(ino);
        let mut first = match whence {
            Seek::Data => None,
            Seek::Hole => Some(size),
        };
        for slot in 0..layout.width {
            let dev = self.device_of_slot(layout, slot);
            let from = first_object_offset(layout, slot, offset);
            let found = match self.object(&objs, dev, ino, false)? {
                Some(f) => seek_file(&f, from, whence).map_err(|e| self.io_err(dev, e))?,
                // No object: all hole.
                None => (whence == Seek::Hole).then_some(from),
            };
            if let Some(at) = found.map(|o| layout.unmap(slot, o)) {
                if at < size {
                    first = Some(first.map_or(at, |f: u64| f.min(at)));
                }
            }
        }
        Ok(first.map(|f| f.max(offset)))
    }

    /// Copies `len` bytes at `from_off` of the file `from` to `to_off` of the file `to`,
    /// striped alike (stripe size and width; the first device may differ), the offsets equal
    /// modulo a stripe row: then each slot's share is one contiguous range of its object,
    /// copied to the same slot's object of `to` (on the same device when the first devices
    /// agree, so the backing filesystem can share the extents). Holes stay holes (a hole in
    /// the source punches the destination).
    #[allow(clippy::too_many_arguments)]
    pub fn copy_aligned(
        &self,
        from: u64,
        from_layout: &Layout,
        from_off: u64,
        to: u64,
        to_layout: &Layout,
        to_off: u64,
        len: u64,
    ) -> Result<()> {
        let row = from_layout.stripe_size as u64 * from_layout.width as u64;
        assert!(
            from_layout.stripe_size == to_layout.stripe_size
                && from_layout.width == to_layout.width
                && from_off % row == to_off % row,
            "copy_aligned needs alike layouts and row-aligned offsets"
        );
        let (src, dst) = (self.objects(from), self.objects(to));
        let mut done = 0u64;
        while done < len {
            let chunk = (len - done).min(1 << 30);
            for io in from_layout.plan(from_off + done, chunk as usize) {
                let src_dev = self.device_of_slot(from_layout, io.slot);
                let dst_dev = self.device_of_slot(to_layout, io.slot);
                let at = from_layout.unmap(io.slot, io.obj_offset) - from_off + to_off;
                let (slot, dst_off) = to_layout.map(at);
                debug_assert_eq!(slot, io.slot);
                let out = self.object(&dst, dst_dev, to, true)?.expect("created");
                self.watch.note(dst_dev, to, dst_off, dst_off + io.len());
                let copied = match self.object(&src, src_dev, from, false)? {
                    Some(f) => copy_extents(&f, io.obj_offset, &out, dst_off, io.len()),
                    None => punch(&out, dst_off, io.len()),
                };
                copied.map_err(|e| self.io_err(dst_dev, e))?;
            }
            done += chunk;
        }
        Ok(())
    }

    /// Makes object `to` the file `from` (of `size` bytes) with the stripe rows `[offset,
    /// offset + len)` taken out (`insert` false: FALLOC_FL_COLLAPSE_RANGE) or put in as holes
    /// (FALLOC_FL_INSERT_RANGE); both multiples of a row, so on every device it is one range
    /// of the object that goes or comes. `from` is not changed: the caller switches the file
    /// to `to` in one commit, so a crash shows the old file or the new, never a blend.
    pub fn shifted_copy(
        &self,
        from: u64,
        to: u64,
        layout: &Layout,
        offset: u64,
        len: u64,
        insert: bool,
    ) -> Result<()> {
        let s = layout.stripe_size as u64;
        let row = s * layout.width as u64;
        assert!(
            offset.is_multiple_of(row) && len.is_multiple_of(row),
            "shifts are whole rows"
        );
        let (at, shift) = (offset / row * s, len / row * s);
        let (src, dst) = (self.objects(from), self.objects(to));
        for slot in 0..layout.width {
            let dev = self.device_of_slot(layout, slot);
            let Some(f) = self.object(&src, dev, from, false)? else {
                continue;
            };
            let out = self.object(&dst, dev, to, true)?.expect("created");
            self.watch.note(dev, to, 0, u64::MAX);
            let copied = (|| {
                let have = f.metadata()?.len();
                copy_extents(&f, 0, &out, 0, at.min(have))?;
                match insert {
                    false if have > at + shift => {
                        copy_extents(&f, at + shift, &out, at, have - at - shift)
                    }
                    true if have > at => copy_extents(&f, at, &out, at + shift, have - at),
                    _ => Ok(()),
                }
            })();
            copied.map_err(|e| self.io_err(dev, e))?;
        }
        self.sync(to)
    }
}

/// The first offset in slot `slot`'s object that holds a file offset at or past `offset`.
fn first_object_offset(layout: &Layout, slot: u32, offset: u64) -> u64 {
    let s = layout.stripe_size as u64;
    let (at_slot, obj) = layout.map(offset);
    let row_start = obj / s * s;
    match slot.cmp(&at_slot) {
        std::cmp::Ordering::Equal => obj,
        // Later in this row.
        std::cmp::Ordering::Greater => row_start,
        // Its stripe in this row is behind `offset`: the next row's.
        std::cmp::Ordering::Less => row_start + s,
    }
}

/// lseek SEEK_DATA / SEEK_HOLE on one object file; `None` for ENXIO (no data past `from`,
/// or `from` past its end, which is a hole: then `from` itself for SEEK_HOLE).
pub(super) fn seek_file(f: &File, from: u64, whence: Seek) -> io::Result<Option<u64>> {
    let how = match whence {
        Seek::Data => libc::SEEK_DATA,
        Seek::Hole => libc::SEEK_HOLE,
    };
    // SAFETY: plain syscall on an owned descriptor.
    let r = unsafe { libc::lseek(f.as_raw_fd(), from as libc::off_t, how) };
    if r >= 0 {
        return Ok(Some(r as u64));
    }
    let e = io::Error::last_os_error();
    match (e.raw_os_error(), whence) {
        (Some(libc::ENXIO), Seek::Data) => Ok(None),
        (Some(libc::ENXIO), Seek::Hole) => Ok(Some(from)),
        _ => Err(e),
    }
}

/// Copies `[src_off, src_off + len)` of one object file to `dst_off` of another: the data
/// extents with copy_file_range, the holes punched, so a sparse file stays sparse.
fn copy_extents(src: &File, src_off: u64, dst: &File, dst_off: u64, len: u64) -> io::Result<()> {
    let end = src_off + len;
    let mut pos = src_off;
    while pos < end {
        let data = seek_file(src, pos, Seek::Data)?.unwrap_or(end).min(end);
        if data > pos {
            punch(dst, dst_off + (pos - src_off), data - pos)?;
        }
        if data >= end {
            break;
        }
        let hole = seek_file(src, data, Seek::Hole)?.unwrap_or(end).min(end);
        copy_bytes(src, data, dst, dst_off + (data - src_off), hole - data)?;
        pos = hole;
    }
    Ok(())
}

/// copy_file_range of a whole range (it may copy less per call), with read and write where
/// the filesystem cannot.
fn copy_bytes(src: &File, mut from: u64, dst: &File, mut to: u64, mut len: u64) -> io::Result<()> {
    while len > 0 {
        let (mut f, mut t) = (from as libc::loff_t, to as libc::loff_t);
        // SAFETY: plain syscall on owned descriptors with offsets we own.
        let n = unsafe {
            libc::copy_file_range(
                src.as_raw_fd(),
                &mut f,
                dst.as_raw_fd(),
                &mut t,
                len.min(1 << 30) as usize,
                0,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EXDEV | libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL) => {
                    copy_by_reading(src, from, dst, to, len)
                }
                _ => Err(e),
            };
        }
        if n == 0 {
            // The source ends here: the rest reads as zeros.
            return punch(dst, to, len);
        }
        (from, to, len) = (from + n as u64, to + n as u64, len - n as u64);
    }
    Ok(())
}

fn copy_by_reading(src: &File, from: u64, dst: &File, to: u64, len: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; (len.min(1 << 20)) as usize];
    let mut done = 0u64;
    while done < len {
        let n = buf.len().min((len - done) as usize);
        let got = src.read_at(&mut buf[..n], from + done)?;
        buf[got..n].fill(0);
        dst.write_all_at(&buf[..n], to + done)?;
        done += n as u64;
    }
    Ok(())
}

/// Makes `[offset, offset + len)` of an object a hole (its length unchanged).
pub(super) fn punch(f: &File, offset: u64, len: u64) -> io::Result<()> {
    if len == 0 || offset >= f.metadata()?.len() {
        return Ok(());
    }
    // SAFETY: plain syscall on an owned descriptor.
    let r = unsafe {
        libc::fallocate(
            f.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            offset as libc::off_t,
            len as libc::off_t,
        )
    };
    match r {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_object_offset_past_a_file_offset_holds_a_later_file_offset() {
        for (stripe, width) in [(4096u32, 1u32), (4096, 3), (65536, 4)] {
            let layout = Layout::new(stripe, width, 0);
            for offset in (0..(stripe as u64 * width as u64 * 3)).step_by(1000) {
                for slot in 0..width {
                    let o = first_object_offset(&layout, slot, offset);
                    let at = layout.unmap(slot, o);
                    assert!(at >= offset, "slot {slot} offset {offset}: {at}");
                    // And nothing of this slot between `offset` and `at`.
                    if o > 0 && o.is_multiple_of(stripe as u64) {
                        assert!(layout.unmap(slot, o - 1) < offset);
                    }
                }
            }
        }
    }
}
