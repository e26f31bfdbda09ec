//! The FUSE boundary: fusewire's requests translated into engine and namespace calls, errors
//! into errnos. One `request` dispatches on the operation; the bodies live by group in
//! `attrs` (nodes and attributes), `dirs`, `data` (open files) and `xattrs`.

mod attrs;
mod data;
mod dirs;
mod xattrs;

use crate::engine::{Caller, Engine};
use crate::error::Result;
use crate::namespace::{Inode, Kind, NewNode, Time};
use dashmap::DashMap;
use fusewire::abi::{self, fuse_attr};
use fusewire::reply::{Entry, Reply};
use fusewire::request::{Operation, Request, TimeOrNow};
use fusewire::session::{Filesystem, InitInfo, Notifier};
use mountcfg::DirectIo;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

const MAX_WRITE: u32 = 1 << 20;
const BLOCK: u32 = 4096;

/// One open directory stream: the entries as they were at opendir (or rewind).
type DirSnapshot = Arc<Vec<(Vec<u8>, u64, Kind)>>;

/// A ring thread's io_uring, lent to the volume's engine while the thread runs our code.
struct Lender<'a, 'b>(&'a fusewire::RingCtx<'b>);

impl stripe::LentRing for Lender<'_, '_> {
    unsafe fn push(
        &self,
        sqe: fusewire::io_uring::squeue::Entry,
        user_data: u64,
    ) -> std::io::Result<()> {
        // SAFETY: the engine keeps what the SQE points to alive until its completion.
        unsafe { self.0.push(sqe, user_data) }
    }

    fn submit(&self) {
        self.0.submit();
    }
}

pub struct StripeFs {
    engine: Arc<Engine>,
    ttl: Duration,
    dirs: DashMap<u64, DirSnapshot>,
    next_fh: AtomicU64,
    /// POSIX ACLs are enforced (FUSE_POSIX_ACL: the kernel checks them, the daemon keeps
    /// them and the mode in step); without it they are refused (EOPNOTSUPP). Set at INIT.
    acl: AtomicBool,
    /// One thread reads /dev/fuse (`[mount] threads = 1`): it never does a request's device
    /// I/O itself, or requests queued behind it would reach the devices one at a time.
    lone_reader: bool,
    /// The kernel leaves the umask to the daemon (FUSE_DONT_MASK), for default ACLs.
    dont_mask: AtomicBool,
    /// Tells the kernel what changed behind its back (a file's data moved by a collapse or
    /// insert): set once the session exists.
    pub kernel: Arc<OnceLock<Notifier>>,
}

impl StripeFs {
    pub fn new(engine: Arc<Engine>) -> StripeFs {
        StripeFs {
            ttl: engine.config.mount.attr_timeout,
            lone_reader: engine.config.mount.fuse_threads(engine.caching.is_some()) == 1,
            engine,
            dirs: DashMap::new(),
            next_fh: AtomicU64::new(1),
            acl: AtomicBool::new(false),
            dont_mask: AtomicBool::new(false),
            kernel: Arc::default(),
        }
    }

    /// What INIT asks of the kernel (only what it offers is kept; `init` sees the outcome).
    /// The same options as under fuser: its defaults (ASYNC_READ, BIG_WRITES, MAX_PAGES)
    /// plus ours. SETXATTR_EXT stays off, as it was: ACL set-group-ID is decided here.
    pub fn session_config(&self, threads: usize) -> fusewire::session::Config {
        let m = &self.engine.config.mount;
        // EXPORT_SUPPORT: lookups of "." and ".." (see `lookup`), for file handles and NFS.
        // DIRECT_IO_ALLOW_MMAP: a file opened with FOPEN_DIRECT_IO can still be mapped shared
        // (the map goes through the page cache, as on ext4 with O_DIRECT).
        let mut want = abi::FUSE_ASYNC_READ
            | abi::FUSE_BIG_WRITES
            | abi::FUSE_MAX_PAGES
            | abi::FUSE_INIT_EXT
            | abi::FUSE_ASYNC_DIO
            | abi::FUSE_PARALLEL_DIROPS
            | abi::FUSE_ATOMIC_O_TRUNC
            | abi::FUSE_EXPORT_SUPPORT
            | abi::FUSE_DIRECT_IO_ALLOW_MMAP;
        if m.writeback_cache {
            want |= abi::FUSE_WRITEBACK_CACHE;
        }
        // ACLs are enforced by the kernel's permission checks, so only where those are on.
        if m.default_permissions {
            want |= abi::FUSE_POSIX_ACL | abi::FUSE_DONT_MASK;
        }
        fusewire::session::Config {
            max_write: MAX_WRITE,
            max_readahead: MAX_WRITE,
            max_background: m.max_background,
            // fuser's default: three quarters of max_background.
            congestion_threshold: (u32::from(m.max_background) * 3 / 4) as u16,
            want,
            threads,
            dev_ring: self.dev_ring(threads),
            ..fusewire::session::Config::default()
        }
    }

