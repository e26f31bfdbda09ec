//! A FUSE session: INIT negotiation, then the /dev/fuse transport (N worker threads reading
//! requests, each from its own cloned descriptor if asked), and the io_uring transport when
//! negotiated. Requests go to a [`Filesystem`]; forgets and interrupts are routed here.
//! The session ends when the kernel says the connection is gone (ENODEV: unmounted).

use crate::abi::{self, *};
use crate::dev_ring;
use crate::lent_ring::{self, RingCtx};
use crate::payload::MsgBuf;
use crate::reply::{DevSink, Reply};
use crate::request::{self, Operation, Proto, ReadInto, Request};
use crate::uring::{self, UringConfig};
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

/// What a filesystem implements. Every method takes `&self` and may be called from several
/// threads at once; a [`Reply`] may be answered later, from any thread.
pub trait Filesystem: Send + Sync + 'static {
    /// INIT was negotiated; called before the kernel sees the INIT reply, so before any request.
    fn init(&self, _info: &InitInfo) {}
    /// Every request that takes a reply (all but FORGET, BATCH_FORGET, INTERRUPT, INIT,
    /// DESTROY). Data in `req` borrows the transport's buffer: copy what must outlive the call.
    fn request(&self, req: Request<'_>, reply: Reply);
    /// A request taken by a thread that waits on an io_uring of its own (a FUSE-over-io_uring
    /// ring thread, or a /dev/fuse worker with `dev_ring`: [`RingCtx::reads_dev_fuse`]): `ring`
    /// queues device I/O on that io_uring (its completions come to `ring_completion` on this
    /// thread). Over io_uring a WRITE's `data` lies in the ring entry's payload and stays there
    /// unchanged until the request is answered, so a device write may point at it (no copy);
    /// over /dev/fuse only while the request holds its buffer (`Payload`). By default the same
    /// as [`Filesystem::request`].
    fn request_on_ring(&self, req: Request<'_>, reply: Reply, ring: &RingCtx<'_>) {
        let _ = ring;
        self.request(req, reply)
    }
    /// Whether `req`, taken by a thread that waits on its own io_uring, may run there now.
    /// `false` hands it to the session's offload thread: for a request that could wait for
    /// something only this thread's own completions release (see
    /// [`RingCtx::own_in_flight`]). By default: yes.
    fn runs_on_ring(&self, _req: &Request<'_>, _ring: &RingCtx<'_>) -> bool {
        true
    }
    /// The completion of an SQE the filesystem queued through a [`RingCtx`].
    fn ring_completion(&self, _ring: &RingCtx<'_>, _user_data: u64, _result: i32) {}
    /// The kernel dropped `nlookup` references to `nodeid`.
    fn forget(&self, _nodeid: u64, _nlookup: u64) {}
    /// The caller of request `unique` was interrupted: answer it soon (EINTR is fine).
    fn interrupt(&self, _unique: u64) {}
    /// The session ends (DESTROY, or unmount); called once.
    fn destroy(&self) {}
}

/// What we ask of the kernel at INIT.
#[derive(Debug, Clone)]
pub struct Config {
    /// Largest WRITE (the kernel caps it at max_pages pages).
    pub max_write: u32,
    /// Readahead we accept (the kernel's offer is the upper bound).
    pub max_readahead: u32,
    pub max_background: u16,
    pub congestion_threshold: u16,
    /// Timestamp granularity in ns.
    pub time_gran: u32,
    /// INIT flags we want; only those the kernel offers are kept.
    pub want: u64,
    /// /dev/fuse worker threads.
    pub threads: usize,
    /// Each worker reads its own descriptor (FUSE_DEV_IOC_CLONE): no shared wait queue.
    pub clone_fd: bool,
    /// Each /dev/fuse worker has an io_uring of its own, which the filesystem's device I/O
    /// completes on and which it waits on while that I/O is in flight (see `dev_ring`). Where
    /// a ring cannot be set up, the worker is a plain read(2) worker
    /// ([`Running::dev_ring_workers`] counts those with a ring).
    pub dev_ring: bool,
    /// Ask for FUSE over io_uring with these queues (used only where the kernel offers it).
    pub uring: Option<UringConfig>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_write: 1 << 20,
            max_readahead: 1 << 20,
            max_background: 64,
            congestion_threshold: 48,
            time_gran: 1,
            want: FUSE_ASYNC_READ
                | FUSE_BIG_WRITES
                | FUSE_PARALLEL_DIROPS
                | FUSE_ASYNC_DIO
                | FUSE_MAX_PAGES
                | FUSE_SETXATTR_EXT
                | FUSE_INIT_EXT,
            threads: 2,
            clone_fd: false,
            dev_ring: false,
            uring: None,
        }
    }
}

