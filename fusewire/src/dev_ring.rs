//! /dev/fuse workers that wait on an io_uring of their own while they have device I/O in
//! flight. The ring polls the worker's own (cloned, non-blocking) /dev/fuse descriptor, and is
//! lent to the filesystem for device I/O ([`RingCtx`], as over FUSE over io_uring): a
//! request's device completion comes back to the thread that read the request, which replies
//! from there. A plain read(2) worker has each device completion run as task work on it
//! (io_uring completes an I/O on the thread that submitted it, interrupting that read), which
//! then wakes the engine's completion thread to reply: two wake-ups per request where this has
//! one, and one request per wake where this reads all that wait. With nothing of its own in
//! flight the worker waits in read(2) on a second, blocking clone: a lone request's cheapest
//! wake-up, where the poll adds a step (its completion, then the read).

use crate::lent_ring::{new_ring, offload, Job, RingCtx, Uring, FS_BIT};
use crate::payload::MsgBuf;
use crate::reply::{DevSink, Reply};
use crate::request;
use crate::session::{
    clone_fd, decode_message, free_space, read_message, serve, Filesystem, Read, Shared,
};
use io_uring::{opcode, squeue, types};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::Arc;

/// user_data of the /dev/fuse poll (the filesystem's SQEs carry `FS_BIT`).
const READY: u64 = 1;
/// Requests read per wake before the ring's completions get their turn.
const BATCH: usize = 16;
/// Submission queue entries: the filesystem's device I/O of the requests in flight.
const ENTRIES: u32 = 256;

pub(crate) struct Worker {
    thread: usize,
    /// Non-blocking, polled through the ring: a read finds nothing rather than waits when
    /// another worker took the request.
    fd: Arc<OwnedFd>,
    /// Blocking, read while nothing of this worker's is in flight. Each clone takes the
    /// replies to the requests read from it.
    blocking: Arc<OwnedFd>,
    uring: Uring,
}

/// Why a worker stops waiting on its ring.
enum End {
    /// The connection is gone.
    Gone,
    Failed(io::Error),
    /// The poll cannot be armed (or failed): the worker reads /dev/fuse as usual.
    NoPoll(io::Error),
}

impl Worker {
    /// Sets up worker `thread`'s descriptors (clones of the `session`'s) and ring, on the
    /// thread that will serve (the ring's single issuer).
    pub(crate) fn new(thread: usize, session: &OwnedFd) -> io::Result<Worker> {
        let fd = Arc::new(clone_fd(session, libc::O_NONBLOCK)?);
        let blocking = Arc::new(clone_fd(session, 0)?);
        let uring = new_ring(ENTRIES)?;
        if let Err(e) = uring.submitter().register_enable_rings() {
            // EBADFD: a plain ring (an older kernel), enabled from the start.
            if e.raw_os_error() != Some(libc::EBADFD) {
                return Err(e);
            }
        }
        Ok(Worker {
            thread,
            fd,
            blocking,
            uring,
        })
    }

    /// Serves until the connection goes away.
    pub(crate) fn serve<F: Filesystem>(
        self,
        shared: &Arc<Shared<F>>,
        size: usize,
        offload: &Sender<Job>,
    ) -> io::Result<()> {
        let ctx = RingCtx::new(&self.uring, self.thread, true);
        let mut cqes = Vec::new();
        shared.dev_ring_workers.fetch_add(1, Ordering::Relaxed);
        let end = self.run(&ctx, &mut cqes, shared, size, offload);
        shared.dev_ring_workers.fetch_sub(1, Ordering::Relaxed);
        // I/O left in flight keeps its buffers: they belong to the filesystem's requests,
        // which are freed only by their completions (none of them is this worker's memory).
        let _drained = ctx.finish(&shared.fs, cqes);
        match end {
            End::Gone => Ok(()),
            End::Failed(e) => Err(e),
            End::NoPoll(e) => {
                log::warn!(
                    "fuse worker {}: its ring cannot wait for requests ({e}); it reads /dev/fuse",
                    self.thread
                );
                serve(&self.blocking, shared, size)
            }
        }
    }

