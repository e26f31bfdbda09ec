//! Measuring a target with a profile, and the results as a CrystalDiskMark-like table, JSON
//! and CSV, each figure beside its ratio to the baseline measured in the same run.

use crate::cpus::CpuList;
use crate::engine::{self, Measured, RunSpec, TestFile};
use crate::fio;
use crate::profile::{Dir, Job};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TestResult {
    pub test: String,
    pub direction: String,
    pub runs: Vec<Measured>,
    pub median: Measured,
    pub best: Measured,
    /// fio's figures for the same test on the same file, when asked for: the median of
    /// `fio_runs`, one run after each of the engine's.
    pub fio: Option<Measured>,
    #[serde(default)]
    pub fio_runs: Vec<Measured>,
}

/// One thing measured: a plain directory or a stripefs volume configuration.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Target {
    pub label: String,
    pub path: PathBuf,
    pub devices: Option<usize>,
    pub stripe_size: Option<u32>,
    pub width: Option<u32>,
    pub cache: Option<String>,
    /// The emulated RAID card's cache: "on" or "off" (None: no card).
    pub controller_cache: Option<String>,
    /// Models of emulated devices ("hdd-5400 (emulated: ...)") and of an emulated RAID card.
    pub emulated: Vec<String>,
    /// How a stripefs volume reads and writes its devices: "direct" or "buffered".
    pub device_io: Option<String>,
    /// The volume's device I/O engine ("uring", "threads").
    pub io_engine: Option<String>,
    /// One line per device: its path and whether it is real or emulated (and as what).
    pub device_list: Vec<String>,
    pub results: Vec<TestResult>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub profile: String,
    pub size: u64,
    pub duration_secs: f64,
    pub runs: usize,
    pub direct: bool,
    /// What drove the I/O: the built-in engine, or fio.
    pub measured_by: String,
    /// The CPUs the load ran on (`--cpus`), if it was kept to some.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<CpuList>,
    /// A backing directory measured with no FUSE in the same run.
    pub baseline: Option<Target>,
    pub targets: Vec<Target>,
}

/// Lays out the test file in `dir` and runs every job in both directions `runs` times.
/// `on_test` hears the name of each test as it starts.
#[allow(clippy::too_many_arguments)]
pub fn measure(
    dir: &Path,
    jobs: &[Job],
    spec: &RunSpec,
    runs: usize,
    with_fio: bool,
    stop: &AtomicBool,
    on_test: &mut dyn FnMut(&str),
) -> io::Result<Vec<TestResult>> {
    measure_with(
        dir,
        jobs,
        spec,
        runs,
        with_fio,
        stop,
        &mut Hooks {
            on_test,
            done: &|_, _| None,
            on_result: &mut |_| Ok(()),
        },
    )
}

/// What a caller hears and decides while `measure_with` runs.
pub struct Hooks<'a> {
    /// The name of each test as it starts ("SEQ1M Q8T1 read").
    pub on_test: &'a mut dyn FnMut(&str),
    /// A result measured before (test, direction): the test is not run again, its result is
    /// taken as it was.
    pub done: &'a dyn Fn(&str, &str) -> Option<TestResult>,
    /// Each newly measured result, the moment its test ends (before the next one starts).
    pub on_result: &'a mut dyn FnMut(&TestResult) -> io::Result<()>,
}

/// The tests `jobs` make, in the order they run: reads first, on the laid-out file; then
/// writes, as CrystalDiskMark orders them. (test name, direction.)
pub fn tests_of(jobs: &[Job]) -> Vec<(String, &'static str)> {
    let mut out = Vec::new();
    for dir in Dir::ALL {
        for job in jobs.iter().filter(|j| j.directions().contains(&dir)) {
            out.push((job.name(), dir.name()));
        }
    }
    out
}

