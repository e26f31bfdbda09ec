//! The buffers /dev/fuse requests are read into, and a WRITE's data kept in place.
//!
//! A request buffer is page-aligned and read at an offset chosen so that a WRITE's data (after
//! its two headers) starts on a page: devices opened with O_DIRECT can then take it as it is.
//! A filesystem that keeps a WRITE's data past the call ([`crate::Request::write_payload`])
//! shares the buffer; the reading thread then reads the next request into another one.
//! Buffers come back to a small pool, so steady traffic allocates (and faults in) nothing.

use crate::abi::{fuse_in_header, fuse_write_in};
use parking_lot::Mutex;
use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::Arc;

const PAGE: usize = 4096;
/// Where a WRITE's data starts in the message.
const WRITE_HEADERS: usize = size_of::<fuse_in_header>() + size_of::<fuse_write_in>();
/// Buffers kept for reuse (about 1 MiB each): enough for Q32 of 1 MiB writes without
/// allocating (and faulting in) a fresh one per request; a larger burst frees its extra.
const KEEP: usize = 32;

/// An idle buffer: its memory and size.
struct Idle(NonNull<u8>, usize);

// SAFETY: memory no one else points to.
unsafe impl Send for Idle {}

static POOL: Mutex<Vec<Idle>> = Mutex::new(Vec::new());

/// Plain memory this value owns: a request buffer.
pub(crate) struct MsgBuf {
    ptr: NonNull<u8>,
    cap: usize,
}

// SAFETY: plain heap memory; shared only read-only (see `Payload`).
unsafe impl Send for MsgBuf {}
unsafe impl Sync for MsgBuf {}

fn layout(cap: usize) -> Layout {
    Layout::from_size_align(cap, PAGE).expect("a request buffer's layout")
}

impl MsgBuf {
    /// A buffer that takes a message of up to `size` bytes at [`MsgBuf::start`].
    pub fn new(size: usize) -> MsgBuf {
        let cap = (PAGE + size).next_multiple_of(PAGE);
        let reused = {
            let mut pool = POOL.lock();
            let at = pool.iter().position(|idle| idle.1 == cap);
            at.map(|i| pool.swap_remove(i).0)
        };
        let ptr = reused.unwrap_or_else(|| {
            // Zeroed once, so no byte is ever uninitialised.
            // SAFETY: non-zero size; freed (or pooled) in Drop with the same layout.
            let p = unsafe { std::alloc::alloc_zeroed(layout(cap)) };
            NonNull::new(p).unwrap_or_else(|| std::alloc::handle_alloc_error(layout(cap)))
        });
        MsgBuf { ptr, cap }
    }

    /// Where messages are read: a WRITE's data then starts on a page.
    const fn start() -> usize {
        PAGE - WRITE_HEADERS
    }

    /// The memory a message is read into.
    pub fn space(&mut self) -> &mut [u8] {
        // SAFETY: [start, cap) lies in the allocation, which `&mut self` holds alone.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.ptr.as_ptr().add(Self::start()),
                self.cap - Self::start(),
            )
        }
    }

    /// The first `n` bytes read into [`MsgBuf::space`].
    pub fn message(&self, n: usize) -> &[u8] {
        assert!(n <= self.cap - Self::start());
        // SAFETY: within the allocation; initialised (zeroed when made).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(Self::start()), n) }
    }

    fn contains(&self, bytes: &[u8]) -> Option<usize> {
        let (base, p) = (self.ptr.as_ptr() as usize, bytes.as_ptr() as usize);
        (p >= base && p + bytes.len() <= base + self.cap).then(|| p - base)
    }
}

impl Drop for MsgBuf {
    fn drop(&mut self) {
        let mut pool = POOL.lock();
        if pool.len() < KEEP {
            pool.push(Idle(self.ptr, self.cap));
            return;
        }
        drop(pool);
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout(self.cap)) }
    }
}

/// A WRITE's data, kept where the request was read: the buffer is not reused while this
/// lives, and nothing writes to it.
pub struct Payload {
    buf: Arc<MsgBuf>,
    at: usize,
    len: usize,
}

impl Payload {
    /// `data`, a slice of `buf`'s message, kept in place.
    pub(crate) fn of(buf: &Arc<MsgBuf>, data: &[u8]) -> Option<Payload> {
        let at = buf.contains(data)?;
        Some(Payload {
            buf: buf.clone(),
            at,
            len: data.len(),
        })
    }
}

impl std::ops::Deref for Payload {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: [at, at + len) lies in the buffer (checked in `of`), which the reading
        // thread no longer writes to while this shares it.
        unsafe { std::slice::from_raw_parts(self.buf.ptr.as_ptr().add(self.at), self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_s_data_starts_on_a_page_and_a_kept_payload_is_left_alone() {
        let mut buf = Arc::new(MsgBuf::new(1 << 20));
        let space = Arc::get_mut(&mut buf).unwrap().space();
        assert_eq!((space.as_ptr() as usize + WRITE_HEADERS) % PAGE, 0);
        space[WRITE_HEADERS..WRITE_HEADERS + 5].copy_from_slice(b"hello");
        let data = &buf.message(WRITE_HEADERS + 5)[WRITE_HEADERS..];
        let kept = Payload::of(&buf, data).unwrap();
        assert_eq!(&kept[..], b"hello");
        assert_eq!(kept.as_ptr() as usize % PAGE, 0);
        // Shared: the reader cannot write into it again.
        assert!(Arc::get_mut(&mut buf).is_none());
        assert!(Payload::of(&buf, b"elsewhere").is_none());
        drop(kept);
        assert!(Arc::get_mut(&mut buf).is_some());
    }
}
