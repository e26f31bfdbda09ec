//! A tiny in-memory filesystem served by fusewire, mounted on a temp dir, and the guards that
//! unmount it and bound every test in time.

#![allow(dead_code)]

use fusewire::abi::{fuse_attr, fuse_kstatfs};
use fusewire::reply::dt_of_mode;
use fusewire::{Config, DirBuf, Entry, Filesystem, Operation, Reply, Request, Session};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

const TTL: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Node {
    attr: fuse_attr,
    /// File contents, or a symlink's target.
    data: Vec<u8>,
    children: BTreeMap<OsString, u64>,
    xattrs: BTreeMap<OsString, Vec<u8>>,
}

/// Files in RAM: enough for lookup, getattr, read, write, create, unlink, readdir, tmpfile.
pub struct MemFs {
    nodes: Mutex<(u64, HashMap<u64, Node>)>,
    /// Which thread served each read (the uring test checks reads came by io_uring).
    pub seen: Mutex<Vec<String>>,
    /// Reads of the file named "slow" wait here until interrupted.
    pub held: Mutex<HashMap<u64, Reply>>,
    pub interrupts: std::sync::atomic::AtomicUsize,
    /// READDIRPLUS requests served.
    pub plus: std::sync::atomic::AtomicUsize,
    slow: Option<u64>,
}

fn attr(ino: u64, mode: u32, size: u64) -> fuse_attr {
    fuse_attr {
        ino,
        size,
        blocks: size.div_ceil(512),
        mode,
        nlink: 1,
        blksize: 4096,
        ..Default::default()
    }
}

impl MemFs {
    /// A root with `files` (name, contents).
    pub fn new(files: &[(&str, &[u8])]) -> MemFs {
        let mut nodes = HashMap::new();
        let mut root = Node {
            attr: attr(1, libc::S_IFDIR | 0o755, 0),
            data: vec![],
            ..Default::default()
        };
        root.attr.nlink = 2;
        let mut next = 2;
        let mut slow = None;
        for (name, data) in files {
            if *name == "slow" {
                slow = Some(next);
            }
            root.children.insert(OsString::from(name), next);
            nodes.insert(
                next,
                Node {
                    attr: attr(next, libc::S_IFREG | 0o644, data.len() as u64),
                    data: data.to_vec(),
                    ..Default::default()
                },
            );
            next += 1;
        }
        nodes.insert(1, root);
        MemFs {
            nodes: Mutex::new((next, nodes)),
            seen: Mutex::new(vec![]),
            held: Mutex::new(HashMap::new()),
            interrupts: Default::default(),
            plus: Default::default(),
            slow,
        }
    }

    fn entry(a: &fuse_attr) -> Entry {
        Entry {
            nodeid: a.ino,
            generation: 0,
            attr: *a,
            entry_ttl: TTL,
            attr_ttl: TTL,
        }
    }

    /// Changes a file behind the kernel's back (what another client of the backing store does).
    pub fn set_data(&self, name: &str, data: &[u8]) -> u64 {
        let mut g = self.nodes.lock();
        let ino = g.1[&1].children[OsStr::new(name)];
        let node = g.1.get_mut(&ino).expect("node");
        node.data = data.to_vec();
        node.attr.size = data.len() as u64;
        ino
    }

    /// Removes a name behind the kernel's back.
    pub fn remove_name(&self, name: &str) {
        self.nodes
            .lock()
            .1
            .get_mut(&1)
            .expect("root")
            .children
            .remove(OsStr::new(name));
    }

    fn new_node(&self, parent: u64, name: Option<&OsStr>, mode: u32) -> Result<fuse_attr, i32> {
        let mut g = self.nodes.lock();
        let (next, nodes) = &mut *g;
        let ino = *next;
        let dir = nodes.get_mut(&parent).ok_or(libc::ENOENT)?;
        if let Some(name) = name {
            if dir.children.contains_key(name) {
                return Err(libc::EEXIST);
            }
            dir.children.insert(name.to_owned(), ino);
        }
        *next += 1;
        let mut a = attr(ino, mode, 0);
        if name.is_none() {
            a.nlink = 0;
        }
        nodes.insert(
            ino,
            Node {
                attr: a,
                data: vec![],
                ..Default::default()
            },
        );
        Ok(a)
    }

