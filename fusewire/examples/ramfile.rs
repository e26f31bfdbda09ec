//! Serves one file from RAM over /dev/fuse or io_uring, runs fio against it, and prints the
//! IOPS and the daemon's CPU per 100k IOPS: what the transport itself costs.
//!
//!     ramfile MOUNTPOINT dev|uring [SIZE_MIB] [-- FIO ARGS...]
//!
//! With `RAMFILE_WORKERS=N` reads are answered by N other threads (as the engine answers from
//! device completions) through `Reply::buffer`, instead of inline on the transport's thread.
//!
//! With `RAMFILE_BACKING=PATH` the file is PATH instead (opened O_DIRECT with
//! `RAMFILE_DIRECT=1`): reads are a blocking pread on the transport's thread, as libfuse's
//! passthrough_hp does, or with `RAMFILE_ON_RING=1` (uring) an IORING_OP_READ on the ring
//! thread's own io_uring into the ring entry's buffer, committed from its completion.
//!
//! Needs root. For `uring` an administrator switches the kernel's FUSE-over-io_uring on
//! first (`echo Y > /sys/module/fuse/parameters/enable_uring`); this program never does.

use fusewire::abi::{fuse_attr, fuse_kstatfs, ROOT_ID};
use fusewire::reply::dt_of_mode;
use fusewire::{Config, DirBuf, Entry, Filesystem, Operation, Reply, Request, Session};
use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const FILE: u64 = 2;
const TTL: Duration = Duration::from_secs(3600);

/// A read handed to a worker: its reply, and the range of the file.
type Job = (fusewire::reply::DataReply, usize, usize);

struct RamFile {
    data: std::sync::Arc<Vec<u8>>,
    size: u64,
    workers: Option<std::sync::mpsc::SyncSender<Job>>,
    backing: Option<Backing>,
}

/// A request waiting for its backing file I/O on the ring.
enum Pending {
    Read(fusewire::reply::DataReply),
    Write(Reply),
}

/// A real file behind the served one.
struct Backing {
    file: std::fs::File,
    on_ring: bool,
    inflight: std::sync::Mutex<std::collections::HashMap<u64, Pending>>,
    next: std::sync::atomic::AtomicU64,
}

impl Backing {
    /// A blocking pwrite (through a 4K-aligned copy when O_DIRECT needs one).
    fn pwrite(&self, reply: Reply, offset: u64, data: &[u8]) {
        use std::os::unix::fs::FileExt;
        let r = if (data.as_ptr() as usize).is_multiple_of(4096) {
            self.file.write_at(data, offset)
        } else {
            let mut v = vec![0u8; data.len() + 4096];
            let skip = v.as_ptr().align_offset(4096);
            v[skip..skip + data.len()].copy_from_slice(data);
            self.file.write_at(&v[skip..skip + data.len()], offset)
        };
        match r {
            Ok(n) => reply.write(n as u32),
            Err(e) => reply.error(e.raw_os_error().unwrap_or(libc::EIO)),
        }
    }

    /// A blocking pread into a 4K-aligned buffer (O_DIRECT wants one), then the reply.
    fn pread(&self, reply: Reply, offset: u64, size: usize) {
        use std::os::unix::fs::FileExt;
        let mut d = reply.buffer(size);
        let aligned = (d.buf().as_ptr() as usize).is_multiple_of(4096);
        let r = if aligned {
            self.file.read_at(d.buf(), offset)
        } else {
            let mut v = vec![0u8; size + 4096];
            let skip = v.as_ptr().align_offset(4096);
            let r = self.file.read_at(&mut v[skip..skip + size], offset);
            if let Ok(n) = r {
                d.buf()[..n].copy_from_slice(&v[skip..skip + n]);
            }
            r
        };
        match r {
            Ok(n) => d.send(n),
            Err(e) => d.error(e.raw_os_error().unwrap_or(libc::EIO)),
        }
    }
}

impl RamFile {
    fn attr(&self, ino: u64) -> fuse_attr {
        let (mode, size) = if ino == ROOT_ID {
            (libc::S_IFDIR | 0o755, 0)
        } else {
            (libc::S_IFREG | 0o644, self.size)
        };
        fuse_attr {
            ino,
            size,
            blocks: size / 512,
            mode,
            nlink: 1,
            blksize: 4096,
            ..Default::default()
        }
    }

