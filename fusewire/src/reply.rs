//! Encoding of replies: the out header and the reply's body, handed to a [`ReplySink`] as
//! slices (no copy here), so the same reply goes to /dev/fuse (one writev) or into an io_uring
//! entry's payload buffer.
//!
//! A [`Reply`] is `Send`: the filesystem may complete it on any thread (the engine completes
//! replies from device completions). Dropped unanswered, it answers EIO, so that no request is
//! ever left hanging in the kernel.

use crate::abi::{self, *};
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::Duration;

/// Where a reply goes. `payload` is the reply's body (without the out header), in pieces.
pub trait ReplySink: Send {
    /// Sends the reply to request `unique`: `error` is 0 or a negative errno (then `payload`
    /// is empty).
    fn send(self: Box<Self>, unique: u64, error: i32, payload: &[&[u8]]) -> io::Result<()>;

    /// Room for at least `len` bytes of the reply's body in the transport's own buffer, if it
    /// has one (io_uring: the entry's payload buffer, which the kernel reads the reply from).
    fn body_buffer(&mut self, _len: usize) -> Option<std::ptr::NonNull<u8>> {
        None
    }

    /// Sends the reply whose `len`-byte body was written into [`ReplySink::body_buffer`].
    fn send_buffered(self: Box<Self>, _unique: u64, _len: usize) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::ENOTSUP))
    }
}

/// Longest name the kernel takes in a directory entry (FUSE_NAME_MAX).
pub const NAME_MAX: usize = 1024;

/// The kernel rejects errors outside 1..512 (ERESTARTSYS and above are kernel-internal).
fn wire_errno(errno: i32) -> i32 {
    if (1..512).contains(&errno) {
        -errno
    } else {
        -libc::EIO
    }
}

/// A lookup's answer: the node, its attributes and how long the kernel may cache them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Entry {
    pub nodeid: u64,
    pub generation: u64,
    pub attr: fuse_attr,
    pub entry_ttl: Duration,
    pub attr_ttl: Duration,
}

impl Entry {
    pub fn to_abi(&self) -> fuse_entry_out {
        fuse_entry_out {
            nodeid: self.nodeid,
            generation: self.generation,
            entry_valid: self.entry_ttl.as_secs(),
            attr_valid: self.attr_ttl.as_secs(),
            entry_valid_nsec: self.entry_ttl.subsec_nanos(),
            attr_valid_nsec: self.attr_ttl.subsec_nanos(),
            attr: self.attr,
        }
    }
}

/// The answer to one request. Consumed by the method that answers it.
pub struct Reply {
    unique: u64,
    sink: Option<Box<dyn ReplySink>>,
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Reply({})", self.unique)
    }
}

impl Reply {
    pub fn new(unique: u64, sink: Box<dyn ReplySink>) -> Reply {
        Reply {
            unique,
            sink: Some(sink),
        }
    }

    /// The request this answers (what an INTERRUPT names).
    pub fn unique(&self) -> u64 {
        self.unique
    }

    fn send(mut self, error: i32, payload: &[&[u8]]) {
        if let Some(sink) = self.sink.take() {
            if let Err(e) = sink.send(self.unique, error, payload) {
                // ENOENT: the kernel forgot the request (interrupted, or the mount is gone).
                log::debug!("reply to {}: {e}", self.unique);
            }
        }
    }

    /// Drops the handle without answering: for the requests the kernel expects no answer to
    /// (FORGET, BATCH_FORGET, INTERRUPT).
    pub fn no_reply(mut self) {
        self.sink = None;
    }

    /// An error: `errno` is positive (libc::ENOENT, ...).
    pub fn error(self, errno: i32) {
        self.send(wire_errno(errno), &[]);
    }

    /// Success without a body (unlink, release, fsync, setxattr, ...).
    pub fn ok(self) {
        self.send(0, &[]);
    }

    /// LOOKUP, MKNOD, MKDIR, SYMLINK, LINK.
    pub fn entry(self, e: &Entry) {
        let out = e.to_abi();
        self.send(0, &[abi::bytes(&out)]);
    }

    /// GETATTR, SETATTR.
    pub fn attr(self, attr: &fuse_attr, ttl: Duration) {
        let out = fuse_attr_out {
            attr_valid: ttl.as_secs(),
            attr_valid_nsec: ttl.subsec_nanos(),
            dummy: 0,
            attr: *attr,
        };
        self.send(0, &[abi::bytes(&out)]);
    }