    fn handle(&self, req: &Request<'_>, reply: Reply) {
        let n = req.nodeid;
        match req.op {
            Operation::Lookup { name } => {
                let g = self.nodes.lock();
                let child = g.1.get(&n).and_then(|d| d.children.get(name));
                match child.and_then(|c| g.1.get(c)) {
                    Some(c) => reply.entry(&Self::entry(&c.attr)),
                    None => reply.error(libc::ENOENT),
                }
            }
            Operation::Getattr { .. } => match self.nodes.lock().1.get(&n) {
                Some(node) => reply.attr(&node.attr, TTL),
                None => reply.error(libc::ENOENT),
            },
            Operation::Setattr(s) => {
                let mut g = self.nodes.lock();
                let Some(node) = g.1.get_mut(&n) else {
                    return reply.error(libc::ENOENT);
                };
                if let Some(size) = s.size {
                    node.data.resize(size as usize, 0);
                    node.attr.size = size;
                }
                if let Some(mode) = s.mode {
                    node.attr.mode = (node.attr.mode & libc::S_IFMT) | (mode & 0o7777);
                }
                reply.attr(&node.attr, TTL)
            }
            // Direct I/O for the slow file: its reads wait in the kernel interruptibly.
            Operation::Open { .. } if Some(n) == self.slow => {
                reply.open(0, fusewire::abi::FOPEN_DIRECT_IO)
            }
            Operation::Open { .. } | Operation::Opendir { .. } => reply.open(0, 0),
            Operation::Read { .. } if Some(n) == self.slow => {
                self.held.lock().insert(req.unique, reply);
            }
            Operation::Read { offset, size, .. } => {
                self.seen
                    .lock()
                    .push(std::thread::current().name().unwrap_or("").to_string());
                let g = self.nodes.lock();
                let Some(node) = g.1.get(&n) else {
                    return reply.error(libc::ENOENT);
                };
                let start = (offset as usize).min(node.data.len());
                let end = (start + size as usize).min(node.data.len());
                // In place: the ring entry's own buffer over io_uring.
                let mut d = reply.buffer(end - start);
                if req.unique.is_multiple_of(2) {
                    // Filled and sent from another thread, as device completions do.
                    let bytes = node.data[start..end].to_vec();
                    std::thread::spawn(move || {
                        d.buf().copy_from_slice(&bytes);
                        d.send(bytes.len())
                    });
                    return;
                }
                d.buf().copy_from_slice(&node.data[start..end]);
                d.send(end - start)
            }
            Operation::Write { offset, data, .. } => {
                let mut g = self.nodes.lock();
                let Some(node) = g.1.get_mut(&n) else {
                    return reply.error(libc::ENOENT);
                };
                let end = offset as usize + data.len();
                if node.data.len() < end {
                    node.data.resize(end, 0);
                }
                node.data[offset as usize..end].copy_from_slice(data);
                node.attr.size = node.data.len() as u64;
                reply.write(data.len() as u32)
            }
            Operation::Create { name, mode, .. } => {
                match self.new_node(n, Some(name), libc::S_IFREG | (mode & 0o7777)) {
                    Ok(a) => reply.create(&Self::entry(&a), 0, 0),
                    Err(e) => reply.error(e),
                }
            }
            Operation::Tmpfile { mode, .. } => {
                match self.new_node(n, None, libc::S_IFREG | (mode & 0o7777)) {
                    Ok(a) => reply.create(&Self::entry(&a), 0, 0),
                    Err(e) => reply.error(e),
                }
            }
            Operation::Mkdir { name, mode, .. } => {
                match self.new_node(n, Some(name), libc::S_IFDIR | (mode & 0o7777)) {
                    Ok(a) => reply.entry(&Self::entry(&a)),
                    Err(e) => reply.error(e),
                }
            }
            Operation::Unlink { name } | Operation::Rmdir { name } => {
                let mut g = self.nodes.lock();
                let removed = g.1.get_mut(&n).and_then(|d| d.children.remove(name));
                match removed {
                    Some(_) => reply.ok(),
                    None => reply.error(libc::ENOENT),
                }
            }
            Operation::Readdir {
                offset, size, plus, ..
            } => {
                let g = self.nodes.lock();
                let Some(dir) = g.1.get(&n) else {
                    return reply.error(libc::ENOENT);
                };
                let mut all: Vec<(u64, &OsStr)> = vec![(n, OsStr::new(".")), (1, OsStr::new(".."))];
                all.extend(dir.children.iter().map(|(k, v)| (*v, k.as_os_str())));
                if plus {
                    self.plus.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                let mut buf = DirBuf::new(size);
                for (i, (ino, name)) in all.iter().enumerate().skip(offset as usize) {
                    let a = g.1.get(ino).map(|c| c.attr).unwrap_or_default();
                    let fits = if plus {
                        buf.add_plus(&Self::entry(&a), i as u64 + 1, name)
                    } else {
                        buf.add(*ino, i as u64 + 1, dt_of_mode(a.mode), name)
                    };
                    if !fits {
                        break;
                    }
                }
                reply.dirents(&buf)
            }
            Operation::Symlink { name, target } => {
                match self.new_node(n, Some(name), libc::S_IFLNK | 0o777) {
                    Ok(mut a) => {
                        let mut g = self.nodes.lock();
                        let node = g.1.get_mut(&a.ino).expect("just made");
                        node.data = target.as_encoded_bytes().to_vec();
                        node.attr.size = node.data.len() as u64;
                        a = node.attr;
                        reply.entry(&Self::entry(&a))
                    }
                    Err(e) => reply.error(e),
                }
            }
            Operation::Readlink => match self.nodes.lock().1.get(&n) {
                Some(node) => reply.data(&node.data),
                None => reply.error(libc::ENOENT),
            },
            Operation::Link { oldnodeid, newname } => {
                let mut g = self.nodes.lock();
                let Some(dir) = g.1.get_mut(&n) else {
                    return reply.error(libc::ENOENT);
                };
                dir.children.insert(newname.to_owned(), oldnodeid);
                match g.1.get_mut(&oldnodeid) {
                    Some(node) => {
                        node.attr.nlink += 1;
                        reply.entry(&Self::entry(&node.attr))
                    }
                    None => reply.error(libc::ENOENT),
                }
            }
            Operation::Rename {
                newdir,
                name,
                newname,
                flags,
            } => {
                if flags != 0 {
                    return reply.error(libc::EINVAL);
                }
                let mut g = self.nodes.lock();
                let Some(child) = g.1.get_mut(&n).and_then(|d| d.children.remove(name)) else {
                    return reply.error(libc::ENOENT);
                };
                match g.1.get_mut(&newdir) {
                    Some(d) => {
                        d.children.insert(newname.to_owned(), child);
                        reply.ok()
                    }
                    None => reply.error(libc::ENOENT),
                }
            }
            Operation::Setxattr { name, value, .. } => match self.nodes.lock().1.get_mut(&n) {
                Some(node) => {
                    node.xattrs.insert(name.to_owned(), value.to_vec());
                    reply.ok()
                }
                None => reply.error(libc::ENOENT),
            },
            Operation::Getxattr { name, size } => {
                let g = self.nodes.lock();
                match g.1.get(&n).and_then(|node| node.xattrs.get(name)) {
                    None => reply.error(libc::ENODATA),
                    Some(v) if size == 0 => reply.xattr_size(v.len() as u32),
                    Some(v) if (size as usize) < v.len() => reply.error(libc::ERANGE),
                    Some(v) => reply.data(v),
                }
            }
            Operation::Listxattr { size } => {
                let g = self.nodes.lock();
                let Some(node) = g.1.get(&n) else {
                    return reply.error(libc::ENOENT);
                };
                let mut list = Vec::new();
                for k in node.xattrs.keys() {
                    list.extend_from_slice(k.as_encoded_bytes());
                    list.push(0);
                }
                if size == 0 {
                    reply.xattr_size(list.len() as u32)
                } else if (size as usize) < list.len() {
                    reply.error(libc::ERANGE)
                } else {
                    reply.data(&list)
                }
            }
            Operation::Removexattr { name } => {
                let removed = self
                    .nodes
                    .lock()
                    .1
                    .get_mut(&n)
                    .and_then(|node| node.xattrs.remove(name));
                match removed {
                    Some(_) => reply.ok(),
                    None => reply.error(libc::ENODATA),
                }
            }
            Operation::Statfs => reply.statfs(&fuse_kstatfs {
                blocks: 1000,
                bfree: 500,
                bavail: 500,
                bsize: 4096,
                namelen: 255,
                frsize: 4096,
                ..Default::default()
            }),
            Operation::Release { .. }
            | Operation::Releasedir { .. }
            | Operation::Flush { .. }
            | Operation::Fsync { .. }
            | Operation::Fsyncdir { .. } => reply.ok(),
            _ => reply.error(libc::ENOSYS),
        }
    }
}

/// What the session serves: a handle the filesystem can clone into other threads.
pub struct Served(pub std::sync::Arc<MemFs>);

impl Filesystem for Served {
    fn request(&self, req: Request<'_>, reply: Reply) {
        // Answer from another thread now and then: replies must work from anywhere.
        if req.unique.is_multiple_of(3) {
            if let Operation::Getattr { .. } = req.op {
                let me = self.0.clone();
                let n = req.nodeid;
                std::thread::spawn(move || match me.nodes.lock().1.get(&n) {
                    Some(node) => reply.attr(&node.attr, TTL),
                    None => reply.error(libc::ENOENT),
                });
                return;
            }
        }
        self.0.handle(&req, reply)
    }

