//! The FUSE boundary: fuser's callbacks translated into engine and namespace calls, errors
//! into errnos.

use crate::acl;
use crate::control;
use crate::engine::{Caller, Engine};
use crate::error::{Error, Result};
use crate::namespace::{Inode, Kind, NewNode, RenameHow, SetAttr, Time};
use dashmap::DashMap;
use fuser::{
    AccessFlags, CopyFileRangeFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use mountcfg::DirectIo;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

const MAX_WRITE: u32 = 1 << 20;
const BLOCK: u32 = 4096;

/// One open directory stream: the entries as they were at opendir (or rewind).
type DirSnapshot = Arc<Vec<(Vec<u8>, u64, Kind)>>;

pub struct StripeFs {
    engine: Arc<Engine>,
    ttl: Duration,
    dirs: DashMap<u64, DirSnapshot>,
    next_fh: AtomicU64,
    /// POSIX ACLs are enforced (FUSE_POSIX_ACL: the kernel checks them, the daemon keeps
    /// them and the mode in step); without it they are refused (EOPNOTSUPP).
    acl: bool,
    /// The kernel leaves the umask to the daemon (FUSE_DONT_MASK), for default ACLs.
    dont_mask: bool,
    /// Tells the kernel what changed behind its back (a file's data moved by a collapse or
    /// insert): set once the session exists.
    pub kernel: Arc<std::sync::OnceLock<fuser::Notifier>>,
}

impl StripeFs {
    pub fn new(engine: Arc<Engine>) -> StripeFs {
        StripeFs {
            ttl: engine.config.mount.attr_timeout,
            engine,
            dirs: DashMap::new(),
            next_fh: AtomicU64::new(1),
            acl: false,
            dont_mask: false,
            kernel: Arc::default(),
        }
    }

    fn attr(&self, i: &Inode) -> FileAttr {
        let kind = file_type(i.kind);
        // A full stripe row is the natural unit of I/O for a file.
        let blksize = i
            .layout
            .map(|l| (l.stripe_size * l.width).min(MAX_WRITE))
            .unwrap_or(BLOCK);
        FileAttr {
            ino: INodeNo(i.ino),
            size: i.size,
            // What the objects really take, as ext4 counts a sparse file's blocks.
            blocks: match i.kind {
                Kind::File => self.engine.allocated(i).div_ceil(512),
                _ => i.size.div_ceil(BLOCK as u64) * (BLOCK as u64 / 512),
            },
            atime: i.atime.into(),
            mtime: i.mtime.into(),
            ctime: i.ctime.into(),
            crtime: i.crtime.into(),
            kind,
            perm: i.perm,
            nlink: i.nlink,
            uid: i.uid,
            gid: i.gid,
            rdev: i.rdev,
            blksize,
            flags: 0,
        }
    }

    fn entry(&self, reply: ReplyEntry, r: Result<Inode>) {
        match r {
            Ok(i) => reply.entry(&self.ttl, &self.attr(&i), Generation(0)),
            Err(e) => reply.error(Errno::from_i32(e.errno())),
        }
    }

    fn empty(reply: ReplyEmpty, r: Result<()>) {
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(Errno::from_i32(e.errno())),
        }
    }

    /// A collapse or insert (`user.stripefs.shift`) moves the file's bytes behind the kernel's
    /// back: its dirty pages (writeback cache, shared maps) are written back first, to the
    /// offsets they were written at, and its cached pages and size are dropped after. The
    /// kernel writes back through the FUSE threads, so this one must not wait on a FUSE
    /// thread: it runs on the admin thread and replies from there.
    fn shift(&self, req: &Request, ino: INodeNo, value: &[u8], reply: ReplyEmpty) {
        let (engine, kernel) = (self.engine.clone(), self.kernel.clone());
        let (caller, value) = (caller(req), value.to_vec());
        self.engine.run_admin(move || {
            let invalidate = || {
                if let Some(k) = kernel.get() {
                    let _ = k.inval_inode(ino, 0, -1);
                }
            };
            invalidate();
            let r = control::set_for(&engine, &caller, ino.0, control::Key::Shift, &value);
            invalidate();
            StripeFs::empty(reply, r);
        });
    }

    /// The umask a new node's mode is masked with here: the kernel's when it left it to us.
    fn umask(&self, umask: u32) -> u16 {
        if self.dont_mask {
            (umask & 0o777) as u16
        } else {
            0
        }
    }

    fn new_node(&self, req: &Request, parent: u64, name: &OsStr, node: NewNode) -> Result<Inode> {
        // Where a layout set on the directory meanwhile could once be missed (the tests hold
        // a create here while one is set).
        faultpoint::fault_point!("fs.create");
        self.engine.ns.create(
            parent,
            name.as_bytes(),
            NewNode {
                uid: req.uid(),
                gid: req.gid(),
                ..node
            },
            self.engine.volume_layout(),
            self.engine.volume.device_count(),
        )
    }

    /// An ACL xattr: set or removed as ext4 does it when ACLs are on, refused when off.
    fn set_acl(&self, req: &Request, ino: u64, name: &[u8], value: Option<&[u8]>) -> Result<()> {
        if !self.acl {
            return Err(Error::Errno(libc::EOPNOTSUPP));
        }
        // As posix_acl_update_mode: set-group-ID falls unless root or in the file's group.
        let gid = self.engine.ns.get(ino)?.gid;
        let kill_sgid = req.uid() != 0 && !caller(req).in_group(gid);
        self.engine
            .ns
            .set_acl(ino, name == acl::DEFAULT, value, kill_sgid)
            .map(|_| ())
    }

    fn open_flags(&self, flags: i32) -> FopenFlags {
        let direct = match self.engine.config.mount.direct_io {
            DirectIo::Always => true,
            DirectIo::Never => false,
            DirectIo::Auto => flags & libc::O_DIRECT != 0,
        };
        if direct {
            FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES
        } else {
            FopenFlags::empty()
        }
    }
}

