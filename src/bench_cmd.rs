//! `stripefs bench`: measure a directory, sweep fresh volumes over stripe sizes, widths and
//! device models, and the presets that reproduce the seeds' experiments. The measuring,
//! reporting and charting is the `bench` crate's; here volumes are built and mounted.

use crate::error::{Error, Result};
use bench::log::ResultLog;
use bench::report::Driver;
use bench::{profile, Report, RunSpec, Target};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::cell::RefCell;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Options every bench command shares.
#[derive(clap::Args, Clone, Debug)]
pub struct BenchOpts {
    /// cdm8 (CrystalDiskMark 8's set), cdm6, or custom:rw=randread,bs=16K,qd=4,threads=2
    #[arg(long, global = true, default_value = "cdm8")]
    pub profile: String,
    /// Test file size [default: 1G; presets choose their own]
    #[arg(long, global = true)]
    pub size: Option<String>,
    /// Duration of each test
    #[arg(long, global = true, default_value = "5s")]
    pub duration: String,
    /// Runs of each test; the median is reported, the best is in the JSON
    #[arg(long, global = true, default_value_t = 1)]
    pub runs: usize,
    /// Buffered I/O instead of O_DIRECT
    #[arg(long, global = true)]
    pub buffered: bool,
    /// Print JSON instead of the table
    #[arg(long, global = true)]
    pub json: bool,
    /// Also write the results as CSV to FILE, and as JSON Lines beside it (FILE.jsonl), each
    /// row the moment its test ends
    #[arg(long, global = true, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Continue the run that wrote the CSV FILE (and its .jsonl): rows already there are not
    /// measured again, new ones are appended
    #[arg(long, global = true, value_name = "FILE", conflicts_with = "csv")]
    pub resume: Option<PathBuf>,
    /// Write a chart to FILE (.svg, or .png)
    #[arg(long, global = true, value_name = "FILE")]
    pub chart: Option<PathBuf>,
    /// Run fio on the same file after each test, as a cross-check
    #[arg(long, global = true)]
    pub fio: bool,
}

#[derive(clap::Subcommand, Clone, Debug)]
pub enum BenchAction {
    /// Build, mount, measure and unmount a fresh volume per configuration
    #[command(
        after_help = "Stripe sizes: 8K to 256K, powers of two; widths: 1 to the device \
        count.\n\nExample:\n  stripefs bench sweep --devices /srv/d0,/srv/d1 \
        --stripe-sizes 64K,256K --widths 1,2 --cache none,ram:wb"
    )]
    Sweep {
        /// Backing directories, one per device
        #[arg(long, value_delimiter = ',', required = true)]
        devices: Vec<PathBuf>,
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "8K,16K,32K,64K,128K,256K"
        )]
        stripe_sizes: Vec<String>,
        /// Devices per file; widths above the device count are skipped
        #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
        widths: Vec<u32>,
        /// Cache setups: none, ram:MODE[:SIZE], file:MODE:DIR[:SIZE] (SIZE defaults to twice
        /// the test file, so the working set fits as in Intel's CAS runs)
        #[arg(long, value_delimiter = ',', default_value = "none")]
        cache: Vec<String>,
        /// Make every device behave like hdd-5400, sata-ssd, nvme or sata-port
        #[arg(long)]
        emulate: Option<String>,
        /// Object I/O of the volumes: buffered, or direct (whole blocks with O_DIRECT, so real
        /// disks show their own speed)
        #[arg(long, default_value = "direct")]
        device_io: String,
    },
    /// Measure directories side by side, interleaved, the first as the baseline: a backing
    /// directory, then stripefs mounts over it. Drives fio (libaio) when it is installed, as
    /// the data path's published tables were measured, else the built-in engine
    #[command(
        after_help = "Example:\n  stripefs bench compare /srv/d0 /mnt/vol1 /mnt/vol4 \
        --size 256M --duration 4s --runs 3"
    )]
    Compare {
        /// The baseline (e.g. a raw backing directory), then the directories to compare
        #[arg(required = true, num_args = 2..)]
        dirs: Vec<PathBuf>,
        /// Use the built-in engine even when fio is installed
        #[arg(long)]
        no_fio: bool,
    },
    /// Reproduce a seed experiment: cas (an emulated HDD behind an emulated SATA SSD or NVMe
    /// cache) or raidcard (RAM disks on emulated SATA ports)
    #[command(after_help = "Example:\n  stripefs bench preset cas")]
    Preset {
        name: String,
        /// Where the preset's RAM disk is mounted
        #[arg(long, default_value = "/tmp/stripefs-preset")]
        dir: PathBuf,
    },
}

struct Plan {
    jobs: Vec<bench::Job>,
    spec: RunSpec,
    opts: BenchOpts,
    /// Where each finished row goes (--csv, --resume); shared by a preset's runs.
    log: Option<Rc<RefCell<ResultLog>>>,
}

fn plan(opts: &BenchOpts) -> Result<Plan> {
    plan_with(opts, None)
}

