//! Serves one file from RAM over /dev/fuse or io_uring, runs fio against it, and prints the
//! IOPS and the daemon's CPU per 100k IOPS: what the transport itself costs.
//!
//!     ramfile MOUNTPOINT dev|uring [SIZE_MIB] [-- FIO ARGS...]
//!
//! With `RAMFILE_WORKERS=N` reads are answered by N other threads (as the engine answers from
//! device completions) through `Reply::buffer`, instead of inline on the transport's thread.
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
    workers: Option<std::sync::mpsc::SyncSender<Job>>,
}

impl RamFile {
    fn attr(&self, ino: u64) -> fuse_attr {
        let (mode, size) = if ino == ROOT_ID {
            (libc::S_IFDIR | 0o755, 0)
        } else {
            (libc::S_IFREG | 0o644, self.data.len() as u64)
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
    let (fd, mut mount) =
        fusewire::mount::mount(&mp, "ramfile", "ramfile", "").expect("mount (as root)");
    let running = Session::new(fd, RamFile { data, workers }, config)
        .spawn()
        .expect("session");
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