/// What INIT settled (for `stripefs status`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InitInfo {
    pub kernel_major: u32,
    pub kernel_minor: u32,
    /// The minor in use.
    pub minor: u32,
    /// What the kernel offered.
    pub kernel_flags: u64,
    /// What we took (a subset of the offer).
    pub flags: u64,
    pub max_write: u32,
    pub max_readahead: u32,
    pub max_pages: u16,
    /// Requests travel over io_uring (negotiated and the queues registered).
    pub uring: bool,
    /// Why not, when io_uring was asked for and does not run.
    pub uring_unavailable: Option<String>,
}

impl InitInfo {
    /// The transport requests travel over, for status lines and bench headers.
    pub fn transport(&self) -> &'static str {
        if self.uring {
            "io_uring"
        } else {
            "/dev/fuse"
        }
    }
}

/// What both transports share.
pub(crate) struct Shared<F> {
    pub fs: F,
    pub proto: OnceLock<Proto>,
    destroyed: AtomicBool,
    /// /dev/fuse workers with rings of their own (`dev_ring`).
    pub dev_ring_workers: Arc<AtomicUsize>,
}

impl<F: Filesystem> Shared<F> {
    fn destroy_once(&self) {
        if !self.destroyed.swap(true, Ordering::AcqRel) {
            self.fs.destroy();
        }
    }

    /// Routes one decoded request (any transport). INIT is the session's and never comes here.
    /// A handler that panics costs its own request (EIO, from the reply dropped on the way
    /// out), not the thread that serves the others: a session whose threads died one panic
    /// at a time would leave every caller waiting.
    pub fn dispatch(&self, req: Request<'_>, reply: Reply, ring: Option<&RingCtx<'_>>) {
        let unique = req.unique;
        let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.route(req, reply, ring)
        }));
        if let Err(panic) = served {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            log::error!("request {unique}: the filesystem panicked ({what}); answered EIO");
        }
    }

    fn route(&self, req: Request<'_>, reply: Reply, ring: Option<&RingCtx<'_>>) {
        match req.op {
            Operation::Forget { nlookup } => {
                self.fs.forget(req.nodeid, nlookup);
                reply.no_reply();
            }
            Operation::BatchForget { ref forgets } => {
                for &(nodeid, nlookup) in forgets {
                    self.fs.forget(nodeid, nlookup);
                }
                reply.no_reply();
            }
            Operation::Interrupt { unique } => {
                self.fs.interrupt(unique);
                reply.no_reply();
            }
            Operation::Destroy => {
                self.destroy_once();
                reply.ok();
            }
            Operation::Init(_) => reply.error(libc::EIO),
            Operation::Unknown { .. } => reply.error(libc::ENOSYS),
            _ => match ring {
                Some(ring) => self.fs.request_on_ring(req, reply, ring),
                None => self.fs.request(req, reply),
            },
        }
    }
}

/// A mounted connection to serve.
pub struct Session<F> {
    fd: Arc<OwnedFd>,
    shared: Arc<Shared<F>>,
    config: Config,
    info: Arc<OnceLock<InitInfo>>,
}

/// A session served on background threads.
pub struct Running {
    info: Arc<OnceLock<InitInfo>>,
    thread: JoinHandle<io::Result<()>>,
    dev_ring_workers: Arc<AtomicUsize>,
}

impl Running {
    /// /dev/fuse workers with rings of their own now (`Config::dev_ring`).
    pub fn dev_ring_workers(&self) -> Arc<AtomicUsize> {
        self.dev_ring_workers.clone()
    }