/// A plan that appends to `log` when given, else opens the files --csv or --resume name.
fn plan_with(opts: &BenchOpts, log: Option<Rc<RefCell<ResultLog>>>) -> Result<Plan> {
    if let Some(chart) = &opts.chart {
        bench::chart::format_of(chart).map_err(|e| Error::Usage(format!("--chart {e}")))?;
    }
    let jobs = profile::parse(&opts.profile).map_err(Error::Usage)?;
    let text = opts.size.as_deref().unwrap_or("1G");
    let size =
        mountcfg::parse_size(text).map_err(|e| Error::Usage(format!("--size {text}: {e}")))?;
    if size < 1 << 20 {
        return Err(Error::Usage("--size must be at least 1M".into()));
    }
    let duration = mountcfg::parse_duration(&opts.duration)
        .map_err(|e| Error::Usage(format!("--duration {}: {e}", opts.duration)))?;
    if opts.runs == 0 {
        return Err(Error::Usage("--runs must be at least 1".into()));
    }
    let log = match (log, &opts.resume, &opts.csv) {
        (Some(log), _, _) => Some(log),
        (None, Some(file), _) => {
            let log = ResultLog::resume(file)
                .map_err(|e| Error::Usage(format!("--resume {}: {e}", file.display())))?;
            eprintln!(
                "resuming {}: {} rows already measured are not measured again",
                file.display(),
                log.rows()
            );
            Some(Rc::new(RefCell::new(log)))
        }
        (None, None, Some(file)) => Some(Rc::new(RefCell::new(
            ResultLog::create(file)
                .map_err(|e| Error::Usage(format!("{}: {e}", file.display())))?,
        ))),
        (None, None, None) => None,
    };
    Ok(Plan {
        log,
        jobs,
        spec: RunSpec {
            size,
            duration,
            direct: !opts.buffered,
        },
        opts: opts.clone(),
    })
}

impl Plan {
    fn tests(&self) -> u64 {
        let per_run: usize = self.jobs.iter().map(|j| j.directions().len()).sum();
        (per_run * self.opts.runs) as u64
    }

    fn report(&self, baseline: Option<Target>, targets: Vec<Target>) -> Report {
        Report {
            measured_by: Driver::Engine.describe().into(),
            profile: self.opts.profile.clone(),
            size: self.spec.size,
            duration_secs: self.spec.duration.as_secs_f64(),
            runs: self.opts.runs,
            direct: self.spec.direct,
            baseline,
            targets,
        }
    }

    /// The result an earlier run (--resume) has for this row.
    fn done(
        &self,
        target: &Target,
        baseline: bool,
        test: &str,
        direction: &str,
    ) -> Option<bench::TestResult> {
        let log = self.log.as_ref()?.borrow();
        log.done(
            target,
            baseline,
            test,
            direction,
            self.spec.size,
            self.spec.direct,
        )
    }

    /// Whether every row of `target` was measured by an earlier run.
    fn all_done(&self, target: &Target, baseline: bool) -> bool {
        bench::report::tests_of(&self.jobs)
            .iter()
            .all(|(t, d)| self.done(target, baseline, t, d).is_some())
    }

    /// Tests left to run for `target`, with their repeats.
    fn tests_left(&self, target: &Target, baseline: bool) -> u64 {
        let left = bench::report::tests_of(&self.jobs)
            .iter()
            .filter(|(t, d)| self.done(target, baseline, t, d).is_none())
            .count();
        (left * self.opts.runs) as u64
    }

    /// Measures `dir` as `target`; every finished test goes to the CSV and JSON Lines files
    /// at once, and rows an earlier run measured are taken from it.
    fn measure(&self, dir: &Path, target: &mut Target, baseline: bool, ctx: &Ctx) -> Result<()> {
        let label = target.label.clone();
        let mut on_test = |t: &str| {
            ctx.start_test(&format!("{label}: {t}"), !t.ends_with("(fio)"));
        };
        let fixed = target.clone();
        let done = |t: &str, d: &str| self.done(&fixed, baseline, t, d);
        let mut on_result = |r: &bench::TestResult| match &self.log {
            Some(log) => {
                log.borrow_mut()
                    .append(&fixed, baseline, r, self.spec.size, self.spec.direct)
            }
            None => Ok(()),
        };
        let measured = bench::report::measure_with(
            dir,
            &self.jobs,
            &self.spec,
            self.opts.runs,
            self.opts.fio,
            &ctx.stop,
            &mut bench::report::Hooks {
                on_test: &mut on_test,
                done: &done,
                on_result: &mut on_result,
            },
        );
        ctx.end_test();
        target.results = measured.map_err(|e| {
            if e.kind() == std::io::ErrorKind::Interrupted {
                self.stopped()
            } else {
                Error::Usage(format!("measuring {}: {e}", dir.display()))
            }
        })?;
        Ok(())
    }

