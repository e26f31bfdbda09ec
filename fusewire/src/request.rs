//! Decoding of the kernel's requests: a header and an opcode-specific body into a typed
//! [`Request`]. Every length is checked: a short, oversized or garbage buffer gives a
//! [`DecodeError`], never a panic.
//!
//! The kernel sends a request's arguments in two parts: the first (per-opcode struct) and the
//! rest (names, data). /dev/fuse hands them over back to back; io_uring puts the first in the
//! entry's `op_in` and the rest in its payload buffer. Both go through [`decode`].

use crate::abi::{self, *};
use crate::payload::{MsgBuf, Payload};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("request shorter than its header ({0} bytes)")]
    ShortHeader(usize),
    #[error("header length {len} does not fit the {have} bytes read")]
    Length { len: u32, have: usize },
    #[error("opcode {opcode}: {what} missing or truncated")]
    Short { opcode: u32, what: &'static str },
    #[error("opcode {opcode}: a name without its NUL")]
    Name { opcode: u32 },
}

/// What the session negotiated that changes how requests look.
#[derive(Debug, Clone, Copy)]
pub struct Proto {
    /// The protocol minor in use (the smaller of the kernel's and ours).
    pub minor: u32,
    /// FUSE_SETXATTR_EXT: SETXATTR carries the 16-byte `fuse_setxattr_in`.
    pub setxattr_ext: bool,
}

impl Default for Proto {
    fn default() -> Self {
        Proto {
            minor: abi::KERNEL_MINOR_VERSION,
            setxattr_ext: false,
        }
    }
}

/// A time from SETATTR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeOrNow {
    Now,
    /// Seconds and nanoseconds since the epoch.
    At(i64, u32),
}

/// The changes of a SETATTR: each field is `Some` when the kernel asks for it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeOrNow>,
    pub mtime: Option<TimeOrNow>,
    pub ctime: Option<(i64, u32)>,
    pub fh: Option<u64>,
    pub lock_owner: Option<u64>,
    /// FATTR_KILL_SUIDGID (with HANDLE_KILLPRIV_V2): clear suid/sgid too.
    pub kill_suidgid: bool,
}

/// The kernel's INIT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitIn {
    pub major: u32,
    pub minor: u32,
    pub max_readahead: u32,
    /// `flags | flags2 << 32`.
    pub flags: u64,
}

/// One request, borrowing names and data from the buffer it was read into.
#[derive(Debug, PartialEq, Eq)]
pub struct Request<'a> {
    pub unique: u64,
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
    pub op: Operation<'a>,
    /// The buffer the request was read into, when a WRITE's data may be kept there.
    pub(crate) read_into: ReadInto<'a>,
}

/// A /dev/fuse request buffer, or none (over io_uring, or a message from elsewhere).
#[derive(Clone, Copy, Default)]
pub(crate) struct ReadInto<'a>(pub Option<&'a Arc<MsgBuf>>);

/// Requests compare by what they ask, not by where they were read.
impl PartialEq for ReadInto<'_> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for ReadInto<'_> {}

impl std::fmt::Debug for ReadInto<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "buffer" } else { "-" })
    }
}

impl Request<'_> {
    /// A WRITE's data kept where it was read, so a device write can take it without a copy
    /// (it is page-aligned, as O_DIRECT wants). It holds the whole request buffer (about
    /// `max_write` bytes) until dropped: worth it for large writes. `None` for other requests
    /// and over io_uring.
    pub fn write_payload(&self) -> Option<Payload> {
        match (&self.op, self.read_into.0) {
            (Operation::Write { data, .. }, Some(buf)) => Payload::of(buf, data),
            _ => None,
        }
    }
}

