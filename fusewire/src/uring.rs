//! FUSE over io_uring (kernel 6.14+, `fuse.enable_uring=Y`): requests arrive as completions of
//! `IORING_OP_URING_CMD`s on /dev/fuse, and a reply is committed together with the fetch of
//! the entry's next request (COMMIT_AND_FETCH).
//!
//! The kernel has one queue per possible CPU and takes a request on the queue of the CPU that
//! issued it; the ring is used only once every queue has an entry. Each ring thread of ours
//! serves some of those queues with `depth` entries each, or, with more threads than queues,
//! shares one queue's `depth` entries with the other threads there. An entry is two buffers: the header
//! (in/out header, the first argument, the commit id and payload size) and the payload (the
//! other arguments, or the reply's body).
//!
//! A ring thread never blocks on the filesystem: it dispatches, and the reply (from the
//! handler inline, or later from any thread) writes the entry's buffers and queues the entry
//! for commit; a reply from another thread wakes the ring through an eventfd. INIT,
//! interrupts, forgets and notifications stay on /dev/fuse (the session's workers).
//!
//! Only the ring thread submits commands. A COMMIT_AND_FETCH submitted by the replying
//! thread would save the wake-up, but the kernel then delivers the entry's next request
//! through that thread's task_work, and cancels it when that thread exits (callers saw
//! ECANCELED in a test that replied from short-lived threads).

use crate::abi::{self, *};
use crate::lent_ring::{
    new_ring, offload, start_offload, stop_offload, Job, RingCtx, Uring, FS_BIT, WAKE,
};
use crate::reply::{Reply, ReplySink};
use crate::request::{self, Proto};
use crate::session::{Filesystem, Shared};
use io_uring::{opcode, squeue, types};
use parking_lot::Mutex;
use std::alloc::Layout;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::{JoinHandle, ThreadId};

/// The io_uring queues.
#[derive(Debug, Clone, Default)]
pub struct UringConfig {
    /// Ring threads; 0: one per queue (per possible CPU). Thread t serves queues t, t+n, ...;
    /// with more threads than queues, thread t shares queue t mod queues with the others
    /// there (at most `depth` threads a queue, one entry each).
    pub threads: usize,
    /// Entries per queue (requests in flight per CPU); 0: 16.
    pub depth: usize,
    /// A ring thread runs only on the CPUs of the queues it serves.
    pub pinned: bool,
}

impl UringConfig {
    /// Entries per queue.
    pub fn queue_depth(&self) -> usize {
        if self.depth == 0 {
            16
        } else {
            self.depth
        }
    }

    /// The ring threads that serve: `threads`, or one per queue, and no more than the
    /// queues have entries (every thread has one of its queue's to wait on).
    pub fn ring_threads(&self) -> usize {
        let queues = kernel_queues();
        match self.threads {
            0 => queues,
            n => n.min(queues * self.queue_depth()),
        }
    }
}

const PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

/// Why the kernel did not offer FUSE over io_uring, for the log and `status`.
pub fn why_unavailable() -> String {
    match std::fs::read_to_string(PARAM) {
        Err(_) => {
            "this kernel has no FUSE over io_uring (CONFIG_FUSE_IO_URING, Linux 6.14+)".into()
        }
        Ok(v) if v.trim() == "N" => {
            format!("switched off: an administrator enables it with `echo Y > {PARAM}`")
        }
        Ok(_) => "not offered by the kernel at INIT".into(),
    }
}

/// The number of kernel queues: one per possible CPU.
pub fn kernel_queues() -> usize {
    let possible = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
    let mut n = 0;
    for part in possible.trim().split(',').filter(|p| !p.is_empty()) {
        let mut ends = part.split('-').map(|x| x.parse::<usize>().ok());
        match (ends.next().flatten(), ends.next().flatten()) {
            (Some(a), Some(b)) if b >= a => n += b - a + 1,
            (Some(_), None) => n += 1,
            _ => {}
        }
    }
    if n == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        n
    }
}

/// An aligned heap buffer the kernel reads and writes (its address must not move).
struct Buf {
    ptr: *mut u8,
    layout: Layout,
}

// SAFETY: plain memory; who writes it when is ruled by the entry's ownership (see Ring).
unsafe impl Send for Buf {}
unsafe impl Sync for Buf {}

