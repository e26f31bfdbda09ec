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

/// 4 KiB buffers a thread keeps before the shared pool, if it takes them too: a RND4K
/// request's buffer is taken and given back on one thread where the devices are in memory,
/// which then touches no lock another CPU takes (the shared pool's lock went from CPU to CPU
/// on every request at Q32). A thread that only gives buffers back (an engine's completions,
/// over disks) keeps none: it would never use them. At most 16 KiB a thread.
const KEEP_LOCAL: usize = 4;

#[derive(Default)]
struct Local {
    /// This thread took a 4 KiB buffer.
    takes: bool,
    free: Vec<NonNull<u8>>,
}

impl Drop for Local {
    fn drop(&mut self) {
        for ptr in self.free.drain(..) {
            to_shared_pool(0, ptr);
        }
    }
}

thread_local! {
    static LOCAL: std::cell::RefCell<Local> = std::cell::RefCell::new(Local::default());
}

/// A free buffer of class `c`: this thread's, else the shared pool's.
fn take_free(c: usize) -> Option<NonNull<u8>> {
    let local = if c == 0 {
        LOCAL
            .try_with(|l| {
                let mut l = l.borrow_mut();
                l.takes = true;
                l.free.pop()
            })
            .ok()
            .flatten()
    } else {
        None
    };
    local.or_else(|| POOL.free[c].lock().pop())
}

/// Keeps the free buffer `ptr` of class `c`: with this thread if it takes such buffers too,
/// else in the shared pool, else gives it back to the allocator.
fn keep_free(c: usize, ptr: NonNull<u8>) {
    let kept = c == 0
        && LOCAL
            .try_with(|l| {
                let mut l = l.borrow_mut();
                let keep = l.takes && l.free.len() < KEEP_LOCAL;
                if keep {
                    l.free.push(ptr);
                }
                keep
            })
            .unwrap_or(false);
    if !kept {
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
    fn a_thread_keeps_4k_buffers_only_if_it_takes_them() {
        let made = IoBuf::stale(4096);
        let kept = std::thread::spawn(move || {
            drop(made);
            LOCAL.with(|l| l.borrow().free.len())
        })
        .join()
        .unwrap();
        assert_eq!(kept, 0, "a thread that only gives buffers back keeps none");
        let (first, then) = std::thread::spawn(|| {
            let bufs: Vec<IoBuf> = (0..KEEP_LOCAL + 2).map(|_| IoBuf::stale(4096)).collect();
            drop(bufs);
            let first = LOCAL.with(|l| l.borrow().free.len());
            let again = IoBuf::stale(4096);
            let then = LOCAL.with(|l| l.borrow().free.len());
            drop(again);
            (first, then)
        })
        .join()
        .unwrap();
        assert_eq!((first, then), (KEEP_LOCAL, KEEP_LOCAL - 1));
    }

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
