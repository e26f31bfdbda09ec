//! `stripefs bench`: measure a directory, sweep fresh volumes over stripe sizes, widths and
//! device models, and the presets that reproduce the seeds' experiments. The measuring,
//! reporting and charting is the `bench` crate's; here volumes are built and mounted.

use crate::error::{Error, Result};
use bench::{profile, Report, RunSpec, Target};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Options every bench command shares.
#[derive(clap::Args, Clone, Debug)]
pub struct BenchOpts {
    /// cdm8 (CrystalDiskMark 8's set), cdm6, or custom:rw=randread,bs=16K,qd=4,threads=2
    #[arg(long, global = true, default_value = "cdm8")]
    pub profile: String,
    /// Test file size
    #[arg(long, global = true, default_value = "1G")]
    pub size: String,
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
    /// Also write the results as CSV to FILE
    #[arg(long, global = true, value_name = "FILE")]
    pub csv: Option<PathBuf>,
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
        /// Cache setups; only "none" until the cache engine lands
        #[arg(long, value_delimiter = ',', default_value = "none")]
        cache: Vec<String>,
        /// Make every device behave like hdd-5400, sata-ssd, nvme or sata-port
        #[arg(long)]
        emulate: Option<String>,
    },
    /// Reproduce a seed experiment: raidcard (RAM disks on emulated SATA ports)
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
}

fn plan(opts: &BenchOpts) -> Result<Plan> {
    let jobs = profile::parse(&opts.profile).map_err(Error::Usage)?;
    let size = mountcfg::parse_size(&opts.size)
        .map_err(|e| Error::Usage(format!("--size {}: {e}", opts.size)))?;
    if size < 1 << 20 {
        return Err(Error::Usage("--size must be at least 1M".into()));
    }
    let duration = mountcfg::parse_duration(&opts.duration)
        .map_err(|e| Error::Usage(format!("--duration {}: {e}", opts.duration)))?;
    if opts.runs == 0 {
        return Err(Error::Usage("--runs must be at least 1".into()));
    }
    Ok(Plan {
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
            profile: self.opts.profile.clone(),
            size: self.spec.size,
            duration_secs: self.spec.duration.as_secs_f64(),
            runs: self.opts.runs,
            direct: self.spec.direct,
            baseline,
            targets,
        }
    }

    fn measure(&self, dir: &Path, target: &mut Target, ctx: &Ctx) -> Result<()> {
        let label = target.label.clone();
        let mut on_test = |t: &str| {
            ctx.bar.set_message(format!("{label}: {t}"));
            if !t.ends_with("(fio)") {
                ctx.bar.inc(1);
            }
        };
        target.results = bench::report::measure(
            dir,
            &self.jobs,
            &self.spec,
            self.opts.runs,
            self.opts.fio,
            &ctx.stop,
            &mut on_test,
        )
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::Interrupted {
                Error::Usage("stopped by a signal".into())
            } else {
                Error::Usage(format!("measuring {}: {e}", dir.display()))
            }
        })?;
        Ok(())
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
        if let Some(csv) = &self.opts.csv {
            std::fs::write(csv, report.csv())
                .map_err(|e| Error::Usage(format!("{}: {e}", csv.display())))?;
            eprintln!("CSV written to {}", csv.display());
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
    bar: ProgressBar,
    stop: Arc<AtomicBool>,
}

impl Ctx {
    fn new(total: u64) -> Result<Ctx> {
        let stop = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register(sig, stop.clone())
                .map_err(|e| Error::Usage(format!("cannot watch signals: {e}")))?;
        }
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} tests  {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        Ok(Ctx { bar, stop })
    }
}

/// `stripefs bench DIR`: one target, any directory.
pub fn bench_dir(dir: &Path, opts: &BenchOpts) -> Result<()> {
    let plan = plan(opts)?;
    let ctx = Ctx::new(plan.tests())?;
    let mut target = Target {
        label: dir.display().to_string(),
        path: dir.to_path_buf(),
        ..Target::default()
    };
    // A stripefs mount says what it is.
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
            "{} (stripefs, {} devices, {})",
            dir.display(),
            target.devices.unwrap_or(0),
            status["layout"].as_str().unwrap_or("")
        );
    }
    let r = plan.measure(dir, &mut target, &ctx);
    ctx.bar.finish_and_clear();
    r?;
    plan.output(&plan.report(None, vec![target]), None)
}

/// A volume built for one sweep configuration; unmounted and removed when dropped.
struct SweepVolume {
    dirs: Vec<PathBuf>,
    mnt: PathBuf,
    mounted: bool,
}

