//! A transport thread's io_uring, lent to the filesystem while the thread runs it
//! ([`RingCtx`]): the ring threads of FUSE over io_uring and the /dev/fuse workers that wait
//! on a ring of their own (`dev_ring`) both take their device I/O completions there. Also the
//! offload thread, which runs the requests that must not run on such a thread.

use crate::session::Filesystem;
use io_uring::{cqueue, squeue, IoUring};
use std::io;
use std::sync::mpsc;
use std::thread::JoinHandle;

/// A request a ring thread hands to the offload thread.
pub(crate) type Job = Box<dyn FnOnce() + Send>;
/// Ends the offload thread once it ran what it was sent (its senders must be gone too).
pub(crate) fn stop_offload((tx, thread): (mpsc::Sender<Job>, JoinHandle<()>)) {
    drop(tx);
    let _ = thread.join();
}

/// Hands `job` to the offload thread; should it be gone, to a thread of its own, never the
/// caller's (the request may wait for the caller's ring).
pub(crate) fn offload(to: &mpsc::Sender<Job>, job: Job) {
    if let Err(mpsc::SendError(job)) = to.send(job) {
        if let Err(e) = std::thread::Builder::new().spawn(job) {
            log::error!("a request could not be run off its ring: {e}");
        }
    }
}

/// Starts the offload thread (of the ring threads, or of the /dev/fuse workers on rings): it
/// runs the jobs sent until every sender is gone.
pub(crate) fn start_offload() -> io::Result<(mpsc::Sender<Job>, JoinHandle<()>)> {
    let (tx, rx) = mpsc::channel::<Job>();
    let thread = std::thread::Builder::new()
        .name("fuse-offload".into())
        .spawn(move || {
            for job in rx {
                job();
            }
        })?;
    Ok((tx, thread))
}

/// user_data of the eventfd poll.
pub(crate) const WAKE: u64 = u64::MAX;
/// user_data bit of the filesystem's own SQEs (see [`RingCtx`]).
pub(crate) const FS_BIT: u64 = 1 << 63;

pub(crate) type Uring = IoUring<squeue::Entry128, cqueue::Entry>;