    fn interrupt(&self, unique: u64) {
        self.0
            .interrupts
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let held = self.0.held.lock().remove(&unique);
        if let Some(reply) = held {
            reply.error(libc::EINTR);
        }
    }
}

/// Aborts the FUSE connection after a deadline, so that a hung test fails instead of hanging.
pub struct Watchdog {
    stop: Option<mpsc::Sender<()>>,
}

///
/// Through the FUSE control filesystem, which is mounted first where the system has not
/// (systemd normally does; without it the abort would silently do nothing).
pub fn abort_connection(conn: u64) {
    let dir = "/sys/fs/fuse/connections";
    let abort = format!("{dir}/{conn}/abort");
    if !Path::new(&abort).exists() {
        let _ = std::process::Command::new("mount")
            .args(["-t", "fusectl", "fusectl", dir])
            .status();
    }
    if let Err(e) = std::fs::write(&abort, "1") {
        eprintln!("cannot abort FUSE connection {conn}: {abort}: {e}");
    }
}

impl Watchdog {
    pub fn new(conn: u64, limit: Duration) -> Watchdog {
        let (tx, rx) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
                eprintln!("watchdog: aborting FUSE connection {conn}");
                abort_connection(conn);
            }
        });
        Watchdog { stop: Some(tx) }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.stop.take());
    }
}