    /// INIT's outcome, once negotiated (None before).
    pub fn info(&self) -> Option<&InitInfo> {
        self.info.get()
    }

    /// Waits for INIT, at most `timeout`.
    pub fn wait_init(&self, timeout: std::time::Duration) -> Option<&InitInfo> {
        let end = std::time::Instant::now() + timeout;
        while self.info.get().is_none() && std::time::Instant::now() < end {
            if self.thread.is_finished() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        self.info.get()
    }

    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }

    /// Waits until the session ends (after the unmount).
    pub fn join(self) -> io::Result<()> {
        self.thread
            .join()
            .map_err(|_| io::Error::other("session thread panicked"))?
    }
}

/// A read buffer big enough for the largest request.
fn buffer_size(max_write: u32) -> usize {
    (max_write as usize + 64 * 1024).max(abi::MIN_READ_BUFFER)
}

/// What one read of /dev/fuse gave.
pub(crate) enum Read {
    /// A message of this many bytes.
    Message(usize),
    /// Nothing now (a non-blocking descriptor).
    Nothing,
    /// The connection is gone.
    Gone,
}

/// Reads one message; on a non-blocking descriptor, `Nothing` when none waits.
pub(crate) fn read_message(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<Read> {
    loop {
        // SAFETY: reads into a buffer we own, within its length.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n > 0 {
            return Ok(Read::Message(n as usize));
        }
        if n == 0 {
            // /dev/fuse never reads 0 bytes; anything else that does has hung up.
            return Ok(Read::Gone);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) => return Ok(Read::Nothing),
            // Interrupted, or the request was answered/aborted before we read it.
            Some(libc::EINTR) | Some(libc::ENOENT) => continue,
            Some(libc::ENODEV) | Some(libc::ECONNABORTED) => return Ok(Read::Gone),
            _ => return Err(e),
        }
    }
}

/// Reads one message, waiting for it; Ok(None) when the connection is gone.
fn read_request(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    loop {
        match read_message(fd, buf)? {
            Read::Message(n) => return Ok(Some(n)),
            Read::Nothing => continue,
            Read::Gone => return Ok(None),
        }
    }
}

impl<F: Filesystem> Session<F> {
    /// A session on `fd`, a /dev/fuse descriptor already mounted (see [`crate::mount`]).
    pub fn new(fd: OwnedFd, fs: F, config: Config) -> Session<F> {
        Session {
            fd: Arc::new(fd),
            shared: Arc::new(Shared {
                fs,
                proto: OnceLock::new(),
                destroyed: AtomicBool::new(false),
                dev_ring_workers: Arc::default(),
            }),
            config,
            info: Arc::new(OnceLock::new()),
        }
    }

    /// Sends notifications (cache invalidations) to the kernel.
    pub fn notifier(&self) -> Notifier {
        Notifier {
            sink: DevSink::new(self.fd.clone()),
        }
    }

    /// Serves on background threads.
    pub fn spawn(self) -> io::Result<Running> {
        let dev_ring_workers = self.shared.dev_ring_workers.clone();
        let info = self.info.clone();
        let thread = std::thread::Builder::new()
            .name("fuse-session".into())
            .spawn(move || self.run())?;
        Ok(Running {
            info,
            thread,
            dev_ring_workers,
        })
    }