    /// OPEN, OPENDIR: the file handle and FOPEN_* flags.
    pub fn open(self, fh: u64, open_flags: u32) {
        let out = fuse_open_out {
            fh,
            open_flags,
            backing_id: 0,
        };
        self.send(0, &[abi::bytes(&out)]);
    }

    /// CREATE, TMPFILE: the new entry and its open file.
    pub fn create(self, e: &Entry, fh: u64, open_flags: u32) {
        let entry = e.to_abi();
        let open = fuse_open_out {
            fh,
            open_flags,
            backing_id: 0,
        };
        self.send(0, &[abi::bytes(&entry), abi::bytes(&open)]);
    }

    /// WRITE and COPY_FILE_RANGE: bytes written.
    pub fn write(self, size: u32) {
        let out = fuse_write_out { size, padding: 0 };
        self.send(0, &[abi::bytes(&out)]);
    }

    /// COPY_FILE_RANGE_64: bytes copied.
    pub fn copied(self, bytes: u64) {
        let out = fuse_copy_file_range_out {
            bytes_copied: bytes,
        };
        self.send(0, &[abi::bytes(&out)]);
    }

    pub fn statfs(self, st: &fuse_kstatfs) {
        let out = fuse_statfs_out { st: *st };
        self.send(0, &[abi::bytes(&out)]);
    }

    /// READ, READLINK, GETXATTR/LISTXATTR with a size: the bytes, not copied.
    pub fn data(self, data: &[u8]) {
        self.send(0, &[data]);
    }

    /// READ from several buffers (a striped read's chunks), not copied.
    pub fn data_iov(self, parts: &[&[u8]]) {
        self.send(0, parts);
    }

    /// READDIR, READDIRPLUS.
    pub fn dirents(self, buf: &DirBuf) {
        self.send(0, &[&buf.buf]);
    }

    /// GETXATTR/LISTXATTR with size 0: the size the value needs.
    pub fn xattr_size(self, size: u32) {
        let out = fuse_getxattr_out { size, padding: 0 };
        self.send(0, &[abi::bytes(&out)]);
    }

    pub fn lseek(self, offset: u64) {
        let out = fuse_lseek_out { offset };
        self.send(0, &[abi::bytes(&out)]);
    }

    pub fn statx(self, out: &fuse_statx_out) {
        self.send(0, &[abi::bytes(out)]);
    }

    /// IOCTL (restricted): the result and the output bytes.
    pub fn ioctl(self, result: i32, data: &[u8]) {
        let out = fuse_ioctl_out {
            result,
            ..Default::default()
        };
        self.send(0, &[abi::bytes(&out), data]);
    }

    /// A READ answer built in place: a buffer of `len` bytes that is the transport's own where
    /// it has one (io_uring: no copy between the device read and the kernel), else a Vec.
    pub fn buffer(self, len: usize) -> DataReply {
        self.in_place(len).unwrap_or_else(|reply| DataReply {
            reply,
            buf: DataBuf::Owned(vec![0; len]),
        })
    }

    /// A READ answer built in the transport's own buffer of `len` bytes (page-aligned), or
    /// the reply back where the transport has none (/dev/fuse). The buffer may hold an earlier
    /// request's bytes: fill every byte that is sent.
    pub fn in_place(mut self, len: usize) -> Result<DataReply, Reply> {
        match self.sink.as_mut().and_then(|s| s.body_buffer(len)) {
            Some(ptr) => Ok(DataReply {
                reply: self,
                buf: DataBuf::Sink(ptr, len),
            }),
            None => Err(self),
        }
    }

    /// A raw body (INIT, and anything the typed methods do not cover).
    pub fn raw(self, parts: &[&[u8]]) {
        self.send(0, parts);
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        if let Some(sink) = self.sink.take() {
            log::debug!("request {} dropped unanswered: EIO", self.unique);
            let _ = sink.send(self.unique, -libc::EIO, &[]);
        }
    }
}

enum DataBuf {
    Sink(std::ptr::NonNull<u8>, usize),
    Owned(Vec<u8>),
}

/// A READ reply whose data is written in place (see [`Reply::buffer`]). `Send`: device
/// reads may fill it and complete it on any thread. Dropped unsent, it answers EIO.
pub struct DataReply {
    reply: Reply,
    buf: DataBuf,
}

// SAFETY: the sink's buffer belongs to this reply alone until it is sent (the transport hands
// an entry's buffer to one reply), and the sink keeps its memory alive.
unsafe impl Send for DataReply {}