fn file_type(kind: Kind) -> FileType {
    match kind {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
        Kind::Fifo => FileType::NamedPipe,
        Kind::Socket => FileType::Socket,
        Kind::CharDev => FileType::CharDevice,
        Kind::BlockDev => FileType::BlockDevice,
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
        TimeOrNow::SpecificTime(t) => Time::from(t),
    }
}

fn caller(req: &Request) -> Caller {
    Caller {
        uid: req.uid(),
        gid: req.gid(),
        pid: req.pid(),
    }
}

fn err(e: &crate::error::Error) -> Errno {
    Errno::from_i32(e.errno())
}

impl Filesystem for StripeFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(MAX_WRITE);
        let _ = config.set_max_readahead(MAX_WRITE);
        let _ = config.set_max_background(self.engine.config.mount.max_background);
        // EXPORT_SUPPORT: lookups of "." and ".." (see `lookup`), for file handles and NFS.
        // DIRECT_IO_ALLOW_MMAP: a file opened with FOPEN_DIRECT_IO can still be mapped shared
        // (the map goes through the page cache, as on ext4 with O_DIRECT).
        let mut want = InitFlags::FUSE_ASYNC_DIO
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_ATOMIC_O_TRUNC
            | InitFlags::FUSE_EXPORT_SUPPORT
            | InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP;
        if self.engine.config.mount.writeback_cache {
            want |= InitFlags::FUSE_WRITEBACK_CACHE;
        }
        // ACLs are enforced by the kernel's permission checks, so only where those are on.
        if self.engine.config.mount.default_permissions {
            want |= InitFlags::FUSE_POSIX_ACL | InitFlags::FUSE_DONT_MASK;
        }
        if let Err(missing) = config.add_capabilities(want) {
            log::warn!("kernel lacks FUSE capabilities {missing:?}; going on without them");
            want &= !missing;
            let _ = config.add_capabilities(want);
        }
        self.acl = want.contains(InitFlags::FUSE_POSIX_ACL);
        self.dont_mask = want.contains(InitFlags::FUSE_DONT_MASK);
        if !self.acl {
            log::info!("POSIX ACLs are refused (EOPNOTSUPP) on this mount");
        }
        Ok(())
    }

    fn destroy(&mut self) {
        if let Err(e) = self.engine.shutdown() {
            log::error!("final write-back failed: {e}");
        }
    }

    /// No ioctl is supported: ENOTTY, as ext4 answers an unknown one, and nothing logged
    /// (fuser's default logs a warning for each; Python's isatty sends TCGETS at every open).
    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        reply.error(Errno::ENOTTY);
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        // The kernel looks up "." and ".." by node id only with FUSE_EXPORT_SUPPORT: a file
        // handle (open_by_handle_at, NFS) names an inode its caches dropped, and ".." finds a
        // directory's parent to reconnect it. Node ids are our inode numbers, never reused (a
        // freed one answers ENOENT, which the kernel turns into ESTALE), so a handle can never
        // reach another file; generation 0 is therefore enough. One gap: a number handed out
        // by a creation that a crash lost before it was durable can be handed out again
        // (`skip_ids_to` covers only numbers that left objects on the devices).
        let r = match name.as_bytes() {
            b"." => self.engine.ns.get(parent.0),
            b".." => self.engine.ns.parent_of(parent.0),
            name => self.engine.ns.lookup(parent.0, name),
        };
        self.entry(reply, r);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.engine.ns.get(ino.0) {
            Ok(i) => reply.attr(&self.ttl, &self.attr(&i)),
            Err(e) => reply.error(err(&e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let r = self.engine.set_size(
            ino.0,
            &SetAttr {
                perm: mode.map(|m| (m & 0o7777) as u16),
                uid,
                gid,
                size,
                atime: atime.map(time_of),
                mtime: mtime.map(time_of),
                ctime: ctime.map(Time::from),
            },
        );
        match r {
            Ok(i) => reply.attr(&self.ttl, &self.attr(&i)),
            Err(e) => reply.error(err(&e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.engine.ns.get(ino.0) {
            Ok(i) if i.kind == Kind::Symlink => reply.data(&i.symlink),
            Ok(_) => reply.error(Errno::EINVAL),
            Err(e) => reply.error(err(&e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let Some(kind) = kind_of_mode(mode) else {
            return reply.error(Errno::EINVAL);
        };
        if kind == Kind::Dir || kind == Kind::Symlink {
            return reply.error(Errno::EINVAL);
        }
        let node = NewNode {
            rdev,
            umask: self.umask(umask),
            ..NewNode::new(kind, mode)
        };
        self.entry(reply, self.new_node(req, parent.0, name, node));
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let node = NewNode {
            umask: self.umask(umask),
            ..NewNode::new(Kind::Dir, mode)
        };
        self.entry(reply, self.new_node(req, parent.0, name, node));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        Self::empty(reply, self.engine.unlink(parent.0, name.as_bytes()));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        Self::empty(reply, self.engine.rmdir(parent.0, name.as_bytes()));
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let target = target.as_os_str().as_bytes();
        if target.len() > 4095 {
            return reply.error(Errno::ENAMETOOLONG);
        }
        let node = NewNode {
            symlink: target,
            ..NewNode::new(Kind::Symlink, 0o777)
        };
        self.entry(reply, self.new_node(req, parent.0, link_name, node));
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let exchange = flags.contains(RenameFlags::RENAME_EXCHANGE);
        if exchange
            && flags.intersects(RenameFlags::RENAME_NOREPLACE | RenameFlags::RENAME_WHITEOUT)
        {
            return reply.error(Errno::EINVAL);
        }
        // The whiteout belongs to the caller, as ext4's does (overlayfs renames with its
        // mounter's credentials).
        let how = RenameHow {
            noreplace: flags.contains(RenameFlags::RENAME_NOREPLACE),
            exchange,
            whiteout: flags
                .contains(RenameFlags::RENAME_WHITEOUT)
                .then(|| (req.uid(), req.gid())),
        };
        Self::empty(
            reply,
            self.engine.rename(
                parent.0,
                name.as_bytes(),
                newparent.0,
                newname.as_bytes(),
                how,
            ),
        );
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.entry(
            reply,
            self.engine.link(ino.0, newparent.0, newname.as_bytes()),
        );
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.engine.ns.get(ino.0) {
            Ok(i) if i.kind == Kind::Dir => reply.error(Errno::EISDIR),
            Ok(i) => {
                // With FUSE_ATOMIC_O_TRUNC the truncation comes with the open, not as a setattr.
                if flags.0 & libc::O_TRUNC != 0 && i.kind == Kind::File {
                    let size = SetAttr {
                        size: Some(0),
                        ..SetAttr::default()
                    };
                    let truncated = self.engine.set_size(ino.0, &size);
                    if let Err(e) = truncated {
                        return reply.error(err(&e));
                    }
                }
                if let Err(e) = self.engine.ns.opened(ino.0) {
                    return reply.error(err(&e));
                }
                reply.opened(FileHandle(0), self.open_flags(flags.0));
            }
            Err(e) => reply.error(err(&e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.engine.read(ino.0, offset, size, move |r| match r {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(err(&e)),
        });
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let len = data.len() as u32;
        // O_SYNC/O_DSYNC (and `-o sync`): durable before the reply. The kernel asks for an
        // fsync after buffered writes itself, not after direct I/O.
        let durable = self.engine.config.mount.sync || flags.0 & libc::O_DSYNC != 0;
        let engine = self.engine.clone();
        self.engine
            .write(caller(req), ino.0, offset, data, move |r| match r {
                Ok(_) if durable => engine.fsync_then(ino.0, move |r| match r {
                    Ok(()) => reply.written(len),
                    Err(e) => reply.error(err(&e)),
                }),
                Ok(_) => reply.written(len),
                Err(e) => reply.error(err(&e)),
            });
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let object = self.engine.ns.get(ino.0).map(|i| i.object);
        match self.engine.ns.released(ino.0) {
            Ok(true) => {
                if let Ok(object) = object {
                    self.engine.volume.close(object);
                }
                self.engine.reclaim_if_short();
                reply.ok()
            }
            Ok(false) => reply.ok(),
            Err(e) => reply.error(err(&e)),
        }
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        Self::empty(reply, self.engine.fsync(ino.0));
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.engine.ns.open_dir(ino.0) {
            Ok(entries) => {
                let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
                self.dirs.insert(fh, Arc::new(entries));
                reply.opened(FileHandle(fh), FopenFlags::empty());
            }
            Err(e) => reply.error(err(&e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        // A rewind (offset 0) sees the directory as it is now.
        if offset == 0 {
            self.engine.ns.note_read(ino.0);
            match self.engine.ns.list(ino.0) {
                Ok(entries) => {
                    self.dirs.insert(fh.0, Arc::new(entries));
                }
                Err(e) => return reply.error(err(&e)),
            }
        }
        let Some(entries) = self.dirs.get(&fh.0).map(|e| e.clone()) else {
            return reply.error(Errno::EBADF);
        };
        let parent = self.engine.ns.get(ino.0).map(|i| i.parent).unwrap_or(ino.0);
        let dots = [
            (b".".to_vec(), ino.0, Kind::Dir),
            (b"..".to_vec(), parent, Kind::Dir),
        ];
        for (i, (name, child, kind)) in dots
            .iter()
            .chain(entries.iter())
            .enumerate()
            .skip(offset as usize)
        {
            let ft = file_type(*kind);
            if reply.add(INodeNo(*child), i as u64 + 1, ft, OsStr::from_bytes(name)) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.dirs.remove(&fh.0);
        // The last handle of a removed directory frees it.
        Self::empty(reply, self.engine.ns.released(ino.0).map(|_| ()));
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        Self::empty(reply, self.engine.commit());
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let (total, avail) = self.engine.capacity();
        let counts = self.engine.ns.counts();
        let free_inodes = 1u64 << 32;
        reply.statfs(
            total / BLOCK as u64,
            avail / BLOCK as u64,
            avail / BLOCK as u64,
            counts.inodes + free_inodes,
            free_inodes,
            BLOCK,
            255,
            BLOCK,
        );
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let name = name.as_bytes();
        let r = match control::key(name) {
            Some(control::Key::Shift) => return self.shift(req, ino, value, reply),
            Some(key) => control::set_for(&self.engine, &caller(req), ino.0, key, value),
            None if acl::is_acl(name) => self.set_acl(req, ino.0, name, Some(value)),
            None => self.engine.ns.setxattr(ino.0, name, value, flags),
        };
        Self::empty(reply, r);
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let name = name.as_bytes();
        let r = match control::key(name) {
            Some(key) => control::get_for(&self.engine, &caller(req), ino.0, key, size),
            None if acl::is_acl(name) && !self.acl => Err(Error::Errno(libc::EOPNOTSUPP)),
            None => self.engine.ns.getxattr(ino.0, name),
        };
        match r {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() <= size as usize => reply.data(&v),
            Ok(_) => reply.error(Errno::ERANGE),
            Err(e) => reply.error(err(&e)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        match self.engine.ns.listxattr(ino.0) {
            Ok(names) => {
                let mut out = Vec::new();
                for n in names.into_iter().filter(|n| self.acl || !acl::is_acl(n)) {
                    out.extend_from_slice(&n);
                    out.push(0);
                }
                if size == 0 {
                    reply.size(out.len() as u32)
                } else if out.len() <= size as usize {
                    reply.data(&out)
                } else {
                    reply.error(Errno::ERANGE)
                }
            }
            Err(e) => reply.error(err(&e)),
        }
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = name.as_bytes();
        let r = match control::key(name) {
            Some(key) => control::remove_for(&self.engine, &caller(req), ino.0, key),
            None if acl::is_acl(name) => self.set_acl(req, ino.0, name, None),
            None => self.engine.ns.removexattr(ino.0, name),
        };
        Self::empty(reply, r);
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        // Reached only without default_permissions: check the mode bits as the kernel would.
        match self.engine.ns.get(ino.0) {
            Ok(i) => {
                let want = mask.bits() as u16 & 0o7;
                let have = if req.uid() == 0 {
                    if want & 1 != 0 && i.kind != Kind::Dir && i.perm & 0o111 == 0 {
                        0o6
                    } else {
                        0o7
                    }
                } else if req.uid() == i.uid {
                    (i.perm >> 6) & 7
                } else if req.gid() == i.gid {
                    (i.perm >> 3) & 7
                } else {
                    i.perm & 7
                };
                if want & !have == 0 {
                    reply.ok()
                } else {
                    reply.error(Errno::EACCES)
                }
            }
            Err(e) => reply.error(err(&e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let node = NewNode {
            umask: self.umask(umask),
            ..NewNode::new(Kind::File, mode)
        };
        match self.new_node(req, parent.0, name, node) {
            Ok(i) => {
                if let Err(e) = self.engine.ns.opened(i.ino) {
                    return reply.error(err(&e));
                }
                reply.created(
                    &self.ttl,
                    &self.attr(&i),
                    Generation(0),
                    FileHandle(0),
                    self.open_flags(flags),
                );
            }
            Err(e) => reply.error(err(&e)),
        }
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let r = self
            .engine
            .fallocate(caller(req), ino.0, offset, length, mode);
        Self::empty(reply, r);
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        match self.engine.seek(ino.0, offset, whence) {
            Ok(at) => reply.offset(at),
            Err(e) => reply.error(Errno::from_i32(e.errno())),
        }
    }

    fn copy_file_range(
        &self,
        req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        if !flags.is_empty() {
            return reply.error(Errno::EINVAL);
        }
        let r =
            self.engine
                .copy_range(caller(req), ino_in.0, offset_in, ino_out.0, offset_out, len);
        match r {
            // At most COPY_MAX, far below u32::MAX.
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(Errno::from_i32(e.errno())),
        }
    }
}