    /// Negotiates INIT, then serves until the connection goes away.
    pub fn run(self) -> io::Result<()> {
        let mut buf = vec![0u8; buffer_size(self.config.max_write)];
        let (mut info, prepared) = loop {
            let Some(n) = read_request(&self.fd, &mut buf)? else {
                self.shared.destroy_once();
                return Ok(());
            };
            if let Some(done) = self.init(&buf[..n])? {
                break done;
            }
        };
        // The io_uring queues register only after the kernel has taken the INIT reply. From
        // then on the kernel holds every request until the ring is ready: a failure here ends
        // the session (its descriptor closes, which fails the waiting callers) rather than
        // leave the mount hanging.
        let mut ring = None;
        if let Some(prepared) = prepared {
            match prepared.start(self.fd.clone(), self.shared.clone()) {
                Ok(r) => {
                    info.uring = true;
                    ring = Some(r);
                }
                Err(e) => {
                    log::error!("FUSE over io_uring negotiated but its queues failed: {e}");
                    self.shared.destroy_once();
                    return Err(io::Error::new(
                        e.kind(),
                        format!("io_uring queue registration: {e}"),
                    ));
                }
            }
        }
        let _ = self.info.set(info);
        // Requests a worker waiting on its own ring must not run (`Filesystem::runs_on_ring`)
        // go to an offload thread, as over io_uring.
        let offload = match (self.config.dev_ring && ring.is_none()).then(lent_ring::start_offload)
        {
            Some(Ok(o)) => Some(o),
            Some(Err(e)) => {
                log::warn!("fuse offload thread: {e}; the workers wait in read(2)");
                None
            }
            None => None,
        };
        let mut workers = Vec::new();
        let clone = self.config.clone_fd;
        for i in 1..self.config.threads.max(1) {
            let (session, shared) = (self.fd.clone(), self.shared.clone());
            let offload = offload.as_ref().map(|o| o.0.clone());
            let size = buf.len();
            let spawned = std::thread::Builder::new()
                .name(format!("fuse-dev-{i}"))
                .spawn(move || {
                    let own = || worker_fd(&session, clone);
                    work(i, &session, own, &shared, size, offload.as_ref())
                });
            match spawned {
                Ok(w) => workers.push(w),
                Err(e) => log::warn!("fuse worker {i}: {e}; serving with fewer"),
            }
        }
        let own_fd = || self.fd.clone();
        let offload_tx = offload.as_ref().map(|o| &o.0);
        let mut result = work(0, &self.fd, own_fd, &self.shared, buf.len(), offload_tx);
        // Every worker is waited for (and the offload thread after them) before DESTROY.
        for w in workers {
            let r = w
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("fuse worker panicked")));
            if result.is_ok() {
                result = r;
            }
        }
        if let Some(offload) = offload {
            lent_ring::stop_offload(offload);
        }
        if let Some(r) = ring {
            r.stop();
        }
        self.shared.destroy_once();
        result
    }

    /// Answers one message read before INIT was settled; the outcome once it is.
    fn init(&self, msg: &[u8]) -> io::Result<Option<(InitInfo, Option<uring::Prepared>)>> {
        let sink = DevSink::new(self.fd.clone());
        let req = match request::parse(msg, &Proto::default()) {
            Ok(r) => r,
            Err(e) => {
                log::warn!("before INIT: {e}");
                if let Some(h) = abi::read::<fuse_in_header>(msg) {
                    let _ = sink.write(h.unique, -libc::EIO, &[]);
                }
                return Ok(None);
            }
        };
        let Operation::Init(k) = req.op else {
            // Nothing but INIT is valid first.
            let _ = sink.write(req.unique, -libc::EIO, &[]);
            return Ok(None);
        };
        let ours = fuse_init_out {
            major: KERNEL_VERSION,
            minor: KERNEL_MINOR_VERSION,
            ..Default::default()
        };
        if k.major > KERNEL_VERSION {
            // The kernel retries INIT with our major.
            sink.write(req.unique, 0, &[abi::bytes(&ours)])?;
            return Ok(None);
        }
        if k.major < KERNEL_VERSION || k.minor < MIN_KERNEL_MINOR_VERSION {
            sink.write(req.unique, -libc::EPROTO, &[])?;
            return Err(io::Error::other(format!(
                "kernel FUSE protocol {}.{} is older than 7.{MIN_KERNEL_MINOR_VERSION}",
                k.major, k.minor
            )));
        }
        let c = &self.config;
        let mut want = c.want | FUSE_INIT_EXT | FUSE_MAX_PAGES;
        if c.uring.is_some() {
            want |= FUSE_OVER_IO_URING;
        }
        let mut flags = want & k.flags;
        let max_pages = c.max_write.div_ceil(4096).clamp(1, u16::MAX as u32) as u16;
        let minor = k.minor.min(KERNEL_MINOR_VERSION);
        let _ = self.shared.proto.set(Proto {
            minor,
            setxattr_ext: flags & FUSE_SETXATTR_EXT != 0,
        });
        // Rings are made now, while /dev/fuse can still be chosen if that fails.
        let mut prepared = None;
        let mut setup_failed = None;
        if flags & FUSE_OVER_IO_URING != 0 {
            let payload = (c.max_write as usize).max(max_pages as usize * 4096);
            match uring::prepare(&c.uring.clone().unwrap_or_default(), payload) {
                Ok(p) => prepared = Some(p),
                Err(e) => {
                    log::warn!("io_uring setup failed ({e}): serving over /dev/fuse");
                    flags &= !FUSE_OVER_IO_URING;
                    setup_failed = Some(format!("io_uring setup failed: {e}"));
                }
            }
        }
        let uring_unavailable = if setup_failed.is_some() {
            setup_failed
        } else if c.uring.is_none() {
            None
        } else if k.flags & FUSE_OVER_IO_URING == 0 {
            let why = uring::why_unavailable();
            // The one line `transport = "auto"` owes the administrator.
            log::info!("FUSE over io_uring unavailable ({why}): serving over /dev/fuse");
            Some(why)
        } else {
            None
        };
        let out = fuse_init_out {
            minor,
            max_readahead: c.max_readahead.min(k.max_readahead),
            flags: flags as u32,
            flags2: (flags >> 32) as u32,
            max_background: c.max_background,
            congestion_threshold: c.congestion_threshold,
            max_write: c.max_write,
            time_gran: c.time_gran,
            max_pages,
            ..ours
        };
        let info = InitInfo {
            kernel_major: k.major,
            kernel_minor: k.minor,
            minor,
            kernel_flags: k.flags,
            flags,
            max_write: c.max_write,
            max_readahead: out.max_readahead,
            max_pages,
            uring: false,
            uring_unavailable,
        };
        self.shared.fs.init(&info);
        sink.write(req.unique, 0, &[abi::bytes(&out)])?;
        log::debug!("FUSE INIT 7.{minor}, flags {flags:#x}");
        Ok(Some((info, prepared)))
    }
}

