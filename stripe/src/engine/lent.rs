//! A ring lent to the engine by the thread it runs on: a FUSE-over-io_uring ring thread lends
//! its own io_uring while it handles a request, so the request's device I/O completes on that
//! same thread, which then commits the FUSE reply with its next batch: no hand-off to the
//! engine's completion thread and no wake-up back. The I/O itself is submitted at once, not
//! with that batch: a disk serves a steady stream faster than bursts (measured in the README).
//!
//! Only I/O nobody waits for on this thread goes there: the thread reaps its ring only
//! between requests, so a wait for one of its own completions would never end.

use io_uring::squeue::Entry;
use std::cell::Cell;
use std::io;

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
