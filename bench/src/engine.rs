//! The workload engine, as fio runs CrystalDiskMark's tests: T threads, each keeping Q I/Os
//! in flight through its own io_uring (submit Q, and on each completion submit the next), so
//! a Q32 test is 32 I/Os outstanding from one thread, not 32 threads on 2 cores measuring the
//! scheduler. Where io_uring is not allowed (old kernels, seccomp, `io_uring_disabled`), or
//! with `STRIPEFS_BENCH_ENGINE=threads`, one blocking worker per queue slot does it instead.

use crate::cpus::CpuList;
use crate::profile::{Dir, Job, Pattern};
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Barrier, OnceLock};
use std::time::{Duration, Instant};

/// How each test runs.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RunSpec {
    /// Size of the test file.
    pub size: u64,
    pub duration: Duration,
    /// O_DIRECT (falls back to buffered where the target refuses it; the result says so).
    pub direct: bool,
    /// The CPUs the load runs on (its threads, or fio's `cpus_allowed`); `None`: any.
    pub cpus: Option<CpuList>,
}

/// What one test measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Measured {
    pub bytes: u64,
    pub ops: u64,
    pub seconds: f64,
    /// MB/s with 1 MB = 10^6 bytes, as CrystalDiskMark counts.
    pub mb_per_s: f64,
    pub iops: f64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    /// Of `ops`, the reads and the writes (a mixed test has both).
    pub read_ops: u64,
    pub write_ops: u64,
    /// The most I/Os seen in flight at once.
    pub max_in_flight: usize,
    pub direct: bool,
    /// How the I/Os were issued: "io_uring", "threads" (a blocking thread per queue slot), or
    /// "fio".
    pub io_engine: String,
}

/// A test file, laid out with random data before the first read test.
pub struct TestFile {
    pub path: PathBuf,
    pub size: u64,
}

impl TestFile {
    pub fn create(dir: &Path, size: u64) -> io::Result<TestFile> {
        let path = dir.join("stripefs-bench.dat");
        let f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&path)?;
        let chunk = 4 << 20;
        let mut buf = vec![0u8; chunk];
        let mut x = 0x2545F4914F6CDD1Du64;
        for b in buf.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b.copy_from_slice(&x.to_le_bytes()[..b.len()]);
        }
        let mut at = 0u64;
        while at < size {
            let n = (size - at).min(chunk as u64) as usize;
            f.write_all_at(&buf[..n], at)?;
            at += n as u64;
        }
        f.sync_all()?;
        Ok(TestFile { path, size })
    }
}

impl Drop for TestFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A buffer aligned for O_DIRECT.
struct Aligned {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl Aligned {
    fn new(len: usize, fill: u64) -> Aligned {
        let layout = std::alloc::Layout::from_size_align(len.max(4096), 4096).expect("layout");
        // SAFETY: non-zero size; freed in Drop with the same layout.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory for a {len}-byte buffer");
        let mut b = Aligned { ptr, layout };
        let mut x = fill | 1;
        for chunk in b.slice().chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let n = chunk.len();
            chunk.copy_from_slice(&x.to_le_bytes()[..n]);
        }
        b
    }

    fn slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr is valid for layout.size() bytes and exclusively ours.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

fn open(path: &Path, direct: bool) -> io::Result<(File, bool)> {
    let mut o = OpenOptions::new();
    o.read(true).write(true);
    if direct {
        match o.clone().custom_flags(libc::O_DIRECT).open(path) {
            Ok(f) => return Ok((f, true)),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                log::warn!(
                    "{} refuses O_DIRECT; measuring buffered I/O",
                    path.display()
                )
            }
            Err(e) => return Err(e),
        }
    }
    Ok((o.open(path)?, false))
}

/// Whether the io_uring engine can run here (asked once): a ring can be made.
pub(crate) fn uring_allowed() -> bool {
    static ALLOWED: OnceLock<bool> = OnceLock::new();
    *ALLOWED.get_or_init(|| {
        if std::env::var("STRIPEFS_BENCH_ENGINE").as_deref() == Ok("threads") {
            return false;
        }
        match io_uring::IoUring::new(2) {
            Ok(_) => true,
            Err(e) => {
                log::warn!(
                    "io_uring is not available ({e}): the bench runs a thread per queue slot"
                );
                false
            }
        }
    })
}

