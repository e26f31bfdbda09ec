//! The object files of an inode, one per device: where they live, how they are opened
//! (beneath the device's object directory, never through a symlink) and kept open,
//! and what fsck sees of them.

use super::*;

/// How many objects may keep open files before idle ones are closed.
pub(super) const OPEN_OBJECTS: usize = 1024;

/// Open object files of one inode, one per device, opened on first use.
pub(super) struct Objects {
    files: Vec<OnceLock<Arc<File>>>,
    /// The same files opened O_DIRECT (None where the device's filesystem refuses it).
    direct: Vec<OnceLock<Option<Arc<File>>>>,
}

impl Volume {
    /// The O_DIRECT twin of an open object file, if the piece can use it: whole blocks on the
    /// device and in memory.
    pub(super) fn direct_twin(
        &self,
        objs: &Objects,
        device: usize,
        ino: u64,
        io: &SlotIo,
        base: *const u8,
    ) -> Option<Arc<File>> {
        let aligned = crate::io::direct_aligned(io.obj_offset, io.len())
            && io
                .segments
                .iter()
                .all(|&(o, l)| (base as usize + o).is_multiple_of(4096) && l.is_multiple_of(4096));
        if !self.direct.load(Relaxed) || !aligned {
            return None;
        }
        let dir = self.set.dev(device).objects.as_ref()?;
        objs.direct
            .get(device)?
            .get_or_init(|| {
                open_object(dir, &object_rel(ino), libc::O_RDWR | libc::O_DIRECT)
                    .inspect_err(|e| {
                        log::debug!("no O_DIRECT for object {ino} on device {device}: {e}")
                    })
                    .ok()
                    .map(Arc::new)
            })
            .clone()
    }

    /// Path of an inode's object file on a device.
    pub fn object_path(&self, device: usize, ino: u64) -> PathBuf {
        object_path(&self.set.dev(device).info.path, ino)
    }

    pub(super) fn objects(&self, ino: u64) -> Arc<Objects> {
        let count = self.set.len();
        if let Some(o) = self.open.get(&ino).filter(|o| o.files.len() == count) {
            return o.clone();
        }
        let fresh = || {
            Arc::new(Objects {
                files: (0..count).map(|_| OnceLock::new()).collect(),
                direct: (0..count).map(|_| OnceLock::new()).collect(),
            })
        };
        let objs = {
            let mut entry = self.open.entry(ino).or_insert_with(fresh);
            // Made before a device joined: made again with a place for it.
            if entry.files.len() < count {
                *entry = fresh();
            }
            entry.clone()
        };
        // Objects opened behind a file's back (a cache writing back after the last close) are
        // not closed by `close`: keep the descriptors bounded by dropping idle ones.
        if self.open.len() > OPEN_OBJECTS {
            self.open.retain(|_, o| Arc::strong_count(o) > 1);
        }
        objs
    }

    /// The object file of `ino` on `device`; `None` if it does not exist and `create` is false.
    pub(super) fn object(
        &self,
        objs: &Objects,
        device: usize,
        ino: u64,
        create: bool,
    ) -> Result<Option<Arc<File>>> {
        let unkept = OnceLock::new();
        // A device that joined after `objs` was made: opened, not kept.
        let slot = objs.files.get(device).unwrap_or(&unkept);
        if let Some(f) = slot.get() {
            return Ok(Some(f.clone()));
        }
        // A removed device holds nothing (the files moved off it before it left).
        if self.set.dev(device).removed() && !create {
            return Ok(None);
        }
        let create = if create { libc::O_CREAT } else { 0 };
        let Some(dir) = self.set.dev(device).objects.as_ref() else {
            return Err(self.io_err(device, io::Error::from_raw_os_error(libc::EIO)));
        };
        let opened = open_object(dir, &object_rel(ino), libc::O_RDWR | create);
        match opened {
            Ok(f) => {
                let _ = slot.set(Arc::new(f));
                Ok(slot.get().cloned())
            }
            // A device gone read-only still serves reads; not kept, so a write later meets
            // EROFS, not a read-only descriptor.
            Err(e) if e.raw_os_error() == Some(libc::EROFS) && create == 0 => {
                open_object(dir, &object_rel(ino), libc::O_RDONLY)
                    .map(|f| Some(Arc::new(f)))
                    .map_err(|e| self.io_err(device, e))
            }
            // No object file is a hole, unless the whole device is gone.
            Err(e) if e.kind() == io::ErrorKind::NotFound && create == 0 => {
                self.check_devices();
                if self.set.failed(device) {
                    return Err(self.io_err(device, io::Error::from_raw_os_error(libc::EIO)));
                }
                Ok(None)
            }
            Err(e) => Err(self.io_err(device, e)),
        }
    }

    /// Drops the inode's open object files (after its last close).
    pub fn close(&self, ino: u64) {
        self.open.remove(&ino);
    }

    /// Deletes the inode's object files on every device.
    pub fn remove(&self, ino: u64) -> Result<()> {
        self.open.remove(&ino);
        self.layouts.remove(&ino);
        for dev in 0..self.set.len() {
            match std::fs::remove_file(self.object_path(dev, ino)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(self.io_err(dev, e)),
            }
        }
        Ok(())
    }

    /// Deletes the object file of `object` on one device only (fsck's stray copies).
    pub fn remove_from(&self, device: usize, object: u64) -> Result<()> {
        self.open.remove(&object);
        std::fs::remove_file(self.object_path(device, object)).map_err(|e| self.io_err(device, e))
    }