    /// Do /dev/fuse workers have rings of their own (`[mount] dev_wait`)? By default where
    /// their requests' device I/O completes on those rings (the io_uring engine, a device that
    /// is not memory: a RAM-backed one is copied on the worker itself), with no cache (its
    /// requests run on its own threads) and another worker to take requests while one does
    /// a lone request's I/O itself. Measured in the README (the data path, `dev_wait`).
    fn dev_ring(&self, threads: usize) -> bool {
        let volume = &self.engine.volume;
        match self.engine.config.mount.dev_wait {
            mountcfg::DevWait::Ring => true,
            mountcfg::DevWait::Read => false,
            mountcfg::DevWait::Auto => {
                threads >= 2
                    && volume.engine_kind() == stripe::EngineKind::Uring
                    && !volume.all_in_memory()
                    && self.engine.caching.is_none()
            }
        }
    }

    fn acl(&self) -> bool {
        self.acl.load(Ordering::Relaxed)
    }

    fn attr(&self, i: &Inode) -> fuse_attr {
        // A full stripe row is the natural unit of I/O for a file.
        let blksize = i
            .layout
            .map(|l| (l.stripe_size * l.width).min(MAX_WRITE))
            .unwrap_or(BLOCK);
        let (a, m, c) = (ts(i.atime), ts(i.mtime), ts(i.ctime));
        fuse_attr {
            ino: i.ino,
            size: i.size,
            // What the objects really take, as ext4 counts a sparse file's blocks.
            blocks: match i.kind {
                Kind::File => self.engine.allocated(i).div_ceil(512),
                _ => i.size.div_ceil(BLOCK as u64) * (BLOCK as u64 / 512),
            },
            atime: a.0,
            mtime: m.0,
            ctime: c.0,
            atimensec: a.1,
            mtimensec: m.1,
            ctimensec: c.1,
            mode: mode_of_kind(i.kind) | u32::from(i.perm),
            nlink: i.nlink,
            uid: i.uid,
            gid: i.gid,
            rdev: i.rdev,
            blksize,
            flags: 0,
        }
    }

    fn entry_of(&self, i: &Inode) -> Entry {
        Entry {
            nodeid: i.ino,
            generation: 0,
            attr: self.attr(i),
            entry_ttl: self.ttl,
            attr_ttl: self.ttl,
        }
    }

    fn entry(&self, reply: Reply, r: Result<Inode>) {
        match r {
            Ok(i) => reply.entry(&self.entry_of(&i)),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn empty(reply: Reply, r: Result<()>) {
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e.errno()),
        }
    }

    /// The umask a new node's mode is masked with here: the kernel's when it left it to us.
    fn umask(&self, umask: u32) -> u16 {
        if self.dont_mask.load(Ordering::Relaxed) {
            (umask & 0o777) as u16
        } else {
            0
        }
    }

    fn open_flags(&self, flags: u32) -> u32 {
        let direct = match self.engine.config.mount.direct_io {
            DirectIo::Always => true,
            DirectIo::Never => false,
            DirectIo::Auto => flags as i32 & libc::O_DIRECT != 0,
        };
        if direct {
            abi::FOPEN_DIRECT_IO | abi::FOPEN_PARALLEL_DIRECT_WRITES
        } else {
            0
        }
    }
}

/// Seconds and nanoseconds as fuse_attr carries them (the kernel reads the seconds as signed).
fn ts(t: Time) -> (u64, u32) {
    (t.secs as u64, t.nsecs)
}

fn mode_of_kind(kind: Kind) -> u32 {
    match kind {
        Kind::File => libc::S_IFREG,
        Kind::Dir => libc::S_IFDIR,
        Kind::Symlink => libc::S_IFLNK,
        Kind::Fifo => libc::S_IFIFO,
        Kind::Socket => libc::S_IFSOCK,
        Kind::CharDev => libc::S_IFCHR,
        Kind::BlockDev => libc::S_IFBLK,
    }
}

