//! The I/O engine: device reads and writes are submitted and completed, never waited for on
//! the thread that asked. A request's pieces (one vectored I/O per device) go out together and
//! each piece's completion runs its callback; short transfers are resubmitted, never returned.
//!
//! Two engines with one contract: `uring` (io_uring, one ring for the volume, completions reaped
//! inline by the submitter when the kernel finished at once, else by one completion thread) and
//! `threads` (a fixed pool of I/O threads per device, for kernels or sandboxes without
//! io_uring). Emulated devices hold a completion back on a timer, never a thread.

// Ops are boxed on purpose: io_uring carries each op's address until its completion.
#![allow(clippy::vec_box, clippy::boxed_local)]

pub(crate) mod lent;
mod own_ring;
mod threads;
mod timer;
mod uring;

use std::fs::File;
use std::io;
use std::os::unix::io::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Instant;

/// Which engine runs device I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineKind {
    Uring,
    Threads,
}

impl EngineKind {
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Uring => "uring",
            EngineKind::Threads => "threads",
        }
    }
}

/// What a mount asks for: one engine, or io_uring where the kernel allows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineChoice {
    Auto,
    Uring,
    Threads,
}

thread_local! {
    /// This thread takes many requests at once (a FUSE-over-io_uring ring thread) and others
    /// wait for it now: I/O it submits does not run on it, even with the engine idle, or the
    /// requests queued behind the one it waits for would reach the devices one at a time.
    static SERVES_MANY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The engine's own threads (completions, I/O workers, the timer): a callback they run
    /// may submit more I/O, and must not wait for room that only they can make.
    static ENGINE_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the calling thread as one of the engine's own (see `ENGINE_THREAD`).
pub(crate) fn this_is_an_engine_thread() {
    ENGINE_THREAD.with(|s| s.set(true));
}

/// Tells whether the calling thread has other requests waiting for it (see `SERVES_MANY`):
/// with none, I/O it submits to an idle engine may run on it, as for any lone request.
pub fn other_requests_wait_for_this_thread(waiting: bool) {
    SERVES_MANY.with(|s| s.set(waiting));
}

/// May I/O submitted by this thread block it (buffered I/O of a RAM-backed device aside)?
pub(crate) fn this_thread_may_block() -> bool {
    !SERVES_MANY.with(|s| s.get())
}

/// Called once a device I/O finished (or failed for good).
pub(crate) type OnDone = Box<dyn FnOnce(io::Result<()>) + Send>;

/// One vectored device I/O in flight. The iovecs point into a buffer that its owner keeps alive
/// until `on_done` has run.
pub(crate) struct DevOp {
    pub device: usize,
    pub write: bool,
    pub fd: Arc<File>,
    /// What a short transfer's remainder uses when `fd` is O_DIRECT: its buffered twin, as
    /// the remainder no longer has the alignment.
    pub retry_fd: Option<Arc<File>>,
    pub offset: u64,
    pub iov: Vec<libc::iovec>,
    /// Run on the submitting thread: buffered I/O of a RAM-backed device is a memory copy
    /// that io_uring would only hand to a kernel worker.
    pub inline: bool,
    /// An emulated device's completion time: the callback does not run before it.
    pub not_before: Option<Instant>,
    pub on_done: Option<OnDone>,
    /// The engine's count of ops in flight, which this op is part of until it finishes.
    pub counted: Option<Arc<InFlight>>,
}

// SAFETY: the iovecs point into a buffer owned by the op's callback (or by a caller that waits
// for it); nothing else touches those bytes until the op completes.
unsafe impl Send for DevOp {}

/// Where a device I/O stands after one transfer.
pub(crate) enum Step {
    /// More to transfer: submit the op again.
    Again(Box<DevOp>),
    Done(Box<DevOp>, io::Result<()>),
}

impl DevOp {
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// A copy to or from memory that nothing holds back: done on the submitting thread, by
    /// the volume before a request reaches the engine (`Volume::submit`).
    pub(crate) fn done_on_submitter(&self) -> bool {
        self.inline && self.not_before.is_none()
    }

    /// Accounts for one transfer's result: `n` bytes moved, or an error.
    pub fn progress(mut self: Box<Self>, res: io::Result<usize>) -> Step {
        let n = match res {
            Ok(n) => n,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EAGAIN)) => {
                return Step::Again(self)
            }
            Err(e) => return Step::Done(self, Err(e)),
        };
        if n == 0 {
            if self.write {
                return Step::Done(self, Err(io::Error::from_raw_os_error(libc::ENOSPC)));
            }
            // End of the object: what is left of the range is a hole.
            for v in &self.iov {
                // SAFETY: each iovec is a live, exclusively owned part of the op's buffer.
                unsafe { std::ptr::write_bytes(v.iov_base.cast::<u8>(), 0, v.iov_len) };
            }
            return Step::Done(self, Ok(()));
        }
        self.offset += n as u64;
        let mut left = n;
        let consumed = self.iov.iter().take_while(|v| {
            if left >= v.iov_len {
                left -= v.iov_len;
                true
            } else {
                false
            }
        });
        let whole = consumed.count();
        self.iov.drain(..whole);
        if let Some(first) = self.iov.first_mut() {
            // SAFETY: `left` is below this iovec's length.
            first.iov_base = unsafe { first.iov_base.cast::<u8>().add(left).cast() };
            first.iov_len -= left;
        }
        if self.iov.is_empty() {
            return Step::Done(self, Ok(()));
        }
        if let Some(buffered) = self.retry_fd.take() {
            self.fd = buffered;
        }
        Step::Again(self)
    }

    /// Runs the op's I/O once with a blocking syscall (the threads engine).
    pub fn transfer_blocking(&self) -> io::Result<usize> {
        let iov = &self.iov[..self.iov.len().min(IOV_MAX)];
        // SAFETY: the iovecs point into live buffers (see `DevOp`).
        let n = unsafe {
            if self.write {
                libc::pwritev(
                    self.raw_fd(),
                    iov.as_ptr(),
                    iov.len() as i32,
                    self.offset as i64,
                )
            } else {
                libc::preadv(
                    self.raw_fd(),
                    iov.as_ptr(),
                    iov.len() as i32,
                    self.offset as i64,
                )
            }
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
}

/// Ops in flight before submitters wait for some to finish: each holds up to a 1 MiB buffer,
/// so this bounds the daemon's memory under a flood of requests (and keeps completions well
/// within the ring's CQ). Q32 over 8 devices is 256 ops.
const MAX_IN_FLIGHT: usize = 256;

/// The ops in flight, and the submitters waiting for room.
#[derive(Default)]
pub(crate) struct InFlight {
    ops: AtomicUsize,
    waiters: AtomicUsize,
    lock: parking_lot::Mutex<()>,
    room: parking_lot::Condvar,
}

impl InFlight {
    /// Counts `n` more ops in, waiting while the engine is full (one request always gets in;
    /// the engine's own threads never wait, nor does a thread that lent its ring: both could
    /// only wait for room that they make).
    /// Returns whether nothing was in flight.
    fn enter(&self, n: usize) -> bool {
        let never_waits = ENGINE_THREAD.with(|s| s.get()) || lent::is_lent();
        loop {
            let now = self.ops.load(SeqCst);
            if now == 0 || now + n <= MAX_IN_FLIGHT || never_waits {
                if self
                    .ops
                    .compare_exchange(now, now + n, SeqCst, SeqCst)
                    .is_ok()
                {
                    return now == 0;
                }
                continue;
            }
            self.waiters.fetch_add(1, SeqCst);
            let mut g = self.lock.lock();
            // Timed: a wake-up between the load above and this wait is not lost for long.
            self.room
                .wait_for(&mut g, std::time::Duration::from_millis(5));
            drop(g);
            self.waiters.fetch_sub(1, SeqCst);
        }
    }

    fn leave(&self) {
        self.ops.fetch_sub(1, SeqCst);
        if self.waiters.load(SeqCst) > 0 {
            let _g = self.lock.lock();
            self.room.notify_all();
        }
    }
}

/// Linux's IOV_MAX: an op with more iovecs transfers in several rounds.
pub(crate) const IOV_MAX: usize = 1024;

enum Backend {
    Uring(uring::Uring),
    Threads(threads::Threads),
}

/// The volume's I/O engine.
pub(crate) struct IoEngine {
    backend: Backend,
    timer: Arc<timer::Timer>,
    in_flight: Arc<InFlight>,
    /// Answers held back on lent rings (timeouts not completed yet).
    held_on_rings: AtomicUsize,
}

impl IoEngine {
    /// Starts the engine `choice` asks for over `devices` devices; `threads_per_device` sizes
    /// the threads engine's pool.
    pub fn start(
        choice: EngineChoice,
        devices: usize,
        threads_per_device: usize,
    ) -> io::Result<IoEngine> {
        let timer = Arc::new(timer::Timer::start()?);
        let backend = match choice {
            EngineChoice::Uring => Backend::Uring(uring::Uring::start(timer.clone())?),
            EngineChoice::Threads => Backend::Threads(threads::Threads::start(
                devices,
                threads_per_device,
                timer.clone(),
            )?),
            EngineChoice::Auto => match uring::Uring::start(timer.clone()) {
                Ok(u) => Backend::Uring(u),
                Err(e) => {
                    log::warn!("io_uring is not available ({e}); device I/O uses threads");
                    Backend::Threads(threads::Threads::start(
                        devices,
                        threads_per_device,
                        timer.clone(),
                    )?)
                }
            },
        };
        Ok(IoEngine {
            backend,
            timer,
            in_flight: Arc::default(),
            held_on_rings: AtomicUsize::new(0),
        })
    }

    /// Makes room for devices up to `count` (the threads engine's queues and threads).
    pub fn ensure_devices(&self, count: usize) -> io::Result<()> {
        match &self.backend {
            Backend::Uring(_) => Ok(()),
            Backend::Threads(t) => t.ensure_devices(count),
        }
    }

    pub fn kind(&self) -> EngineKind {
        match self.backend {
            Backend::Uring(_) => EngineKind::Uring,
            Backend::Threads(_) => EngineKind::Threads,
        }
    }

    /// Runs `job` at `at`. A lone answer (none other held back, no other request waiting for
    /// this thread; a hint, not a guarantee, across ring threads) waits on the ring this
    /// thread lent (see [`lent`]), so the ring thread commits it without a wake-up from the
    /// timer: RND4K Q1T1 read of the CAS preset's NVMe cache over io_uring 64 -> 70 MB/s.
    /// Under load the engine's timer thread keeps them: it answers all that are due in one
    /// wake, on another CPU, where a timeout per answer woke the ring thread once each (Q32T1
    /// read 610 -> 148 MB/s). Nothing on this thread may wait for the job.
    pub fn at(&self, at: Instant, job: impl FnOnce() + Send + 'static) {
        let mut job: timer::Job = Box::new(job);
        if this_thread_may_block() && self.held_on_rings.load(SeqCst) == 0 && self.timer.idle() {
            match lent::push_timed(at, job) {
                Ok(()) => {
                    self.held_on_rings.fetch_add(1, SeqCst);
                    return;
                }
                Err(back) => job = back,
            }
        }
        self.timer.at(at, job);
    }

    /// Nothing in flight: a request now is latency-bound, and may be done by the thread
    /// that asks (unless that thread serves many requests at once).
    pub fn idle(&self) -> bool {
        self.in_flight.ops.load(SeqCst) == 0 && this_thread_may_block()
    }

    /// Hands a request's ops to the devices; each op's callback runs once it is done. A
    /// request with nothing else in flight is latency-bound, and the submitter does its I/O
    /// itself, as a blocking pread would: no hand-off and no wake-up, which is what a queue
    /// depth of 1 pays for (RND4K Q1T1 on an ext4 disk). One piece runs with a blocking call;
    /// pieces on several devices go out together on the thread's own ring ([`own_ring`]),
    /// over io_uring (not on the engine's own threads, which others wait for). Under load
    /// every op goes to the engine: to a ring this thread lent ([`lent`]) unless
    /// `submitter_waits` for them, else to the engine's own.
    pub fn submit(&self, mut ops: Vec<Box<DevOp>>, submitter_waits: bool) {
        if ops.is_empty() {
            return;
        }
        let idle = self.in_flight.enter(ops.len()) && this_thread_may_block();
        let alone = idle && ops.len() == 1;
        for op in &mut ops {
            op.counted = Some(self.in_flight.clone());
            op.inline |= alone;
        }
        let (inline, queued): (Vec<_>, Vec<_>) = ops.into_iter().partition(|op| op.inline);
        // A lone request over several devices: its pieces at once, waited for on this thread.
        let (queued, inline) = match &self.backend {
            Backend::Uring(_)
                if idle
                    && !queued.is_empty()
                    && !lent::is_lent()
                    && !ENGINE_THREAD.with(|s| s.get()) =>
            {
                match own_ring::run_here(&self.timer, queued, inline) {
                    Ok(()) => return,
                    Err(back) => back,
                }
            }
            _ => (queued, inline),
        };
        if !queued.is_empty() {
            match &self.backend {
                Backend::Uring(u) if !submitter_waits && lent::is_lent() => {
                    self.push_lent(u, queued)
                }
                Backend::Uring(u) => u.submit(queued),
                Backend::Threads(t) => t.submit(queued),
            }
        }
        for op in inline {
            run_blocking(&self.timer, op);
        }
    }

    /// Queues ops on the ring lent to this thread; any it refuses go to the engine's own.
    fn push_lent(&self, own: &uring::Uring, ops: Vec<Box<DevOp>>) {
        let mut refused = Vec::new();
        let queued = ops.len();
        for op in ops {
            let op = Box::into_raw(op);
            // SAFETY: the op, and the buffer its iovecs point into, live until its completion
            // comes back to `complete_lent`, which takes the op back.
            match unsafe { lent::push(uring::entry(&*op), op as u64) } {
                Some(Ok(())) => continue,
                Some(Err(e)) => log::debug!("the lent ring refused an I/O ({e}): ours takes it"),
                None => {}
            }
            // SAFETY: not queued: still only ours.
            refused.push(unsafe { Box::from_raw(op) });
        }
        if refused.len() < queued {
            lent::submit();
        }
        own.submit(refused);
    }

    /// The completion of an op queued on a lent ring, on the thread that lent it (with the
    /// ring lent again, so a short transfer's rest goes there too).
    ///
    /// # Safety
    /// `user_data` comes from the completion of an SQE this engine queued on a lent ring
    /// (each completion handed over once).
    pub unsafe fn complete_lent(&self, user_data: u64, result: i32) {
        // SAFETY: the caller's promise.
        if let Some((job, at)) = unsafe { lent::take_timed(user_data) } {
            self.held_on_rings.fetch_sub(1, SeqCst);
            // ETIME: its deadline passed. A timeout the kernel refused waits on the timer.
            return match result {
                r if r == -libc::ETIME => guarded(job),
                _ => self.timer.at(at, job),
            };
        }
        // SAFETY: the op leaked by `push_lent`, completed once (the caller's promise).
        let op = unsafe { Box::from_raw(user_data as *mut DevOp) };
        match op.progress(cqe_result(result)) {
            Step::Again(op) => match &self.backend {
                Backend::Uring(u) => self.push_lent(u, vec![op]),
                Backend::Threads(t) => t.submit(vec![op]),
            },
            Step::Done(op, r) => finish(&self.timer, op, r),
        }
    }
}

impl Drop for IoEngine {
    fn drop(&mut self) {
        match &mut self.backend {
            Backend::Uring(u) => u.stop(),
            Backend::Threads(t) => t.stop(),
        }
        self.timer.stop();
    }
}

/// An io_uring completion's result as a transfer's.
pub(crate) fn cqe_result(res: i32) -> io::Result<usize> {
    if res < 0 {
        Err(io::Error::from_raw_os_error(-res))
    } else {
        Ok(res as usize)
    }
}

/// Runs an op to its end with blocking syscalls on this thread.
pub(crate) fn run_blocking(timer: &timer::Timer, op: Box<DevOp>) {
    let (op, r) = transfer_all(op);
    finish(timer, op, r)
}

/// Transfers all of an op on this thread, with blocking calls; its callback is not run.
pub(crate) fn transfer_all(mut op: Box<DevOp>) -> (Box<DevOp>, io::Result<()>) {
    loop {
        let res = op.transfer_blocking();
        match op.progress(res) {
            Step::Again(o) => op = o,
            Step::Done(o, r) => return (o, r),
        }
    }
}

/// Runs a finished op's callback, at once or when its emulated device would have finished.
/// The op counts as in flight until then: an emulated device is busy until its model says,
/// and an engine that looked idle meanwhile would have every next request done (and, for a
/// caller that waits, waited for) on its submitter's thread, one per thread.
pub(crate) fn finish(timer: &timer::Timer, mut op: Box<DevOp>, result: io::Result<()>) {
    let counted = op.counted.take();
    let done = move |cb: Option<OnDone>, result| {
        if let Some(c) = counted {
            c.leave();
        }
        if let Some(cb) = cb {
            guarded(|| cb(result));
        }
    };
    let cb = op.on_done.take();
    match op.not_before {
        Some(t) if t > Instant::now() => timer.at(t, Box::new(move || done(cb, result))),
        _ => done(cb, result),
    }
}

/// Runs a callback; one that panics is logged, and the thread (a completion thread, or a
/// submitter whose own buffer the kernel may still be filling) goes on.
fn guarded(cb: impl FnOnce()) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(cb)).is_err() {
        log::error!(
            "an I/O completion callback or a timed answer panicked; the I/O engine goes on"
        );
    }
}
