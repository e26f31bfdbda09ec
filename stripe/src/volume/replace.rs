//! A device's objects copied, one at a time, to the device taking its place, while the volume
//! stays online (`stripefs device replace`). Every change to an object on the old device
//! meanwhile is noted, by object and range, so the caller copies it again; the caller makes
//! the last pass with the file's writers held off, then moves the file to its ring's twin
//! (see `Rings::replacing`).
//!
//! A failing old device is read in chunks; a chunk that fails is retried, then read block by
//! block, and the blocks that still fail are left as holes on the new device and reported
//! (object ranges: the caller names the files and their ranges).

use super::extents::{punch, seek_file};
use super::*;
use smallvec::smallvec;
use std::os::unix::fs::FileExt;

/// What is copied and retried at once.
const CHUNK: u64 = 1 << 20;
/// The smallest range told apart as lost.
const BLOCK: u64 = 4096;
/// Reads of a range that failed, before it is given up as lost.
const ATTEMPTS: u32 = 3;

/// Changes to the one object being copied off a device, noted while it is copied.
#[derive(Default)]
pub(super) struct Watch {
    /// The device watched, plus one; 0: none (the fast path of every write looks here).
    device: AtomicUsize,
    state: Mutex<Watched>,
}

#[derive(Default)]
struct Watched {
    object: u64,
    /// The object ranges changed since the caller last took them.
    changed: Vec<(u64, u64)>,
    /// Writes noted and not yet done.
    writing: usize,
}

impl Watch {
    /// Notes a change of `[start, end)` of `object` on `device`, before it is made (so a
    /// change in flight is always in the list the caller takes next). True when it was
    /// noted as a write in flight: `write_done` must follow.
    pub(super) fn note(&self, device: usize, object: u64, start: u64, end: u64) -> bool {
        self.noted(device, object, start, end, false)
    }

    pub(super) fn note_write(&self, device: usize, object: u64, start: u64, end: u64) -> bool {
        self.noted(device, object, start, end, true)
    }

    fn noted(&self, device: usize, object: u64, start: u64, end: u64, write: bool) -> bool {
        if self.device.load(Relaxed) != device + 1 {
            return false;
        }
        let mut w = self.state.lock();
        if w.object != object {
            return false;
        }
        w.changed.push((start, end));
        w.writing += write as usize;
        write
    }

    pub(super) fn write_done(&self) {
        let mut w = self.state.lock();
        w.writing = w.writing.saturating_sub(1);
    }
}

/// What one copy did: bytes read, and the object ranges the old device could not give.
#[derive(Debug, Default)]
pub struct Copied {
    pub bytes: u64,
    pub lost: Vec<(u64, u64)>,
}

impl Volume {
    /// Notes every change to `object` on `device` from now on (`None`: stops).
    pub fn watch_changes(&self, target: Option<(usize, u64)>) {
        let mut w = self.watch.state.lock();
        *w = Watched {
            object: target.map_or(0, |t| t.1),
            ..Watched::default()
        };
        self.watch
            .device
            .store(target.map_or(0, |t| t.0 + 1), Relaxed);
    }

    /// The ranges of the watched object changed since the last call (merged, in order).
    pub fn take_changes(&self) -> Vec<(u64, u64)> {
        merged(std::mem::take(&mut self.watch.state.lock().changed))
    }