impl DataReply {
    /// The buffer to fill.
    pub fn buf(&mut self) -> &mut [u8] {
        match &mut self.buf {
            // SAFETY: `len` bytes the sink reserved for this reply (see above).
            DataBuf::Sink(p, len) => unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), *len) },
            DataBuf::Owned(v) => v,
        }
    }

    /// The reply, leaving none behind (so that Drop answers nothing more).
    fn take(&mut self) -> Reply {
        let none = Reply {
            unique: self.reply.unique,
            sink: None,
        };
        std::mem::replace(&mut self.reply, none)
    }

    /// Sends the first `len` bytes of the buffer.
    pub fn send(mut self, len: usize) {
        let mut reply = self.take();
        match &self.buf {
            DataBuf::Sink(_, cap) => {
                if let Some(sink) = reply.sink.take() {
                    if let Err(e) = sink.send_buffered(reply.unique, len.min(*cap)) {
                        log::debug!("reply to {}: {e}", reply.unique);
                    }
                }
            }
            DataBuf::Owned(v) => reply.data(&v[..len.min(v.len())]),
        }
    }

    /// Answers an error instead.
    pub fn error(mut self, errno: i32) {
        self.take().error(errno);
    }
}

/// The directory type of a mode (DT_REG, DT_DIR, ...), as directory entries carry it.
pub fn dt_of_mode(mode: u32) -> u32 {
    (mode & libc::S_IFMT) >> 12
}

/// A READDIR or READDIRPLUS reply being filled, at most the size the kernel asked for.
#[derive(Debug, Clone)]
pub struct DirBuf {
    buf: Vec<u8>,
    max: usize,
}

impl DirBuf {
    pub fn new(size: u32) -> DirBuf {
        DirBuf {
            buf: Vec::with_capacity((size as usize).min(1 << 20)),
            max: size as usize,
        }
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Adds a READDIR entry; `off` is the offset of the *next* entry. False when it does not
    /// fit (the reply is full). Names must be 1..=1024 bytes: others are skipped.
    pub fn add(&mut self, ino: u64, off: u64, dt: u32, name: &OsStr) -> bool {
        let name = name.as_bytes();
        if name.is_empty() || name.len() > NAME_MAX {
            return true;
        }
        let d = fuse_dirent {
            ino,
            off,
            namelen: name.len() as u32,
            typ: dt,
        };
        self.push(&[abi::bytes(&d), name])
    }

    /// Adds a READDIRPLUS entry (the kernel takes it as a lookup: nodeid 0 means none).
    pub fn add_plus(&mut self, e: &Entry, off: u64, name: &OsStr) -> bool {
        let name = name.as_bytes();
        if name.is_empty() || name.len() > NAME_MAX {
            return true;
        }
        let d = fuse_direntplus {
            entry_out: e.to_abi(),
            dirent: fuse_dirent {
                ino: e.attr.ino,
                off,
                namelen: name.len() as u32,
                typ: dt_of_mode(e.attr.mode),
            },
        };
        self.push(&[abi::bytes(&d), name])
    }

    fn push(&mut self, parts: &[&[u8]]) -> bool {
        let raw: usize = parts.iter().map(|p| p.len()).sum();
        let padded = abi::dirent_size(0, raw);
        if self.buf.len() + padded > self.max {
            return false;
        }
        for p in parts {
            self.buf.extend_from_slice(p);
        }
        self.buf.resize(self.buf.len() + padded - raw, 0);
        true
    }
}

/// Replies over /dev/fuse: one writev of the out header and the body's pieces.
#[derive(Debug, Clone)]
pub struct DevSink {
    fd: Arc<OwnedFd>,
}

impl DevSink {
    pub fn new(fd: Arc<OwnedFd>) -> DevSink {
        DevSink { fd }
    }