    /// The error of a run stopped by a signal, saying where its finished rows are.
    fn stopped(&self) -> Error {
        match &self.log {
            Some(log) => {
                let log = log.borrow();
                Error::Usage(format!(
                    "stopped by a signal; the {} finished rows are in {} and {}: \
                     `--resume {}` measures the rest",
                    log.rows(),
                    log.csv_path.display(),
                    log.jsonl_path.display(),
                    log.csv_path.display()
                ))
            }
            None => Error::Usage("stopped by a signal".into()),
        }
    }

    /// Prints and writes the report as asked.
    fn output(&self, report: &Report, default_chart: Option<&Path>) -> Result<()> {
        if self.opts.json {
            println!(
                "{}",
                serde_json::to_string_pretty(report).unwrap_or_default()
            );
        } else {
            print!("{}", report.table());
        }
        if let Some(log) = &self.log {
            let log = log.borrow();
            eprintln!(
                "CSV written to {} and JSON Lines to {} ({} rows measured now)",
                log.csv_path.display(),
                log.jsonl_path.display(),
                log.appended
            );
        }
        if let Some(chart) = self.opts.chart.as_deref().or(default_chart) {
            bench::chart::write(report, chart)
                .map_err(|e| Error::Usage(format!("chart {}: {e}", chart.display())))?;
            eprintln!("chart written to {}", chart.display());
        }
        Ok(())
    }
}

/// Progress and Ctrl-C, shared by everything one command measures.
struct Ctx {
    /// The whole run: tests done of all, with its ETA.
    bar: ProgressBar,
    /// The test in progress: its time elapsed of its duration, with its ETA.
    test: ProgressBar,
    stop: Arc<AtomicBool>,
    /// Ends the thread that moves `test` along.
    ticker: Arc<AtomicBool>,
    /// A counted test is running (it counts as done when the next starts, or at the end).
    running: std::cell::Cell<bool>,
}

impl Ctx {
    /// `total` tests, each running `test_duration`. Bars only when stderr is a terminal.
    fn new(total: u64, test_duration: std::time::Duration) -> Result<Ctx> {
        let stop = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register(sig, stop.clone())
                .map_err(|e| Error::Usage(format!("cannot watch signals: {e}")))?;
        }
        let shown = std::io::stderr().is_terminal();
        let multi = MultiProgress::with_draw_target(if shown {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        });
        let style = |t: &str| {
            ProgressStyle::with_template(t)
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> ")
        };
        let bar = multi.add(ProgressBar::new(total));
        bar.set_style(style(
            "all   {elapsed_precise} [{bar:30}] {pos}/{len} tests done, ETA {eta_precise}",
        ));
        let test = multi.add(ProgressBar::new(test_duration.as_millis().max(1) as u64));
        test.set_style(style("test  {prefix:>8} left [{bar:30}] {wide_msg}"));
        let ticker = Arc::new(AtomicBool::new(false));
        if shown {
            let (test, ticker) = (test.clone(), ticker.clone());
            std::thread::spawn(move || {
                while !ticker.load(Ordering::Relaxed) {
                    // Time left of a test of fixed duration: its own clock, not an estimate.
                    let done = test.elapsed().as_millis() as u64;
                    let left = test.length().unwrap_or(0).saturating_sub(done);
                    test.set_position(done);
                    test.set_prefix(format!("{:.1}s", left as f64 / 1000.0));
                    std::thread::sleep(std::time::Duration::from_millis(200));
                }
            });
        }
        Ok(Ctx {
            bar,
            test,
            stop,
            ticker,
            running: std::cell::Cell::new(false),
        })
    }

    /// A test starts; `counts` when it is one of the total (not a fio cross-check).
    fn start_test(&self, what: &str, counts: bool) {
        if self.running.replace(counts) {
            self.bar.inc(1);
        }
        self.test.reset();
        self.test.set_prefix(format!(
            "{:.1}s",
            self.test.length().unwrap_or(0) as f64 / 1000.0
        ));
        self.test.set_message(what.to_string());
    }

    fn end_test(&self) {
        if self.running.replace(false) && !self.stop.load(Ordering::Relaxed) {
            self.bar.inc(1);
        }
        self.test.set_message(String::new());
    }

    fn finish(&self) {
        self.end_test();
        self.ticker.store(true, Ordering::Relaxed);
        self.test.finish_and_clear();
        self.bar.finish_and_clear();
    }
}

/// A target for `dir`; a stripefs mount says what it is (devices, layout, I/O engine).
fn describe_target(dir: &Path) -> Target {
    let mut target = Target {
        label: dir.display().to_string(),
        path: dir.to_path_buf(),
        device_list: vec![format!(
            "{}: real directory, not a stripefs volume (no FUSE)",
            dir.display()
        )],
        ..Target::default()
    };
    if let Ok(status) = crate::xattr::volume_status(dir) {
        target.devices = status["devices"].as_array().map(|d| d.len());
        target.stripe_size = status["stripe_size"].as_u64().map(|s| s as u32);
        target.width = status["width"].as_u64().map(|w| w as u32);
        target.emulated = status["devices"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| {
                Some(format!(
                    "device {}: {}",
                    d["index"],
                    d["emulated"].as_str()?
                ))
            })
            .collect();
        target.label = format!(
            "{} (stripefs, {} devices, {}, io engine {})",
            dir.display(),
            target.devices.unwrap_or(0),
            status["layout"].as_str().unwrap_or(""),
            status["options"]["io_engine"].as_str().unwrap_or("?")
        );
        let c = &status["cache"];
        target.cache = Some(if c.is_object() {
            format!(
                "{}:{} {}",
                c["store"].as_str().unwrap_or("?"),
                c["default_mode"].as_str().unwrap_or("?"),
                bench::report::human(c["size_bytes"].as_u64().unwrap_or(0))
            )
        } else {
            "none".into()
        });
        from_status(&mut target, &status);
    }
    target
}