    /// Waits until every write to the watched object noted so far is done (on the device).
    pub fn wait_for_noted_writes(&self) {
        while self.watch.state.lock().writing > 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Copies `object` from device `from` to device `to`: all of it into a fresh object
    /// (`ranges` None), or those ranges of it. `expected` is the object's length by its file's
    /// size, for a source that cannot be opened at all (all of it lost then). `pace` is told
    /// each chunk's bytes first, and may wait; when it says no, the copy stops (EINTR).
    pub fn copy_object(
        &self,
        object: u64,
        from: usize,
        to: usize,
        ranges: Option<&[(u64, u64)]>,
        expected: u64,
        pace: &mut dyn FnMut(u64) -> bool,
    ) -> Result<Copied> {
        let mut copied = Copied::default();
        let Some(src) = self.open_source(object, from)? else {
            if ranges.is_none() {
                self.drop_object(to, object)?;
            }
            return Ok(copied);
        };
        let Some(src) = src else {
            copied.lost.push((0, expected));
            let out = self.open_target(object, to, ranges.is_none())?;
            out.set_len(expected).map_err(|e| self.io_err(to, e))?;
            return Ok(copied);
        };
        let out = self.open_target(object, to, ranges.is_none())?;
        let len = src.metadata().map_err(|e| self.io_err(from, e))?.len();
        let whole = [(0, len)];
        let mut buf = vec![0u8; CHUNK as usize];
        for &(start, end) in ranges.unwrap_or(&whole) {
            for (a, b) in data_extents(&src, start, end.min(len)) {
                let mut pos = a;
                while pos < b {
                    let n = (b - pos).min(CHUNK);
                    if !pace(n) {
                        return Err(self.io_err(from, io::Error::from_raw_os_error(libc::EINTR)));
                    }
                    let chunk = &mut buf[..n as usize];
                    self.copy_chunk(&src, from, &out, to, pos, chunk, &mut copied)?;
                    copied.bytes += n;
                    pos += n;
                }
            }
            // A range that had data before and has none now (punched, or cut and grown
            // again) is a hole on the new device too.
            if ranges.is_some() {
                for (a, b) in holes_between(
                    &data_extents(&src, start, end.min(len)),
                    start,
                    end.min(len),
                ) {
                    punch(&out, a, b - a).map_err(|e| self.io_err(to, e))?;
                }
            }
        }
        Ok(copied)
    }

    /// Makes the copy of `object` on `to` as long as the original on `from` (or gone, when
    /// the original is), and durable: the last step before the file moves to it.
    pub fn settle_copy(&self, object: u64, from: usize, to: usize, expected: u64) -> Result<()> {
        let len = match self.open_source(object, from)? {
            None => return self.drop_object(to, object),
            Some(None) => expected,
            Some(Some(src)) => src.metadata().map_err(|e| self.io_err(from, e))?.len(),
        };
        let out = self.open_target(object, to, false)?;
        out.set_len(len).map_err(|e| self.io_err(to, e))?;
        out.sync_data().map_err(|e| self.io_err(to, e))
    }

    /// The object on the old device: `None` when there is none (a hole), `Some(None)` when
    /// the device cannot give it at all (failed).
    fn open_source(&self, object: u64, from: usize) -> Result<Option<Option<File>>> {
        let dev = self.set.dev(from);
        let (Some(dir), false) = (dev.objects.as_ref(), self.set.failed(from)) else {
            return Ok(Some(None));
        };
        match open_object(dir, &object_rel(object), libc::O_RDONLY) {
            Ok(f) => Ok(Some(Some(f))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.check_devices();
                Ok(if self.set.failed(from) {
                    Some(None)
                } else {
                    None
                })
            }
            Err(e) => {
                log::error!("device {from}: object {object} cannot be opened: {e}");
                Ok(Some(None))
            }
        }
    }

    fn open_target(&self, object: u64, to: usize, fresh: bool) -> Result<File> {
        let Some(dir) = self.set.dev(to).objects.as_ref() else {
            return Err(self.io_err(to, io::Error::from_raw_os_error(libc::EIO)));
        };
        let trunc = if fresh { libc::O_TRUNC } else { 0 };
        open_object(
            dir,
            &object_rel(object),
            libc::O_RDWR | libc::O_CREAT | trunc,
        )
        .map_err(|e| self.io_err(to, e))
    }

    fn drop_object(&self, device: usize, object: u64) -> Result<()> {
        match std::fs::remove_file(self.object_path(device, object)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(self.io_err(device, e)),
            _ => Ok(()),
        }
    }

    /// One chunk: read (retried), written; what cannot be read is narrowed down to blocks,
    /// which are left as holes and noted lost.
    #[allow(clippy::too_many_arguments)]
    fn copy_chunk(
        &self,
        src: &File,
        from: usize,
        out: &File,
        to: usize,
        at: u64,
        buf: &mut [u8],
        copied: &mut Copied,
    ) -> Result<()> {
        let write = |at: u64, data: &[u8]| -> Result<()> {
            let io = SlotIo {
                slot: 0,
                obj_offset: at,
                segments: smallvec![(0, data.len())],
            };
            self.set
                .note_error(to, true, self.set.admit(to, true, &io))?;
            let r = out.write_all_at(data, at).map_err(|e| self.io_err(to, e));
            self.set.note_error(to, true, r)
        };
        if self.read_retrying(src, from, at, buf) {
            return write(at, buf);
        }
        for (i, block) in buf.chunks_mut(BLOCK as usize).enumerate() {
            let pos = at + i as u64 * BLOCK;
            if self.read_retrying(src, from, pos, block) {
                write(pos, block)?;
                continue;
            }
            punch(out, pos, block.len() as u64).map_err(|e| self.io_err(to, e))?;
            match copied.lost.last_mut() {
                Some(last) if last.1 == pos => last.1 += block.len() as u64,
                _ => copied.lost.push((pos, pos + block.len() as u64)),
            }
        }
        Ok(())
    }

    /// Reads `buf` at `at` from the old device (zeros past its end), trying again a few
    /// times, a little later each; false when every attempt failed.
    fn read_retrying(&self, src: &File, from: usize, at: u64, buf: &mut [u8]) -> bool {
        let io = SlotIo {
            slot: 0,
            obj_offset: at,
            segments: smallvec![(0, buf.len())],
        };
        for attempt in 0..ATTEMPTS {
            let r = self
                .set
                .admit(from, false, &io)
                .and_then(|()| read_full(src, at, buf).map_err(|e| self.io_err(from, e)));
            if self.set.note_error(from, false, r).is_ok() {
                return true;
            }
            if self.set.failed(from) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2 << attempt));
        }
        false
    }
}

