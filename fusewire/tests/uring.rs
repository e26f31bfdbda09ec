//! fusewire over io_uring: the same RAM filesystem and scenario as over /dev/fuse, with the
//! kernel's FUSE-over-io_uring switched on for the test (and restored after it, also when the
//! test fails). Needs root and a kernel with CONFIG_FUSE_IO_URING; skipped otherwise.

mod common;

use common::{
    abort_connection, exercise, files, interrupt_a_held_read, notifications, MemFs, Mounted,
};
use fusewire::{Config, UringConfig};

const PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

/// Sets `enable_uring` to Y and puts the previous value back when dropped. Tests holding one
/// run one at a time (a second guard would save the first one's Y as "previous").
struct EnableUring {
    previous: String,
    _one_at_a_time: parking_lot::MutexGuard<'static, ()>,
}

static PARAM_LOCK: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

impl EnableUring {
    fn new() -> Option<EnableUring> {
        // SAFETY: plain getter.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root");
            return None;
        }
        let lock = PARAM_LOCK.lock();
        let Ok(previous) = std::fs::read_to_string(PARAM) else {
            eprintln!("skipped: this kernel has no FUSE over io_uring");
            return None;
        };
        let guard = EnableUring {
            previous: previous.trim().to_string(),
            _one_at_a_time: lock,
        };
        std::fs::write(PARAM, "Y").ok()?;
        Some(guard)
    }
}

impl Drop for EnableUring {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(PARAM, &self.previous) {
            eprintln!("could not restore {PARAM} to {}: {e}", self.previous);
        }
    }
}

fn uring_config(threads: usize, depth: usize) -> Config {
    let base = Config::default();
    Config {
        uring: Some(UringConfig {
            threads,
            depth,
            pinned: true,
        }),
        // READDIRPLUS on the single-thread run: its entries cross the ring too.
        want: match threads {
            1 => base.want | fusewire::abi::FUSE_DO_READDIRPLUS,
            _ => base.want,
        },
        ..base
    }
}

#[test]
fn uring_serves_a_ram_filesystem() {
    let Some(_on) = EnableUring::new() else {
        return;
    };
    for (threads, depth) in [(0, 8), (1, 4)] {
        let mut m = Mounted::new(files(), uring_config(threads, depth));
        assert!(m.info.uring, "io_uring not running: {:?}", m.info);
        assert_ne!(m.info.flags & fusewire::abi::FUSE_OVER_IO_URING, 0);
        exercise(&m);
        notifications(&m);
        if threads == 1 {
            assert!(m.fs.plus.load(std::sync::atomic::Ordering::SeqCst) > 0);
        }
        let seen = m.fs.seen.lock().clone();
        eprintln!("reads served by: {seen:?}");
        assert!(
            seen.iter().any(|t| t.starts_with("fuse-ring")),
            "no read came over the ring: {seen:?}"
        );
        assert!(m.finish(), "the session did not end after the unmount");
    }
    // Interrupts still come over /dev/fuse; the held read's reply goes back over the ring.
    let mut m = Mounted::new(MemFs::new(&[("slow", b"0123456789")]), uring_config(0, 4));
    assert!(m.info.uring);
    interrupt_a_held_read(&m);
    assert!(m.finish(), "the session did not end after the unmount");
    // An aborted connection (what `fusectl abort` or a dying daemon's kernel side does) ends
    // the ring threads and the session too.
    let mut m = Mounted::new(files(), uring_config(0, 4));
    assert_eq!(std::fs::read(m.path("hello")).unwrap(), b"hello world\n");
    abort_connection(m.conn);
    let e = std::fs::read(m.path("hello")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOTCONN));
    assert!(m.finish(), "the session did not end after the abort");
}

/// A file backed by a real file whose reads, over io_uring, go from the backing file straight
/// into the ring entry's payload buffer by an IORING_OP_READ on the same ring: the pattern the
/// engine needs (device I/O and FUSE requests in flight together, nothing blocking, no copy).
struct Backed {
    file: std::fs::File,
    size: u64,
    inflight: parking_lot::Mutex<std::collections::HashMap<u64, Pending>>,
    next: std::sync::atomic::AtomicU64,
    ring_reads: std::sync::atomic::AtomicUsize,
}