fn kind_of_mode(mode: u32) -> Option<Kind> {
    Some(match mode & libc::S_IFMT {
        libc::S_IFREG | 0 => Kind::File,
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFLNK => Kind::Symlink,
        libc::S_IFIFO => Kind::Fifo,
        libc::S_IFSOCK => Kind::Socket,
        libc::S_IFCHR => Kind::CharDev,
        libc::S_IFBLK => Kind::BlockDev,
        _ => return None,
    })
}

fn time_of(t: TimeOrNow) -> Time {
    match t {
        TimeOrNow::Now => Time::now(),
        TimeOrNow::At(secs, nsecs) => Time { secs, nsecs },
    }
}

fn name_bytes(name: &OsStr) -> &[u8] {
    name.as_bytes()
}

impl Filesystem for StripeFs {
    fn init(&self, info: &InitInfo) {
        let missing = self.session_config(0).want & !info.flags;
        if missing != 0 {
            log::warn!("kernel lacks FUSE capabilities {missing:#x}; going on without them");
        }
        let acl = info.flags & abi::FUSE_POSIX_ACL != 0;
        self.acl.store(acl, Ordering::Relaxed);
        self.dont_mask
            .store(info.flags & abi::FUSE_DONT_MASK != 0, Ordering::Relaxed);
        if !acl {
            log::info!("POSIX ACLs are refused (EOPNOTSUPP) on this mount");
        }
    }

    /// Over io_uring a thread takes its entries' requests: while others wait for it, their
    /// device I/O must not block it. It goes on the thread's own ring, lent to the engine, and
    /// the reply is committed from its completion on this thread. A /dev/fuse worker with a
    /// ring of its own (`dev_ring`) does the same; it is one of several, unless it is the
    /// only one (`lone_reader`). Both hand a cache's requests that may wait to its threads:
    /// this thread's own completions wait for it meanwhile.
    fn request_on_ring(&self, req: Request<'_>, reply: Reply, ring: &fusewire::RingCtx<'_>) {
        crate::engine::this_is_a_ring_thread();
        let only_reader = ring.reads_dev_fuse() && self.lone_reader;
        stripe::other_requests_wait_for_this_thread(only_reader || ring.others_waiting());
        stripe::lend_ring(&Lender(ring), || self.serve(req, reply))
    }

    fn ring_completion(&self, ring: &fusewire::RingCtx<'_>, user_data: u64, result: i32) {
        // SAFETY: the engine is the only one that queues SQEs on the ring lent to it, and the
        // transport hands each completion over once.
        stripe::lend_ring(&Lender(ring), || unsafe {
            self.engine.volume.complete_lent(user_data, result)
        })
    }

    /// A request that may wait for a file's data lock (truncate, punch, migrate, a cache
    /// flush or detach) must not run on a ring thread with device I/O (or answers held back
    /// for an emulated device) of its own in flight: the read locks of those are let go by
    /// completions only this thread reaps. With a
    /// cache they also wait on its devices (a flush, a write-back), which would hold every
    /// request of the ring's CPU. Those go to the offload thread; the rest (traced: none
    /// waits for a data lock or for a thread that does) stay on the ring, an fsync handing
    /// its wait to the cache's threads.
    fn runs_on_ring(&self, req: &Request<'_>, ring: &fusewire::RingCtx<'_>) -> bool {
        let waits = match req.op {
            Operation::Setattr(ref a) => a.size.is_some(),
            Operation::Open { flags, .. } => flags as i32 & libc::O_TRUNC != 0,
            Operation::Fallocate { .. }
            | Operation::CopyFileRange { .. }
            | Operation::Lseek { .. }
            | Operation::Setxattr { .. }
            | Operation::Removexattr { .. } => true,
            _ => false,
        };
        !waits || (ring.own_in_flight() == 0 && self.engine.caching.is_none())
    }

    fn destroy(&self) {
        if let Err(e) = self.engine.shutdown() {
            log::error!("final write-back failed: {e}");
        }
    }

    fn request(&self, req: Request<'_>, reply: Reply) {
        if self.lone_reader {
            // With one thread reading /dev/fuse, requests may always be waiting for it.
            stripe::other_requests_wait_for_this_thread(true);
        }
        self.serve(req, reply)
    }
}