impl SweepVolume {
    fn build(
        devices: &[PathBuf],
        tag: &str,
        stripe: u32,
        width: u32,
        emulate: Option<&str>,
    ) -> Result<SweepVolume> {
        let io = |p: &Path, e: std::io::Error| Error::Usage(format!("{}: {e}", p.display()));
        let dirs: Vec<PathBuf> = devices
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
            "[volume]\ndevices = [{}]\nstripe_size = {stripe}\nwidth = {width}\n",
            list.join(", ")
        );
        if let Some(profile) = emulate {
            text.push_str(&format!(
                "[[volume.emulate]]\ndevice = \"all\"\nprofile = \"{profile}\"\n"
            ));
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

impl Drop for SweepVolume {
    fn drop(&mut self) {
        if self.mounted {
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

/// Measures the baseline (one backing directory, no FUSE) and then every configuration.
fn run_sweep(plan: &Plan, base_dir: &Path, configs: &[Config], chart: &Path) -> Result<()> {
    let ctx = Ctx::new(plan.tests() * (configs.len() as u64 + 1))?;
    let result = (|| -> Result<Report> {
        let dir = base_dir.join(format!("stripefs-baseline-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::Usage(format!("{}: {e}", dir.display())))?;
        let mut baseline = Target {
            label: format!("{} (backing directory)", base_dir.display()),
            path: base_dir.to_path_buf(),
            devices: Some(1),
            ..Target::default()
        };
        let measured = plan.measure(&dir, &mut baseline, &ctx);
        let _ = std::fs::remove_dir_all(&dir);
        measured?;
        let mut targets = Vec::new();
        for (k, c) in configs.iter().enumerate() {
            let tag = format!("{}-{k}", std::process::id());
            let volume =
                SweepVolume::build(&c.devices, &tag, c.stripe, c.width, c.emulate.as_deref())?;
            let mut t = Target {
                label: format!(
                    "{} devices, stripe {}, width {}, cache none{}",
                    c.devices.len(),
                    mountcfg::format_size(c.stripe as u64),
                    c.width,
                    c.emulate
                        .as_ref()
                        .map(|e| format!(", emulated {e}"))
                        .unwrap_or_default()
                ),
                path: volume.mnt.clone(),
                devices: Some(c.devices.len()),
                stripe_size: Some(c.stripe),
                width: Some(c.width),
                cache: Some("none".into()),
                emulated: c
                    .emulate
                    .as_deref()
                    .and_then(stripe::DeviceModel::profile)
                    .map(|m| vec![format!("all devices: {}", m.describe())])
                    .unwrap_or_default(),
                results: Vec::new(),
            };
            plan.measure(&volume.mnt, &mut t, &ctx)?;
            targets.push(t);
            if ctx.stop.load(Ordering::Relaxed) {
                break;
            }
        }
        Ok(plan.report(Some(baseline), targets))
    })();
    ctx.bar.finish_and_clear();
    plan.output(&result?, Some(chart))
}

pub fn sweep(
    opts: &BenchOpts,
    devices: &[PathBuf],
    stripe_sizes: &[String],
    widths: &[u32],
    cache: &[String],
    emulate: Option<String>,
) -> Result<()> {
    let plan = plan(opts)?;
    if let Some(c) = cache.iter().find(|c| c.as_str() != "none") {
        return Err(Error::Usage(format!(
            "--cache {c}: cached configurations need the cache engine, which is not built yet; \
             use --cache none"
        )));
    }
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
        for &s in &stripes {
            configs.push(Config {
                devices: devices[..w as usize].to_vec(),
                stripe: s,
                width: w,
                emulate: emulate.clone(),
            });
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
}

/// The seeds' RAM-disk RAID-0 experiment: tmpfs devices on emulated 175/146 MB/s SATA ports,
/// 4 and 8 of them, stripes 8K/64K/256K, test files of 100 MB and 1000 MB.
pub fn preset(opts: &BenchOpts, name: &str, dir: &Path) -> Result<()> {
    if name != "raidcard" {
        return Err(Error::Usage(format!(
            "unknown preset \"{name}\": raidcard (the Intel CAS preset needs the cache engine, \
             not built yet)"
        )));
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::Usage(format!("{}: {e}", dir.display())))?;
    let ram = RamDisk::mount(dir, "6G")?;
    let devices: Vec<PathBuf> = (0..8).map(|i| ram.dir.join(format!("port{i}"))).collect();
    for d in &devices {
        std::fs::create_dir_all(d).map_err(|e| Error::Usage(format!("{}: {e}", d.display())))?;
    }
    eprintln!(
        "raidcard preset: RAM disks under {} on emulated SATA ports ({}); cache-on columns \
         need the cache engine (not built yet)",
        ram.dir.display(),
        stripe::DeviceModel::profile("sata-port")
            .map(|m| m.describe())
            .unwrap_or_default()
    );
    for size in ["100M", "1000M"] {
        let mut sized = opts.clone();
        sized.size = size.into();
        let plan = plan(&sized)?;
        let configs: Vec<Config> = [4usize, 8]
            .iter()
            .flat_map(|&n| {
                let devices = devices[..n].to_vec();
                [8192u32, 65536, 262144].map(move |s| Config {
                    devices: devices.clone(),
                    stripe: s,
                    width: n as u32,
                    emulate: Some("sata-port".into()),
                })
            })
            .collect();
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