    fn entry(&self, ino: u64) -> Entry {
        Entry {
            nodeid: ino,
            attr: self.attr(ino),
            entry_ttl: TTL,
            attr_ttl: TTL,
            ..Default::default()
        }
    }
}

impl Filesystem for RamFile {
    fn request(&self, req: Request<'_>, reply: Reply) {
        match req.op {
            Operation::Lookup { name } if req.nodeid == ROOT_ID && name == "f" => {
                reply.entry(&self.entry(FILE))
            }
            Operation::Lookup { .. } => reply.error(libc::ENOENT),
            Operation::Getattr { .. } => reply.attr(&self.attr(req.nodeid), TTL),
            Operation::Open { .. } | Operation::Opendir { .. } => reply.open(0, 0),
            Operation::Read { offset, size, .. } if self.backing.is_some() => {
                if let Some(b) = &self.backing {
                    b.pread(reply, offset, size as usize);
                }
            }
            Operation::Write { offset, data, .. } => match &self.backing {
                Some(b) => b.pwrite(reply, offset, data),
                None => reply.error(libc::EROFS),
            },
            Operation::Read { offset, size, .. } => {
                let start = (offset as usize).min(self.data.len());
                let end = (start + size as usize).min(self.data.len());
                match &self.workers {
                    Some(tx) => {
                        let _ = tx.send((reply.buffer(end - start), start, end));
                    }
                    None => reply.data(&self.data[start..end]),
                }
            }
            Operation::Readdir { offset, size, .. } => {
                let mut buf = DirBuf::new(size);
                let names = [(ROOT_ID, "."), (ROOT_ID, ".."), (FILE, "f")];
                for (i, (ino, name)) in names.iter().enumerate().skip(offset as usize) {
                    let dt = dt_of_mode(self.attr(*ino).mode);
                    if !buf.add(*ino, i as u64 + 1, dt, OsStr::new(name)) {
                        break;
                    }
                }
                reply.dirents(&buf)
            }
            Operation::Statfs => reply.statfs(&fuse_kstatfs {
                bsize: 4096,
                frsize: 4096,
                namelen: 255,
                ..Default::default()
            }),
            Operation::Release { .. } | Operation::Releasedir { .. } | Operation::Flush { .. } => {
                reply.ok()
            }
            _ => reply.error(libc::ENOSYS),
        }
    }

    fn request_on_ring(&self, req: Request<'_>, reply: Reply, ring: &fusewire::RingCtx<'_>) {
        use fusewire::io_uring::{opcode, types};
        use std::os::fd::AsRawFd;
        let Some(b) = self.backing.as_ref().filter(|b| b.on_ring) else {
            return self.request(req, reply);
        };
        let fd = types::Fd(b.file.as_raw_fd());
        let (sqe, pending) = match req.op {
            Operation::Read { offset, size, .. } => {
                let mut d = reply.buffer(size as usize);
                let buf = d.buf();
                let sqe = opcode::Read::new(fd, buf.as_mut_ptr(), size)
                    .offset(offset)
                    .build();
                (sqe, Pending::Read(d))
            }
            // The data stays in the ring entry until the reply: written from there.
            Operation::Write { offset, data, .. } => {
                let sqe = opcode::Write::new(fd, data.as_ptr(), data.len() as u32)
                    .offset(offset)
                    .build();
                (sqe, Pending::Write(reply))
            }
            _ => return self.request(req, reply),
        };
        let id = b.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        b.inflight.lock().unwrap().insert(id, pending);
        // SAFETY: the read buffer belongs to the DataReply, the write data to the ring entry,
        // both kept until the reply, which waits for this completion.
        if let Err(e) = unsafe { ring.push(sqe, id) } {
            // Not queued: answered as its completion would be.
            self.ring_completion(ring, id, -e.raw_os_error().unwrap_or(libc::EIO));
        }
    }