    /// Writes one message: a reply, or a notification when `unique` is 0.
    pub fn write(&self, unique: u64, error: i32, payload: &[&[u8]]) -> io::Result<()> {
        let body: usize = payload.iter().map(|p| p.len()).sum();
        let header = fuse_out_header {
            len: (size_of::<fuse_out_header>() + body) as u32,
            error,
            unique,
        };
        let mut iov = Vec::with_capacity(payload.len() + 1);
        for part in std::iter::once(abi::bytes(&header)).chain(payload.iter().copied()) {
            if !part.is_empty() {
                iov.push(libc::iovec {
                    iov_base: part.as_ptr() as *mut libc::c_void,
                    iov_len: part.len(),
                });
            }
        }
        loop {
            // SAFETY: the iovecs point into slices that outlive the call.
            let n = unsafe {
                libc::writev(self.fd.as_raw_fd(), iov.as_ptr(), iov.len() as libc::c_int)
            };
            if n >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }
}

impl ReplySink for DevSink {
    fn send(self: Box<Self>, unique: u64, error: i32, payload: &[&[u8]]) -> io::Result<()> {
        self.write(unique, error, payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;

    /// What a reply sent: (unique, error, body).
    type Sent = (u64, i32, Vec<u8>);

    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<Sent>>>);

    impl ReplySink for Capture {
        fn send(self: Box<Self>, unique: u64, error: i32, payload: &[&[u8]]) -> io::Result<()> {
            self.0.lock().push((unique, error, payload.concat()));
            Ok(())
        }
    }

    fn reply(c: &Capture, unique: u64) -> Reply {
        Reply::new(unique, Box::new(c.clone()))
    }

    #[test]
    fn bodies_have_the_kernels_sizes() {
        let c = Capture::default();
        reply(&c, 1).entry(&Entry::default());
        reply(&c, 2).attr(&fuse_attr::default(), Duration::from_secs(1));
        reply(&c, 3).open(5, FOPEN_DIRECT_IO);
        reply(&c, 4).create(&Entry::default(), 5, 0);
        reply(&c, 5).write(4096);
        reply(&c, 6).statfs(&fuse_kstatfs::default());
        reply(&c, 7).xattr_size(12);
        reply(&c, 8).lseek(99);
        reply(&c, 9).ok();
        reply(&c, 10).error(libc::ENOENT);
        reply(&c, 11).error(100_000);
        let got = c.0.lock().clone();
        let sizes: Vec<usize> = got.iter().map(|g| g.2.len()).collect();
        assert_eq!(sizes, [128, 104, 16, 144, 8, 80, 8, 8, 0, 0, 0]);
        assert_eq!(got[9].1, -libc::ENOENT);
        assert_eq!(got[10].1, -libc::EIO);
        let open: fuse_open_out = abi::read(&got[2].2).unwrap();
        assert_eq!((open.fh, open.open_flags), (5, FOPEN_DIRECT_IO));
    }

    #[test]
    fn a_dropped_reply_answers_eio_from_any_thread() {
        let c = Capture::default();
        let r = reply(&c, 77);
        std::thread::spawn(move || drop(r)).join().unwrap();
        assert_eq!(c.0.lock()[0], (77, -libc::EIO, vec![]));
    }

    #[test]
    fn a_buffer_reply_without_a_sink_buffer_sends_its_vec() {
        let c = Capture::default();
        let mut d = reply(&c, 5).buffer(8);
        d.buf()[..3].copy_from_slice(b"abc");
        std::thread::spawn(move || d.send(3)).join().unwrap();
        reply(&c, 6).buffer(8).error(libc::EIO);
        drop(reply(&c, 7).buffer(8));
        let got = c.0.lock().clone();
        assert_eq!(got[0], (5, 0, b"abc".to_vec()));
        assert_eq!((got[1].0, got[1].1), (6, -libc::EIO));
        assert_eq!((got[2].0, got[2].1), (7, -libc::EIO));
    }

    #[test]
    fn dirents_are_padded_and_bounded() {
        let mut d = DirBuf::new(80);
        assert!(d.add(1, 1, libc::DT_DIR as u32, OsStr::new(".")));
        assert_eq!(d.len(), 32);
        assert!(d.add(2, 2, libc::DT_REG as u32, OsStr::new("abcdefghi")));
        assert_eq!(d.len(), 72);
        assert!(!d.add(3, 3, libc::DT_REG as u32, OsStr::new("x")));
        assert_eq!(d.len(), 72);
        let first: fuse_dirent = abi::read(&d.buf).unwrap();
        assert_eq!((first.ino, first.off, first.namelen), (1, 1, 1));
        let mut p = DirBuf::new(4096);
        let mut e = Entry::default();
        e.attr.mode = libc::S_IFREG | 0o644;
        assert!(p.add_plus(&e, 1, OsStr::new("f")));
        assert_eq!(p.len(), 160);
        let plus: fuse_direntplus = abi::read(&p.buf).unwrap();
        assert_eq!(plus.dirent.typ, libc::DT_REG as u32);
    }
}