impl StripeFs {
    /// A request from either transport.
    fn serve(&self, req: Request<'_>, reply: Reply) {
        let ino = req.nodeid;
        let c = Caller {
            uid: req.uid,
            gid: req.gid,
            pid: req.pid,
        };
        match req.op {
            Operation::Lookup { name } => self.lookup(ino, name, reply),
            Operation::Getattr { .. } => self.getattr(ino, reply),
            Operation::Setattr(a) => self.setattr(ino, a, reply),
            Operation::Readlink => self.readlink(ino, reply),
            Operation::Mknod {
                name,
                mode,
                rdev,
                umask,
            } => self.mknod(&c, ino, name, mode, umask, rdev, reply),
            Operation::Mkdir { name, mode, umask } => self.mkdir(&c, ino, name, mode, umask, reply),
            Operation::Unlink { name } => self.unlink(ino, name, reply),
            Operation::Rmdir { name } => self.rmdir(ino, name, reply),
            Operation::Symlink { name, target } => self.symlink(&c, ino, name, target, reply),
            Operation::Rename {
                newdir,
                name,
                newname,
                flags,
            } => self.rename(&c, ino, name, newdir, newname, flags, reply),
            Operation::Link { oldnodeid, newname } => self.link(oldnodeid, ino, newname, reply),
            Operation::Open { flags, .. } => self.open(ino, flags, reply),
            Operation::Read { offset, size, .. } => self.read(ino, offset, size, reply),
            Operation::Write {
                offset,
                data,
                flags,
                ..
            } => {
                let kept = data::keep_in_place(&req);
                self.write(&c, ino, offset, data, kept, flags, reply)
            }
            Operation::Flush { .. } => reply.ok(),
            Operation::Release { .. } => self.release(ino, reply),
            Operation::Fsync { .. } => {
                // With a cache, the file's dirty lines are written back first.
                let engine = self.engine.clone();
                self.engine
                    .on_cache_thread(move || Self::empty(reply, engine.fsync(ino)))
            }
            Operation::Opendir { .. } => self.opendir(ino, reply),
            Operation::Readdir {
                fh,
                offset,
                size,
                plus,
            } => self.readdir(ino, fh, offset, size, plus, reply),
            Operation::Releasedir { fh, .. } => self.releasedir(ino, fh, reply),
            Operation::Fsyncdir { .. } => Self::empty(reply, self.engine.commit()),
            Operation::Statfs => self.statfs(reply),
            Operation::Setxattr {
                name, value, flags, ..
            } => self.setxattr(&c, ino, name, value, flags as i32, reply),
            Operation::Getxattr { name, size } => self.getxattr(&c, ino, name, size, reply),
            Operation::Listxattr { size } => self.listxattr(ino, size, reply),
            Operation::Removexattr { name } => self.removexattr(&c, ino, name, reply),
            Operation::Access { mask } => self.access(&c, ino, mask, reply),
            Operation::Create {
                name,
                flags,
                mode,
                umask,
                ..
            } => self.create(&c, ino, Some(name), mode, umask, flags, reply),
            Operation::Tmpfile {
                flags, mode, umask, ..
            } => self.create(&c, ino, None, mode, umask, flags, reply),
            Operation::Fallocate {
                offset,
                length,
                mode,
                ..
            } => Self::empty(
                reply,
                self.engine.fallocate(c, ino, offset, length, mode as i32),
            ),
            Operation::Lseek { offset, whence, .. } => {
                match self.engine.seek(ino, offset as i64, whence as i32) {
                    Ok(at) => reply.lseek(at as u64),
                    Err(e) => reply.error(e.errno()),
                }
            }
            Operation::CopyFileRange {
                off_in,
                nodeid_out,
                off_out,
                len,
                flags,
                wide,
                ..
            } => self.copy_file_range(
                &c, ino, off_in, nodeid_out, off_out, len, flags, wide, reply,
            ),
            // No ioctl is supported: ENOTTY, as ext4 answers an unknown one, and nothing
            // logged (Python's isatty sends TCGETS at every open).
            Operation::Ioctl { .. } => reply.error(libc::ENOTTY),
            // What fuser answered for these: ENOSYS (the kernel then does without).
            _ => reply.error(libc::ENOSYS),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_carry_the_file_type() {
        for k in [
            Kind::File,
            Kind::Dir,
            Kind::Symlink,
            Kind::Fifo,
            Kind::Socket,
            Kind::CharDev,
            Kind::BlockDev,
        ] {
            assert_eq!(kind_of_mode(mode_of_kind(k) | 0o644), Some(k));
        }
    }
}