/// What a mounted volume's status says of its device I/O: direct or buffered, the engine,
/// and each device, real or emulated.
fn from_status(target: &mut Target, status: &serde_json::Value) {
    let o = &status["options"];
    target.io_engine = o["io_engine"].as_str().map(str::to_string);
    target.device_io = o["device_io"].as_str().map(str::to_string);
    target.device_list = status["devices"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| {
            format!(
                "device {} {}: {}",
                d["index"],
                d["path"].as_str().unwrap_or("?"),
                d["emulated"]
                    .as_str()
                    .map_or("real".to_string(), |e| format!("EMULATED {e}"))
            )
        })
        .collect();
}

/// `stripefs bench DIR`: one target, any directory.
pub fn bench_dir(dir: &Path, opts: &BenchOpts) -> Result<()> {
    let plan = plan(opts)?;
    let mut target = describe_target(dir);
    let ctx = Ctx::new(plan.tests_left(&target, false), plan.spec.duration)?;
    let r = plan.measure(dir, &mut target, false, &ctx);
    ctx.finish();
    r?;
    plan.output(&plan.report(None, vec![target]), None)
}

/// `stripefs bench compare BASE DIR...`: every test on every directory in turn, ratios to BASE.
pub fn compare(dirs: &[PathBuf], no_fio: bool, opts: &BenchOpts) -> Result<()> {
    let plan = plan(opts)?;
    let fio_here = Command::new("fio")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let driver = if fio_here && !no_fio {
        Driver::FioLibaio
    } else {
        Driver::Engine
    };
    if plan.opts.resume.is_some() {
        return Err(Error::Usage(
            "compare measures its directories interleaved, test by test: it cannot resume \
             (--csv keeps its rows)"
                .into(),
        ));
    }
    let ctx = Ctx::new(plan.tests() * dirs.len() as u64, plan.spec.duration)?;
    let paths: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
    let measured = bench::report::compare(
        &paths,
        &plan.jobs,
        &plan.spec,
        plan.opts.runs,
        driver,
        &ctx.stop,
        &mut |t| ctx.start_test(t, true),
    );
    ctx.finish();
    let measured = measured.map_err(|e| Error::Usage(format!("measuring: {e}")))?;
    let mut targets: Vec<Target> = dirs
        .iter()
        .zip(measured)
        .map(|(d, results)| Target {
            results,
            ..describe_target(d)
        })
        .collect();
    if let Some(log) = &plan.log {
        let mut log = log.borrow_mut();
        for (k, t) in targets.iter().enumerate() {
            for r in &t.results {
                log.append(t, k == 0, r, plan.spec.size, plan.spec.direct)
                    .map_err(|e| Error::Usage(format!("{}: {e}", log.csv_path.display())))?;
            }
        }
    }
    let baseline = targets.remove(0);
    let mut report = plan.report(Some(baseline), targets);
    report.measured_by = driver.describe().into();
    plan.output(&report, None)
}

/// A volume built for one sweep configuration; unmounted and removed when dropped.
struct SweepVolume {
    dirs: Vec<PathBuf>,
    mnt: PathBuf,
    mounted: bool,
}

