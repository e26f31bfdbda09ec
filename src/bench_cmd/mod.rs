//! `stripefs bench`: measure a directory, sweep fresh volumes over stripe sizes, widths and
//! device models, and the presets that reproduce the seeds' experiments. The measuring,
//! reporting and charting is the `bench` crate's; here volumes are built and mounted.

mod compare;
mod presets;
mod progress;
mod raidcard;
mod sweep;
mod volume;

pub use compare::compare;
pub use presets::preset;
pub use sweep::{sweep, SweepArgs};

use crate::error::{Error, Result};
use bench::log::ResultLog;
use bench::report::Driver;
use bench::{profile, CpuList, Report, RunSpec, Target};
use progress::Ctx;
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

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
    /// Run fio on the same file after each run of a test, as a cross-check (median to median)
    #[arg(long, global = true)]
    pub fio: bool,
    /// Keep the load (the engine's threads, or fio's, as its cpus_allowed) on these CPUs:
    /// 0, 0-3, 0,2-3. On one CPU, FUSE over io_uring serves every request on that CPU's
    /// queue; left to the scheduler, requests and replies may cross CPUs
    #[arg(long, global = true, value_name = "LIST")]
    pub cpus: Option<String>,
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
        /// Put every device behind an emulated RAID card: none, lsi-9260-8i (its cache on)
        /// or lsi-9260-8i:nocache; a list sweeps over them
        #[arg(long, value_delimiter = ',', default_value = "none")]
        controller: Vec<String>,
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
    /// cache) or raidcard (RAM disks on emulated SATA ports behind an emulated LSI 9260-8i)
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

/// What is refused before anything is mounted or measured: the chart's format, the CPUs.
pub(super) fn check_early(opts: &BenchOpts) -> Result<()> {
    if let Some(chart) = &opts.chart {
        bench::chart::format_of(chart).map_err(|e| Error::Usage(format!("--chart {e}")))?;
    }
    cpus_of(opts).map(drop)
}

fn cpus_of(opts: &BenchOpts) -> Result<Option<CpuList>> {
    let Some(list) = opts.cpus.as_deref() else {
        return Ok(None);
    };
    CpuList::parse(list)
        .map(Some)
        .map_err(|e| Error::Usage(format!("--cpus {e}")))
}

/// A plan that appends to `log` when given, else opens the files --csv or --resume name.
fn plan_with(opts: &BenchOpts, log: Option<Rc<RefCell<ResultLog>>>) -> Result<Plan> {
    check_early(opts)?;
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
            cpus: cpus_of(opts)?,
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
            cpus: self.spec.cpus.clone(),
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
        log.done(target, baseline, test, direction, &self.spec)
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
            Some(log) => log.borrow_mut().append(&fixed, baseline, r, &self.spec),
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
            if default_chart.is_some() && bench::heatmap::fits(report) {
                let map = bench::heatmap::path_beside(chart);
                bench::heatmap::write(report, &map)
                    .map_err(|e| Error::Usage(format!("heat map {}: {e}", map.display())))?;
                eprintln!(
                    "heat map (stripe size x devices) written to {}",
                    map.display()
                );
            }
        }
        Ok(())
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
        if let Some(c) = status["controller"].as_str() {
            target.emulated.push(format!("controller: {c}"));
            target.controller_cache =
                Some(if c.contains("cache off") { "off" } else { "on" }.into());
        }
        target.label = format!(
            "{} (stripefs, {}, {}, FUSE over {}{}, io engine {})",
            dir.display(),
            bench::report::devices(target.devices.unwrap_or(0)),
            status["layout"].as_str().unwrap_or(""),
            status["options"]["transport"].as_str().unwrap_or("?"),
            match (
                status["options"]["dev_ring_workers"].as_u64(),
                status["options"]["ring_threads"].as_u64(),
            ) {
                (Some(0), _) => " (workers in read)".to_string(),
                (Some(_), _) => " (workers on rings)".to_string(),
                (None, Some(n)) => format!(" ({n} ring threads)"),
                (None, None) => String::new(),
            },
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
