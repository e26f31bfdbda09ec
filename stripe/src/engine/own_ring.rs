//! A thread's own small io_uring, for a request that spans devices while nothing else is in
//! flight: its pieces go out together on this ring and the thread waits for them itself, as it
//! would in a blocking `pread`, so no completion thread is woken for it and none wakes this
//! one back. At queue depth 1 that hand-off is most of the request's cost beyond the device
//! (SEQ1M Q1T1 on 4 directories of an ext4 disk).

use super::uring::{enter, entry};
use super::{cqe_result, finish, timer::Timer, DevOp, Step};
use io_uring::IoUring;
use std::cell::RefCell;
use std::io;

/// Ops one request may put on the ring: a piece per device.
const ENTRIES: u32 = 64;

enum Own {
    NotYet,
    Ready(Box<IoUring>),
    /// The kernel refused a ring: this thread uses the engine's.
    Refused,
}

/// Ops not started, as `run_here` got them: (queued, inline).
pub(super) type Refused = (Vec<Box<DevOp>>, Vec<Box<DevOp>>);

thread_local! {
    static OWN: RefCell<Own> = const { RefCell::new(Own::NotYet) };
}

/// A ring only this thread enters: completions are run when it waits for them (DEFER_TASKRUN,
/// kernels from 6.1), else a plain ring.
fn new_ring() -> io::Result<IoUring> {
    IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_coop_taskrun()
        .setup_submit_all()
        .build(ENTRIES)
        .or_else(|_| IoUring::builder().build(ENTRIES))
}

/// Runs `queued` on this thread's ring and `inline` with blocking calls meanwhile, and returns
/// once every op has finished (each op's callback run here). `Err` gives the ops back, none
/// started, when this thread has no ring free (the kernel refused one, too many ops, or the
/// ring is busy with the request whose callback submits this one).
pub(super) fn run_here(
    timer: &Timer,
    queued: Vec<Box<DevOp>>,
    inline: Vec<Box<DevOp>>,
) -> Result<(), Refused> {
    if queued.len() > ENTRIES as usize {
        return Err((queued, inline));
    }
    let ring = OWN.with(|own| {
        let mut own = own.borrow_mut();
        match std::mem::replace(&mut *own, Own::Refused) {
            Own::Ready(ring) => Some(ring),
            Own::NotYet => match new_ring() {
                Ok(ring) => Some(Box::new(ring)),
                Err(e) => {
                    log::debug!("no io_uring of this thread's own ({e}): the engine's serves it");
                    None
                }
            },
            Own::Refused => None,
        }
    });
    let Some(mut ring) = ring else {
        return Err((queued, inline));
    };
    // While the ring is out of its cell a nested request (submitted by a callback) finds
    // `Refused` and goes to the engine's ring. Nothing in `run_on` unwinds (callbacks run
    // guarded): the ring never goes with ops still in flight on it.
    run_on(&mut ring, timer, queued, inline);
    OWN.with(|own| *own.borrow_mut() = Own::Ready(ring));
    Ok(())
}

fn run_on(ring: &mut IoUring, timer: &Timer, queued: Vec<Box<DevOp>>, inline: Vec<Box<DevOp>>) {
    let mut pending = queued.len();
    for op in queued {
        push(ring, op);
    }
    enter(ring, 0);
    for op in inline {
        super::run_blocking(timer, op);
    }
    while pending > 0 {
        enter(ring, 1);
        let mut reaped = Vec::new();
        for cqe in ring.completion() {
            // SAFETY: user_data is an op leaked by `push`, completed exactly once.
            let op = unsafe { Box::from_raw(cqe.user_data() as *mut DevOp) };
            reaped.push(op.progress(cqe_result(cqe.result())));
        }
        for step in reaped {
            match step {
                Step::Again(op) => push(ring, op),
                Step::Done(op, r) => {
                    pending -= 1;
                    finish(timer, op, r);
                }
            }
        }
    }
}

/// Puts `op` on the SQ; the op is leaked until its completion is reaped.
fn push(ring: &mut IoUring, op: Box<DevOp>) {
    let e = entry(Box::leak(op));
    // SAFETY: the entry's iovecs and the op live until its completion is reaped; the SQ has
    // room, as no request puts more than ENTRIES ops on it and a retry replaces its op.
    while unsafe { ring.submission().push(&e) }.is_err() {
        enter(ring, 0);
    }
}