impl Buf {
    fn new(len: usize, align: usize) -> io::Result<Buf> {
        let layout = Layout::from_size_align(len.max(1), align).map_err(io::Error::other)?;
        // SAFETY: non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(io::Error::from_raw_os_error(libc::ENOMEM));
        }
        Ok(Buf { ptr, layout })
    }

    fn len(&self) -> usize {
        self.layout.size()
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        // SAFETY: allocated in new with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

/// One ring entry's memory.
struct Ent {
    qid: u16,
    header: Buf,
    payload: Buf,
    /// A handler runs on the ring thread with the request's arguments borrowed from
    /// `payload`: a reply sent meanwhile must not overwrite them.
    in_dispatch: AtomicBool,
}

/// What a reply hands to the ring thread.
enum Done {
    /// The reply is in the entry's buffers.
    InPlace(usize),
    /// The reply came while the request's payload was still borrowed: copied here.
    Owned(usize, fuse_out_header, Vec<u8>),
}

/// What a ring thread shares with the replies of its entries.
struct Ring {
    ents: Vec<Ent>,
    done: Mutex<Vec<Done>>,
    wake: OwnedFd,
    thread: std::sync::OnceLock<ThreadId>,
    stop: AtomicBool,
    /// Runs only on the CPUs of the queues it serves (`UringConfig::pinned`).
    pinned: bool,
}

impl Ring {
    fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a local to our eventfd.
        unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Writes a reply into entry `idx`'s buffers. Only while the entry is ours (between the
    /// kernel handing it over and our commit).
    fn fill(&self, idx: usize, header: &fuse_out_header, payload: &[&[u8]]) {
        let ent = &self.ents[idx];
        let mut at = 0;
        for p in payload {
            // SAFETY: bounds were checked by the caller (total <= payload len); the entry is
            // owned by this reply until committed, so nobody else touches the buffer.
            unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), ent.payload.ptr.add(at), p.len()) };
            at += p.len();
        }
        self.fill_header(idx, header, at);
    }

    /// Writes a reply's out header and payload size into entry `idx`'s header buffer.
    fn fill_header(&self, idx: usize, header: &fuse_out_header, payload_sz: usize) {
        let ent = &self.ents[idx];
        let at = payload_sz;
        // SAFETY: the header buffer holds a fuse_uring_req_header; unaligned-safe writes.
        unsafe {
            let h = ent.header.ptr.cast::<fuse_uring_req_header>();
            std::ptr::write_unaligned((*h).in_out.as_mut_ptr().cast::<fuse_out_header>(), *header);
            std::ptr::addr_of_mut!((*h).ring_ent_in_out.payload_sz).write_unaligned(at as u32);
        }
    }
}

/// Replies into a ring entry.
struct UringSink {
    ring: Arc<Ring>,
    idx: usize,
    /// Bytes of the request's arguments in the payload buffer (borrowed while dispatching).
    req_payload: usize,
}

impl UringSink {
    /// May the reply write the payload buffer now? Not while a handler still borrows the
    /// request's arguments from it.
    fn payload_free(&self) -> bool {
        self.req_payload == 0 || !self.ring.ents[self.idx].in_dispatch.load(Ordering::Acquire)
    }

    fn commit(&self, done: Done) {
        let first = {
            let mut list = self.ring.done.lock();
            list.push(done);
            list.len() == 1
        };
        // One wake per batch: a non-empty list has a wake pending, and the ring thread takes
        // the list only after it consumed the wake.
        if first && self.ring.thread.get() != Some(&std::thread::current().id()) {
            self.ring.wake();
        }
    }
}

impl ReplySink for UringSink {
    fn send(self: Box<Self>, unique: u64, mut error: i32, payload: &[&[u8]]) -> io::Result<()> {
        let ent = &self.ring.ents[self.idx];
        let mut total: usize = payload.iter().map(|p| p.len()).sum();
        let mut payload = payload;
        if total > ent.payload.len() {
            log::warn!("reply to {unique}: {total} bytes exceed the ring's payload buffer");
            (error, total, payload) = (-libc::EIO, 0, &[]);
        }
        let header = fuse_out_header {
            len: (size_of::<fuse_out_header>() + total) as u32,
            error,
            unique,
        };
        let done = if self.payload_free() {
            self.ring.fill(self.idx, &header, payload);
            Done::InPlace(self.idx)
        } else {
            Done::Owned(self.idx, header, payload.concat())
        };
        self.commit(done);
        Ok(())
    }