/// What every worker of a test shares.
struct Shared<'a> {
    bs: u64,
    blocks: u64,
    dir: Dir,
    /// Percent of reads of a mixed test.
    mix_read: u8,
    pattern: Pattern,
    in_flight: &'a AtomicUsize,
    max_in_flight: &'a AtomicUsize,
    stop: &'a AtomicBool,
}

impl Shared<'_> {
    /// The block the next I/O of a worker goes to.
    fn next_block(&self, cursor: &AtomicU64, rng: &mut u64) -> u64 {
        match self.pattern {
            Pattern::Seq => cursor.fetch_add(1, Ordering::Relaxed) % self.blocks,
            Pattern::Rand => {
                *rng ^= *rng << 13;
                *rng ^= *rng >> 7;
                *rng ^= *rng << 17;
                *rng % self.blocks
            }
        }
    }

    /// Whether the next I/O is a read.
    fn reads(&self, rng: &mut u64) -> bool {
        match self.dir {
            Dir::Read => true,
            Dir::Write => false,
            Dir::Mixed => {
                *rng ^= *rng << 13;
                *rng ^= *rng >> 7;
                *rng ^= *rng << 17;
                (*rng % 100) < self.mix_read as u64
            }
        }
    }

    fn started(&self) {
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.max_in_flight.fetch_max(now, Ordering::Relaxed);
    }

    fn finished(&self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One thread keeping `slots` I/Os in flight through its own ring until `end`.
fn uring_worker(
    f: &File,
    sh: &Shared,
    slots: usize,
    cursor: &AtomicU64,
    seed: u64,
    end: Instant,
) -> io::Result<Done> {
    use io_uring::{opcode, types, IoUring};
    // Declared before the ring, so dropped after it.
    let mut bufs: Vec<Aligned> = (0..slots)
        .map(|i| Aligned::new(sh.bs as usize, seed ^ (i as u64 + 1).wrapping_mul(0x9E37)))
        .collect();
    let entries = (slots as u32).next_power_of_two().max(2);
    // As fio sets up its rings: completions run when this thread asks for them, not as task
    // work interrupting it (DEFER_TASKRUN, which needs SINGLE_ISSUER); on tmpfs this nearly
    // doubles the 4K IOPS at Q32. Kernels before 6.1 lack them: a plain ring there.
    let mut ring = IoUring::builder()
        .setup_coop_taskrun()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(entries)
        .or_else(|_| IoUring::new(entries))?;
    let mut since = vec![Instant::now(); slots];
    let mut reading = vec![true; slots];
    let mut rng = seed | 1;
    let mut mix = seed.rotate_left(17) | 1;
    let fd = types::Fd(f.as_raw_fd());
    let mut done = Done::default();
    let mut outstanding = 0usize;
    let mut failed: Option<io::Error> = None;
    let mut push = |ring: &mut IoUring,
                    slot: usize,
                    bufs: &mut [Aligned],
                    reading: &mut [bool]|
     -> io::Result<()> {
        let at = sh.next_block(cursor, &mut rng) * sh.bs;
        let ptr = bufs[slot].slice().as_mut_ptr();
        let len = sh.bs as u32;
        reading[slot] = sh.reads(&mut mix);
        let entry = if reading[slot] {
            opcode::Read::new(fd, ptr, len).offset(at).build()
        } else {
            opcode::Write::new(fd, ptr, len).offset(at).build()
        }
        .user_data(slot as u64);
        // SAFETY: the buffer stays alive and untouched until its completion is reaped below.
        unsafe { ring.submission().push(&entry) }
            .map_err(|_| io::Error::other("benchmark ring full"))
    };
    for (slot, t) in since.iter_mut().enumerate() {
        if Instant::now() >= end || sh.stop.load(Ordering::Relaxed) {
            break;
        }
        push(&mut ring, slot, &mut bufs, &mut reading)?;
        *t = Instant::now();
        sh.started();
        outstanding += 1;
    }
    while outstanding > 0 {
        // A signal (Ctrl-C stops a run) must not end the loop with I/Os still in flight into
        // buffers that are then freed.
        match ring.submit_and_wait(1) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => r?,
        };
        let reaped: Vec<(usize, i32)> = ring
            .completion()
            .map(|c| (c.user_data() as usize, c.result()))
            .collect();
        for (slot, res) in reaped {
            outstanding -= 1;
            sh.finished();
            if res < 0 {
                failed.get_or_insert(io::Error::from_raw_os_error(-res));
            } else if res as u64 != sh.bs {
                failed.get_or_insert(io::Error::other(format!(
                    "a short {} of {res} bytes of {}",
                    if reading[slot] { "read" } else { "write" },
                    sh.bs
                )));
            } else {
                done.count(reading[slot], since[slot]);
            }
            let now = Instant::now();
            if failed.is_none() && now < end && !sh.stop.load(Ordering::Relaxed) {
                push(&mut ring, slot, &mut bufs, &mut reading)?;
                since[slot] = now;
                sh.started();
                outstanding += 1;
            }
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(done),
    }
}

/// What a worker did: I/Os by direction and each one's latency.
#[derive(Default)]
struct Done {
    reads: u64,
    writes: u64,
    lat: Vec<u32>,
}

impl Done {
    fn count(&mut self, read: bool, since: Instant) {
        self.lat
            .push(since.elapsed().as_nanos().min(u32::MAX as u128) as u32);
        if read {
            self.reads += 1;
        } else {
            self.writes += 1;
        }
    }
}

/// One thread with one I/O in flight at a time (a queue slot of the threads engine).
fn blocking_worker(
    f: &File,
    sh: &Shared,
    cursor: &AtomicU64,
    seed: u64,
    end: Instant,
) -> io::Result<Done> {
    let mut buf = Aligned::new(sh.bs as usize, seed);
    let data = &mut buf.slice()[..sh.bs as usize];
    let mut rng = seed | 1;
    let mut mix = seed.rotate_left(17) | 1;
    let mut done = Done::default();
    while !sh.stop.load(Ordering::Relaxed) {
        let block = sh.next_block(cursor, &mut rng);
        let t0 = Instant::now();
        if t0 >= end {
            break;
        }
        let read = sh.reads(&mut mix);
        sh.started();
        let r = if read {
            f.read_exact_at(data, block * sh.bs)
        } else {
            f.write_all_at(data, block * sh.bs)
        };
        sh.finished();
        r?;
        done.count(read, t0);
    }
    Ok(done)
}

/// Runs one test (a job in one direction) against a laid-out test file.
pub fn run(
    file: &TestFile,
    job: &Job,
    dir: Dir,
    spec: &RunSpec,
    stop: &AtomicBool,
) -> io::Result<Measured> {
    let bs = job.block_size as u64;
    let blocks = (file.size / bs).max(1);
    let uring = uring_allowed();
    // io_uring: a worker per thread with Q slots; threads: a worker per slot.
    let (workers, slots) = if uring {
        (job.threads, job.queue_depth)
    } else {
        (job.threads * job.queue_depth, 1)
    };
    let barrier = Barrier::new(workers + 1);
    let in_flight = AtomicUsize::new(0);
    let max_in_flight = AtomicUsize::new(0);
    // Sequential streams: one cursor per thread, shared by its queue slots, as fio does it.
    let cursors: Vec<AtomicU64> = (0..job.threads)
        .map(|t| AtomicU64::new(t as u64 * blocks / job.threads as u64))
        .collect();
    let deadline = OnceLock::<Instant>::new();
    let mut files = Vec::with_capacity(workers);
    for _ in 0..workers {
        files.push(open(&file.path, spec.direct)?);
    }
    let direct = files.iter().all(|(_, d)| *d);
    let sh = Shared {
        bs,
        blocks,
        dir,
        mix_read: job.mix_read.unwrap_or(50),
        pattern: job.pattern,
        in_flight: &in_flight,
        max_in_flight: &max_in_flight,
        stop,
    };
    let (results, seconds) = std::thread::scope(|scope| {
        let handles: Vec<_> = files
            .into_iter()
            .enumerate()
            .map(|(w, (f, _))| {
                let cursor = &cursors[w * job.threads / workers];
                let (barrier, deadline, sh) = (&barrier, &deadline, &sh);
                let seed = 0x9E3779B97F4A7C15u64 ^ (w as u64 + 1).wrapping_mul(0xBF58476D1CE4E5B9);
                let cpus = spec.cpus.as_ref();
                scope.spawn(move || -> io::Result<Done> {
                    // Every worker meets the barrier, pinned or not: the others wait for it.
                    let pinned = cpus.map_or(Ok(()), CpuList::pin_this_thread);
                    barrier.wait();
                    let end = *deadline.wait();
                    pinned.map_err(|e| {
                        io::Error::new(e.kind(), format!("keeping the load on its CPUs: {e}"))
                    })?;
                    if uring {
                        uring_worker(&f, sh, slots, cursor, seed, end)
                    } else {
                        blocking_worker(&f, sh, cursor, seed, end)
                    }
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let _ = deadline.set(start + spec.duration);
        let results: Vec<io::Result<Done>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("benchmark worker panicked")))
            })
            .collect();
        (results, start.elapsed().as_secs_f64())
    });
    let (mut reads, mut writes) = (0u64, 0u64);
    let mut lat: Vec<u32> = Vec::new();
    for r in results {
        let d = r?;
        reads += d.reads;
        writes += d.writes;
        lat.extend(d.lat);
    }
    let mut m = summarise(
        reads + writes,
        bs,
        seconds,
        &mut lat,
        max_in_flight.load(Ordering::Relaxed),
        direct,
    );
    m.io_engine = if uring { "io_uring" } else { "threads" }.into();
    (m.read_ops, m.write_ops) = (reads, writes);
    Ok(m)
}

fn summarise(
    ops: u64,
    bs: u64,
    seconds: f64,
    lat: &mut [u32],
    max_in_flight: usize,
    direct: bool,
) -> Measured {
    lat.sort_unstable();
    let mean_us = if lat.is_empty() {
        0.0
    } else {
        lat.iter().map(|&l| l as f64).sum::<f64>() / lat.len() as f64 / 1000.0
    };
    let pct = |p: f64| {
        if lat.is_empty() {
            0.0
        } else {
            lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)] as f64 / 1000.0
        }
    };
    let bytes = ops * bs;
    Measured {
        bytes,
        ops,
        seconds,
        mb_per_s: bytes as f64 / seconds / 1e6,
        iops: ops as f64 / seconds,
        mean_us,
        p50_us: pct(0.50),
        p99_us: pct(0.99),
        p999_us: pct(0.999),
        read_ops: 0,
        write_ops: 0,
        max_in_flight,
        direct,
        io_engine: String::new(),
    }
}

