//! Vectored positional I/O that finishes the whole transfer (or fails).

use std::io;
use std::os::unix::io::RawFd;

/// Linux's IOV_MAX.
const IOV_MAX: usize = 1024;

/// Reads `bufs.len()` buffers from `offset` on. Bytes past the end of the file are left as they
/// are (callers pass zeroed buffers, so holes and tails read as zeros).
pub(crate) fn preadv_full(fd: RawFd, bufs: &mut [&mut [u8]], mut offset: u64) -> io::Result<()> {
    let mut idx = 0;
    let mut skip = 0usize;
    while idx < bufs.len() {
        let iovs: Vec<libc::iovec> = bufs[idx..]
            .iter_mut()
            .take(IOV_MAX)
            .enumerate()
            .map(|(i, b)| {
                let start = if i == 0 { skip } else { 0 };
                libc::iovec {
                    iov_base: b[start..].as_mut_ptr().cast(),
                    iov_len: b.len() - start,
                }
            })
            .collect();
        // SAFETY: every iovec points into a live, exclusively borrowed buffer.
        let n = unsafe { libc::preadv(fd, iovs.as_ptr(), iovs.len() as i32, offset as i64) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Ok(()); // end of file: the rest stays zero
        }
        offset += n as u64;
        advance(
            bufs.iter().map(|b| b.len()),
            &mut idx,
            &mut skip,
            n as usize,
        );
    }
    Ok(())
}

/// Writes all of `bufs` at `offset`.
pub(crate) fn pwritev_full(fd: RawFd, bufs: &[&[u8]], mut offset: u64) -> io::Result<()> {
    let mut idx = 0;
    let mut skip = 0usize;
    while idx < bufs.len() {
        let iovs: Vec<libc::iovec> = bufs[idx..]
            .iter()
            .take(IOV_MAX)
            .enumerate()
            .map(|(i, b)| {
                let start = if i == 0 { skip } else { 0 };
                libc::iovec {
                    iov_base: b[start..].as_ptr() as *mut libc::c_void,
                    iov_len: b.len() - start,
                }
            })
            .collect();
        // SAFETY: every iovec points into a live buffer; pwritev only reads them.
        let n = unsafe { libc::pwritev(fd, iovs.as_ptr(), iovs.len() as i32, offset as i64) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        offset += n as u64;
        advance(
            bufs.iter().map(|b| b.len()),
            &mut idx,
            &mut skip,
            n as usize,
        );
    }
    Ok(())
}

/// Moves the (buffer index, offset in it) cursor `n` bytes on, skipping empty buffers.
fn advance(lens: impl Iterator<Item = usize>, idx: &mut usize, skip: &mut usize, mut n: usize) {
    for len in lens.skip(*idx) {
        let left = len - *skip;
        if n < left {
            *skip += n;
            return;
        }
        n -= left;
        *idx += 1;
        *skip = 0;
    }
}

/// A zeroed buffer aligned for O_DIRECT.
pub(crate) struct AlignedBuf {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

// SAFETY: the buffer is plain memory owned by this value.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    pub(crate) fn new(len: usize) -> AlignedBuf {
        let layout = std::alloc::Layout::from_size_align(len.max(4096), 4096).expect("layout");
        // SAFETY: non-zero size; freed in Drop with the same layout.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        AlignedBuf { ptr, layout }
    }

    pub(crate) fn as_mut_slice(&mut self, len: usize) -> &mut [u8] {
        assert!(len <= self.layout.size());
        // SAFETY: ptr is valid for layout.size() bytes and exclusively ours.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

/// Direct I/O wants offsets and lengths in whole 4 KiB blocks.
pub(crate) fn direct_aligned(offset: u64, len: u64) -> bool {
    offset.is_multiple_of(4096) && len.is_multiple_of(4096) && len > 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::io::AsRawFd;

    #[test]
    fn vectored_round_trip_with_tail_past_eof() {
        let f = tempfile::tempfile().unwrap();
        let a = vec![1u8; 5000];
        let b = vec![2u8; 3];
        let c = vec![3u8; 70000];
        pwritev_full(f.as_raw_fd(), &[&a, &b, &c], 100).unwrap();
        let mut x = vec![9u8; 100];
        let mut y = vec![0u8; 75003];
        let mut z = vec![0u8; 50];
        preadv_full(f.as_raw_fd(), &mut [&mut x, &mut y, &mut z], 0).unwrap();
        assert!(x.iter().all(|&v| v == 0), "hole reads as zero");
        assert!(y[..5000].iter().all(|&v| v == 1));
        assert_eq!(&y[5000..5003], &[2, 2, 2]);
        assert!(y[5003..].iter().all(|&v| v == 3));
        assert!(z.iter().all(|&v| v == 0), "past EOF stays zero");
    }
}