    fn body_buffer(&mut self, len: usize) -> Option<std::ptr::NonNull<u8>> {
        let ent = &self.ring.ents[self.idx];
        if len > ent.payload.len() || !self.payload_free() {
            return None;
        }
        std::ptr::NonNull::new(ent.payload.ptr)
    }

    fn send_buffered(self: Box<Self>, unique: u64, len: usize) -> io::Result<()> {
        let len = len.min(self.ring.ents[self.idx].payload.len());
        let header = fuse_out_header {
            len: (size_of::<fuse_out_header>() + len) as u32,
            error: 0,
            unique,
        };
        // The body is in place: write only the header and the size.
        self.ring.fill_header(self.idx, &header, len);
        self.commit(Done::InPlace(self.idx));
        Ok(())
    }
}

/// The running ring threads, and the thread that runs requests they must not
/// ([`Filesystem::runs_on_ring`]).
pub(crate) struct Rings {
    rings: Vec<Arc<Ring>>,
    threads: Vec<JoinHandle<()>>,
    offload: Option<(mpsc::Sender<Job>, JoinHandle<()>)>,
}

impl Rings {
    /// Stops the ring threads (after the connection ended) and waits for them, then for the
    /// offload thread's last request.
    pub fn stop(self) {
        for r in &self.rings {
            r.stop.store(true, Ordering::Release);
            r.wake();
        }
        for t in self.threads {
            let _ = t.join();
        }
        if let Some(offload) = self.offload {
            stop_offload(offload);
        }
    }
}

/// Rings with their entries' memory, made before the INIT reply: once the kernel has taken
/// FUSE_OVER_IO_URING it holds every request until the ring is ready, so whatever can fail
/// (memory, io_uring setup) must fail while /dev/fuse can still be chosen instead.
pub(crate) struct Prepared {
    rings: Vec<(Arc<Ring>, Uring)>,
}

/// Allocates the entries and creates one io_uring per ring thread.
pub(crate) fn prepare(cfg: &UringConfig, payload: usize) -> io::Result<Prepared> {
    let queues = kernel_queues();
    let depth = cfg.queue_depth();
    let nthreads = cfg.ring_threads();
    let payload = payload.max(abi::MIN_READ_BUFFER);
    let mut rings = Vec::new();
    for t in 0..nthreads {
        let qids = queues_of(t, nthreads, queues);
        let depth = depth_of(t, nthreads, queues, depth);
        let n = (qids.len() * depth) as u32;
        // The cheap check first: room for the filesystem's own SQEs (device I/O) next to
        // the entries' commands (the kernel refuses more than 32768 SQEs).
        let sq = n.saturating_add(1).saturating_mul(4).next_power_of_two();
        let uring = new_ring(sq)?;
        let mut ents = Vec::new();
        for qid in qids {
            for _ in 0..depth {
                ents.push(Ent {
                    qid: qid as u16,
                    header: Buf::new(size_of::<fuse_uring_req_header>(), 64)?,
                    payload: Buf::new(payload, 4096)?,
                    in_dispatch: AtomicBool::new(false),
                });
            }
        }
        // SAFETY: eventfd(2); the descriptor is owned at once.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        let ring = Arc::new(Ring {
            ents,
            done: Mutex::new(Vec::new()),
            // SAFETY: just created, owned by nothing else.
            wake: unsafe { OwnedFd::from_raw_fd(efd) },
            thread: std::sync::OnceLock::new(),
            stop: AtomicBool::new(false),
            pinned: cfg.pinned,
        });
        rings.push((ring, uring));
    }
    Ok(Prepared { rings })
}

/// The kernel queues ring thread `t` of `threads` registers entries on: fewer threads than
/// queues share them out; more share each queue (thread `t` on queue `t % queues`), so one
/// CPU's requests, all on its queue, are spread over several threads as /dev/fuse workers
/// share theirs. The kernel hands a request to the entry freed last, so a queue's second
/// thread takes requests once the first has all of its entries busy: under load.
fn queues_of(t: usize, threads: usize, queues: usize) -> Vec<usize> {
    if threads <= queues {
        (t..queues).step_by(threads).collect()
    } else {
        vec![t % queues]
    }
}

