//! Buffers for device I/O: page-aligned (O_DIRECT wants it) and pooled, so a large request
//! neither faults in fresh pages nor is zeroed before the devices overwrite it.

use parking_lot::Mutex;
use std::alloc::Layout as AllocLayout;
use std::ptr::NonNull;

const ALIGN: usize = 4096;
/// Pooled size classes: 4 KiB << 0..=CLASSES-1, up to 1 MiB (one FUSE request).
const CLASSES: usize = 9;
/// Free buffers kept per class.
const KEEP: usize = 64;

struct Pool {
    free: [Mutex<Vec<NonNull<u8>>>; CLASSES],
}

// SAFETY: the pool holds owned allocations that no one else references.
unsafe impl Send for Pool {}
unsafe impl Sync for Pool {}

static POOL: Pool = Pool {
    free: [const { Mutex::new(Vec::new()) }; CLASSES],
};

/// Free buffers each thread keeps per small class before the shared pool: a small request's
/// buffer is mostly taken and given back on one thread, which then touches no lock another
/// CPU takes too (the shared pool's lock went from CPU to CPU on every request at RND4K Q32).
/// Small classes only (4 to 16 KiB, at most 112 KiB a thread): many threads may keep some.
const KEEP_LOCAL: usize = 4;
const LOCAL_CLASSES: usize = 3;

struct Local([Vec<NonNull<u8>>; LOCAL_CLASSES]);

impl Drop for Local {
    fn drop(&mut self) {
        for (c, list) in self.0.iter_mut().enumerate() {
            for ptr in list.drain(..) {
                to_shared_pool(c, ptr);
            }
        }
    }
}

thread_local! {
    static LOCAL: std::cell::RefCell<Local> =
        const { std::cell::RefCell::new(Local([const { Vec::new() }; LOCAL_CLASSES])) };
}

/// A free buffer of class `c`: this thread's, else the shared pool's.
fn take_free(c: usize) -> Option<NonNull<u8>> {
    let local = if c < LOCAL_CLASSES {
        LOCAL.try_with(|l| l.borrow_mut().0[c].pop()).ok().flatten()
    } else {
        None
    };
    local.or_else(|| POOL.free[c].lock().pop())
}

/// Keeps the free buffer `ptr` of class `c`: with this thread, else in the shared pool, else
/// gives it back to the allocator.
fn keep_free(c: usize, ptr: NonNull<u8>) {
    if c >= LOCAL_CLASSES {
        return to_shared_pool(c, ptr);
    }
    let kept = LOCAL.try_with(|l| {
        let mut l = l.borrow_mut();
        let list = &mut l.0[c];
        if list.len() < KEEP_LOCAL {
            list.push(ptr);
            true
        } else {
            false
        }
    });
    if kept != Ok(true) {
        to_shared_pool(c, ptr);
    }
}

fn to_shared_pool(c: usize, ptr: NonNull<u8>) {
    let mut free = POOL.free[c].lock();
    if free.len() < KEEP {
        free.push(ptr);
        return;
    }
    drop(free);
    // SAFETY: a pooled buffer of class `c` was allocated with this layout.
    unsafe { std::alloc::dealloc(ptr.as_ptr(), alloc_layout(ALIGN << c)) }
}

fn class_of(len: usize) -> Option<usize> {
    let c = len.max(ALIGN).next_power_of_two().trailing_zeros() as usize - 12;
    (c < CLASSES).then_some(c)
}

fn alloc_layout(cap: usize) -> AllocLayout {
    AllocLayout::from_size_align(cap, ALIGN).expect("buffer layout")
}

/// A page-aligned byte buffer of a given length.
pub struct IoBuf {
    ptr: NonNull<u8>,
    len: usize,
    cap: usize,
}

// SAFETY: the buffer is plain memory owned by this value.
unsafe impl Send for IoBuf {}
unsafe impl Sync for IoBuf {}

impl IoBuf {
    /// A buffer whose bytes are whatever it last held (another file's data, maybe): only for
    /// reads that overwrite every byte, as the volume's do (holes and short objects zeroed).
    pub fn stale(len: usize) -> IoBuf {
        let class = class_of(len);
        let cap = match class {
            Some(c) => ALIGN << c,
            None => len.next_multiple_of(ALIGN),
        };
        if let Some(ptr) = class.and_then(take_free) {
            return IoBuf { ptr, len, cap };
        }
        // Fresh memory is zeroed once, so no byte is ever uninitialised.
        // SAFETY: non-zero size; freed in Drop (or pooled) with the same layout.
        let ptr = unsafe { std::alloc::alloc_zeroed(alloc_layout(cap)) };
        let ptr =
            NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(alloc_layout(cap)));
        IoBuf { ptr, len, cap }
    }

    pub fn zeroed(len: usize) -> IoBuf {
        let mut b = IoBuf::stale(len);
        b.fill(0);
        b
    }

    pub fn copy_of(data: &[u8]) -> IoBuf {
        let mut b = IoBuf::stale(data.len());
        b.copy_from_slice(data);
        b
    }
}

impl std::ops::Deref for IoBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid and initialised for cap >= len bytes.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for IoBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and exclusively ours.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

/// Memory a read fills in place and hands back with its completion: a pooled buffer, or a
/// transport's own (FUSE over io_uring: the ring entry the kernel reads the reply from).
///
/// # Safety
/// `target` returns the same memory every time, and moving the value does not move that
/// memory (it lives on the heap or elsewhere, never inline): devices fill it after the value
/// moved into the completion.
pub unsafe trait ReadTarget: Send + 'static {
    fn target(&mut self) -> &mut [u8];
}

// SAFETY: the bytes are a heap allocation this value owns.
unsafe impl ReadTarget for IoBuf {
    fn target(&mut self) -> &mut [u8] {
        self
    }
}

/// Bytes a write takes where they lie: a pooled buffer, or the caller's own (the buffer a
/// request arrived in), with no copy first.
///
/// # Safety
/// `source` returns the same memory every time, unchanged until the value is dropped, and
/// moving the value does not move that memory: devices read it after the value moved into
/// the completion.
pub unsafe trait WriteSource: Send + 'static {
    fn source(&self) -> &[u8];
}

// SAFETY: the bytes are a heap allocation this value owns.
unsafe impl WriteSource for IoBuf {
    fn source(&self) -> &[u8] {
        self
    }
}

// SAFETY: the box's contents keep the promise; the box itself is not the memory.
unsafe impl<T: WriteSource + ?Sized> WriteSource for Box<T> {
    fn source(&self) -> &[u8] {
        (**self).source()
    }
}

impl Drop for IoBuf {
    fn drop(&mut self) {
        if let Some(c) = class_of(self.cap).filter(|&c| ALIGN << c == self.cap) {
            return keep_free(c, self.ptr);
        }
        // SAFETY: allocated in `stale` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), alloc_layout(self.cap)) }
    }
}

/// Direct I/O wants offsets, lengths and memory in whole 4 KiB blocks.
pub(crate) fn direct_aligned(offset: u64, len: u64) -> bool {
    offset.is_multiple_of(ALIGN as u64) && len.is_multiple_of(ALIGN as u64) && len > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_sized_and_reused() {
        for len in [1, 4096, 5000, 1 << 20, (1 << 20) + 1, 3 << 20] {
            let b = IoBuf::zeroed(len);
            assert_eq!(b.len(), len);
            assert_eq!(b.as_ptr() as usize % ALIGN, 0);
            assert!(b.iter().all(|&x| x == 0));
        }
        let b = IoBuf::copy_of(b"hello");
        assert_eq!(&b[..], b"hello");
    }
}
