//! The workload engine: T threads each keeping Q I/Os in flight, one blocking worker per slot
//! (so the queue depth is real: Q*T positional reads or writes are outstanding at once).

use crate::profile::{Job, Pattern};
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Barrier, OnceLock};
use std::time::{Duration, Instant};

/// How each test runs.
#[derive(Clone, Debug, Serialize)]
pub struct RunSpec {
    /// Size of the test file.
    pub size: u64,
    pub duration: Duration,
    /// O_DIRECT (falls back to buffered where the target refuses it; the result says so).
    pub direct: bool,
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
    pub p99_us: f64,
    /// The most I/Os seen in flight at once.
    pub max_in_flight: usize,
    pub direct: bool,
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

/// Runs one test (a job in one direction) against a laid-out test file.
pub fn run(
    file: &TestFile,
    job: &Job,
    read: bool,
    spec: &RunSpec,
    stop: &AtomicBool,
) -> io::Result<Measured> {
    let bs = job.block_size as u64;
    let blocks = (file.size / bs).max(1);
    let workers = job.threads * job.queue_depth;
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
    let (results, seconds) = std::thread::scope(|scope| {
        let handles: Vec<_> = files
            .into_iter()
            .enumerate()
            .map(|(w, (f, _))| {
                let cursor = &cursors[w / job.queue_depth];
                let (barrier, in_flight, max_in_flight, deadline) =
                    (&barrier, &in_flight, &max_in_flight, &deadline);
                scope.spawn(move || -> io::Result<(u64, Vec<u32>)> {
                    let mut buf = Aligned::new(job.block_size, w as u64 * 0x9E37_79B9 + 7);
                    let data = &mut buf.slice()[..bs as usize];
                    let mut rng =
                        0x9E3779B97F4A7C15u64 ^ (w as u64 + 1).wrapping_mul(0xBF58476D1CE4E5B9);
                    let mut lat = Vec::with_capacity(1 << 16);
                    let mut ops = 0u64;
                    barrier.wait();
                    let end = *deadline.wait();
                    while !stop.load(Ordering::Relaxed) {
                        let block = match job.pattern {
                            Pattern::Seq => cursor.fetch_add(1, Ordering::Relaxed) % blocks,
                            Pattern::Rand => {
                                rng ^= rng << 13;
                                rng ^= rng >> 7;
                                rng ^= rng << 17;
                                rng % blocks
                            }
                        };
                        let t0 = Instant::now();
                        if t0 >= end {
                            break;
                        }
                        let now = in_flight.fetch_add(1, Ordering::Relaxed) + 1;
                        max_in_flight.fetch_max(now, Ordering::Relaxed);
                        let r = if read {
                            f.read_exact_at(data, block * bs)
                        } else {
                            f.write_all_at(data, block * bs)
                        };
                        in_flight.fetch_sub(1, Ordering::Relaxed);
                        r?;
                        lat.push(t0.elapsed().as_nanos().min(u32::MAX as u128) as u32);
                        ops += 1;
                    }
                    Ok((ops, lat))
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let _ = deadline.set(start + spec.duration);
        let results: Vec<io::Result<(u64, Vec<u32>)>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("benchmark worker panicked")))
            })
            .collect();
        (results, start.elapsed().as_secs_f64())
    });
    let mut ops = 0u64;
    let mut lat: Vec<u32> = Vec::new();
    for r in results {
        let (n, l) = r?;
        ops += n;
        lat.extend(l);
    }
    Ok(summarise(
        ops,
        bs,
        seconds,
        &mut lat,
        max_in_flight.load(Ordering::Relaxed),
        direct,
    ))
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
    let p99_us = if lat.is_empty() {
        0.0
    } else {
        lat[((lat.len() as f64 * 0.99) as usize).min(lat.len() - 1)] as f64 / 1000.0
    };
    let bytes = ops * bs;
    Measured {
        bytes,
        ops,
        seconds,
        mb_per_s: bytes as f64 / seconds / 1e6,
        iops: ops as f64 / seconds,
        mean_us,
        p99_us,
        max_in_flight,
        direct,
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
        };
        let stop = AtomicBool::new(false);
        let job = Job::new(Pattern::Rand, 4096, 8, 2);
        let m = run(&file, &job, true, &spec, &stop).unwrap();
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
            false,
            &spec,
            &stop,
        )
        .unwrap();
        assert_eq!(w.bytes, w.ops << 20);
        assert_eq!(w.max_in_flight, 1);
        // The file keeps its size: writes stay inside it.
        assert_eq!(std::fs::metadata(&file.path).unwrap().len(), 8 << 20);
    }

    #[test]
    fn stop_flag_ends_a_run_early() {
        let dir = tempfile::tempdir().unwrap();
        let file = TestFile::create(dir.path(), 1 << 20).unwrap();
        let spec = RunSpec {
            size: 1 << 20,
            duration: Duration::from_secs(3600),
            direct: false,
        };
        let stop = AtomicBool::new(true);
        let m = run(
            &file,
            &Job::new(Pattern::Rand, 4096, 1, 1),
            true,
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