/// Entries thread `t` registers per queue: the queue's `depth` split among its threads (no
/// more threads than `depth` share one), so `depth` stays the requests in flight per queue.
fn depth_of(t: usize, threads: usize, queues: usize, depth: usize) -> usize {
    if threads <= queues {
        return depth;
    }
    let sharing = (t % queues..threads).step_by(queues).count();
    // This thread's place among those of its queue: the first ones take the remainder.
    let place = t / queues;
    depth / sharing + usize::from(place < depth % sharing)
}

impl Prepared {
    /// Starts the ring threads and registers their entries (after the INIT reply); returns
    /// once every entry is submitted (the kernel switches to the ring when all queues have
    /// entries).
    pub(crate) fn start<F: Filesystem>(
        self,
        fd: Arc<OwnedFd>,
        shared: Arc<Shared<F>>,
    ) -> io::Result<Rings> {
        let offload = start_offload()?;
        let mut running = Rings {
            rings: Vec::new(),
            threads: Vec::new(),
            offload: None,
        };
        for (t, (ring, uring)) in self.rings.into_iter().enumerate() {
            let (r, f, s, o) = (ring.clone(), fd.clone(), shared.clone(), offload.0.clone());
            let (tx, rx) = mpsc::channel();
            let spawned = std::thread::Builder::new()
                .name(format!("fuse-ring-{t}"))
                .spawn(move || ring_thread(t, uring, r, f, s, o, tx));
            let thread = match spawned {
                Ok(thread) => thread,
                Err(e) => {
                    running.offload = Some(offload);
                    running.stop();
                    return Err(e);
                }
            };
            running.threads.push(thread);
            running.rings.push(ring);
            // Registration errors (EOPNOTSUPP, EINVAL) come back as the first completions.
            let started = match rx.recv_timeout(std::time::Duration::from_secs(5)) {
                Ok(r) => r,
                Err(_) => Err(io::Error::other("ring thread did not start")),
            };
            if let Err(e) = started {
                running.offload = Some(offload);
                running.stop();
                return Err(e);
            }
        }
        running.offload = Some(offload);
        Ok(running)
    }
}

/// A URING_CMD for entry `idx`.
fn command(
    fd: i32,
    ent: &Ent,
    idx: usize,
    cmd: u32,
    commit_id: u64,
    iov: *const libc::iovec,
) -> squeue::Entry128 {
    let req = fuse_uring_cmd_req {
        flags: 0,
        commit_id,
        qid: ent.qid,
        padding: [0; 6],
    };
    let mut area = [0u8; 80];
    area[..size_of::<fuse_uring_cmd_req>()].copy_from_slice(abi::bytes(&req));
    let mut op = opcode::UringCmd80::new(types::Fd(fd), cmd).cmd(area);
    if cmd == FUSE_IO_URING_CMD_REGISTER {
        op = op.addr(Some(iov as u64));
    }
    let sqe = op.build().user_data(idx as u64);
    if cmd != FUSE_IO_URING_CMD_REGISTER {
        return sqe;
    }
    // REGISTER wants sqe->len = 2 (header and payload iovecs), which the crate's builder does
    // not set: patch the `len` field (offset 24 of io_uring_sqe).
    // SAFETY: Entry128 is repr(C), 128 bytes of plain integers.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(sqe) };
    raw[24..28].copy_from_slice(&2u32.to_ne_bytes());
    // SAFETY: the same bytes with one integer field changed.
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(raw) }
}