/// A mounted MemFs: unmounted, and its session waited for (bounded), when dropped.
pub struct Mounted {
    pub dir: tempfile::TempDir,
    pub fs: std::sync::Arc<MemFs>,
    pub info: fusewire::InitInfo,
    pub conn: u64,
    pub notifier: fusewire::Notifier,
    mount: Option<fusewire::mount::Mount>,
    running: Option<fusewire::Running>,
    _watchdog: Watchdog,
}

impl Mounted {
    pub fn new(fs: MemFs, config: Config) -> Mounted {
        let dir = tempfile::tempdir().expect("tempdir");
        let (fd, mount) =
            fusewire::mount::mount(dir.path(), "fusewiretest", "memfs", "").expect("mount");
        let fs = std::sync::Arc::new(fs);
        let session = Session::new(fd, Served(fs.clone()), config);
        let notifier = session.notifier();
        let running = session.spawn().expect("spawn");
        let info = running
            .wait_init(Duration::from_secs(10))
            .cloned()
            .expect("INIT within 10 s");
        let conn = std::fs::metadata(dir.path())
            .map(|m| m.dev())
            .expect("stat");
        // The connection's number is the mount's minor device number.
        let conn = conn & 0xff | ((conn >> 12) & 0xfff00);
        Mounted {
            dir,
            fs,
            info,
            conn,
            mount: Some(mount),
            running: Some(running),
            notifier,
            _watchdog: Watchdog::new(conn, Duration::from_secs(60)),
        }
    }