/// The median (by throughput) and the best of several runs.
pub fn median_and_best(runs: &[Measured]) -> (Measured, Measured) {
    let mut sorted: Vec<&Measured> = runs.iter().collect();
    sorted.sort_by(|a, b| a.mb_per_s.total_cmp(&b.mb_per_s));
    let median = sorted[sorted.len() / 2].clone();
    let best = sorted[sorted.len() - 1].clone();
    (median, best)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Job;

    #[test]
    fn queue_depth_is_really_reached_and_bytes_add_up() {
        let dir = tempfile::tempdir().unwrap();
        let file = TestFile::create(dir.path(), 8 << 20).unwrap();
        assert_eq!(std::fs::metadata(&file.path).unwrap().len(), 8 << 20);
        let spec = RunSpec {
            size: 8 << 20,
            duration: Duration::from_millis(300),
            direct: false,
            cpus: None,
        };
        let stop = AtomicBool::new(false);
        let job = Job::new(Pattern::Rand, 4096, 8, 2);
        let m = run(&file, &job, Dir::Read, &spec, &stop).unwrap();
        assert!(m.ops > 0);
        assert_eq!(m.bytes, m.ops * 4096);
        assert!(m.max_in_flight <= 16);
        // Sixteen workers blocked in I/O at once is likely but not certain on two cores;
        // more than one at once proves the slots run concurrently.
        assert!(m.max_in_flight > 1, "{m:?}");
        assert!(m.p99_us >= m.mean_us * 0.0 && m.mean_us > 0.0);
        let w = run(
            &file,
            &Job::new(Pattern::Seq, 1 << 20, 1, 1),
            Dir::Write,
            &spec,
            &stop,
        )
        .unwrap();
        assert_eq!(w.bytes, w.ops << 20);
        assert_eq!(w.max_in_flight, 1);
        // The file keeps its size: writes stay inside it.
        assert_eq!(std::fs::metadata(&file.path).unwrap().len(), 8 << 20);
    }

    /// One thread keeps all of its queue depth in flight through its ring (as fio's libaio
    /// or io_uring engines do), not a thread per slot.
    #[test]
    fn one_thread_keeps_its_queue_depth_in_flight() {
        if !uring_allowed() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let file = TestFile::create(dir.path(), 4 << 20).unwrap();
        let spec = RunSpec {
            size: 4 << 20,
            duration: Duration::from_millis(200),
            direct: true,
            cpus: None,
        };
        let stop = AtomicBool::new(false);
        for read in [true, false] {
            let m = run(
                &file,
                &Job::new(Pattern::Rand, 4096, 8, 1),
                if read { Dir::Read } else { Dir::Write },
                &spec,
                &stop,
            )
            .unwrap();
            assert_eq!(m.io_engine, "io_uring");
            assert_eq!(m.max_in_flight, 8, "{m:?}");
            assert!(
                m.ops > 0 && m.p50_us <= m.p99_us && m.p99_us <= m.p999_us,
                "{m:?}"
            );
        }
    }

    /// A mixed test (fio's randrw, rwmixread=70) issues reads and writes in that share.
    #[test]
    fn a_mixed_test_reads_and_writes_in_its_share() {
        let dir = tempfile::tempdir().unwrap();
        let file = TestFile::create(dir.path(), 4 << 20).unwrap();
        let spec = RunSpec {
            size: 4 << 20,
            duration: Duration::from_millis(300),
            direct: false,
            cpus: None,
        };
        let job = crate::profile::parse("custom:rw=randrw,rwmixread=70,bs=4K,qd=4")
            .unwrap()
            .remove(0);
        let m = run(&file, &job, Dir::Mixed, &spec, &AtomicBool::new(false)).unwrap();
        assert_eq!(m.read_ops + m.write_ops, m.ops);
        let share = m.read_ops as f64 / m.ops as f64;
        assert!(m.ops > 200 && (0.6..0.8).contains(&share), "{m:?}");
    }

    #[test]
    fn stop_flag_ends_a_run_early() {
        let dir = tempfile::tempdir().unwrap();
        let file = TestFile::create(dir.path(), 1 << 20).unwrap();
        let spec = RunSpec {
            size: 1 << 20,
            duration: Duration::from_secs(3600),
            direct: false,
            cpus: None,
        };
        let stop = AtomicBool::new(true);
        let m = run(
            &file,
            &Job::new(Pattern::Rand, 4096, 1, 1),
            Dir::Read,
            &spec,
            &stop,
        )
        .unwrap();
        assert_eq!(m.ops, 0);
    }

    #[test]
    fn median_and_best_pick_by_throughput() {
        let runs: Vec<Measured> = [3.0, 1.0, 2.0]
            .iter()
            .map(|&mb| Measured {
                mb_per_s: mb,
                ..Measured::default()
            })
            .collect();
        let (median, best) = median_and_best(&runs);
        assert_eq!((median.mb_per_s, best.mb_per_s), (2.0, 3.0));
    }
}