fn ring_thread<F: Filesystem>(
    thread: usize,
    uring: Uring,
    ring: Arc<Ring>,
    fd: Arc<OwnedFd>,
    shared: Arc<Shared<F>>,
    offload: mpsc::Sender<Job>,
    started: mpsc::Sender<io::Result<()>>,
) {
    let _ = ring.thread.set(std::thread::current().id());
    if ring.pinned {
        pin_to_its_cpus(&ring);
    }
    let raw = fd.as_raw_fd();
    let proto = shared.proto.get().copied().unwrap_or_default();
    // The iovecs REGISTER points at: read by the kernel during submission only.
    let iovs: Vec<[libc::iovec; 2]> = ring
        .ents
        .iter()
        .map(|e| {
            [
                libc::iovec {
                    iov_base: e.header.ptr.cast(),
                    iov_len: e.header.len(),
                },
                libc::iovec {
                    iov_base: e.payload.ptr.cast(),
                    iov_len: e.payload.len(),
                },
            ]
        })
        .collect();
    // The single issuer is the thread that enables the ring (EBADFD: a plain ring, enabled).
    if let Err(e) = uring.submitter().register_enable_rings() {
        if e.raw_os_error() != Some(libc::EBADFD) {
            let _ = started.send(Err(e));
            return;
        }
    }
    let n = ring.ents.len();
    // The last command per entry (to resubmit on EAGAIN/EINTR) and its commit id.
    let mut last: Vec<(u32, u64)> = vec![(FUSE_IO_URING_CMD_REGISTER, 0); n];
    let mut live = n;
    let ctx = RingCtx::new(&uring, thread, false);
    for (i, e) in ring.ents.iter().enumerate() {
        ctx.push_command(&command(
            raw,
            e,
            i,
            FUSE_IO_URING_CMD_REGISTER,
            0,
            iovs[i].as_ptr(),
        ));
    }
    let poll = opcode::PollAdd::new(types::Fd(ring.wake.as_raw_fd()), libc::POLLIN as u32)
        .build()
        .user_data(WAKE);
    ctx.push_command(&poll.clone().into());
    if let Err(e) = uring.submit() {
        let _ = started.send(Err(e));
        return;
    }
    // A REGISTER fails at once (its completion is posted during the submit); a good one
    // completes only when a request comes. So what is in the queue now tells.
    let mut cqes = Vec::new();
    ctx.take_completions(&mut cqes);
    let failed = cqes
        .iter()
        .find(|&&(d, r)| d != WAKE && r < 0 && r != -libc::EAGAIN && r != -libc::EINTR);
    let _ = started.send(match failed {
        Some(&(_, r)) => Err(io::Error::from_raw_os_error(-r)),
        None => Ok(()),
    });
    loop {
        let mut unhandled = cqes.len();
        for (data, res) in cqes.drain(..) {
            unhandled -= 1;
            ctx.set_unhandled(unhandled);
            if data == WAKE {
                let mut v = 0u64;
                // SAFETY: reads 8 bytes into a local from our non-blocking eventfd.
                unsafe { libc::read(ring.wake.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
                ctx.push_command(&poll.clone().into());
                continue;
            }
            if data & FS_BIT != 0 {
                ctx.hand_back(&shared.fs, data, res);
                continue;
            }
            let idx = data as usize;
            if idx >= n {
                continue;
            }
            if res < 0 {
                match -res {
                    libc::EAGAIN | libc::EINTR => {
                        let (cmd, id) = last[idx];
                        let sqe = command(raw, &ring.ents[idx], idx, cmd, id, iovs[idx].as_ptr());
                        ctx.push_command(&sqe);
                    }
                    e => {
                        // ENOTCONN/ECONNABORTED: the connection ended (unmount).
                        if !matches!(e, libc::ENOTCONN | libc::ECONNABORTED | libc::ENODEV) {
                            let e = io::Error::from_raw_os_error(e);
                            log::warn!("fuse ring entry {idx}: {e}");
                        }
                        live -= 1;
                    }
                }
                continue;
            }
            last[idx].1 = handle(&ring, idx, &shared, &proto, &ctx, &offload);
        }
        // Commit what was answered (inline or from other threads) and fetch the next.
        let done = std::mem::take(&mut *ring.done.lock());
        for d in done {
            let idx = match d {
                Done::InPlace(idx) => idx,
                Done::Owned(idx, header, body) => {
                    ring.fill(idx, &header, &[&body]);
                    idx
                }
            };
            last[idx].0 = FUSE_IO_URING_CMD_COMMIT_AND_FETCH;
            let cmd = FUSE_IO_URING_CMD_COMMIT_AND_FETCH;
            let sqe = command(
                raw,
                &ring.ents[idx],
                idx,
                cmd,
                last[idx].1,
                iovs[idx].as_ptr(),
            );
            ctx.push_command(&sqe);
        }
        if live == 0 || ring.stop.load(Ordering::Acquire) {
            break;
        }
        if let Err(e) = ctx.wait() {
            log::warn!("io_uring wait: {e}");
            break;
        }
        ctx.take_completions(&mut cqes);
    }
    if !ctx.finish(&shared.fs, cqes) {
        // The kernel may still fill entries' payloads and the filesystem's buffers.
        std::mem::forget(ring);
        std::mem::forget(uring);
    }
}

/// A ring thread runs on the CPUs of the queues it serves: the kernel queues a request on the
/// CPU that issued it, and an answer from another CPU costs a cross-CPU wake-up each way. The
/// price: the thread shares those CPUs with the application, so where device I/O leaves a CPU
/// idle (disks) a free thread does better. CPUs this process may not use (a cpuset, offline)
/// are left out; with none left the thread stays free.
fn pin_to_its_cpus(ring: &Ring) {
    let size = size_of::<libc::cpu_set_t>();
    let setsize = 8 * size;
    // SAFETY: zeroed cpu_set_t values are empty sets; the CPU_* calls stay below setsize and
    // sched_{get,set}affinity get the sets' own size.
    unsafe {
        let mut allowed: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size, &mut allowed) != 0 {
            return;
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for e in &ring.ents {
            let cpu = e.qid as usize;
            if cpu < setsize && libc::CPU_ISSET(cpu, &allowed) {
                libc::CPU_SET(cpu, &mut set);
            }
        }
        let queues: std::collections::BTreeSet<u16> = ring.ents.iter().map(|e| e.qid).collect();
        if libc::CPU_COUNT(&set) == 0 {
            // A CPU that is offline (or outside our cpuset) has no requests to serve.
            log::info!(
                "fuse ring thread of queues {queues:?}: their CPUs are not ours: not pinned"
            );
        } else if libc::sched_setaffinity(0, size, &set) != 0 {
            let e = io::Error::last_os_error();
            log::warn!("fuse ring thread of queues {queues:?}: not pinned: {e}");
        }
    }
}

/// Decodes entry `idx`'s request and dispatches it (or hands it to the offload thread);
/// returns its commit id.
fn handle<F: Filesystem>(
    ring: &Arc<Ring>,
    idx: usize,
    shared: &Arc<Shared<F>>,
    proto: &Proto,
    ctx: &RingCtx<'_>,
    to_offload: &mpsc::Sender<Job>,
) -> u64 {
    let ent = &ring.ents[idx];
    // SAFETY: the kernel filled the header buffer before completing the command; we copy it
    // out, so no borrow of it outlives this line.
    let h: fuse_uring_req_header = unsafe { std::ptr::read_unaligned(ent.header.ptr.cast()) };
    let commit_id = h.ring_ent_in_out.commit_id;
    let Some(inh) = abi::read::<fuse_in_header>(&h.in_out) else {
        return commit_id;
    };
    let size = (h.ring_ent_in_out.payload_sz as usize).min(ent.payload.len());
    let arg0_len = request::first_arg_len(inh.opcode, proto).min(FUSE_URING_OP_IN_OUT_SZ);
    ent.in_dispatch.store(true, Ordering::Release);
    // SAFETY: the payload is ours until we commit; replies sent while this borrow lives copy
    // their bytes elsewhere (in_dispatch).
    let rest = unsafe { std::slice::from_raw_parts(ent.payload.ptr, size) };
    let sink = Box::new(UringSink {
        ring: ring.clone(),
        idx,
        req_payload: size,
    });
    match request::decode(&inh, &h.op_in[..arg0_len], rest, proto) {
        Ok(req) if !shared.fs.runs_on_ring(&req, ctx) => {
            // Copied: the offload thread decodes its own copy (the payload is the reply's).
            let (arg0, rest) = (h.op_in[..arg0_len].to_vec(), rest.to_vec());
            let (shared, proto) = (shared.clone(), *proto);
            let job: Job = Box::new(move || {
                let reply = Reply::new(inh.unique, sink);
                match request::decode(&inh, &arg0, &rest, &proto) {
                    Ok(req) => shared.dispatch(req, reply, None),
                    Err(_) => reply.error(libc::EIO),
                }
            });
            // The offload thread outlives the ring threads (Rings::stop).
            offload(to_offload, job);
        }
        Ok(req) => shared.dispatch(req, Reply::new(inh.unique, sink), Some(ctx)),
        Err(e) => {
            log::warn!("undecodable request over io_uring: {e}");
            Reply::new(inh.unique, sink).error(libc::EIO);
        }
    }
    ent.in_dispatch.store(false, Ordering::Release);
    commit_id
}

#[cfg(test)]
#[path = "uring_tests.rs"]
mod tests;
