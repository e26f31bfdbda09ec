//! The io_uring engine: one ring for the volume. Any thread submits (the SQ under a lock); the
//! thread that submitted reaps what the kernel finished at once, and one completion thread,
//! woken by an eventfd the ring signals, reaps the rest. Callbacks run outside the locks.

use super::{cqe_result, finish, timer::Timer, DevOp, Step, IOV_MAX};
use io_uring::{opcode, types, IoUring};
use parking_lot::Mutex;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

const SQ_ENTRIES: u32 = 512;
const CQ_ENTRIES: u32 = 4096;
/// user_data of the wake-up no-op sent at stop.
const WAKE: u64 = 0;

struct Ring {
    ring: IoUring,
    sq: Mutex<()>,
    cq: Mutex<()>,
    /// Set by a thread that found the CQ being reaped by another: the reaper looks again.
    reap_wanted: AtomicBool,
    in_flight: AtomicUsize,
    stop: AtomicBool,
    eventfd: OwnedFd,
    timer: Arc<Timer>,
}

pub(crate) struct Uring {
    ring: Arc<Ring>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Uring {
    pub fn start(timer: Arc<Timer>) -> io::Result<Uring> {
        // SUBMIT_ALL (5.18+): an SQE the kernel refuses at submission still lets the ones
        // behind it go, as the enter loops assume.
        let ring = IoUring::builder()
            .setup_cqsize(CQ_ENTRIES)
            .setup_submit_all()
            .build(SQ_ENTRIES)
            .or_else(|_| {
                IoUring::builder()
                    .setup_cqsize(CQ_ENTRIES)
                    .build(SQ_ENTRIES)
            })?;
        // SAFETY: plain syscall; the descriptor is owned below.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor that nothing else owns.
        let eventfd = unsafe { OwnedFd::from_raw_fd(efd) };
        ring.submitter().register_eventfd(eventfd.as_raw_fd())?;
        let ring = Arc::new(Ring {
            ring,
            sq: Mutex::new(()),
            cq: Mutex::new(()),
            reap_wanted: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            eventfd,
            timer,
        });
        let r = ring.clone();
        let thread = std::thread::Builder::new()
            .name("stripefs-uring".into())
            .spawn(move || {
                super::this_is_an_engine_thread();
                r.complete_loop()
            })?;
        Ok(Uring {
            ring,
            thread: Some(thread),
        })
    }

    pub fn submit(&self, ops: Vec<Box<DevOp>>) {
        if ops.is_empty() {
            return;
        }
        self.ring.push(ops);
        self.ring.reap(false);
    }

    /// Waits for every op in flight, then ends the completion thread.
    pub fn stop(&mut self) {
        self.ring.stop.store(true, SeqCst);
        self.ring.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Submits what is on `ring`'s SQ and waits for `want` completions. The ops are in flight, so
/// this retries until the kernel takes them; when it is busy, completions must be reaped
/// first, which the engine's completion thread does (a submitter holding the SQ must not).
pub(super) fn enter(ring: &IoUring, want: usize) {
    loop {
        match ring.submit_and_wait(want) {
            Ok(_) => return,
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EBUSY)) => {
                std::thread::yield_now()
            }
            Err(e) => {
                log::error!("io_uring submit failed: {e}; retrying");
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
    }
}

/// The SQE of `op`'s next transfer; its user_data is the op's address.
pub(super) fn entry(op: &DevOp) -> io_uring::squeue::Entry {
    let fd = types::Fd(op.raw_fd());
    let n = op.iov.len().min(IOV_MAX) as u32;
    let e = if op.write {
        opcode::Writev::new(fd, op.iov.as_ptr(), n)
            .offset(op.offset)
            .build()
    } else {
        opcode::Readv::new(fd, op.iov.as_ptr(), n)
            .offset(op.offset)
            .build()
    };
    e.user_data(op as *const DevOp as u64)
}

impl Ring {
    /// Puts ops on the SQ and submits them; a full SQ is submitted and refilled.
    fn push(&self, ops: Vec<Box<DevOp>>) {
        let one = self.sq.lock();
        for op in ops {
            // The op is leaked until its completion is reaped.
            let e = entry(Box::leak(op));
            self.in_flight.fetch_add(1, SeqCst);
            loop {
                // SAFETY: the SQ is only touched under `self.sq`; the entry's iovecs and the
                // op live until the op's completion is reaped.
                let pushed = unsafe { self.ring.submission_shared().push(&e) };
                if pushed.is_ok() {
                    break;
                }
                self.enter();
            }
        }
        // Submitted without the lock: the kernel serialises submissions itself (an enter
        // submits what is on the SQ, another's entries too), and a thread waiting for the
        // lock across this syscall spins and sched_yields (19k times a second at RND4K Q32T1
        // on an ext4 disk).
        drop(one);
        self.enter();
    }

    fn enter(&self) {
        enter(&self.ring, 0);
    }

    /// Takes every finished op off the CQ and runs its completion. With `wait`, waits for a
    /// thread that is reaping; without, leaves the work to it.
    fn reap(&self, mut wait: bool) {
        loop {
            self.reap_wanted.store(true, SeqCst);
            let guard = if wait {
                self.cq.lock()
            } else {
                match self.cq.try_lock() {
                    Some(g) => g,
                    None => return,
                }
            };
            self.reap_wanted.store(false, SeqCst);
            let mut again = Vec::new();
            let mut done = Vec::new();
            // SAFETY: the CQ is only touched under `self.cq`.
            for cqe in unsafe { self.ring.completion_shared() } {
                if cqe.user_data() == WAKE {
                    continue;
                }
                self.in_flight.fetch_sub(1, SeqCst);
                // SAFETY: user_data is the op leaked by `push`, completed exactly once.
                let op = unsafe { Box::from_raw(cqe.user_data() as *mut DevOp) };
                match op.progress(cqe_result(cqe.result())) {
                    Step::Again(op) => again.push(op),
                    Step::Done(op, r) => done.push((op, r)),
                }
            }
            drop(guard);
            if !again.is_empty() {
                self.push(again);
            }
            for (op, r) in done {
                finish(&self.timer, op, r);
            }
            if !self.reap_wanted.load(SeqCst) {
                return;
            }
            wait = false;
        }
    }

    fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd.
        unsafe { libc::write(self.eventfd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    fn complete_loop(&self) {
        loop {
            let mut n: u64 = 0;
            // SAFETY: reads 8 bytes into a live u64 from our eventfd.
            let r = unsafe { libc::read(self.eventfd.as_raw_fd(), (&mut n as *mut u64).cast(), 8) };
            if r < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                log::error!("io_uring eventfd: {}", io::Error::last_os_error());
            }
            self.reap(true);
            if self.stop.load(SeqCst) {
                // Let what is still in flight finish, then go.
                while self.in_flight.load(SeqCst) > 0 {
                    let _ = self.ring.submit_and_wait(1);
                    self.reap(true);
                }
                return;
            }
        }
    }
}
