//! A ring lent to the engine by the thread it runs on: a FUSE-over-io_uring ring thread lends
//! its own io_uring while it handles a request, so the request's device I/O completes on that
//! same thread, which then commits the FUSE reply with its next batch: no hand-off to the
//! engine's completion thread and no wake-up back. The I/O itself is submitted at once, not
//! with that batch: a disk serves a steady stream faster than bursts (measured in the README).
//!
//! An answer held back until an emulated device would have given it may wait there too, as
//! a timeout: the thread runs it when the timeout completes and commits it, where the timer
//! thread would have had to wake the ring thread to commit it (which answers go there is the
//! engine's `at`).
//!
//! Only what nobody waits for on this thread goes there: the thread reaps its ring only
//! between requests, so a wait for one of its own completions would never end.

use io_uring::squeue::Entry;
use io_uring::{opcode, types};
use std::cell::Cell;
use std::io;
use std::time::Instant;

/// What lends its ring.
pub trait LentRing {
    /// Queues `sqe`; its completion is handed to `Volume::complete_lent` with `user_data` on
    /// this thread, with the ring lent again. `Err`: not queued.
    ///
    /// # Safety
    /// What the SQE points to stays valid until its completion (the engine's ops do).
    unsafe fn push(&self, sqe: Entry, user_data: u64) -> io::Result<()>;

    /// Submits what is queued now rather than with the ring's next batch.
    fn submit(&self);
}

type PushFn = unsafe fn(*const (), Entry, u64) -> io::Result<()>;
type SubmitFn = unsafe fn(*const ());

#[derive(Clone, Copy)]
struct Lent {
    ring: *const (),
    push: PushFn,
    submit: SubmitFn,
}

thread_local! {
    static LENT: Cell<Option<Lent>> = const { Cell::new(None) };
}

/// Runs `f` with `ring` lent to the engine on this thread.
pub fn lend_ring<L: LentRing, R>(ring: &L, f: impl FnOnce() -> R) -> R {
    /// # Safety
    /// `ring` is the `&L` given to `lend_ring`, alive for the whole call.
    unsafe fn push_via<L: LentRing>(ring: *const (), sqe: Entry, user_data: u64) -> io::Result<()> {
        (*ring.cast::<L>()).push(sqe, user_data)
    }
    /// # Safety
    /// As `push_via`.
    unsafe fn submit_via<L: LentRing>(ring: *const ()) {
        (*ring.cast::<L>()).submit()
    }
    /// Puts back what was lent before, however `f` ends.
    struct Restore(Option<Lent>);
    impl Drop for Restore {
        fn drop(&mut self) {
            LENT.with(|l| l.set(self.0));
        }
    }
    let lent = Lent {
        ring: (ring as *const L).cast(),
        push: push_via::<L>,
        submit: submit_via::<L>,
    };
    let _restore = Restore(LENT.with(|l| l.replace(Some(lent))));
    f()
}

/// Is a ring lent on this thread?
pub(crate) fn is_lent() -> bool {
    LENT.with(|l| l.get().is_some())
}

/// Queues `sqe` on the ring lent to this thread; `None` when none is.
///
/// # Safety
/// As [`LentRing::push`].
pub(crate) unsafe fn push(sqe: Entry, user_data: u64) -> Option<io::Result<()>> {
    let lent = LENT.with(|l| l.get())?;
    // SAFETY: set by `lend_ring`, whose borrow of the ring outlives this call (the cell is
    // restored before `lend_ring` returns).
    Some(unsafe { (lent.push)(lent.ring, sqe, user_data) })
}

/// Submits what was queued on the ring lent to this thread, if one is.
pub(crate) fn submit() {
    if let Some(lent) = LENT.with(|l| l.get()) {
        // SAFETY: as in `push`.
        unsafe { (lent.submit)(lent.ring) }
    }
}

/// A job waiting on the lent ring for its deadline.
struct Timed {
    deadline: types::Timespec,
    at: Instant,
    job: super::timer::Job,
}

/// Tags the user_data of a [`Timed`] (an op's is its 8-aligned address).
const TIMED: u64 = 1;

/// Queues `job` to run on this thread at `at`, when a ring is lent to it; else hands it back.
/// Nothing on this thread may wait for the job.
pub(crate) fn push_timed(at: Instant, job: super::timer::Job) -> Result<(), super::timer::Job> {
    if !is_lent() {
        return Err(job);
    }
    let timed = Box::into_raw(Box::new(Timed {
        deadline: monotonic(at),
        at,
        job,
    }));
    // An absolute deadline: the SQE may go out with the ring's next batch.
    // SAFETY: `timed` is ours until the timeout's completion is handed to `take_timed`, and
    // the kernel reads the timespec inside it before then.
    let sqe = opcode::Timeout::new(unsafe { &raw const (*timed).deadline })
        .flags(types::TimeoutFlags::ABS)
        .build();
    // SAFETY: as above.
    match unsafe { push(sqe, timed as u64 | TIMED) } {
        Some(Ok(())) => Ok(()),
        // SAFETY: not queued: still only ours.
        _ => Err(unsafe { Box::from_raw(timed) }.job),
    }
}

/// A timeout queued by [`push_timed`], if `user_data` is one's: its job and deadline.
///
/// # Safety
/// `user_data` comes from a completion of the lent ring, each handed over once.
pub(crate) unsafe fn take_timed(user_data: u64) -> Option<(super::timer::Job, Instant)> {
    if user_data & TIMED == 0 {
        return None;
    }
    // SAFETY: leaked by `push_timed`, completed once (the caller's promise).
    let timed = unsafe { Box::from_raw((user_data & !TIMED) as *mut Timed) };
    Some((timed.job, timed.at))
}

/// `at` on CLOCK_MONOTONIC, the clock of `Instant` and of io_uring's absolute timeouts.
fn monotonic(at: Instant) -> types::Timespec {
    // The wait first: the clock read after it can only put the deadline later, never early.
    let wait = at.saturating_duration_since(Instant::now());
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into a local.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    let nanos = now.tv_nsec as u64 + u64::from(wait.subsec_nanos());
    types::Timespec::new()
        .sec(now.tv_sec as u64 + wait.as_secs() + nanos / 1_000_000_000)
        .nsec((nanos % 1_000_000_000) as u32)
}