impl SweepVolume {
    fn build(c: &Config, tag: &str, test_size: u64) -> Result<SweepVolume> {
        let (stripe, width, emulate) = (c.stripe, c.width, c.emulate.as_deref());
        let io = |p: &Path, e: std::io::Error| Error::Usage(format!("{}: {e}", p.display()));
        let dirs: Vec<PathBuf> = c
            .devices
            .iter()
            .map(|d| d.join(format!("stripefs-sweep-{tag}")))
            .collect();
        let mnt = std::env::temp_dir().join(format!("stripefs-sweep-mnt-{tag}"));
        let mut v = SweepVolume {
            dirs,
            mnt,
            mounted: false,
        };
        for d in v.dirs.iter().chain([&v.mnt]) {
            let _ = std::fs::remove_dir_all(d);
            std::fs::create_dir_all(d).map_err(|e| io(d, e))?;
        }
        let list: Vec<String> = v
            .dirs
            .iter()
            .map(|d| format!("\"{}\"", d.display()))
            .collect();
        let mut text = format!(
            "[volume]\ndevices = [{}]\nstripe_size = {stripe}\nwidth = {width}\ndevice_io = \"{}\"\n",
            list.join(", "),
            if c.direct_device_io { "direct" } else { "buffered" }
        );
        if let Some(profile) = emulate {
            text.push_str(&format!(
                "[[volume.emulate]]\ndevice = \"all\"\nprofile = \"{profile}\"\n"
            ));
        }
        if let Some(cache) = &c.cache {
            let size = cache.size.unwrap_or(2 * test_size).max(1 << 20);
            text.push_str(&format!(
                "[cache]\nsize = {size}\nline_size = \"64K\"\nmode = \"{}\"\n",
                cache.mode
            ));
            if let Some(dir) = &cache.dir {
                let own = dir.join(format!("stripefs-sweep-cache-{tag}"));
                let _ = std::fs::remove_dir_all(&own);
                std::fs::create_dir_all(&own).map_err(|e| io(&own, e))?;
                text.push_str(&format!("store = \"file\"\npath = \"{}\"\n", own.display()));
                v.dirs.push(own);
            }
            if let Some(e) = &cache.emulate {
                text.push_str(&format!("emulate = \"{e}\"\n"));
            }
        }
        let cfg = v.dirs[0].join("sweep.toml");
        std::fs::write(&cfg, text).map_err(|e| io(&cfg, e))?;
        run_self(&["mkfs", &cfg.display().to_string()])?;
        run_self(&[
            "mount",
            &cfg.display().to_string(),
            &v.mnt.display().to_string(),
        ])?;
        v.mounted = true;
        Ok(v)
    }
}

/// Whether `path` is a mount point now (a mount whose `stripefs mount` was interrupted after
/// its daemon had mounted still counts).
fn is_mount_point(path: &Path) -> bool {
    let want = path.display().to_string().replace(' ', "\\040");
    std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|m| {
        m.lines()
            .any(|l| l.split(' ').nth(4) == Some(want.as_str()))
    })
}

impl Drop for SweepVolume {
    fn drop(&mut self) {
        if self.mounted || is_mount_point(&self.mnt) {
            let mnt = self.mnt.display().to_string();
            if run_self(&["umount", &mnt]).is_err() {
                let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
            }
        }
        for d in &self.dirs {
            let _ = std::fs::remove_dir_all(d);
        }
        let _ = std::fs::remove_dir(&self.mnt);
    }
}