    fn ring_completion(&self, _ring: &fusewire::RingCtx<'_>, user_data: u64, result: i32) {
        let Some(b) = &self.backing else { return };
        let Some(p) = b.inflight.lock().unwrap().remove(&user_data) else {
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

/// This process's user+system CPU seconds.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the zeroed struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: ramfile MOUNTPOINT dev|uring [SIZE_MIB] [-- FIO ARGS...]";
    let (Some(mp), Some(transport)) = (args.get(1), args.get(2)) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let split = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let size_mib: usize = args
        .get(3)
        .filter(|_| split > 3)
        .and_then(|s| s.parse().ok())
        .unwrap_or(256);
    let mp = PathBuf::from(mp);
    let file = mp.join("f");
    let mut fio: Vec<String> = args
        .get(split + 1..)
        .map(|a| a.to_vec())
        .unwrap_or_default();
    if fio.is_empty() {
        fio = "--name=t --rw=randread --bs=4k --iodepth=32 --ioengine=libaio --direct=1 --runtime=5 --time_based"
            .split(' ')
            .map(String::from)
            .collect();
    }
    fio.push(format!("--filename={}", file.display()));
    fio.push("--output-format=terse".into());

    let uring = match transport.as_str() {
        "dev" => false,
        "uring" => true,
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    let config = Config {
        threads: 2,
        uring: uring.then_some(fusewire::UringConfig {
            threads: 0,
            depth: 32,
            pinned: true,
        }),
        ..Config::default()
    };
    let data: Vec<u8> = (0..size_mib << 20).map(|i| (i % 253) as u8).collect();
    let data = std::sync::Arc::new(data);
    let nworkers: usize = std::env::var("RAMFILE_WORKERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let workers = (nworkers > 0).then(|| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Job>(1024);
        let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
        for _ in 0..nworkers {
            let (rx, data) = (rx.clone(), data.clone());
            std::thread::spawn(move || loop {
                let job = rx.lock().map(|r| r.recv());
                let Ok(Ok((mut d, start, end))) = job else {
                    return;
                };
                d.buf().copy_from_slice(&data[start..end]);
                d.send(end - start);
            });
        }
        tx
    });
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let backing = env("RAMFILE_BACKING").map(|path| {
        use std::os::unix::fs::OpenOptionsExt;
        let direct = env("RAMFILE_DIRECT").is_some_and(|v| v == "1");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(if direct { libc::O_DIRECT } else { 0 })
            .open(&path)
            .expect("backing file");
        Backing {
            file,
            on_ring: env("RAMFILE_ON_RING").is_some_and(|v| v == "1"),
            inflight: Default::default(),
            next: Default::default(),
        }
    });
    let size = match &backing {
        Some(b) => b.file.metadata().expect("backing size").len(),
        None => data.len() as u64,
    };
    let (fd, mut mount) =
        fusewire::mount::mount(&mp, "ramfile", "ramfile", "").expect("mount (as root)");
    let fs = RamFile {
        data,
        size,
        workers,
        backing,
    };
    let running = Session::new(fd, fs, config).spawn().expect("session");
    let info = running
        .wait_init(Duration::from_secs(10))
        .cloned()
        .expect("INIT");
    if uring && !info.uring {
        eprintln!(
            "io_uring does not run: {}",
            info.uring_unavailable.as_deref().unwrap_or("?")
        );
        drop(mount);
        std::process::exit(1);
    }
    let (cpu0, t0) = (cpu_seconds(), Instant::now());
    let out = Command::new("fio").args(&fio).output().expect("fio");
    let (cpu, wall) = (cpu_seconds() - cpu0, t0.elapsed().as_secs_f64());
    let _ = mount.unmount(true);
    let _ = running.join();
    let terse = String::from_utf8_lossy(&out.stdout);
    // fio's terse v3: field 8 is the read IOPS, field 49 the write IOPS.
    let fields: Vec<&str> = terse.trim().split(';').collect();
    let iops: f64 = [7, 48]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<f64>().ok()))
        .sum();
    if iops == 0.0 {
        eprintln!("fio: {}", String::from_utf8_lossy(&out.stderr));
        std::process::exit(1);
    }
    let cores = cpu / wall;
    println!(
        "transport={transport} workers={nworkers} iops={iops:.0} daemon_cores={cores:.2} cores_per_100k_iops={:.2}",
        cores / (iops / 100_000.0)
    );
}