    /// Length and allocation of each of the inode's object files that exists.
    pub fn object_info(&self, ino: u64) -> Vec<ObjectInfo> {
        (0..self.set.len())
            .filter_map(|dev| {
                let md = std::fs::symlink_metadata(self.object_path(dev, ino)).ok()?;
                Some(object_info(dev, ino, &md))
            })
            .collect()
    }

    /// Every object file on every device (for fsck).
    pub fn list_objects(&self) -> Result<Vec<ObjectInfo>> {
        let mut out = Vec::new();
        for (dev, d) in self.set.members() {
            let root = d.info.path.join(META_DIR).join(OBJECTS);
            for fan in 0..FANOUT {
                let dir = root.join(format!("{fan:02x}"));
                let entries = match std::fs::read_dir(&dir) {
                    Ok(e) => e,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(self.io_err(dev, e)),
                };
                for entry in entries {
                    let entry = entry.map_err(|e| self.io_err(dev, e))?;
                    let Some(ino) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
                        continue;
                    };
                    let md = entry.metadata().map_err(|e| self.io_err(dev, e))?;
                    out.push(object_info(dev, ino, &md));
                }
            }
        }
        Ok(out)
    }
}

fn object_path(device: &Path, ino: u64) -> PathBuf {
    device
        .join(META_DIR)
        .join(OBJECTS)
        .join(format!("{:02x}", ino % FANOUT))
        .join(ino.to_string())
}

fn object_info(device: usize, ino: u64, md: &std::fs::Metadata) -> ObjectInfo {
    use std::os::unix::fs::MetadataExt;
    ObjectInfo {
        device,
        ino,
        len: md.len(),
        allocated: md.blocks() * 512,
        regular: md.file_type().is_file(),
    }
}

/// Opens `rel` under the directory `dir` without following a symlink anywhere on the way, nor
/// leaving `dir`.
fn open_beneath(dir: &OwnedFd, rel: &str, flags: i32) -> io::Result<File> {
    let c = std::ffi::CString::new(rel).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: open_how is plain data; zero is its neutral value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC | libc::O_NOFOLLOW) as u64;
    how.mode = if flags & libc::O_CREAT != 0 { 0o600 } else { 0 };
    how.resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_BENEATH;
    // SAFETY: openat2 with a live directory descriptor, a C string and a filled open_how.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor that we own.
    Ok(unsafe { File::from_raw_fd(fd as i32) })
}

/// Opens the object file `rel` beneath the object directory `dir` ([`open_beneath`]): an
/// object file is never anything but the regular file it names. Anything else put in its
/// place is refused (EIO): a FIFO would hold the I/O that reaches it, and the caller with it,
/// until someone writes to it or drains it, and a device node would be read as data.
pub(super) fn open_object(dir: &OwnedFd, rel: &str, flags: i32) -> io::Result<File> {
    // Non-blocking until it is known to be a regular file: opening a FIFO for reading waits
    // for a writer.
    let file = open_beneath(dir, rel, flags | libc::O_NONBLOCK | libc::O_NOCTTY)?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        log::error!("object file {rel} is not a regular file ({kind:?}): refused");
        return Err(io::Error::from_raw_os_error(libc::EIO));
    }
    // A regular file's reads and writes never wait on O_NONBLOCK, but io_uring would answer
    // EAGAIN for them instead of waiting: back to what the caller asked.
    // SAFETY: fcntl on a descriptor we own.
    if flags & libc::O_NONBLOCK == 0
        && unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) } != 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok(file)
}

/// The largest file the filesystem of `dir` accepts, found by growing an unnamed, empty
/// O_TMPFILE (sparse: nothing is allocated, nothing is left behind) until EFBIG.
pub(super) fn largest_file(dir: &OwnedFd) -> u64 {
    let most = i64::MAX as u64;
    // SAFETY: openat on a live directory descriptor with a static C string.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c".".as_ptr(),
            libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
            0o600,
        )
    };
    if fd < 0 {
        // No O_TMPFILE here (or a read-only device): the kernel's own checks still apply.
        return most;
    }
    // SAFETY: a fresh descriptor that we own.
    let probe = unsafe { OwnedFd::from_raw_fd(fd) };
    // Past the limit ftruncate fails with EFBIG (SIGXFSZ, which would kill us under a file
    // size rlimit, is ignored by the daemon); any other error says nothing of the limit.
    // SAFETY: ftruncate on a descriptor we own.
    let fits = |len: u64| match unsafe { libc::ftruncate(probe.as_raw_fd(), len as i64) } {
        0 => Some(true),
        _ => match io::Error::last_os_error().raw_os_error() {
            Some(libc::EFBIG) | Some(libc::EINVAL) => Some(false),
            _ => None,
        },
    };
    match fits(most) {
        Some(true) | None => return most,
        Some(false) => {}
    }
    let (mut lo, mut hi) = (0, most);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match fits(mid) {
            Some(true) => lo = mid,
            Some(false) => hi = mid,
            None => return most,
        }
    }
    lo
}

/// The object directory of a device, opened once: objects are opened beneath it.
pub(super) fn objects_dir(device: &Path) -> io::Result<OwnedFd> {
    let dev = File::open(device)?;
    let dir = OwnedFd::from(dev);
    open_beneath(
        &dir,
        &format!("{META_DIR}/{OBJECTS}"),
        libc::O_DIRECTORY | libc::O_PATH,
    )
    .map(OwnedFd::from)
}

/// An object's path relative to its device's object directory.
pub(super) fn object_rel(ino: u64) -> String {
    format!("{:02x}/{ino}", ino % FANOUT)
}