/// `measure`, with results taken from an earlier run where `hooks.done` has them, and each new
/// result handed to `hooks.on_result` as soon as it is complete. A stop request ends the run
/// with `Interrupted`; a test cut short by it is dropped, never reported.
#[allow(clippy::too_many_arguments)]
pub fn measure_with(
    dir: &Path,
    jobs: &[Job],
    spec: &RunSpec,
    runs: usize,
    with_fio: bool,
    stop: &AtomicBool,
    hooks: &mut Hooks,
) -> io::Result<Vec<TestResult>> {
    let stopped = || io::Error::new(io::ErrorKind::Interrupted, "stopped");
    let is_stopped = || stop.load(std::sync::atomic::Ordering::Relaxed);
    let mut file = None;
    let mut out = Vec::new();
    for way in Dir::ALL {
        for job in jobs.iter().filter(|j| j.directions().contains(&way)) {
            let direction = way.name();
            let name = job.name();
            if let Some(earlier) = (hooks.done)(&name, direction) {
                out.push(earlier);
                continue;
            }
            if is_stopped() {
                return Err(stopped());
            }
            // Laid out once, on the first test that runs.
            if file.is_none() {
                file = Some(TestFile::create(dir, spec.size)?);
            }
            let file = file.as_ref().expect("laid out above");
            let mut measured = Vec::with_capacity(runs);
            let mut by_fio = Vec::new();
            for _ in 0..runs.max(1) {
                if is_stopped() {
                    return Err(stopped());
                }
                (hooks.on_test)(&format!("{name} {direction}"));
                let m = engine::run(file, job, way, spec, stop)?;
                if is_stopped() {
                    // Cut short: not a measurement of the full duration.
                    return Err(stopped());
                }
                measured.push(m);
                // Interleaved with the engine's runs, so a drift of the machine hits both
                // alike, and compared median to median.
                if with_fio {
                    (hooks.on_test)(&format!("{name} {direction} (fio)"));
                    let m = fio::run(file, job, way, spec);
                    // A terminal's Ctrl-C reaches fio too: it fails or stops short.
                    if is_stopped() {
                        return Err(stopped());
                    }
                    by_fio.push(m?);
                }
            }
            let (median, best) = engine::median_and_best(&measured);
            let fio = (!by_fio.is_empty()).then(|| engine::median_and_best(&by_fio).0);
            let result = TestResult {
                test: name,
                direction: direction.into(),
                runs: measured,
                median,
                best,
                fio,
                fio_runs: by_fio,
            };
            (hooks.on_result)(&result)?;
            out.push(result);
        }
    }
    Ok(out)
}

/// Which tool drives a comparison's I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Driver {
    /// The built-in engine: one blocking worker per queue slot.
    Engine,
    /// fio with libaio: real queue depth from one thread, as the published figures were taken.
    FioLibaio,
}

impl Driver {
    pub fn describe(self) -> &'static str {
        match self {
            Driver::Engine => "the built-in engine (io_uring, Q in flight from each of T threads)",
            Driver::FioLibaio => "fio (ioengine=libaio, iodepth=Q, numjobs=T)",
        }
    }
}

/// Measures every directory with every test, interleaved (each test runs on every directory
/// in turn, `runs` rounds), so slow drifts of a shared machine hit all of them alike.
/// Returns each directory's results in the order of `dirs`.
pub fn compare(
    dirs: &[&Path],
    jobs: &[Job],
    spec: &RunSpec,
    runs: usize,
    driver: Driver,
    stop: &AtomicBool,
    on_test: &mut dyn FnMut(&str),
) -> io::Result<Vec<Vec<TestResult>>> {
    let files = dirs
        .iter()
        .map(|d| TestFile::create(d, spec.size))
        .collect::<io::Result<Vec<_>>>()?;
    let mut tests = Vec::new();
    for dir in Dir::ALL {
        for job in jobs.iter().filter(|j| j.directions().contains(&dir)) {
            tests.push((job, dir));
        }
    }
    let mut measured = vec![vec![Vec::new(); tests.len()]; dirs.len()];
    for _ in 0..runs.max(1) {
        for (t, &(job, dir)) in tests.iter().enumerate() {
            for (d, file) in files.iter().enumerate() {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    return Err(io::Error::new(io::ErrorKind::Interrupted, "stopped"));
                }
                let direction = dir.name();
                on_test(&format!(
                    "{} {direction} on {}",
                    job.name(),
                    dirs[d].display()
                ));
                measured[d][t].push(match driver {
                    Driver::Engine => engine::run(file, job, dir, spec, stop)?,
                    Driver::FioLibaio => fio::run_libaio(file, job, dir, spec)?,
                });
            }
        }
    }
    Ok(measured
        .into_iter()
        .map(|per_test| {
            per_test
                .into_iter()
                .zip(&tests)
                .map(|(runs, &(job, dir))| {
                    let (median, best) = engine::median_and_best(&runs);
                    TestResult {
                        test: job.name(),
                        direction: dir.name().into(),
                        runs,
                        median,
                        best,
                        fio: None,
                        fio_runs: Vec::new(),
                    }
                })
                .collect()
        })
        .collect())
}

impl Report {
    /// The baseline's median for a test, if there is one.
    pub fn baseline_of(&self, test: &str, direction: &str) -> Option<&Measured> {
        self.baseline
            .as_ref()?
            .results
            .iter()
            .find(|r| r.test == test && r.direction == direction)
            .map(|r| &r.median)
    }

    pub fn emulated(&self) -> bool {
        self.targets.iter().any(|t| !t.emulated.is_empty())
    }