/// A request waiting for its device I/O.
enum Pending {
    Read(fusewire::reply::DataReply),
    Write(fusewire::Reply),
}

impl Backed {
    fn attr(&self, ino: u64) -> fusewire::abi::fuse_attr {
        let (mode, size) = match ino {
            1 => (libc::S_IFDIR | 0o755, 0),
            _ => (libc::S_IFREG | 0o644, self.size),
        };
        fusewire::abi::fuse_attr {
            ino,
            size,
            mode,
            nlink: 1,
            blksize: 4096,
            ..Default::default()
        }
    }
}

impl fusewire::Filesystem for Backed {
    fn request(&self, req: fusewire::Request<'_>, reply: fusewire::Reply) {
        use fusewire::Operation as Op;
        use std::os::unix::fs::FileExt;
        let ttl = std::time::Duration::from_secs(1);
        match req.op {
            Op::Lookup { name } if req.nodeid == 1 && name == "f" => {
                reply.entry(&fusewire::Entry {
                    nodeid: 2,
                    attr: self.attr(2),
                    entry_ttl: ttl,
                    attr_ttl: ttl,
                    ..Default::default()
                })
            }
            Op::Lookup { .. } => reply.error(libc::ENOENT),
            Op::Getattr { .. } => reply.attr(&self.attr(req.nodeid), ttl),
            Op::Open { .. } | Op::Opendir { .. } => reply.open(0, 0),
            Op::Read { offset, size, .. } => {
                let mut d = reply.buffer(size as usize);
                match self.file.read_at(d.buf(), offset) {
                    Ok(n) => d.send(n),
                    Err(e) => d.error(e.raw_os_error().unwrap_or(libc::EIO)),
                }
            }
            Op::Release { .. } | Op::Releasedir { .. } | Op::Flush { .. } => reply.ok(),
            _ => reply.error(libc::ENOSYS),
        }
    }

    fn request_on_ring(
        &self,
        req: fusewire::Request<'_>,
        reply: fusewire::Reply,
        ring: &fusewire::RingCtx<'_>,
    ) {
        use fusewire::io_uring::{opcode, types};
        use std::os::fd::AsRawFd;
        let (sqe, pending) = match req.op {
            fusewire::Operation::Read { offset, size, .. } => {
                let mut d = reply.buffer(size as usize);
                let buf = d.buf();
                let fd = types::Fd(self.file.as_raw_fd());
                let sqe = opcode::Read::new(fd, buf.as_mut_ptr(), buf.len() as u32)
                    .offset(offset)
                    .build();
                (sqe, Pending::Read(d))
            }
            // The data stays in the ring entry's payload, untouched, until the reply: the
            // device write goes straight from there.
            fusewire::Operation::Write { offset, data, .. } => {
                let fd = types::Fd(self.file.as_raw_fd());
                let sqe = opcode::Write::new(fd, data.as_ptr(), data.len() as u32)
                    .offset(offset)
                    .build();
                (sqe, Pending::Write(reply))
            }
            _ => return self.request(req, reply),
        };
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Parked before the push: the completion may be reaped in the same batch.
        self.inflight.lock().insert(id, pending);
        self.ring_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: a read's buffer is the DataReply's, a write's data the entry's payload,
        // both kept until the reply, which waits for the completion; the file stays open as
        // long as the filesystem.
        if let Err(e) = unsafe { ring.push(sqe, id) } {
            // Not queued: answered as its completion would be.
            self.ring_completion(ring, id, -e.raw_os_error().unwrap_or(libc::EIO));
        }
    }

    fn ring_completion(&self, _ring: &fusewire::RingCtx<'_>, user_data: u64, result: i32) {
        let Some(p) = self.inflight.lock().remove(&user_data) else {
            return;
        };
        match p {
            Pending::Read(d) if result < 0 => d.error(-result),
            Pending::Read(d) => d.send(result as usize),
            Pending::Write(r) if result < 0 => r.error(-result),
            Pending::Write(r) => r.write(result as u32),
        }
    }
}

