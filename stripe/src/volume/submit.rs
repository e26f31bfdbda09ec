//! How a request reaches the devices: its pieces, one vectored I/O per device, are
//! submitted together to the I/O engine and the request completes when its last piece does;
//! copies to and from devices in memory are done on the calling thread instead.

use super::replace::Watch;
use super::*;

/// A request's pieces in flight: the request completes when the last one does, with the
/// first error any piece met.
struct Join {
    left: AtomicUsize,
    error: Mutex<Option<StripeError>>,
    done: Mutex<Option<JoinDone>>,
}

type JoinDone = Box<dyn FnOnce(Result<()>) + Send>;

/// One device's share of a request: its op, and whether a device replacement's copy
/// watches the write (told when it ends).
struct Piece {
    op: Box<DevOp>,
    watched: bool,
}

/// A request's pieces, one per device (inline, as its plan: every request makes them).
type Pieces = smallvec::SmallVec<[Piece; 8]>;

/// A piece's outcome as the request sees it: errors named by device and counted against it,
/// and the replacement's watch told the write ended.
fn piece_outcome(
    set: &DeviceSet,
    watch: Option<&Watch>,
    dev: usize,
    write: bool,
    r: io::Result<()>,
) -> Result<()> {
    let r = r.map_err(|e| set.io_err(dev, e));
    if let Some(w) = watch {
        w.write_done();
    }
    set.note_error(dev, write, r)
}

/// A request as the devices see it: which object, laid out how, over which buffer.
#[derive(Clone, Copy)]
struct Request<'a> {
    ino: u64,
    layout: &'a Layout,
    /// The caller's buffer: it stays alive and untouched until the request completes.
    base: *mut u8,
    write: bool,
}

impl Join {
    /// One token is the submitter's: nothing completes before every piece is out.
    fn new(done: impl FnOnce(Result<()>) + Send + 'static) -> Arc<Join> {
        Arc::new(Join {
            left: AtomicUsize::new(1),
            error: Mutex::new(None),
            done: Mutex::new(Some(Box::new(done))),
        })
    }

    fn add(&self) {
        self.left.fetch_add(1, Relaxed);
    }

    fn piece_done(&self, r: Result<()>) {
        if let Err(e) = r {
            self.error.lock().get_or_insert(e);
        }
        if self.left.fetch_sub(1, std::sync::atomic::Ordering::AcqRel) == 1 {
            let result = self.error.lock().take().map_or(Ok(()), Err);
            let done = self.done.lock().take();
            if let Some(done) = done {
                done(result);
            }
        }
    }
}

/// Waits on the calling thread for a request submitted with `Join`.
#[derive(Default)]
struct Waiter {
    result: Mutex<Option<Result<()>>>,
    ready: Condvar,
}

impl Waiter {
    /// What the request calls when it is done: hands the result to `wait`.
    fn done(self: &Arc<Self>) -> impl FnOnce(Result<()>) + Send + 'static {
        let w = self.clone();
        move |r| {
            *w.result.lock() = Some(r);
            w.ready.notify_one();
        }
    }

    fn wait(&self) -> Result<()> {
        let mut g = self.result.lock();
        loop {
            if let Some(r) = g.take() {
                return r;
            }
            self.ready.wait(&mut g);
        }
    }
}