    fn run<F: Filesystem>(
        &self,
        ctx: &RingCtx<'_>,
        cqes: &mut Vec<(u64, i32)>,
        shared: &Arc<Shared<F>>,
        size: usize,
        offload: &Sender<Job>,
    ) -> End {
        let serving = Serving {
            shared,
            proto: shared.proto.get().copied().unwrap_or_default(),
            ctx,
            offload,
        };
        // Not exclusive (EPOLLEXCLUSIVE): a request wakes every worker waiting on its ring (those
        // with I/O in flight; idle ones sit in read(2), which wakes one) and the first reads
        // what waits. Exclusive woke only one, and a request that came while it was busy
        // waited for it: RND4K Q32T1 read on 4 directories of the ext4 disk, 2 workers, 77-78k
        // IOPS exclusive against 82-83k not (alternating; measured before the read(2) wait).
        let events = libc::POLLIN as u32;
        let poll: squeue::Entry128 = opcode::PollAdd::new(types::Fd(self.fd.as_raw_fd()), events)
            .build()
            .user_data(READY)
            .into();
        if let Err(e) = ctx.try_push_command(&poll) {
            return End::NoPoll(e);
        }
        let mut buf = Arc::new(MsgBuf::new(size));
        loop {
            if ctx.own_in_flight() == 0 {
                // Nothing of ours to complete: the poll stays as it is (queued, armed or
                // done) for the next wait on the ring.
                match read_message(&self.blocking, free_space(&mut buf, size)) {
                    Ok(Read::Message(n)) => serving.handle(&self.blocking, &buf, n),
                    Ok(Read::Nothing) => {}
                    Ok(Read::Gone) => return End::Gone,
                    Err(e) => return End::Failed(e),
                }
                continue;
            }
            if let Err(e) = ctx.wait() {
                return End::Failed(e);
            }
            ctx.take_completions(cqes);
            cqes.reverse(); // popped from the end: in the order they came
            while let Some((data, res)) = cqes.pop() {
                ctx.set_unhandled(cqes.len());
                if data & FS_BIT != 0 {
                    ctx.hand_back(&shared.fs, data, res);
                    continue;
                }
                if data != READY {
                    continue;
                }
                if res < 0 && res != -libc::EINTR && res != -libc::EAGAIN {
                    return End::NoPoll(io::Error::from_raw_os_error(-res));
                }
                // A request waits, or the connection ended: take what there is.
                for _ in 0..BATCH {
                    match read_message(&self.fd, free_space(&mut buf, size)) {
                        Ok(Read::Message(n)) => serving.handle(&self.fd, &buf, n),
                        Ok(Read::Nothing) => break,
                        Ok(Read::Gone) => return End::Gone,
                        Err(e) => return End::Failed(e),
                    }
                }
                if let Err(e) = ctx.try_push_command(&poll) {
                    return End::NoPoll(e);
                }
            }
        }
    }
}

/// What a worker hands each request it reads.
struct Serving<'a, F> {
    shared: &'a Arc<Shared<F>>,
    proto: request::Proto,
    ctx: &'a RingCtx<'a>,
    offload: &'a Sender<Job>,
}

impl<F: Filesystem> Serving<'_, F> {
    /// Decodes one request read from `fd` and runs it here, or on the offload thread when it
    /// must not run on a ring ([`Filesystem::runs_on_ring`]); its reply goes to `fd`. A panic
    /// before the dispatch (whose own guard answers EIO) costs the request, not the worker.
    fn handle(&self, fd: &Arc<OwnedFd>, buf: &Arc<MsgBuf>, n: usize) {
        let run = || {
            let Some(req) = decode_message(fd, buf, n, &self.proto) else {
                return;
            };
            let reply = Reply::new(req.unique, Box::new(DevSink::new(fd.clone())));
            if self.shared.fs.runs_on_ring(&req, self.ctx) {
                return self.shared.dispatch(req, reply, Some(self.ctx));
            }
            drop(req);
            // Decoded again from a copy: the buffer is this worker's next.
            let (msg, shared, proto) = (buf.message(n).to_vec(), self.shared.clone(), self.proto);
            let job: Job = Box::new(move || match request::parse(&msg, &proto) {
                Ok(req) => shared.dispatch(req, reply, None),
                Err(_) => reply.error(libc::EIO),
            });
            offload(self.offload, job);
        };
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).is_err() {
            log::error!("a request panicked before its dispatch");
        }
    }
}