/// Runs this binary with `args` (mkfs, mount, umount) and fails with its message.
fn run_self(args: &[&str]) -> Result<()> {
    let exe = std::env::current_exe()
        .map_err(|e| Error::Usage(format!("cannot find my own binary: {e}")))?;
    let out = Command::new(exe)
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .map_err(|e| Error::Usage(format!("stripefs {}: {e}", args[0])))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "stripefs {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// One sweep configuration.
#[derive(Clone, Debug)]
struct Config {
    devices: Vec<PathBuf>,
    stripe: u32,
    width: u32,
    emulate: Option<String>,
    cache: Option<CacheSetup>,
    direct_device_io: bool,
}

/// A cache for a sweep configuration: `ram:wb`, `file:wb:/ssd`, with an optional size.
#[derive(Clone, Debug, PartialEq)]
struct CacheSetup {
    mode: String,
    /// File store in this directory; RAM when None.
    dir: Option<PathBuf>,
    size: Option<u64>,
    /// The cache device's model (presets).
    emulate: Option<String>,
}

impl CacheSetup {
    fn parse(spec: &str) -> Result<Option<CacheSetup>> {
        if spec == "none" {
            return Ok(None);
        }
        let bad = |why: &str| {
            Error::Usage(format!(
                "--cache {spec}: {why} (none, ram:MODE[:SIZE], file:MODE:DIR[:SIZE])"
            ))
        };
        let parts: Vec<&str> = spec.split(':').collect();
        let mode = parts.get(1).copied().ok_or_else(|| bad("no mode"))?;
        if cache::Mode::parse(mode).is_none() {
            return Err(bad("the mode must be wt, wb, wa, wi, wo or pt"));
        }
        let size = |s: Option<&&str>| -> Result<Option<u64>> {
            s.map(|s| mountcfg::parse_size(s).map_err(|e| bad(&e)))
                .transpose()
        };
        match parts[0] {
            "ram" if parts.len() <= 3 => Ok(Some(CacheSetup {
                mode: mode.into(),
                dir: None,
                size: size(parts.get(2))?,
                emulate: None,
            })),
            "file" if (3..=4).contains(&parts.len()) => {
                let dir = PathBuf::from(parts[2]);
                if !dir.is_dir() {
                    return Err(bad(&format!("{} is not a directory", dir.display())));
                }
                Ok(Some(CacheSetup {
                    mode: mode.into(),
                    dir: Some(dir),
                    size: size(parts.get(3))?,
                    emulate: None,
                }))
            }
            _ => Err(bad("unknown form")),
        }
    }

    fn label(&self) -> String {
        format!(
            "{}:{}{}",
            if self.dir.is_some() { "file" } else { "ram" },
            self.mode,
            self.emulate
                .as_ref()
                .map(|e| format!(" on {e}"))
                .unwrap_or_default()
        )
    }
}

fn parse_stripes(list: &[String]) -> Result<Vec<u32>> {
    list.iter()
        .map(|s| {
            let b = mountcfg::parse_size(s)
                .map_err(|e| Error::Usage(format!("--stripe-sizes {s}: {e}")))?;
            if !b.is_power_of_two() || !(mountcfg::MIN_STRIPE..=mountcfg::MAX_STRIPE).contains(&b) {
                return Err(Error::Usage(format!(
                    "--stripe-sizes {s}: must be a power of two from 8K to 256K"
                )));
            }
            Ok(b as u32)
        })
        .collect()
}

fn check_emulate(emulate: &Option<String>) -> Result<()> {
    match emulate {
        Some(p) if stripe::DeviceModel::profile(p).is_none() => Err(Error::Usage(format!(
            "--emulate {p}: must be one of {}",
            stripe::DeviceModel::profile_names().join(", ")
        ))),
        _ => Ok(()),
    }
}

/// The target a sweep configuration is measured as (its path is set once it is mounted).
fn config_target(c: &Config) -> Target {
    let cache = c
        .cache
        .as_ref()
        .map_or("none".to_string(), CacheSetup::label);
    let mut emulated: Vec<String> = c
        .emulate
        .as_deref()
        .and_then(stripe::DeviceModel::profile)
        .map(|m| vec![format!("all devices: {}", m.describe())])
        .unwrap_or_default();
    if let Some(m) = c
        .cache
        .as_ref()
        .and_then(|c| c.emulate.as_deref())
        .and_then(stripe::DeviceModel::profile)
    {
        emulated.push(format!("cache device: {}", m.describe()));
    }
    Target {
        label: format!(
            "{} devices, stripe {}, width {}, cache {cache}{}",
            c.devices.len(),
            mountcfg::format_size(c.stripe as u64),
            c.width,
            c.emulate
                .as_ref()
                .map(|e| format!(", emulated {e}"))
                .unwrap_or_default()
        ),
        devices: Some(c.devices.len()),
        stripe_size: Some(c.stripe),
        width: Some(c.width),
        cache: Some(cache),
        emulated,
        device_io: Some(
            if c.direct_device_io {
                "direct"
            } else {
                "buffered"
            }
            .into(),
        ),
        ..Target::default()
    }
}

/// Measures the baseline (one backing directory, no FUSE) and then every configuration. With
/// --resume, rows measured before are taken from the file, and a configuration whose rows all
/// are is not even mounted.
fn run_sweep(plan: &Plan, base_dir: &Path, configs: &[Config], chart: &Path) -> Result<Report> {
    let mut baseline = Target {
        label: format!("{} (backing directory)", base_dir.display()),
        path: base_dir.to_path_buf(),
        devices: Some(1),
        device_list: vec![format!("{}: real directory, no FUSE", base_dir.display())],
        ..Target::default()
    };
    let config_targets: Vec<Target> = configs.iter().map(config_target).collect();
    let left = plan.tests_left(&baseline, true)
        + config_targets
            .iter()
            .map(|t| plan.tests_left(t, false))
            .sum::<u64>();
    let ctx = Ctx::new(left, plan.spec.duration)?;
    let (mut mounted, mut resumed) = (0usize, 0usize);
    let result = (|| -> Result<Report> {
        if plan.all_done(&baseline, true) {
            plan.measure(base_dir, &mut baseline, true, &ctx)?;
        } else {
            let dir = base_dir.join(format!("stripefs-baseline-{}", std::process::id()));
            std::fs::create_dir_all(&dir)
                .map_err(|e| Error::Usage(format!("{}: {e}", dir.display())))?;
            let measured = plan.measure(&dir, &mut baseline, true, &ctx);
            let _ = std::fs::remove_dir_all(&dir);
            measured?;
        }
        let mut targets = Vec::new();
        for (k, (c, t)) in configs.iter().zip(config_targets).enumerate() {
            let mut t = t;
            if plan.all_done(&t, false) {
                // Every row is in the resumed file: taken from it, nothing mounted.
                resumed += 1;
                let dir = c.devices[0].clone();
                plan.measure(&dir, &mut t, false, &ctx)?;
                t.device_list = vec![format!(
                    "(every row resumed from {}: devices as configured above)",
                    plan.log
                        .as_ref()
                        .map(|l| l.borrow().csv_path.display().to_string())
                        .unwrap_or_default()
                )];
                targets.push(t);
                continue;
            }
            let tag = format!("{}-{k}", std::process::id());
            // A Ctrl-C from a terminal also hits mkfs and mount, which then fail.
            let volume = SweepVolume::build(c, &tag, plan.spec.size).map_err(|e| {
                if ctx.stop.load(Ordering::Relaxed) {
                    plan.stopped()
                } else {
                    e
                }
            })?;
            mounted += 1;
            t.path = volume.mnt.clone();
            if let Ok(status) = crate::xattr::volume_status(&volume.mnt) {
                from_status(&mut t, &status);
            }
            if let Some(cache) = &c.cache {
                t.device_list.push(match (&cache.dir, &cache.emulate) {
                    (None, _) => "cache: in RAM".to_string(),
                    (Some(d), None) => format!("cache device {}: real", d.display()),
                    (Some(d), Some(e)) => format!("cache device {}: EMULATED {e}", d.display()),
                });
            }
            plan.measure(&volume.mnt, &mut t, false, &ctx)?;
            targets.push(t);
            if ctx.stop.load(Ordering::Relaxed) {
                return Err(plan.stopped());
            }
        }
        Ok(plan.report(Some(baseline), targets))
    })();
    ctx.finish();
    if plan.log.is_some() {
        eprintln!(
            "{mounted} configurations mounted and measured, {resumed} taken whole from the \
             resumed file"
        );
    }
    let report = result?;
    plan.output(&report, Some(chart))?;
    Ok(report)
}

pub fn sweep(
    opts: &BenchOpts,
    devices: &[PathBuf],
    stripe_sizes: &[String],
    widths: &[u32],
    cache: &[String],
    emulate: Option<String>,
    device_io: &str,
) -> Result<()> {
    let plan = plan(opts)?;
    let direct_device_io = match device_io {
        "buffered" => false,
        "direct" => true,
        other => {
            return Err(Error::Usage(format!(
                "--device-io {other}: must be buffered or direct"
            )))
        }
    };
    let caches: Vec<Option<CacheSetup>> = cache
        .iter()
        .map(|c| CacheSetup::parse(c))
        .collect::<Result<_>>()?;
    check_emulate(&emulate)?;
    for d in devices {
        if !d.is_dir() {
            return Err(Error::Usage(format!(
                "--devices: {} is not a directory",
                d.display()
            )));
        }
    }
    let stripes = parse_stripes(stripe_sizes)?;
    let mut configs = Vec::new();
    for &w in widths {
        if w == 0 || w as usize > devices.len() {
            eprintln!("width {w} skipped: {} devices given", devices.len());
            continue;
        }
        for cache in &caches {
            for &s in &stripes {
                configs.push(Config {
                    devices: devices[..w as usize].to_vec(),
                    stripe: s,
                    width: w,
                    emulate: emulate.clone(),
                    cache: cache.clone(),
                    direct_device_io,
                });
            }
        }
    }
    if configs.is_empty() {
        return Err(Error::Usage("no configuration to measure".into()));
    }
    run_sweep(
        &plan,
        &devices[0],
        &configs,
        Path::new("stripefs-sweep.svg"),
    )
    .map(|_| ())
}

/// The seeds' RAM-disk RAID-0 experiment: tmpfs devices on emulated 175/146 MB/s SATA ports,
/// 4 and 8 of them, stripes 8K/64K/256K, test files of 100 MB and 1000 MB.
pub fn preset(opts: &BenchOpts, name: &str, dir: &Path) -> Result<()> {
    // Refused before a RAM disk is mounted or anything measured.
    if let Some(chart) = &opts.chart {
        bench::chart::format_of(chart).map_err(|e| Error::Usage(format!("--chart {e}")))?;
    }
    match name {
        "raidcard" => raidcard(opts, dir),
        "cas" => cas(opts, dir),
        _ => Err(Error::Usage(format!(
            "unknown preset \"{name}\": cas or raidcard"
        ))),
    }
}

/// The seeds' Intel CAS table: speedups of a SATA SSD and an NVMe cache (write-back) over a
/// 5400 rpm HDD, in CrystalDiskMark 6's tests (Seq, RND4K Q8T8, Q32T1, Q1T1; read, write).
const CAS_SEEDS: [(&str, &str, f64, f64); 8] = [
    ("SEQ128K Q32T1", "read", 7.0, 22.0),
    ("SEQ128K Q32T1", "write", 5.0, 11.0),
    ("RND4K Q8T8", "read", 268.0, 648.0),
    ("RND4K Q8T8", "write", 192.0, 729.0),
    ("RND4K Q32T1", "read", 189.0, 265.0),
    ("RND4K Q32T1", "write", 185.0, 236.0),
    ("RND4K Q1T1", "read", 51.0, 68.0),
    ("RND4K Q1T1", "write", 48.0, 90.0),
];

/// An emulated HDD core with no cache, then with a write-back cache on an emulated SATA SSD
/// and on an emulated NVMe; CDM6's tests; the speedups beside the seeds'.
fn cas(opts: &BenchOpts, dir: &Path) -> Result<()> {
    let mut opts = opts.clone();
    if opts.profile == "cdm8" {
        opts.profile = "cdm6".into();
    }
    opts.size.get_or_insert_with(|| "256M".into());
    let plan = plan(&opts)?;
    std::fs::create_dir_all(dir).map_err(|e| Error::Usage(format!("{}: {e}", dir.display())))?;
    let ram = RamDisk::mount(dir, "4G")?;
    let core = ram.dir.join("hdd");
    let ssd = ram.dir.join("ssd");
    for d in [&core, &ssd] {
        std::fs::create_dir_all(d).map_err(|e| Error::Usage(format!("{}: {e}", d.display())))?;
    }
    let configs: Vec<Config> = [None, Some("sata-ssd"), Some("nvme")]
        .iter()
        .map(|cache_device| Config {
            devices: vec![core.clone()],
            stripe: 65536,
            width: 1,
            emulate: Some("hdd-5400".into()),
            direct_device_io: false,
            cache: cache_device.map(|d| CacheSetup {
                mode: "wb".into(),
                dir: Some(ssd.clone()),
                size: None,
                emulate: Some(d.into()),
            }),
        })
        .collect();
    eprintln!(
        "cas preset: core {}; caches write-back on emulated sata-ssd and nvme ({} test file)",
        stripe::DeviceModel::profile("hdd-5400")
            .map(|m| m.describe())
            .unwrap_or_default(),
        bench::report::human(plan.spec.size)
    );
    let report = run_sweep(&plan, &core, &configs, Path::new("stripefs-cas.svg"))?;
    if plan.opts.json || report.targets.len() < 3 {
        return Ok(());
    }
    let value = |t: &Target, test: &str, dir: &str| {
        t.results
            .iter()
            .find(|r| r.test == test && r.direction == dir)
            .map(|r| r.median.mb_per_s)
    };
    let (none, sata, nvme) = (&report.targets[0], &report.targets[1], &report.targets[2]);
    println!("\nIntel CAS experiment, EMULATED devices: speedup of a write-back cache over the HDD alone");
    println!(
        "{:<15} {:<5} {:>10} {:>12} {:>8} {:>7} {:>12} {:>8} {:>7}",
        "test", "", "HDD MB/s", "SATA-SSD", "x", "seed", "NVMe", "x", "seed"
    );
    // The tests measured, in their order (a custom profile's too); the seed's speedup beside
    // those it has.
    for r in &none.results {
        let (test, dir) = (r.test.as_str(), r.direction.as_str());
        let base = r.median.mb_per_s;
        let seed = CAS_SEEDS
            .iter()
            .find(|(t, d, _, _)| *t == test && *d == dir);
        let cell = |t: &Target, seed: Option<f64>| match value(t, test, dir) {
            Some(v) if base > 0.0 => format!(
                "{v:>12.1} {:>7.0}x {:>7}",
                v / base,
                seed.map_or("-".to_string(), |s| format!("{s:.0}x"))
            ),
            _ => format!("{:>12} {:>8} {:>7}", "-", "-", "-"),
        };
        println!(
            "{test:<15} {dir:<5} {base:>10.1} {} {}",
            cell(sata, seed.map(|s| s.2)),
            cell(nvme, seed.map(|s| s.3))
        );
    }
    Ok(())
}

fn raidcard(opts: &BenchOpts, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::Usage(format!("{}: {e}", dir.display())))?;
    let ram = RamDisk::mount(dir, "6G")?;
    let devices: Vec<PathBuf> = (0..8).map(|i| ram.dir.join(format!("port{i}"))).collect();
    for d in &devices {
        std::fs::create_dir_all(d).map_err(|e| Error::Usage(format!("{}: {e}", d.display())))?;
    }
    eprintln!(
        "raidcard preset: RAM disks under {} on emulated SATA ports ({}); cache off, and on \
         (a RAM write-back cache)",
        ram.dir.display(),
        stripe::DeviceModel::profile("sata-port")
            .map(|m| m.describe())
            .unwrap_or_default()
    );
    let sizes: Vec<String> = match &opts.size {
        Some(s) => vec![s.clone()],
        None => vec!["100M".into(), "1000M".into()],
    };
    let mut log = None;
    for size in sizes {
        let mut sized = opts.clone();
        sized.size = Some(size.clone());
        // One CSV for both sizes: the size is part of each row's key.
        let plan = plan_with(&sized, log.take())?;
        log = plan.log.clone();
        let ram_wb = CacheSetup {
            mode: "wb".into(),
            dir: None,
            size: None,
            emulate: None,
        };
        let mut configs = Vec::new();
        for cache in [None, Some(ram_wb)] {
            for n in [4usize, 8] {
                for stripe in [8192u32, 65536, 262144] {
                    configs.push(Config {
                        devices: devices[..n].to_vec(),
                        stripe,
                        width: n as u32,
                        emulate: Some("sata-port".into()),
                        cache: cache.clone(),
                        direct_device_io: false,
                    });
                }
            }
        }
        println!("\n##### raidcard, test size {size}");
        run_sweep(
            &plan,
            &devices[0],
            &configs,
            Path::new(&format!("stripefs-raidcard-{size}.svg")),
        )?;
    }
    Ok(())
}

/// A tmpfs mounted for a preset; unmounted when dropped.
struct RamDisk {
    dir: PathBuf,
}

impl RamDisk {
    fn mount(dir: &Path, size: &str) -> Result<RamDisk> {
        let ok = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            return Err(Error::Usage(format!(
                "could not mount a tmpfs on {} (needs root)",
                dir.display()
            )));
        }
        Ok(RamDisk {
            dir: dir.to_path_buf(),
        })
    }
}

impl Drop for RamDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
    }
}