impl Volume {
    /// The device op for one slot's share of a request over the buffer at `base`, its
    /// callback not set; `None` for a read of an object that does not exist (its segments are
    /// zeroed here).
    fn op_for(
        &self,
        objs: &Objects,
        req: Request,
        io: &SlotIo,
        dev: usize,
    ) -> Result<Option<Piece>> {
        let Request {
            ino,
            layout: _,
            base,
            write,
        } = req;
        self.set
            .note_error(dev, write, self.set.admit(dev, write, io))?;
        let opened = self.object(objs, dev, ino, write);
        let Some(file) = self.set.note_error(dev, write, opened)? else {
            // Only a read finds no object: a write makes it. A write's buffer is read-only.
            debug_assert!(!write, "a write without its object");
            for &(o, l) in &io.segments {
                // SAFETY: the segment lies inside the request's buffer, which is ours.
                unsafe { std::ptr::write_bytes(base.add(o), 0, l) };
            }
            return Ok(None);
        };
        let (fd, retry_fd) = match self.direct_twin(objs, dev, ino, io, base) {
            Some(direct) => (direct, Some(file)),
            None => (file, None),
        };
        let iov = io
            .segments
            .iter()
            .map(|&(o, l)| libc::iovec {
                // SAFETY: the segment lies inside the request's buffer.
                iov_base: unsafe { base.add(o) }.cast(),
                iov_len: l,
            })
            .collect();
        let not_before = match &self.controller {
            // One command per stripe unit: what makes small stripes cost a card more.
            Some(c) if c.serves(dev) => {
                let lens: Vec<u64> = io.segments.iter().map(|s| s.1 as u64).collect();
                Some(c.book(dev, write, ino, io.obj_offset, &lens))
            }
            _ => self
                .emulated(dev)
                .map(|e| e.book(write, ino, io.obj_offset, io.len())),
        };
        // Noted last, when nothing can fail before the op runs: its end is always told
        // (`piece_outcome`).
        let watched = write
            && self
                .watch
                .note_write(dev, ino, io.obj_offset, io.obj_offset + io.len());
        if watched {
            // Tests widen the window between a write's note and its landing.
            let _ = faultpoint::check("volume.write-noted");
        }
        Ok(Some(Piece {
            op: Box::new(DevOp {
                device: dev,
                write,
                fd,
                retry_fd,
                offset: io.obj_offset,
                iov,
                inline: self.set.dev(dev).ram_backed,
                not_before,
                counted: None,
                on_done: None,
            }),
            watched,
        }))
    }