    /// Whether any figure went through a page cache: the test file opened without O_DIRECT
    /// (asked for, or a fallback where the target refused it), or a volume's device I/O
    /// buffered.
    pub fn buffered(&self) -> bool {
        let all = || self.baseline.iter().chain(&self.targets);
        !self.direct
            || all().any(|t| t.device_io.as_deref() == Some("buffered"))
            || all().any(|t| {
                t.results
                    .iter()
                    .any(|r| r.median.ops > 0 && !r.median.direct)
            })
    }

    /// The run's header: how the I/O was done, by what, on what devices, so a figure is never
    /// read without its conditions.
    pub fn header(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "profile {}, test size {}, {:.0}s per test, {} run(s){}",
            self.profile,
            human(self.size),
            self.duration_secs,
            self.runs,
            if self.runs > 1 {
                " (median; best in JSON)"
            } else {
                ""
            },
        );
        let fell_back = self.direct
            && self.baseline.iter().chain(&self.targets).any(|t| {
                t.results
                    .iter()
                    .any(|r| r.median.ops > 0 && !r.median.direct)
            });
        let _ = writeln!(
            s,
            "test file I/O: {}",
            match (self.direct, fell_back) {
                (true, false) => "O_DIRECT",
                (true, true) => "O_DIRECT asked, buffered where the target refused it",
                (false, _) => "buffered",
            }
        );
        let _ = writeln!(s, "workload engine: {}", self.measured_by);
        if let Some(cpus) = &self.cpus {
            let which = if cpus.cpus().len() == 1 {
                "CPU"
            } else {
                "CPUs"
            };
            let _ = writeln!(s, "load kept to {which} {cpus} (--cpus)");
        }
        if self.buffered() {
            let _ = writeln!(
                s,
                "BUFFERED: figures are flattered by the page cache (buffered test file or \
                 device I/O): they may measure memory, not the devices"
            );
        }
        if self.emulated() {
            let _ = writeln!(
                s,
                "EMULATED devices: figures model slower drives on this machine"
            );
        }
        s
    }

    /// One target's header lines: device I/O mode, I/O engine, cache, each device real or
    /// emulated.
    fn target_header(t: &Target, is_base: bool) -> String {
        let mut s = String::new();
        if !is_base && t.devices.is_some() {
            let _ = writeln!(
                s,
                "   device I/O {}, io engine {}, cache {}",
                match t.device_io.as_deref() {
                    Some("direct") => "direct (O_DIRECT)",
                    Some("buffered") => "BUFFERED (flattered by the devices' page cache)",
                    Some(other) => other,
                    None => "unknown",
                },
                t.io_engine.as_deref().unwrap_or("unknown"),
                t.cache.as_deref().unwrap_or("none")
            );
        }
        for d in &t.device_list {
            let _ = writeln!(s, "   {d}");
        }
        for e in &t.emulated {
            let _ = writeln!(s, "   {e}");
        }
        s
    }

    /// A table per target, like CrystalDiskMark's window, after the run's header.
    pub fn table(&self) -> String {
        let mut s = self.header();
        for t in self.baseline.iter().chain(&self.targets) {
            let is_base = self.baseline.as_ref().is_some_and(|b| std::ptr::eq(b, t));
            let _ = writeln!(
                s,
                "\n== {}{}",
                t.label,
                if is_base { "  [baseline, no FUSE]" } else { "" }
            );
            s.push_str(&Self::target_header(t, is_base));
            let _ = writeln!(
                s,
                "{:<15} {:<5} {:>10} {:>10} {:>10} {:>10} {:>8}{}",
                "test",
                "",
                "MB/s",
                "IOPS",
                "mean us",
                "p99 us",
                "x base",
                if t.results.iter().any(|r| r.fio.is_some()) {
                    "   fio MB/s  engine/fio"
                } else {
                    ""
                }
            );
            for r in &t.results {
                let ratio = match self.baseline_of(&r.test, &r.direction) {
                    Some(b) if !is_base && b.mb_per_s > 0.0 => {
                        format!("{:.2}x", r.median.mb_per_s / b.mb_per_s)
                    }
                    _ => "-".into(),
                };
                let fio = match &r.fio {
                    Some(f) if f.mb_per_s > 0.0 => format!(
                        " {:>10.1} {:>10.2}",
                        f.mb_per_s,
                        r.median.mb_per_s / f.mb_per_s
                    ),
                    _ => String::new(),
                };
                let m = &r.median;
                let _ = writeln!(
                    s,
                    "{:<15} {:<5} {:>10.1} {:>10.0} {:>10.1} {:>10.1} {:>8}{fio}",
                    r.test, r.direction, m.mb_per_s, m.iops, m.mean_us, m.p99_us, ratio
                );
            }
        }
        s
    }

    /// One row per target and test.
    pub fn csv(&self) -> String {
        let mut s = String::from(CSV_HEADER);
        s.push('\n');
        for t in self.baseline.iter().chain(&self.targets) {
            let is_base = self.baseline.as_ref().is_some_and(|b| std::ptr::eq(b, t));
            for r in &t.results {
                let base = self.baseline_of(&r.test, &r.direction).map(|b| b.mb_per_s);
                s.push_str(&csv_row(t, is_base, r, base));
                s.push('\n');
            }
        }
        s
    }
}