/// `ranges` sorted and merged where they touch.
pub fn merged(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (a, b) in ranges {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// Fills `buf` from `at`, zeros past the end of the file.
fn read_full(f: &File, at: u64, buf: &mut [u8]) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], at + done as u64) {
            Ok(0) => {
                buf[done..].fill(0);
                break;
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The data ranges of `f` within `[start, end)` (all of it where the filesystem cannot say).
fn data_extents(f: &File, start: u64, end: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut pos = start;
    while pos < end {
        let data = match seek_file(f, pos, Seek::Data) {
            Ok(Some(d)) if d < end => d,
            Ok(_) => break,
            Err(_) => {
                out.push((pos, end));
                break;
            }
        };
        let hole = seek_file(f, data, Seek::Hole)
            .ok()
            .flatten()
            .unwrap_or(end)
            .min(end);
        out.push((data, hole));
        pos = hole;
    }
    out
}

/// The gaps between `extents` (in order) within `[start, end)`.
fn holes_between(extents: &[(u64, u64)], start: u64, end: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut pos = start;
    for &(a, b) in extents {
        if a > pos {
            out.push((pos, a));
        }
        pos = pos.max(b);
    }
    if pos < end {
        out.push((pos, end));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holes_between_extents() {
        assert_eq!(
            holes_between(&[(10, 20), (30, 40)], 0, 50),
            [(0, 10), (20, 30), (40, 50)]
        );
        assert_eq!(holes_between(&[], 5, 9), [(5, 9)]);
        assert!(holes_between(&[(0, 9)], 0, 9).is_empty());
    }
}