    /// The ops of a request `[offset, offset + len)` over the buffer at `base`, one per
    /// device, and the error of the first piece that could not be made.
    fn pieces(&self, req: Request, offset: u64, len: usize) -> (Pieces, Option<StripeError>) {
        let objs = self.objects(req.ino);
        let plan = req.layout.plan(offset, len);
        // The rings looked at once per request, not once per piece.
        let devices: smallvec::SmallVec<[usize; 8]> = {
            let rings = self.rings.read();
            plan.iter()
                .map(|io| rings.device_of_slot(req.layout, io.slot))
                .collect()
        };
        let mut pieces = Pieces::with_capacity(plan.len());
        let mut first_error = None;
        for (io, dev) in plan.iter().zip(devices) {
            match self.op_for(&objs, req, io, dev) {
                Ok(Some(piece)) => pieces.push(piece),
                Ok(None) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        (pieces, first_error)
    }

    /// Submits the request `[offset, offset + len)` of the file over the buffer at `base`, one
    /// op per device, and calls `done` with the first error of any piece once the last one is
    /// done. The buffer must stay alive and untouched until then; `submitter_waits` for it or
    /// not. A request whose pieces are all copies to and from memory (devices whose files
    /// live in RAM, no emulated timing) is done here and now, on this thread as the engine
    /// would do them, without the join and callbacks a request in flight needs, nor taking
    /// room in the engine or touching its shared count.
    fn submit(
        &self,
        req: Request,
        offset: u64,
        len: usize,
        done: impl FnOnce(Result<()>) + Send + 'static,
        submitter_waits: bool,
    ) {
        let (pieces, error) = self.pieces(req, offset, len);
        if pieces.iter().all(|p| p.op.done_on_submitter()) {
            let mut result = error.map_or(Ok(()), Err);
            for Piece { op, watched } in pieces {
                let (dev, write) = (op.device, op.write);
                let (_, r) = crate::engine::transfer_all(op);
                let watch = watched.then_some(&*self.watch);
                result = result.and(piece_outcome(&self.set, watch, dev, write, r));
            }
            return done(result);
        }
        let join = Join::new(done);
        if let Some(e) = error {
            join.error.lock().get_or_insert(e);
        }
        let ops = pieces
            .into_iter()
            .map(|Piece { mut op, watched }| {
                let (set, join) = (self.set.clone(), join.clone());
                let watch = watched.then(|| self.watch.clone());
                let (dev, write) = (op.device, op.write);
                join.add();
                op.on_done = Some(Box::new(move |r: io::Result<()>| {
                    join.piece_done(piece_outcome(&set, watch.as_deref(), dev, write, r));
                }));
                op
            })
            .collect();
        self.engine().submit(ops, submitter_waits);
        join.piece_done(Ok(()));
    }

    /// Reads `len` bytes at `offset` and hands them to `done`; holes and unwritten ranges read
    /// as zeros. `done` runs when the devices have answered: later, or before this returns
    /// when the engine was idle and the calling thread did the I/O itself.
    pub fn read_async(
        &self,
        ino: u64,
        layout: &Layout,
        offset: u64,
        len: usize,
        done: impl FnOnce(Result<IoBuf>) + Send + 'static,
    ) {
        let buf = IoBuf::stale(len);
        self.read_async_into(ino, layout, offset, len, buf, move |buf, r| {
            done(r.map(|()| buf))
        });
    }

    /// As `read_async`, into the first `len` bytes of `into` (at least that long), which
    /// `done` gets back whatever the outcome.
    pub fn read_async_into<T: ReadTarget>(
        &self,
        ino: u64,
        layout: &Layout,
        offset: u64,
        len: usize,
        mut into: T,
        done: impl FnOnce(T, Result<()>) + Send + 'static,
    ) {
        let target = into.target();
        assert!(
            len <= target.len(),
            "read of {len} bytes into {}",
            target.len()
        );
        let base = target.as_mut_ptr();
        self.submit(
            Request {
                ino,
                layout,
                base,
                write: false,
            },
            offset,
            len,
            move |r| done(into, r),
            false,
        );
    }

    /// Writes `data` at `offset`; `done` runs when every device has it (and `data` is
    /// dropped).
    pub fn write_async<T: WriteSource>(
        &self,
        ino: u64,
        layout: &Layout,
        offset: u64,
        data: T,
        done: impl FnOnce(Result<()>) + Send + 'static,
    ) {
        let bytes = data.source();
        // Writes only read the buffer.
        let (base, len) = (bytes.as_ptr() as *mut u8, bytes.len());
        let done = move |r| {
            drop(data);
            done(r)
        };
        self.submit(
            Request {
                ino,
                layout,
                base,
                write: true,
            },
            offset,
            len,
            done,
            false,
        );
    }

    /// Reads `buf.len()` bytes at `offset`, waiting for them; holes read as zeros.
    pub fn read(&self, ino: u64, layout: &Layout, offset: u64, buf: &mut [u8]) -> Result<()> {
        let base = buf.as_mut_ptr();
        self.submit_and_wait(
            Request {
                ino,
                layout,
                base,
                write: false,
            },
            offset,
            buf.len(),
        )
    }

    /// Writes `data` at `offset`, waiting until every device has it.
    pub fn write(&self, ino: u64, layout: &Layout, offset: u64, data: &[u8]) -> Result<()> {
        // Writes only read the buffer.
        let base = data.as_ptr() as *mut u8;
        self.submit_and_wait(
            Request {
                ino,
                layout,
                base,
                write: true,
            },
            offset,
            data.len(),
        )
    }

    /// The completion of device I/O this volume queued on a ring its thread lent
    /// ([`crate::lend_ring`]).
    ///
    /// # Safety
    /// `user_data` and `result` are those of such a completion, handed over once.
    pub unsafe fn complete_lent(&self, user_data: u64, result: i32) {
        // SAFETY: the caller's promise.
        unsafe { self.engine().complete_lent(user_data, result) }
    }

    /// Submits and waits on this thread: the caller's buffer outlives the request.
    fn submit_and_wait(&self, req: Request, offset: u64, len: usize) -> Result<()> {
        let waiter = Arc::new(Waiter::default());
        self.submit(req, offset, len, waiter.done(), true);
        waiter.wait()
    }
}