#[test]
fn uring_device_io_on_the_same_ring() {
    let Some(_on) = EnableUring::new() else {
        return;
    };
    let backing = tempfile::NamedTempFile::new().unwrap();
    let data: Vec<u8> = (0..(2u32 << 20)).map(|i| (i % 241) as u8).collect();
    std::fs::write(backing.path(), &data).unwrap();
    let fs = std::sync::Arc::new(Backed {
        file: std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(backing.path())
            .unwrap(),
        size: data.len() as u64,
        inflight: Default::default(),
        next: Default::default(),
        ring_reads: Default::default(),
    });
    struct Served(std::sync::Arc<Backed>);
    impl fusewire::Filesystem for Served {
        fn request(&self, req: fusewire::Request<'_>, reply: fusewire::Reply) {
            self.0.request(req, reply)
        }
        fn request_on_ring(
            &self,
            req: fusewire::Request<'_>,
            reply: fusewire::Reply,
            ring: &fusewire::RingCtx<'_>,
        ) {
            self.0.request_on_ring(req, reply, ring)
        }
        fn ring_completion(&self, ring: &fusewire::RingCtx<'_>, user_data: u64, result: i32) {
            self.0.ring_completion(ring, user_data, result)
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let (fd, mut mount) = fusewire::mount::mount(dir.path(), "fusewiretest", "backed", "").unwrap();
    let running = fusewire::Session::new(fd, Served(fs.clone()), uring_config(0, 8))
        .spawn()
        .unwrap();
    let info = running
        .wait_init(std::time::Duration::from_secs(10))
        .cloned();
    assert!(info.is_some_and(|i| i.uring));
    let dev = std::os::unix::fs::MetadataExt::dev(&std::fs::metadata(dir.path()).unwrap());
    let _watchdog = common::Watchdog::new(
        dev & 0xff | ((dev >> 12) & 0xfff00),
        std::time::Duration::from_secs(60),
    );
    // Buffered (readahead-sized requests) and direct 4K reads at odd places.
    assert_eq!(std::fs::read(dir.path().join("f")).unwrap(), data);
    {
        use std::os::unix::fs::{FileExt, OpenOptionsExt};
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(dir.path().join("f"))
            .unwrap();
        let mut buf = vec![0u8; 8192];
        let aligned = (buf.as_ptr() as usize).next_multiple_of(4096) - buf.as_ptr() as usize;
        for off in [0u64, 4096, 1 << 20, (2 << 20) - 4096] {
            let b = &mut buf[aligned..aligned + 4096];
            assert_eq!(f.read_at(b, off).unwrap(), 4096);
            assert_eq!(b, &data[off as usize..off as usize + 4096]);
        }
    }
    // Direct 4K writes go from the ring entry to the backing file.
    {
        use std::os::unix::fs::{FileExt, OpenOptionsExt};
        let f = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(dir.path().join("f"))
            .unwrap();
        let mut buf = vec![0u8; 8192];
        let aligned = (buf.as_ptr() as usize).next_multiple_of(4096) - buf.as_ptr() as usize;
        let b = &mut buf[aligned..aligned + 4096];
        b.fill(0xab);
        assert_eq!(f.write_at(b, 8192).unwrap(), 4096);
        let back = std::fs::read(backing.path()).unwrap();
        assert!(back[8192..12288].iter().all(|&x| x == 0xab));
        assert_eq!(back[..8192], data[..8192]);
    }
    assert!(fs.ring_reads.load(std::sync::atomic::Ordering::Relaxed) > 0);
    assert!(fs.inflight.lock().is_empty());
    mount.unmount(true).unwrap();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !running.is_finished() && std::time::Instant::now() < end {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        running.is_finished(),
        "the session did not end after the unmount"
    );
}

#[test]
fn uring_setup_failure_falls_back_to_dev_fuse() {
    let Some(_on) = EnableUring::new() else {
        return;
    };
    // More entries than an io_uring takes: the rings cannot be made, which is found before
    // the INIT reply, so the mount is served over /dev/fuse instead of hanging.
    let mut m = Mounted::new(files(), uring_config(1, 20_000));
    assert!(!m.info.uring);
    assert_eq!(m.info.flags & fusewire::abi::FUSE_OVER_IO_URING, 0);
    let why = m.info.uring_unavailable.clone().unwrap_or_default();
    assert!(why.contains("setup failed"), "{why}");
    exercise(&m);
    assert!(m.finish(), "the session did not end after the unmount");
}