/// The CSV's columns.
pub const CSV_HEADER: &str = "target,baseline,devices,stripe_size,width,cache,controller_cache,emulated,models,profile,direction,mb_per_s,iops,mean_us,p99_us,best_mb_per_s,ratio_to_baseline,fio_mb_per_s";

/// One CSV row (no newline): `target`'s result `r`, with its ratio to the baseline's MB/s
/// `base` when there is one.
pub fn csv_row(t: &Target, is_base: bool, r: &TestResult, base: Option<f64>) -> String {
    let ratio = base
        .filter(|&b| b > 0.0)
        .map(|b| format!("{:.4}", r.median.mb_per_s / b))
        .unwrap_or_default();
    let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
    format!(
        "\"{}\",{},{},{},{},{},{},{},\"{}\",{},{},{:.2},{:.0},{:.2},{:.2},{:.2},{},{}",
        t.label.replace('"', "'"),
        is_base,
        opt(t.devices.map(|d| d as u64)),
        opt(t.stripe_size.map(u64::from)),
        opt(t.width.map(u64::from)),
        t.cache.clone().unwrap_or_default(),
        t.controller_cache.clone().unwrap_or_default(),
        !t.emulated.is_empty(),
        t.emulated.join("; ").replace('"', "'"),
        r.test,
        r.direction,
        r.median.mb_per_s,
        r.median.iops,
        r.median.mean_us,
        r.median.p99_us,
        r.best.mb_per_s,
        ratio,
        r.fio
            .as_ref()
            .map(|f| format!("{:.2}", f.mb_per_s))
            .unwrap_or_default()
    )
}

/// "1 device", "4 devices".
pub fn devices(n: usize) -> String {
    format!("{n} device{}", if n == 1 { "" } else { "s" })
}

pub fn human(bytes: u64) -> String {
    if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) {
        format!("{} GiB", bytes >> 30)
    } else if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Job, Pattern};
    use std::time::Duration;

    #[test]
    fn measure_a_directory_and_report_it() {
        let dir = tempfile::tempdir().unwrap();
        let spec = RunSpec {
            size: 4 << 20,
            duration: Duration::from_millis(200),
            direct: true,
            cpus: None,
        };
        let jobs = [
            Job::new(Pattern::Seq, 1 << 20, 2, 1),
            Job::new(Pattern::Rand, 4096, 4, 1),
        ];
        let stop = AtomicBool::new(false);
        let mut seen = Vec::new();
        let results = measure(dir.path(), &jobs, &spec, 3, false, &stop, &mut |t| {
            seen.push(t.to_string())
        })
        .unwrap();
        assert_eq!(results.len(), 4);
        assert_eq!(seen.len(), 12);
        assert_eq!(results[0].test, "SEQ1M Q2T1");
        assert_eq!(results[0].direction, "read");
        assert_eq!(results[2].direction, "write");
        assert!(results
            .iter()
            .all(|r| r.runs.len() == 3 && r.median.ops > 0));
        assert!(
            !dir.path().join("stripefs-bench.dat").exists(),
            "test file removed"
        );
        let base = Target {
            label: "baseline".into(),
            results: results.clone(),
            ..Target::default()
        };
        let volume = Target {
            label: "volume".into(),
            stripe_size: Some(65536),
            width: Some(2),
            devices: Some(2),
            emulated: vec!["hdd-5400 (emulated: ...)".into()],
            results,
            ..Target::default()
        };
        let report = Report {
            profile: "custom".into(),
            size: spec.size,
            duration_secs: 0.2,
            runs: 3,
            direct: true,
            measured_by: "engine".into(),
            cpus: None,
            baseline: Some(base),
            targets: vec![volume],
        };
        let table = report.table();
        assert!(
            table.contains("== volume") && table.contains("1.00x") && table.contains("EMULATED"),
            "{table}"
        );
        let csv = report.csv();
        assert_eq!(csv.lines().count(), 1 + 8);
        assert!(csv.lines().nth(5).unwrap().contains(",65536,2,"), "{csv}");
        assert!(
            csv.lines().nth(5).unwrap().contains(",,true,\"hdd-5400"),
            "{csv}"
        );
        let json: serde_json::Value = serde_json::to_value(&report).unwrap();
        assert_eq!(
            json["targets"][0]["results"][0]["runs"]
                .as_array()
                .unwrap()
                .len(),
            3
        );
    }
}