/// Opens a new /dev/fuse descriptor attached to `fd`'s connection.
pub(crate) fn clone_fd(fd: &OwnedFd, flags: i32) -> io::Result<OwnedFd> {
    // SAFETY: open(2) with a valid C string; the descriptor is owned at once.
    let raw = unsafe {
        libc::open(
            c"/dev/fuse".as_ptr(),
            libc::O_RDWR | libc::O_CLOEXEC | flags,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just opened, owned by nothing else.
    let new = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut master: u32 = fd.as_raw_fd() as u32;
    // SAFETY: the ioctl reads one u32 from the pointer.
    if unsafe { libc::ioctl(new.as_raw_fd(), FUSE_DEV_IOC_CLONE, &mut master) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(new)
}

/// Room for the next message in `buf`; a buffer the filesystem still shares (a WRITE's data
/// it kept) is left to it.
pub(crate) fn free_space(buf: &mut Arc<MsgBuf>, size: usize) -> &mut [u8] {
    if Arc::get_mut(buf).is_none() {
        *buf = Arc::new(MsgBuf::new(size));
    }
    Arc::get_mut(buf).expect("a buffer nobody shares").space()
}

/// A worker's descriptor for reading /dev/fuse: its own clone (`clone_fd`), else a dup of
/// the session's, else the session's itself (failing would leave the workers already started
/// serving a session that returned).
fn worker_fd(session: &Arc<OwnedFd>, clone: bool) -> Arc<OwnedFd> {
    match clone.then(|| clone_fd(session, 0)) {
        Some(Ok(fd)) => Arc::new(fd),
        Some(Err(e)) => {
            log::warn!("FUSE_DEV_IOC_CLONE: {e}; the worker shares the descriptor");
            session.clone()
        }
        // Its own handle on the same descriptor: every reply holds one, and a count all
        // workers shared would be written from every CPU on every request.
        None => match session.try_clone() {
            Ok(fd) => Arc::new(fd),
            Err(e) => {
                log::warn!("dup of /dev/fuse: {e}; the worker shares the session's");
                session.clone()
            }
        },
    }
}

/// /dev/fuse worker `i`: on a ring of its own when `offload` is given and one can be set up
/// (`dev_ring`), else reading the descriptor `fd` makes.
fn work<F: Filesystem>(
    i: usize,
    session: &OwnedFd,
    fd: impl FnOnce() -> Arc<OwnedFd>,
    shared: &Arc<Shared<F>>,
    size: usize,
    offload: Option<&std::sync::mpsc::Sender<lent_ring::Job>>,
) -> io::Result<()> {
    if let Some(offload) = offload {
        match dev_ring::Worker::new(i, session) {
            Ok(w) => return w.serve(shared, size, offload),
            Err(e) => log::warn!("fuse worker {i}: no ring of its own ({e}); it reads /dev/fuse"),
        }
    }
    serve(&fd(), shared, size)
}

/// One /dev/fuse worker: read, decode, dispatch, until the connection goes away.
pub(crate) fn serve<F: Filesystem>(
    fd: &Arc<OwnedFd>,
    shared: &Shared<F>,
    size: usize,
) -> io::Result<()> {
    let mut buf = Arc::new(MsgBuf::new(size));
    let proto = shared.proto.get().copied().unwrap_or_default();
    loop {
        let Some(n) = read_request(fd, free_space(&mut buf, size))? else {
            return Ok(());
        };
        if let Some(req) = decode_message(fd, &buf, n, &proto) {
            let reply = Reply::new(req.unique, Box::new(DevSink::new(fd.clone())));
            shared.dispatch(req, reply, None);
        }
    }
}

/// Decodes the message of `n` bytes read from `fd` into `buf`; one that does not decode is
/// answered EIO here (unless it wants no answer).
pub(crate) fn decode_message<'b>(
    fd: &Arc<OwnedFd>,
    buf: &'b Arc<MsgBuf>,
    n: usize,
    proto: &Proto,
) -> Option<Request<'b>> {
    let msg = buf.message(n);
    match request::parse(msg, proto) {
        Ok(mut req) => {
            req.read_into = ReadInto(Some(buf));
            Some(req)
        }
        Err(e) => {
            log::warn!("undecodable request: {e}");
            if let Some(h) = abi::read::<fuse_in_header>(msg) {
                let no_reply = matches!(h.opcode, FUSE_FORGET | FUSE_BATCH_FORGET | FUSE_INTERRUPT);
                if !no_reply {
                    let _ = DevSink::new(fd.clone()).write(h.unique, -libc::EIO, &[]);
                }
            }
            None
        }
    }
}

/// Tells the kernel to drop what it cached. Cheap to clone; usable from any thread.
#[derive(Debug, Clone)]
pub struct Notifier {
    sink: DevSink,
}

impl Notifier {
    /// Drops cached data of `ino` in [off, off+len) (len 0: to the end) and its attributes.
    pub fn inval_inode(&self, ino: u64, off: i64, len: i64) -> io::Result<()> {
        let out = fuse_notify_inval_inode_out { ino, off, len };
        self.sink
            .write(0, FUSE_NOTIFY_INVAL_INODE, &[abi::bytes(&out)])
    }

    /// Drops the cached entry `name` of directory `parent`.
    pub fn inval_entry(&self, parent: u64, name: &OsStr) -> io::Result<()> {
        let out = fuse_notify_inval_entry_out {
            parent,
            namelen: name.len() as u32,
            flags: 0,
        };
        self.sink.write(
            0,
            FUSE_NOTIFY_INVAL_ENTRY,
            &[abi::bytes(&out), name.as_bytes(), b"\0"],
        )
    }

    /// Tells the kernel `child` named `name` in `parent` is gone.
    pub fn delete(&self, parent: u64, child: u64, name: &OsStr) -> io::Result<()> {
        let out = fuse_notify_delete_out {
            parent,
            child,
            namelen: name.len() as u32,
            padding: 0,
        };
        self.sink.write(
            0,
            FUSE_NOTIFY_DELETE,
            &[abi::bytes(&out), name.as_bytes(), b"\0"],
        )
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