/// The operation and its arguments. Each says which reply the kernel expects.
#[derive(Debug, PartialEq, Eq)]
pub enum Operation<'a> {
    /// Reply: entry.
    Lookup { name: &'a OsStr },
    /// No reply.
    Forget { nlookup: u64 },
    /// No reply: (nodeid, nlookup) pairs.
    BatchForget { forgets: Vec<(u64, u64)> },
    /// Reply: attr.
    Getattr { fh: Option<u64> },
    /// Reply: attr.
    Setattr(SetAttr),
    /// Reply: data (the target).
    Readlink,
    /// Reply: entry.
    Symlink { name: &'a OsStr, target: &'a OsStr },
    /// Reply: entry.
    Mknod {
        name: &'a OsStr,
        mode: u32,
        rdev: u32,
        umask: u32,
    },
    /// Reply: entry.
    Mkdir {
        name: &'a OsStr,
        mode: u32,
        umask: u32,
    },
    /// Reply: empty.
    Unlink { name: &'a OsStr },
    /// Reply: empty.
    Rmdir { name: &'a OsStr },
    /// RENAME and RENAME2 (flags 0 for RENAME). Reply: empty.
    Rename {
        newdir: u64,
        name: &'a OsStr,
        newname: &'a OsStr,
        flags: u32,
    },
    /// Reply: entry (of the old node, in `nodeid` of the new name's parent request).
    Link { oldnodeid: u64, newname: &'a OsStr },
    /// Reply: open.
    Open { flags: u32, open_flags: u32 },
    /// Reply: data.
    Read {
        fh: u64,
        offset: u64,
        size: u32,
        flags: u32,
        lock_owner: Option<u64>,
    },
    /// Reply: write.
    Write {
        fh: u64,
        offset: u64,
        data: &'a [u8],
        write_flags: u32,
        flags: u32,
        lock_owner: Option<u64>,
    },
    /// Reply: statfs.
    Statfs,
    /// Reply: empty.
    Release {
        fh: u64,
        flags: u32,
        release_flags: u32,
        lock_owner: u64,
    },
    /// Reply: empty.
    Fsync { fh: u64, datasync: bool },
    /// Reply: empty.
    Setxattr {
        name: &'a OsStr,
        value: &'a [u8],
        flags: u32,
        setxattr_flags: u32,
    },
    /// Reply: xattr (size when `size` is 0, else data).
    Getxattr { name: &'a OsStr, size: u32 },
    /// Reply: xattr (size when `size` is 0, else data).
    Listxattr { size: u32 },
    /// Reply: empty.
    Removexattr { name: &'a OsStr },
    /// Reply: empty.
    Flush { fh: u64, lock_owner: u64 },
    /// Answered by the session.
    Init(InitIn),
    /// Reply: open.
    Opendir { flags: u32 },
    /// READDIR and READDIRPLUS. Reply: dirents (plus ones for `plus`).
    Readdir {
        fh: u64,
        offset: u64,
        size: u32,
        plus: bool,
    },
    /// Reply: empty.
    Releasedir { fh: u64, flags: u32 },
    /// Reply: empty.
    Fsyncdir { fh: u64, datasync: bool },
    /// Reply: empty.
    Access { mask: u32 },
    /// Reply: create (entry + open).
    Create {
        name: &'a OsStr,
        flags: u32,
        mode: u32,
        umask: u32,
        open_flags: u32,
    },
    /// An unnamed file in directory `nodeid` (O_TMPFILE). Reply: create.
    Tmpfile {
        flags: u32,
        mode: u32,
        umask: u32,
        open_flags: u32,
    },
    /// No reply: the request `unique` was interrupted.
    Interrupt { unique: u64 },
    /// Answered by the session.
    Destroy,
    /// Reply: ioctl.
    Ioctl {
        fh: u64,
        flags: u32,
        cmd: u32,
        arg: u64,
        in_data: &'a [u8],
        out_size: u32,
    },
    /// Reply: empty.
    Fallocate {
        fh: u64,
        offset: u64,
        length: u64,
        mode: u32,
    },
    /// Reply: lseek.
    Lseek { fh: u64, offset: u64, whence: u32 },
    /// COPY_FILE_RANGE (reply: write) and COPY_FILE_RANGE_64 (reply: copy_file_range_64).
    CopyFileRange {
        fh_in: u64,
        off_in: u64,
        nodeid_out: u64,
        fh_out: u64,
        off_out: u64,
        len: u64,
        flags: u64,
        wide: bool,
    },
    /// Reply: statx.
    Statx {
        fh: Option<u64>,
        sx_flags: u32,
        sx_mask: u32,
    },
    /// Reply: empty.
    Syncfs,
    /// An opcode we do not decode (locks, poll, bmap, ...): answer ENOSYS.
    Unknown { opcode: u32 },
}

/// The size of the first (per-opcode) argument the kernel sends for `opcode`.
pub fn first_arg_len(opcode: u32, proto: &Proto) -> usize {
    match opcode {
        FUSE_FORGET | FUSE_RENAME | FUSE_LINK | FUSE_MKDIR | FUSE_OPEN | FUSE_OPENDIR
        | FUSE_GETXATTR | FUSE_LISTXATTR | FUSE_ACCESS | FUSE_INTERRUPT | FUSE_BATCH_FORGET
        | FUSE_SYNCFS => 8,
        FUSE_GETATTR | FUSE_MKNOD | FUSE_RENAME2 | FUSE_FSYNC | FUSE_FSYNCDIR | FUSE_CREATE
        | FUSE_TMPFILE => 16,
        FUSE_SETXATTR if proto.setxattr_ext => size_of::<fuse_setxattr_in>(),
        FUSE_SETXATTR => FUSE_COMPAT_SETXATTR_IN_SIZE,
        FUSE_RELEASE | FUSE_RELEASEDIR | FUSE_FLUSH | FUSE_LSEEK | FUSE_STATX => 24,
        FUSE_IOCTL | FUSE_FALLOCATE => 32,
        FUSE_READ | FUSE_READDIR | FUSE_READDIRPLUS | FUSE_WRITE => 40,
        FUSE_COPY_FILE_RANGE | FUSE_COPY_FILE_RANGE_64 => 56,
        FUSE_SETATTR => 88,
        _ => 0,
    }
}

/// Decodes a whole request as read from /dev/fuse.
pub fn parse<'a>(buf: &'a [u8], proto: &Proto) -> Result<Request<'a>, DecodeError> {
    let header: fuse_in_header = abi::read(buf).ok_or(DecodeError::ShortHeader(buf.len()))?;
    let len = header.len as usize;
    if len < size_of::<fuse_in_header>() || len > buf.len() {
        return Err(DecodeError::Length {
            len: header.len,
            have: buf.len(),
        });
    }
    let body = &buf[size_of::<fuse_in_header>()..len];
    // INIT's body changed size over time: it is all first argument.
    let first = if header.opcode == FUSE_INIT {
        body.len()
    } else {
        first_arg_len(header.opcode, proto).min(body.len())
    };
    let (arg0, rest) = body.split_at(first);
    decode(&header, arg0, rest, proto)
}

/// Decodes a request from its header, its first argument and the rest of its arguments.
pub fn decode<'a>(
    h: &fuse_in_header,
    arg0: &'a [u8],
    rest: &'a [u8],
    proto: &Proto,
) -> Result<Request<'a>, DecodeError> {
    let opcode = h.opcode;
    // Extensions (security contexts, supplementary groups) sit at the end: we ask for none,
    // but never read them as names or data.
    let ext = (h.total_extlen as usize) * 8;
    let rest = &rest[..rest.len().saturating_sub(ext)];
    let mut a = Args {
        opcode,
        arg0,
        rest,
        proto,
    };
    let op = match opcode {
        FUSE_LOOKUP => Operation::Lookup { name: a.name()? },
        FUSE_FORGET => Operation::Forget {
            nlookup: a.first::<fuse_forget_in>("forget_in")?.nlookup,
        },
        FUSE_BATCH_FORGET => {
            let b: fuse_batch_forget_in = a.first("batch_forget_in")?;
            let one = size_of::<fuse_forget_one>();
            // Never trust the count beyond what the buffer holds.
            let n = (b.count as usize).min(a.rest.len() / one);
            let forgets = (0..n)
                .filter_map(|i| abi::read::<fuse_forget_one>(&a.rest[i * one..]))
                .map(|f| (f.nodeid, f.nlookup))
                .collect();
            Operation::BatchForget { forgets }
        }
        FUSE_GETATTR => {
            let g: fuse_getattr_in = a.first("getattr_in")?;
            Operation::Getattr {
                fh: (g.getattr_flags & FUSE_GETATTR_FH != 0).then_some(g.fh),
            }
        }
        FUSE_SETATTR => Operation::Setattr(setattr(a.first("setattr_in")?)),
        FUSE_READLINK => Operation::Readlink,
        FUSE_SYMLINK => Operation::Symlink {
            name: a.name()?,
            target: a.name()?,
        },
        FUSE_MKNOD => {
            let m: fuse_mknod_in = a.first("mknod_in")?;
            Operation::Mknod {
                name: a.name()?,
                mode: m.mode,
                rdev: m.rdev,
                umask: m.umask,
            }
        }
        FUSE_MKDIR => {
            let m: fuse_mkdir_in = a.first("mkdir_in")?;
            Operation::Mkdir {
                name: a.name()?,
                mode: m.mode,
                umask: m.umask,
            }
        }
        FUSE_UNLINK => Operation::Unlink { name: a.name()? },
        FUSE_RMDIR => Operation::Rmdir { name: a.name()? },
        FUSE_RENAME => {
            let r: fuse_rename_in = a.first("rename_in")?;
            Operation::Rename {
                newdir: r.newdir,
                name: a.name()?,
                newname: a.name()?,
                flags: 0,
            }
        }
        FUSE_RENAME2 => {
            let r: fuse_rename2_in = a.first("rename2_in")?;
            Operation::Rename {
                newdir: r.newdir,
                name: a.name()?,
                newname: a.name()?,
                flags: r.flags,
            }
        }
        FUSE_LINK => {
            let l: fuse_link_in = a.first("link_in")?;
            Operation::Link {
                oldnodeid: l.oldnodeid,
                newname: a.name()?,
            }
        }
        FUSE_OPEN => {
            let o: fuse_open_in = a.first("open_in")?;
            Operation::Open {
                flags: o.flags,
                open_flags: o.open_flags,
            }
        }
        FUSE_READ => {
            let r: fuse_read_in = a.first("read_in")?;
            Operation::Read {
                fh: r.fh,
                offset: r.offset,
                size: r.size,
                flags: r.flags,
                lock_owner: (r.read_flags & FUSE_READ_LOCKOWNER != 0).then_some(r.lock_owner),
            }
        }
        FUSE_WRITE => {
            let w: fuse_write_in = a.first("write_in")?;
            Operation::Write {
                fh: w.fh,
                offset: w.offset,
                data: a.bytes(w.size as usize, "write data")?,
                write_flags: w.write_flags,
                flags: w.flags,
                lock_owner: (w.write_flags & FUSE_WRITE_LOCKOWNER != 0).then_some(w.lock_owner),
            }
        }
        FUSE_STATFS => Operation::Statfs,
        FUSE_RELEASE | FUSE_RELEASEDIR => {
            let r: fuse_release_in = a.first("release_in")?;
            if opcode == FUSE_RELEASE {
                Operation::Release {
                    fh: r.fh,
                    flags: r.flags,
                    release_flags: r.release_flags,
                    lock_owner: r.lock_owner,
                }
            } else {
                Operation::Releasedir {
                    fh: r.fh,
                    flags: r.flags,
                }
            }
        }
        FUSE_FSYNC | FUSE_FSYNCDIR => {
            let f: fuse_fsync_in = a.first("fsync_in")?;
            let datasync = f.fsync_flags & FUSE_FSYNC_FDATASYNC != 0;
            if opcode == FUSE_FSYNC {
                Operation::Fsync { fh: f.fh, datasync }
            } else {
                Operation::Fsyncdir { fh: f.fh, datasync }
            }
        }
        FUSE_SETXATTR => {
            let want = first_arg_len(FUSE_SETXATTR, a.proto);
            if a.arg0.len() < want {
                return Err(a.short("setxattr_in"));
            }
            let s: fuse_setxattr_in = abi::read_prefix(&a.arg0[..want]);
            Operation::Setxattr {
                name: a.name()?,
                value: a.bytes(s.size as usize, "xattr value")?,
                flags: s.flags,
                setxattr_flags: s.setxattr_flags,
            }
        }
        FUSE_GETXATTR => {
            let g: fuse_getxattr_in = a.first("getxattr_in")?;
            Operation::Getxattr {
                name: a.name()?,
                size: g.size,
            }
        }
        FUSE_LISTXATTR => Operation::Listxattr {
            size: a.first::<fuse_getxattr_in>("getxattr_in")?.size,
        },
        FUSE_REMOVEXATTR => Operation::Removexattr { name: a.name()? },
        FUSE_FLUSH => {
            let f: fuse_flush_in = a.first("flush_in")?;
            Operation::Flush {
                fh: f.fh,
                lock_owner: f.lock_owner,
            }
        }
        FUSE_INIT => {
            if a.arg0.len() < FUSE_COMPAT_INIT_IN_SIZE {
                return Err(a.short("init_in"));
            }
            let i: fuse_init_in = abi::read_prefix(a.arg0);
            let flags2 = if i.flags as u64 & FUSE_INIT_EXT != 0 {
                i.flags2 as u64
            } else {
                0
            };
            Operation::Init(InitIn {
                major: i.major,
                minor: i.minor,
                max_readahead: i.max_readahead,
                flags: i.flags as u64 | flags2 << 32,
            })
        }
        FUSE_OPENDIR => Operation::Opendir {
            flags: a.first::<fuse_open_in>("open_in")?.flags,
        },
        FUSE_READDIR | FUSE_READDIRPLUS => {
            let r: fuse_read_in = a.first("read_in")?;
            Operation::Readdir {
                fh: r.fh,
                offset: r.offset,
                size: r.size,
                plus: opcode == FUSE_READDIRPLUS,
            }
        }
        FUSE_ACCESS => Operation::Access {
            mask: a.first::<fuse_access_in>("access_in")?.mask,
        },
        FUSE_CREATE => {
            let c: fuse_create_in = a.first("create_in")?;
            Operation::Create {
                name: a.name()?,
                flags: c.flags,
                mode: c.mode,
                umask: c.umask,
                open_flags: c.open_flags,
            }
        }
        FUSE_TMPFILE => {
            let c: fuse_create_in = a.first("create_in")?;
            Operation::Tmpfile {
                flags: c.flags,
                mode: c.mode,
                umask: c.umask,
                open_flags: c.open_flags,
            }
        }
        FUSE_INTERRUPT => Operation::Interrupt {
            unique: a.first::<fuse_interrupt_in>("interrupt_in")?.unique,
        },
        FUSE_DESTROY => Operation::Destroy,
        FUSE_IOCTL => {
            let i: fuse_ioctl_in = a.first("ioctl_in")?;
            Operation::Ioctl {
                fh: i.fh,
                flags: i.flags,
                cmd: i.cmd,
                arg: i.arg,
                in_data: a.bytes(i.in_size as usize, "ioctl data")?,
                out_size: i.out_size,
            }
        }
        FUSE_FALLOCATE => {
            let f: fuse_fallocate_in = a.first("fallocate_in")?;
            Operation::Fallocate {
                fh: f.fh,
                offset: f.offset,
                length: f.length,
                mode: f.mode,
            }
        }
        FUSE_LSEEK => {
            let l: fuse_lseek_in = a.first("lseek_in")?;
            Operation::Lseek {
                fh: l.fh,
                offset: l.offset,
                whence: l.whence,
            }
        }
        FUSE_COPY_FILE_RANGE | FUSE_COPY_FILE_RANGE_64 => {
            let c: fuse_copy_file_range_in = a.first("copy_file_range_in")?;
            Operation::CopyFileRange {
                fh_in: c.fh_in,
                off_in: c.off_in,
                nodeid_out: c.nodeid_out,
                fh_out: c.fh_out,
                off_out: c.off_out,
                len: c.len,
                flags: c.flags,
                wide: opcode == FUSE_COPY_FILE_RANGE_64,
            }
        }
        FUSE_STATX => {
            let s: fuse_statx_in = a.first("statx_in")?;
            Operation::Statx {
                fh: (s.getattr_flags & FUSE_GETATTR_FH != 0).then_some(s.fh),
                sx_flags: s.sx_flags,
                sx_mask: s.sx_mask,
            }
        }
        FUSE_SYNCFS => Operation::Syncfs,
        _ => Operation::Unknown { opcode },
    };
    Ok(Request {
        unique: h.unique,
        nodeid: h.nodeid,
        uid: h.uid,
        gid: h.gid,
        pid: h.pid,
        op,
        read_into: ReadInto::default(),
    })
}

fn setattr(s: fuse_setattr_in) -> SetAttr {
    let has = |bit: u32| s.valid & bit != 0;
    let time = |set: u32, now: u32, sec: u64, nsec: u32| {
        if has(now) {
            Some(TimeOrNow::Now)
        } else if has(set) {
            Some(TimeOrNow::At(sec as i64, nsec))
        } else {
            None
        }
    };
    SetAttr {
        mode: has(FATTR_MODE).then_some(s.mode),
        uid: has(FATTR_UID).then_some(s.uid),
        gid: has(FATTR_GID).then_some(s.gid),
        size: has(FATTR_SIZE).then_some(s.size),
        atime: time(FATTR_ATIME, FATTR_ATIME_NOW, s.atime, s.atimensec),
        mtime: time(FATTR_MTIME, FATTR_MTIME_NOW, s.mtime, s.mtimensec),
        ctime: has(FATTR_CTIME).then_some((s.ctime as i64, s.ctimensec)),
        fh: has(FATTR_FH).then_some(s.fh),
        lock_owner: has(FATTR_LOCKOWNER).then_some(s.lock_owner),
        kill_suidgid: has(FATTR_KILL_SUIDGID),
    }
}

/// A cursor over a request's arguments.
struct Args<'a, 'p> {
    opcode: u32,
    arg0: &'a [u8],
    rest: &'a [u8],
    proto: &'p Proto,
}

impl<'a> Args<'a, '_> {
    fn short(&self, what: &'static str) -> DecodeError {
        DecodeError::Short {
            opcode: self.opcode,
            what,
        }
    }

    /// The first argument as its struct.
    fn first<T: Pod>(&self, what: &'static str) -> Result<T, DecodeError> {
        abi::read(self.arg0).ok_or_else(|| self.short(what))
    }

    /// The next NUL-terminated name of the rest.
    fn name(&mut self) -> Result<&'a OsStr, DecodeError> {
        let nul = self
            .rest
            .iter()
            .position(|&b| b == 0)
            .ok_or(DecodeError::Name {
                opcode: self.opcode,
            })?;
        let name = &self.rest[..nul];
        self.rest = &self.rest[nul + 1..];
        Ok(OsStr::from_bytes(name))
    }

    /// The next `len` bytes of the rest.
    fn bytes(&mut self, len: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        if self.rest.len() < len {
            return Err(self.short(what));
        }
        let (b, rest) = self.rest.split_at(len);
        self.rest = rest;
        Ok(b)
    }
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