    pub fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Unmounts and waits for the session to end; true when it ended in time.
    pub fn finish(&mut self) -> bool {
        drop(self.mount.take());
        let Some(running) = self.running.take() else {
            return true;
        };
        let end = std::time::Instant::now() + Duration::from_secs(10);
        while !running.is_finished() && std::time::Instant::now() < end {
            std::thread::sleep(Duration::from_millis(10));
        }
        if !running.is_finished() {
            abort_connection(self.conn);
            return false;
        }
        running.join().is_ok()
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The scenario both transports run: lookup, getattr, read, write, readdir, create, unlink,
/// O_TMPFILE, statfs.
pub fn exercise(m: &Mounted) {
    use std::io::{Read, Seek, SeekFrom, Write};
    use std::os::fd::FromRawFd;
    use std::os::unix::ffi::OsStrExt;

    // lookup + getattr + open + read
    assert_eq!(std::fs::read(m.path("hello")).unwrap(), b"hello world\n");
    assert_eq!(std::fs::metadata(m.path("hello")).unwrap().len(), 12);
    assert!(std::fs::metadata(m.path("missing")).is_err());

    // create + write + read back
    std::fs::write(m.path("new"), b"fresh data").unwrap();
    assert_eq!(std::fs::read(m.path("new")).unwrap(), b"fresh data");
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.path("new"))
        .unwrap();
    f.seek(SeekFrom::Start(6)).unwrap();
    f.write_all(b"DATA").unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "fresh DATA");
    drop(f);

    // a bigger write and read, many requests in flight over both halves
    let big: Vec<u8> = (0..(3 << 20)).map(|i| (i % 251) as u8).collect();
    std::fs::write(m.path("big"), &big).unwrap();
    assert_eq!(std::fs::read(m.path("big")).unwrap(), big);

    // readdir
    let mut names: Vec<String> = std::fs::read_dir(m.root())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["big", "hello", "new", "small"]);

    // mkdir + unlink + rmdir
    std::fs::create_dir(m.path("d")).unwrap();
    std::fs::remove_file(m.path("new")).unwrap();
    assert!(std::fs::metadata(m.path("new")).is_err());
    std::fs::remove_dir(m.path("d")).unwrap();

    // symlink + readlink, link, rename (names in the payload, newdir in the first argument)
    std::os::unix::fs::symlink("hello", m.path("lnk")).unwrap();
    assert_eq!(
        std::fs::read_link(m.path("lnk")).unwrap(),
        Path::new("hello")
    );
    assert_eq!(std::fs::read(m.path("lnk")).unwrap(), b"hello world\n");
    std::fs::hard_link(m.path("hello"), m.path("hello2")).unwrap();
    assert_eq!(std::fs::metadata(m.path("hello2")).unwrap().nlink(), 2);
    std::fs::rename(m.path("hello2"), m.path("hello3")).unwrap();
    assert!(std::fs::metadata(m.path("hello2")).is_err());
    assert_eq!(std::fs::read(m.path("hello3")).unwrap(), b"hello world\n");
    std::fs::remove_file(m.path("hello3")).unwrap();
    std::fs::remove_file(m.path("lnk")).unwrap();

    // xattrs: setxattr's first argument is the extended 16-byte struct when negotiated
    let c_hello = std::ffi::CString::new(m.path("hello").as_os_str().as_bytes()).unwrap();
    let (name, value) = (c"user.test", b"some value");
    // SAFETY: valid C strings and buffers of the given lengths, for all four calls.
    unsafe {
        let r = libc::setxattr(
            c_hello.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        );
        assert_eq!(r, 0, "setxattr: {}", std::io::Error::last_os_error());
        let mut buf = [0u8; 64];
        let n = libc::getxattr(
            c_hello.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        );
        assert_eq!(&buf[..n as usize], value);
        assert_eq!(
            libc::getxattr(c_hello.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0),
            10
        );
        let n = libc::listxattr(c_hello.as_ptr(), buf.as_mut_ptr().cast(), buf.len());
        assert_eq!(&buf[..n as usize], b"user.test\0");
        assert_eq!(libc::removexattr(c_hello.as_ptr(), name.as_ptr()), 0);
        assert!(libc::getxattr(c_hello.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), 64) < 0);
    }

    // O_TMPFILE
    let dir = std::ffi::CString::new(m.root().as_os_str().as_bytes()).unwrap();
    // SAFETY: open(2) with a valid C string; the descriptor is owned by the File at once.
    let fd = unsafe { libc::open(dir.as_ptr(), libc::O_TMPFILE | libc::O_RDWR, 0o600) };
    assert!(fd >= 0, "O_TMPFILE: {}", std::io::Error::last_os_error());
    // SAFETY: fd was just opened and is owned by nothing else.
    let mut t = unsafe { std::fs::File::from_raw_fd(fd) };
    t.write_all(b"unnamed").unwrap();
    t.seek(SeekFrom::Start(0)).unwrap();
    let mut s = String::new();
    t.read_to_string(&mut s).unwrap();
    assert_eq!(s, "unnamed");
    assert_eq!(t.metadata().unwrap().len(), 7);
    drop(t);

    // statfs
    let c = std::ffi::CString::new(m.root().as_os_str().as_bytes()).unwrap();
    // SAFETY: statvfs fills the zeroed struct; the path is a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    assert_eq!(st.f_blocks, 1000);
}