/// Queues an SQE; only the ring thread does, so no other queue borrow is alive. A full
/// submission queue is submitted; completions the kernel holds back meanwhile (a full
/// completion queue) are moved to `reaped`. `Err`: not queued.
fn push_sqe(
    uring: &Uring,
    sqe: &squeue::Entry128,
    reaped: &std::cell::RefCell<Vec<(u64, i32)>>,
) -> io::Result<()> {
    // SAFETY: the ring thread is the only one touching this ring's queues, and no other
    // queue of it is borrowed while this one is; what the SQE points to is the pusher's to
    // keep valid (our entries live as long as the ring thread).
    while unsafe { uring.submission_shared().push(sqe) }.is_err() {
        match uring.submitter().submit() {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EAGAIN)) => {
                // SAFETY: as above, for the completion queue.
                let cq = unsafe { uring.completion_shared() };
                reaped
                    .borrow_mut()
                    .extend(cq.map(|c| (c.user_data(), c.result())));
                std::thread::yield_now();
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The ring thread's io_uring, lent to the filesystem while it runs on that thread
/// ([`Filesystem::request_on_ring`], [`Filesystem::ring_completion`]): device I/O queued here
/// is submitted with the ring's next batch, or at once with [`RingCtx::submit`], and completes
/// on the same thread, so a READ can go from the device into the entry's payload buffer
/// ([`Reply::buffer`]) and be committed without any other thread or copy.
pub struct RingCtx<'a> {
    uring: &'a Uring,
    thread: usize,
    /// Completions taken from the ring and not handled yet.
    unhandled: std::cell::Cell<usize>,
    /// Completions taken off the ring while pushing (a full completion queue).
    reaped: std::cell::RefCell<Vec<(u64, i32)>>,
    /// The filesystem's SQEs not completed yet.
    own_in_flight: std::cell::Cell<usize>,
    reads_dev: bool,
}

impl<'a> RingCtx<'a> {
    /// The context of the thread that owns `uring`; `reads_dev` when that thread takes its
    /// requests from /dev/fuse (`dev_ring`), not from the ring.
    pub(crate) fn new(uring: &'a Uring, thread: usize, reads_dev: bool) -> RingCtx<'a> {
        RingCtx {
            uring,
            thread,
            reads_dev,
            unhandled: std::cell::Cell::new(0),
            reaped: std::cell::RefCell::new(Vec::new()),
            own_in_flight: std::cell::Cell::new(0),
        }
    }

    /// Completions taken off the ring and not handled yet, for [`RingCtx::others_waiting`].
    pub(crate) fn set_unhandled(&self, n: usize) {
        self.unhandled.set(n);
    }

    /// This thread takes its requests from /dev/fuse, as one of several workers (`dev_ring`),
    /// not from its entries of a FUSE-over-io_uring queue.
    pub fn reads_dev_fuse(&self) -> bool {
        self.reads_dev
    }

    /// Which ring thread this is (0..threads): for per-thread state in the filesystem.
    pub fn thread(&self) -> usize {
        self.thread
    }

    /// Are other requests (or completions) waiting for this thread? If not, a request handled
    /// now is alone, and the thread may as well wait for its I/O itself.
    pub fn others_waiting(&self) -> bool {
        // A /dev/fuse worker is one of several reading the kernel's queue: only its own
        // completions wait for it (a poll completion on its ring is no request of its own).
        if self.reads_dev {
            return self.own_in_flight.get() > 0;
        }
        // SAFETY: only this thread uses the queues; their flags and length are read, not taken.
        self.unhandled.get() > 0
            || !self.reaped.borrow().is_empty()
            || !unsafe { self.uring.completion_shared() }.is_empty()
            // Completions deferred in the kernel until this thread waits.
            || unsafe { self.uring.submission_shared() }.taskrun()
    }

    /// Queues `sqe`; its completion comes to [`Filesystem::ring_completion`] with
    /// `user_data` (below 2^63) on this thread. `Err`: not queued (the ring failed).
    ///
    /// # Safety
    /// Whatever the SQE points to (buffers, iovecs, paths) must stay valid until its
    /// completion, and its file descriptor open.
    pub unsafe fn push(&self, sqe: squeue::Entry, user_data: u64) -> io::Result<()> {
        let sqe: squeue::Entry128 = sqe.user_data((user_data & !FS_BIT) | FS_BIT).into();
        push_sqe(self.uring, &sqe, &self.reaped)?;
        self.own_in_flight.set(self.own_in_flight.get() + 1);
        Ok(())
    }

    /// Submits what is queued now rather than when this thread next waits. Best effort: a
    /// busy ring (EBUSY, EAGAIN) keeps it for that wait, which always comes before the thread
    /// sleeps while the filesystem has SQEs on the ring (a /dev/fuse worker with none waits
    /// in read(2), its poll maybe still queued: harmless).
    pub fn submit(&self) {
        if let Err(e) = self.uring.submit() {
            if !matches!(
                e.raw_os_error(),
                Some(libc::EBUSY | libc::EAGAIN | libc::EINTR)
            ) {
                log::warn!("io_uring submit: {e}");
            }
        }
    }

    /// The filesystem's SQEs on this ring whose completions have not come yet. While there
    /// are some, this thread must not wait for anything they hold (a lock a completion
    /// releases): [`Filesystem::runs_on_ring`].
    pub fn own_in_flight(&self) -> usize {
        self.own_in_flight.get()
    }

    /// Hands the completion of one of the filesystem's SQEs back to it.
    pub(crate) fn hand_back<F: Filesystem>(&self, fs: &F, user_data: u64, res: i32) {
        self.own_in_flight.set(self.own_in_flight.get() - 1);
        fs.ring_completion(self, user_data & !FS_BIT, res);
    }

    /// Queues one of the transport's own commands; one that cannot be queued costs its
    /// entry (logged).
    pub(crate) fn push_command(&self, sqe: &squeue::Entry128) {
        if let Err(e) = self.try_push_command(sqe) {
            log::warn!("io_uring submit: {e}");
        }
    }

    /// Queues one of the transport's own commands. `Err`: not queued.
    pub(crate) fn try_push_command(&self, sqe: &squeue::Entry128) -> io::Result<()> {
        push_sqe(self.uring, sqe, &self.reaped)
    }

    /// Submits what is queued and waits for a completion, unless some were already moved
    /// aside while pushing (they may be all there is to wait for). A busy ring (EAGAIN,
    /// EBUSY: completions to reap first) moves them aside and returns; only a broken ring
    /// is an error.
    pub(crate) fn wait(&self) -> io::Result<()> {
        let want = if self.reaped.borrow().is_empty() {
            1
        } else {
            0
        };
        match self.uring.submit_and_wait(want) {
            Ok(_) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EAGAIN)) => {
                let mut reaped = Vec::new();
                self.take_completions(&mut reaped);
                self.reaped.borrow_mut().append(&mut reaped);
                std::thread::yield_now();
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Waits for the filesystem's I/O still in flight, its buffers and callbacks with it (the
    /// replies they send go nowhere now); `cqes`: completions taken and not handled yet. False
    /// if the ring kept failing with I/O still in flight: the kernel may still write into the
    /// memory that I/O was given, so the caller must leak, not free, what it lent the ring.
    #[must_use]
    pub(crate) fn finish<F: Filesystem>(&self, fs: &F, mut cqes: Vec<(u64, i32)>) -> bool {
        let mut failures = 0;
        while self.own_in_flight() > 0 {
            for (data, res) in cqes.drain(..) {
                if data != WAKE && data & FS_BIT != 0 {
                    self.hand_back(fs, data, res);
                }
            }
            if self.own_in_flight() == 0 {
                break;
            }
            if let Err(e) = self.wait() {
                failures += 1;
                let n = self.own_in_flight();
                if failures == 100 {
                    log::error!(
                        "io_uring wait: {e}; {n} I/Os of the filesystem left in flight (their \
                         memory is kept)"
                    );
                    return false;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            self.take_completions(&mut cqes);
        }
        true
    }

    /// Completions taken off the ring: those moved aside while pushing, then the queue's.
    pub(crate) fn take_completions(&self, into: &mut Vec<(u64, i32)>) {
        into.append(&mut self.reaped.borrow_mut());
        // SAFETY: only this thread reads the completion queue.
        into.extend(unsafe { self.uring.completion_shared() }.map(|c| (c.user_data(), c.result())));
    }
}

/// A ring set up as fio sets up its own: only the ring thread submits (SINGLE_ISSUER, the
/// ring created disabled and enabled by that thread), and completions, the kernel's FUSE
/// requests among them, are run when the thread enters the kernel for them (its waits, and a
/// [`RingCtx::submit`] while the flag below is up) rather than as task work interrupting it
/// (DEFER_TASKRUN); TASKRUN_FLAG tells the thread, without entering the kernel, that some
/// wait; SUBMIT_ALL lets the SQEs behind one the kernel refuses go. Kernels before 6.1 lack
/// these: a plain ring there.
pub(crate) fn new_ring(sq: u32) -> io::Result<Uring> {
    let deferred = IoUring::builder()
        .setup_cqsize(sq * 2)
        .setup_r_disabled()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_coop_taskrun()
        .setup_taskrun_flag()
        .setup_submit_all()
        .build(sq);
    match deferred {
        Ok(uring) => Ok(uring),
        Err(_) => IoUring::builder().setup_cqsize(sq * 2).build(sq),
    }
}