/// The files every test starts with.
pub fn files() -> MemFs {
    MemFs::new(&[("hello", b"hello world\n"), ("small", b"x")])
}

extern "C" fn on_signal(_: libc::c_int) {}

/// A read of "slow" that waits in the filesystem is interrupted by a signal: the kernel sends
/// INTERRUPT, the filesystem answers the held read EINTR from the interrupt's thread.
pub fn interrupt_a_held_read(m: &Mounted) {
    use std::io::Read;
    use std::os::unix::thread::JoinHandleExt;
    // SAFETY: installs a no-op handler without SA_RESTART, so the read returns EINTR.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut());
    }
    let path = m.path("slow");
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut f = std::fs::File::open(path).unwrap();
        let mut b = [0u8; 10];
        let _ = tx.send(f.read(&mut b).map_err(|e| e.raw_os_error()));
    });
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while m.fs.held.lock().is_empty() {
        match rx.try_recv() {
            Ok(r) => panic!("the read returned without reaching the filesystem: {r:?}"),
            Err(mpsc::TryRecvError::Disconnected) => panic!("the reader failed"),
            Err(mpsc::TryRecvError::Empty) => {}
        }
        assert!(
            std::time::Instant::now() < end,
            "the read never reached the filesystem"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // Signal until the read returns: a signal that lands before the kernel waits is lost.
    let got = loop {
        // SAFETY: the thread is alive until it sends its result.
        unsafe { libc::pthread_kill(reader.as_pthread_t(), libc::SIGUSR1) };
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(r) => break r,
            Err(_) => assert!(
                std::time::Instant::now() < end,
                "the read was never interrupted"
            ),
        }
    };
    reader.join().unwrap();
    assert_eq!(got, Err(Some(libc::EINTR)));
    assert!(m.fs.interrupts.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    assert!(m.fs.held.lock().is_empty());
}

/// Notifications (which always travel over /dev/fuse) reach the kernel: a changed file reads
/// anew after inval_inode, a removed name is gone after inval_entry.
pub fn notifications(m: &Mounted) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(m.path("hello")).unwrap();
    let mut buf = [0u8; 12];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), 12);
    assert_eq!(&buf, b"hello world\n");
    let ino = m.fs.set_data("hello", b"HELLO WORLD\n");
    m.notifier.inval_inode(ino, 0, 0).unwrap();
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), 12);
    assert_eq!(&buf, b"HELLO WORLD\n");
    assert!(std::fs::metadata(m.path("small")).is_ok());
    m.fs.remove_name("small");
    m.notifier
        .inval_entry(fusewire::abi::ROOT_ID, OsStr::new("small"))
        .unwrap();
    assert!(std::fs::metadata(m.path("small")).is_err());
}
