//! The command line: one binary, subcommands.

use crate::caching::CacheReset;
use crate::control::PREFIX;
use crate::daemon::{self, Ready, DAEMON_ENV};
use crate::engine::namespace_path;
use crate::error::{Error, Result};
use crate::namespace::Namespace;
use crate::{fsck, xattr};
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "stripefs",
    version,
    about = "A FUSE filesystem that stripes files RAID-0 style across backing devices",
    after_help = "RAID-0 has no redundancy: losing one device loses the volume."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Format the devices a config lists into a new, empty volume
    Mkfs {
        config: PathBuf,
        /// Overwrite devices that already hold a stripefs volume (their data is lost)
        #[arg(long)]
        force: bool,
    },
    /// Mount a volume; returns once the mount is ready unless --foreground.
    /// `stripefs mount -o remount,ro MOUNTPOINT` changes a mounted volume
    Mount {
        config: PathBuf,
        mountpoint: Option<PathBuf>,
        /// Stay in the foreground; SIGTERM or Ctrl-C unmounts cleanly
        #[arg(short, long)]
        foreground: bool,
        /// Mount options over the config's [mount] section, e.g. allow_other,ro,threads=4
        #[arg(short = 'o', value_name = "OPTIONS")]
        options: Option<String>,
        /// Log file of a background daemon [default: on the first device]
        #[arg(long)]
        log: Option<PathBuf>,
        /// Replace a cache file that does not fit (another volume's, other settings, damaged);
        /// refused while it holds data not yet written to the devices
        #[arg(long)]
        cache_reset: bool,
        /// With --cache-reset: replace it even then, LOSING that unwritten data
        #[arg(long, requires = "cache_reset")]
        discard_dirty: bool,
        #[arg(long, hide = true)]
        ready_fd: Option<i32>,
    },
    /// Unmount, after the daemon has written everything back
    Umount {
        mountpoint: PathBuf,
        /// Detach now even if busy; the daemon finishes when the last user leaves
        #[arg(long)]
        lazy: bool,
    },
    /// Link /sbin/mount.fuse.stripefs and /sbin/umount.fuse.stripefs to this binary, for
    /// mount(8), umount(8) and /etc/fstab (idempotent; root)
    InstallHelper {
        /// Put the links in PREFIX/sbin
        #[arg(long, default_value = "/")]
        prefix: PathBuf,
        /// Remove the links instead
        #[arg(long)]
        uninstall: bool,
    },
    /// Volume status: uuid, devices, layout, files, options
    Status {
        mountpoint: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Show or set a file's or directory's layout
    Layout {
        #[command(subcommand)]
        action: LayoutAction,
    },
    /// Restripe an existing file to a new layout, content unchanged
    Migrate {
        file: PathBuf,
        #[arg(long, value_name = "SIZE")]
        stripe_size: Option<String>,
        #[arg(long)]
        width: Option<u32>,
    },
    /// Check a volume (not mounted) for namespace and object inconsistencies
    #[command(after_help = FSCK_EXIT_CODES)]
    Fsck {
        config: PathBuf,
        /// Mend what can be mended safely
        #[arg(long)]
        repair: bool,
        #[arg(long)]
        json: bool,
    },
    /// Cache targets: folders with their own cache mode
    Target {
        #[command(subcommand)]
        action: TargetAction,
    },
    /// Cache statistics, as casadm -P shows them
    Stats {
        mountpoint: PathBuf,
        #[arg(long)]
        json: bool,
        /// Print again every second until Ctrl-C
        #[arg(long)]
        watch: bool,
    },
    /// Write every dirty cache line back; returns when nothing is dirty
    Flush { mountpoint: PathBuf },
    /// Show or set the volume's default cache mode (wt, wb, wa, wi, wo, pt)
    Mode {
        mountpoint: PathBuf,
        mode: Option<String>,
    },
    /// Benchmark a directory (CrystalDiskMark profiles), sweep fresh volumes, or run a preset
    #[command(args_conflicts_with_subcommands = true)]
    Bench {
        #[command(subcommand)]
        action: Option<crate::bench_cmd::BenchAction>,
        /// Any directory: a stripefs mount, a backing directory, anything
        target: Option<PathBuf>,
        #[command(flatten)]
        opts: crate::bench_cmd::BenchOpts,
    },
    /// Zero-config first contact: a 4-device volume in a temporary directory, mounted until Ctrl-C
    Demo {
        /// Where the demo's devices and mountpoint live
        #[arg(long, default_value = "/tmp/stripefs-demo")]
        dir: PathBuf,
        #[arg(long, default_value_t = 4)]
        devices: usize,
    },
}

#[derive(Subcommand)]
enum TargetAction {
    /// Make DIR a cache target (or change it)
    Add {
        dir: PathBuf,
        #[arg(long)]
        mode: String,
        /// Eviction priority: 0 is kept longest (default for a new target: 0; root or the
        /// mounter only)
        #[arg(long)]
        priority: Option<u8>,
        /// Most of the cache this target may hold (0..1] (default for a new target: 1; root
        /// or the mounter only)
        #[arg(long)]
        allocation: Option<f64>,
        /// Never evict this target's lines (root or the mounter only)
        #[arg(long, conflicts_with = "unpin")]
        pin: bool,
        /// Evict this target's lines again
        #[arg(long)]
        unpin: bool,
    },
    /// Stop caching DIR by its own setting (its dirty lines are written back first)
    Rm { dir: PathBuf },
    /// List the targets of a mounted volume
    Ls {
        mountpoint: PathBuf,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum LayoutAction {
    /// Print the layout of PATH
    Get {
        path: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Set a directory's default layout for new files (or an empty file's own)
    Set {
        path: PathBuf,
        #[arg(long, value_name = "SIZE")]
        stripe_size: Option<String>,
        #[arg(long)]
        width: Option<u32>,
    },
    /// Make a directory inherit its layout again
    Clear { path: PathBuf },
}

/// Runs the CLI; returns the process exit code.
pub fn main(args: Vec<String>) -> i32 {
    init_logging();
    let cli = match Cli::try_parse_from(&args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return match (e.use_stderr(), args.get(1).map(String::as_str)) {
                (false, _) => 0,
                (true, Some("fsck")) => FSCK_USAGE,
                (true, _) => 2,
            };
        }
    };
    match run(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("stripefs: {e}");
            1
        }
    }
}

/// `mount.stripefs SOURCE DIR [-sfnv] [-o OPTIONS]`, as mount(8) calls helpers.
pub fn mount_helper_main(args: Vec<String>) -> i32 {
    if std::env::var_os(DAEMON_ENV).is_some() {
        // Re-executed as the daemon child: the arguments are already in CLI form.
        return main(args);
    }
    let mut positional = Vec::new();
    let mut options = Vec::new();
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "-o" => options.extend(it.next().cloned()),
            "-s" | "-f" | "-n" | "-v" => {}
            _ => positional.push(a.clone()),
        }
    }
    if positional.len() != 2 {
        eprintln!("usage: mount.stripefs CONFIG MOUNTPOINT [-o OPTIONS]");
        return 2;
    }
    let mut full = vec![
        "stripefs".into(),
        "mount".into(),
        positional[0].clone(),
        positional[1].clone(),
    ];
    if !options.is_empty() {
        full.push("-o".into());
        full.push(options.join(","));
    }
    main(full)
}

fn init_logging() {
    let _ = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_timestamp_millis()
        .try_init();
}

fn run(command: Command) -> Result<i32> {
    match command {
        Command::Mkfs { config, force } => mkfs(&config, force).map(|()| 0),
        Command::Mount {
            config,
            mountpoint,
            foreground,
            options,
            log,
            cache_reset,
            discard_dirty,
            ready_fd,
        } => {
            let remounting = options
                .as_deref()
                .is_some_and(|o| o.split(',').any(|x| x.trim() == "remount"));
            if remounting {
                // mount(8) passes the source too; `stripefs mount -o remount MNT` does not.
                let target = mountpoint.as_ref().unwrap_or(&config);
                daemon::remount(target, options.as_deref().unwrap_or_default())?;
                return Ok(0);
            }
            let Some(mountpoint) = mountpoint else {
                return Err(Error::Usage(
                    "stripefs mount CONFIG MOUNTPOINT: the mountpoint is missing".into(),
                ));
            };
            let reset = match (cache_reset, discard_dirty) {
                (_, true) => CacheReset::DiscardDirty,
                (true, false) => CacheReset::Reset,
                (false, false) => CacheReset::Keep,
            };
            let mut cfg = mountcfg::load(&config)?;
            if let Some(o) = &options {
                daemon::apply_mount_options(&mut cfg, o)?;
            }
            daemon::clear_mountpoint(&mountpoint)?;
            crate::mount::busy::wait_for_unmounting_daemon(&cfg, Duration::from_secs(10))?;
            if foreground {
                // SAFETY: the fd was handed to us by our parent for this purpose.
                let ready = match ready_fd {
                    Some(fd) => unsafe { Ready::from_fd(fd) },
                    None => Ready::none(),
                };
                daemon::run_foreground(cfg, &mountpoint, reset, ready)?;
            } else {
                let log = log.unwrap_or_else(|| daemon::default_log_path(&cfg));
                let mut args = vec![
                    "mount".to_string(),
                    absolute(&config).display().to_string(),
                    absolute(&mountpoint).display().to_string(),
                ];
                if let Some(o) = options {
                    args.push("-o".into());
                    args.push(o);
                }
                if cache_reset {
                    args.push("--cache-reset".into());
                }
                if discard_dirty {
                    args.push("--discard-dirty".into());
                }
                daemon::spawn_background(&args, &log)?;
            }
            Ok(0)
        }
        Command::Umount { mountpoint, lazy } => {
            daemon::umount(&mountpoint, lazy, Duration::from_secs(600))?;
            Ok(0)
        }
        Command::InstallHelper { prefix, uninstall } => {
            for line in crate::mount::helper::install_helper(&prefix, uninstall)? {
                println!("{line}");
            }
            Ok(0)
        }
        Command::Status { mountpoint, json } => {
            let status = xattr::volume_status(&mountpoint)?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&status).unwrap_or_default()
                );
            } else {
                print_status(&status);
            }
            Ok(0)
        }
        Command::Layout { action } => layout(action).map(|()| 0),
        Command::Migrate {
            file,
            stripe_size,
            width,
        } => {
            let spec = layout_spec(stripe_size, width)?;
            xattr::set(&file, &format!("{PREFIX}migrate"), spec.as_bytes())
                .map_err(|e| xattr::explain(&file, "migrate", e))?;
            let now = xattr::get(&file, &format!("{PREFIX}layout"))
                .map_err(|e| xattr::explain(&file, "layout", e))?;
            println!("{}: {}", file.display(), String::from_utf8_lossy(&now));
            Ok(0)
        }
        Command::Fsck {
            config,
            repair,
            json,
        } => {
            let report = match checked(&config, repair) {
                Ok(report) => report,
                Err(e) => {
                    if json {
                        let out = serde_json::json!({ "error": e.to_string(), "exit": FSCK_ERROR });
                        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
                    }
                    eprintln!(
                        "stripefs fsck: {}: the volume could not be checked: {e}",
                        config.display()
                    );
                    return Ok(FSCK_ERROR);
                }
            };
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).unwrap_or_default()
                );
            } else {
                for p in &report.problems {
                    let state = if p.repaired { "repaired" } else { "found" };
                    println!("{state:>8}  {:<18} {}", p.kind, p.detail);
                }
                println!(
                    "{}: {} inodes, {} entries, {} objects; {} problems, {} left",
                    config.display(),
                    report.inodes,
                    report.entries,
                    report.objects,
                    report.problems.len(),
                    report.unrepaired()
                );
            }
            // e2fsck's convention: 0 clean, 1 errors corrected, 4 errors left.
            Ok(if report.clean() {
                FSCK_CLEAN
            } else if report.unrepaired() == 0 {
                FSCK_REPAIRED
            } else {
                FSCK_LEFT
            })
        }
        Command::Demo { dir, devices } => demo(&dir, devices).map(|()| 0),
        Command::Target { action } => target(action).map(|()| 0),
        Command::Stats {
            mountpoint,
            json,
            watch,
        } => stats(&mountpoint, json, watch).map(|()| 0),
        Command::Flush { mountpoint } => flush(&mountpoint).map(|()| 0),
        Command::Mode { mountpoint, mode } => {
            has_cache(&mountpoint)?;
            let key = format!("{PREFIX}mode");
            if let Some(m) = mode {
                xattr::set(&mountpoint, &key, m.as_bytes()).map_err(|e| {
                    match e.raw_os_error() {
                        Some(libc::EINVAL) => {
                            Error::Usage(format!("mode {m}: must be wt, wb, wa, wi, wo or pt"))
                        }
                        _ => xattr::explain(&mountpoint, "mode", e),
                    }
                })?;
            }
            let now = xattr::get(&mountpoint, &key)
                .map_err(|e| xattr::explain(&mountpoint, "mode", e))?;
            println!(
                "{}: default cache mode {}",
                mountpoint.display(),
                String::from_utf8_lossy(&now)
            );
            Ok(0)
        }
        Command::Bench {
            action,
            target,
            opts,
        } => {
            use crate::bench_cmd::{self as b, BenchAction};
            match (action, target) {
                (Some(BenchAction::Sweep {
                    devices,
                    stripe_sizes,
                    widths,
                    cache,
                    emulate,
                    device_io,
                }), _) => b::sweep(&opts, &devices, &stripe_sizes, &widths, &cache, emulate, &device_io),
                (Some(BenchAction::Preset { name, dir }), _) => b::preset(&opts, &name, &dir),
                (Some(BenchAction::Compare { dirs, no_fio }), _) => b::compare(&dirs, no_fio, &opts),
                (None, Some(dir)) => b::bench_dir(&dir, &opts),
                (None, None) => Err(Error::Usage(
                    "give a directory to measure, or `sweep` or `preset` (see stripefs bench --help)"
                        .into(),
                )),
            }
            .map(|()| 0)
        }
    }
}

/// `stripefs fsck` exit codes, e2fsck's (fsck(8)): no problems.
pub const FSCK_CLEAN: i32 = 0;
/// Problems found, and all of them repaired.
pub const FSCK_REPAIRED: i32 = 1;
/// Problems left as they were (no --repair, or none that can be repaired safely).
pub const FSCK_LEFT: i32 = 4;
/// Operational error: the volume could not be checked.
pub const FSCK_ERROR: i32 = 8;
/// Usage error: bad arguments.
pub const FSCK_USAGE: i32 = 16;

const FSCK_EXIT_CODES: &str = "Exit codes, as e2fsck's:
   0  no problems found
   1  problems found, and all of them repaired (--repair)
   4  problems left unrepaired: without --repair, or beyond what can be mended safely
   8  operational error: the volume could not be checked (a device's superblock or the
      namespace store is missing, damaged or another volume's; the volume is mounted; a bad
      config); nothing was written
  16  usage error: bad arguments";

/// Loads the config and runs fsck; a panic anywhere in it is an error, not a crash.
fn checked(config: &Path, repair: bool) -> Result<fsck::Report> {
    let cfg = mountcfg::load(config)?;
    crate::panics::catch(|| fsck::check(&cfg, repair)).unwrap_or_else(|panic| {
        Err(Error::Usage(format!(
            "fsck stopped: internal error ({panic})"
        )))
    })
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

fn mkfs(config: &Path, force: bool) -> Result<()> {
    let cfg = mountcfg::load(config)?;
    crate::engine::check_meta_dir(&cfg)?;
    let ns_path = namespace_path(&cfg);
    if cfg.volume.meta.is_some() && ns_path.exists() && !force {
        return Err(Error::Usage(format!(
            "{} already holds a namespace; --force replaces it (every file of that volume is LOST)",
            ns_path.display()
        )));
    }
    let uuid = stripe::format(&stripe::FormatOptions {
        devices: &cfg.volume.devices,
        stripe_size: cfg.volume.stripe_size,
        width: cfg.width(),
        force,
    })?;
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    Namespace::format(&ns_path, uuid, uid, gid)?;
    println!(
        "stripefs volume {uuid}: {} devices, stripe_size={} width={}, namespace in {}",
        cfg.volume.devices.len(),
        mountcfg::format_size(cfg.volume.stripe_size as u64),
        cfg.width(),
        ns_path.display()
    );
    for (i, d) in cfg.volume.devices.iter().enumerate() {
        println!("  device {i}: {}", d.display());
    }
    Ok(())
}

fn layout_spec(stripe_size: Option<String>, width: Option<u32>) -> Result<String> {
    let mut parts = Vec::new();
    if let Some(s) = stripe_size {
        let bytes = mountcfg::parse_size(&s)
            .map_err(|e| Error::Usage(format!("--stripe-size {s}: {e}")))?;
        if !bytes.is_power_of_two()
            || !(mountcfg::MIN_STRIPE..=mountcfg::MAX_STRIPE).contains(&bytes)
        {
            return Err(Error::Usage(format!(
                "--stripe-size {s}: must be a power of two from 8K to 256K"
            )));
        }
        parts.push(format!("stripe_size={bytes}"));
    }
    if let Some(w) = width {
        parts.push(format!("width={w}"));
    }
    if parts.is_empty() {
        return Err(Error::Usage(
            "give --stripe-size and/or --width".to_string(),
        ));
    }
    Ok(parts.join(" "))
}

fn layout(action: LayoutAction) -> Result<()> {
    match action {
        LayoutAction::Get { path, json } => {
            let raw = xattr::get(&path, &format!("{PREFIX}layout.json"))
                .map_err(|e| xattr::explain(&path, "layout", e))?;
            let info: serde_json::Value = serde_json::from_slice(&raw)
                .map_err(|e| Error::Usage(format!("bad layout from the daemon: {e}")))?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&info).unwrap_or_default()
                );
                return Ok(());
            }
            println!(
                "{}: stripe_size={} width={} first_device={}{}",
                path.display(),
                mountcfg::format_size(info["stripe_size"].as_u64().unwrap_or(0)),
                info["width"],
                info["first_device"],
                if info["inherited"].as_bool() == Some(true) {
                    " (inherited)"
                } else {
                    ""
                }
            );
            if let Some(objects) = info["objects"].as_array() {
                for o in objects {
                    println!(
                        "  device {}: {} bytes  {}",
                        o["device"],
                        o["bytes"],
                        o["path"].as_str().unwrap_or("")
                    );
                }
            }
            Ok(())
        }
        LayoutAction::Set {
            path,
            stripe_size,
            width,
        } => {
            let spec = layout_spec(stripe_size, width)?;
            xattr::set(&path, &format!("{PREFIX}layout"), spec.as_bytes())
                .map_err(|e| xattr::explain(&path, "layout", e))?;
            let now = xattr::get(&path, &format!("{PREFIX}layout"))
                .map_err(|e| xattr::explain(&path, "layout", e))?;
            println!("{}: {}", path.display(), String::from_utf8_lossy(&now));
            Ok(())
        }
        LayoutAction::Clear { path } => xattr::remove(&path, &format!("{PREFIX}layout"))
            .map_err(|e| xattr::explain(&path, "layout", e)),
    }
}

/// Fails unless `mountpoint` is a stripefs mount with a cache.
fn has_cache(mountpoint: &Path) -> Result<serde_json::Value> {
    let status = xattr::volume_status(mountpoint)?;
    if status["cache"].is_null() {
        return Err(Error::Usage(format!(
            "{} has no cache (add a [cache] section to its config)",
            mountpoint.display()
        )));
    }
    Ok(status)
}

fn target(action: TargetAction) -> Result<()> {
    let key = format!("{PREFIX}cache");
    match action {
        TargetAction::Add {
            dir,
            mode,
            priority,
            allocation,
            pin,
            unpin,
        } => {
            if cache::Mode::parse(&mode).is_none() {
                return Err(Error::Usage(format!(
                    "--mode {mode}: must be wt, wb, wa, wi, wo or pt"
                )));
            }
            // Only what was asked: the rest keeps the target's current value.
            let mut value = format!("mode={mode}");
            if let Some(p) = priority {
                value += &format!(" priority={p}");
            }
            if let Some(a) = allocation {
                if !(a > 0.0 && a <= 1.0) {
                    return Err(Error::Usage(format!(
                        "--allocation {a}: must be above 0 and at most 1"
                    )));
                }
                value += &format!(" allocation={a}");
            }
            if pin || unpin {
                value += &format!(" pinned={}", u8::from(pin));
            }
            xattr::set(&dir, &key, value.as_bytes())
                .map_err(|e| xattr::explain(&dir, "cache", e))?;
            let now = xattr::get(&dir, &key).map_err(|e| xattr::explain(&dir, "cache", e))?;
            println!("{}: {}", dir.display(), String::from_utf8_lossy(&now));
            Ok(())
        }
        TargetAction::Rm { dir } => xattr::remove(&dir, &key).map_err(|e| match e.raw_os_error() {
            Some(libc::ENODATA) => Error::Usage(format!("{} is not a cache target", dir.display())),
            _ => xattr::explain(&dir, "cache", e),
        }),
        TargetAction::Ls { mountpoint, json } => {
            has_cache(&mountpoint)?;
            let raw = xattr::get(&mountpoint, &format!("{PREFIX}targets"))
                .map_err(|e| xattr::explain(&mountpoint, "targets", e))?;
            let list: serde_json::Value = serde_json::from_slice(&raw)
                .map_err(|e| Error::Usage(format!("bad target list from the daemon: {e}")))?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&list).unwrap_or_default()
                );
                return Ok(());
            }
            println!(
                "{:<32} {:<5} {:>8} {:>10} {:>6} {:>10} {:>10}  from",
                "folder", "mode", "priority", "allocation", "pinned", "lines", "dirty"
            );
            for t in list.as_array().into_iter().flatten() {
                println!(
                    "{:<32} {:<5} {:>8} {:>10} {:>6} {:>10} {:>10}  {}",
                    t["path"].as_str().unwrap_or("?"),
                    t["mode"].as_str().unwrap_or("?"),
                    t["priority"].to_string(),
                    t["allocation"].to_string(),
                    t["pinned"].to_string(),
                    t["occupancy_lines"].to_string(),
                    t["dirty_lines"].to_string(),
                    if t["from_config"].as_bool() == Some(true) {
                        "config"
                    } else {
                        "live"
                    }
                );
            }
            Ok(())
        }
    }
}

fn read_stats(mountpoint: &Path) -> Result<serde_json::Value> {
    let raw = xattr::get(mountpoint, &format!("{PREFIX}stats"))
        .map_err(|e| xattr::explain(mountpoint, "stats", e))?;
    serde_json::from_slice(&raw)
        .map_err(|e| Error::Usage(format!("bad statistics from the daemon: {e}")))
}

fn stats(mountpoint: &Path, json: bool, watch: bool) -> Result<()> {
    loop {
        let status = xattr::volume_status(mountpoint)?;
        let cache = if status["cache"].is_null() {
            serde_json::Value::Null
        } else {
            read_stats(mountpoint)?
        };
        if json {
            let both = serde_json::json!({ "devices": status["devices"], "cache": cache });
            println!(
                "{}",
                serde_json::to_string_pretty(&both).unwrap_or_default()
            );
        } else {
            if watch {
                print!("\x1b[2J\x1b[H");
            }
            print_device_health(&status);
            if cache.is_null() {
                println!("\n(no cache on this volume)");
            } else {
                print_stats(&cache);
            }
        }
        if !watch {
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn print_device_health(status: &serde_json::Value) {
    println!(
        "  #  {:<40} {:>7} {:>12} {:>12} {:>7}",
        "device", "state", "read errors", "write errors", "faults"
    );
    for d in status["devices"].as_array().into_iter().flatten() {
        println!(
            "  {:<2} {:<40} {:>7} {:>12} {:>12} {:>7}",
            d["index"],
            d["path"].as_str().unwrap_or("?"),
            d["state"].as_str().unwrap_or("?"),
            d["read_errors"].to_string(),
            d["write_errors"].to_string(),
            d["injected_faults"].to_string()
        );
    }
}

fn print_stats(s: &serde_json::Value) {
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    let lines = n(&s["lines"]).max(1);
    let pct = |x: u64| 100.0 * x as f64 / lines as f64;
    println!(
        "cache: {} store{}, {} in {} lines of {}, default mode {}",
        s["store"].as_str().unwrap_or("?"),
        s["path"]
            .as_str()
            .map(|p| format!(" at {p}"))
            .unwrap_or_default(),
        human_bytes(n(&s["size_bytes"])),
        n(&s["lines"]),
        human_bytes(n(&s["line_size"])),
        s["default_mode"].as_str().unwrap_or("?")
    );
    if s["failed"].as_bool() == Some(true) {
        println!(
            "CACHE DEVICE FAILED: running pass-through; dirty lines stay until it can be read"
        );
    }
    println!("\nUsage statistics         lines        %");
    for (label, key) in [
        ("occupancy", "occupancy_lines"),
        ("free", "free_lines"),
        ("clean", "clean_lines"),
        ("dirty", "dirty_lines"),
    ] {
        println!("  {label:<20} {:>9} {:>8.1}", n(&s[key]), pct(n(&s[key])));
    }
    let print_counters = |title: &str, c: &serde_json::Value| {
        let reads = n(&c["read_hits"])
            + n(&c["read_partial_misses"])
            + n(&c["read_full_misses"])
            + n(&c["pass_through_reads"]);
        let writes = n(&c["write_hits"])
            + n(&c["write_partial_misses"])
            + n(&c["write_full_misses"])
            + n(&c["pass_through_writes"]);
        let p = |x: u64, of: u64| {
            if of == 0 {
                0.0
            } else {
                100.0 * x as f64 / of as f64
            }
        };
        println!("\n{title}");
        println!("  {:<24} {:>12} {:>8}", "request", "count", "%");
        for (label, key, of) in [
            ("read hits", "read_hits", reads),
            ("read partial misses", "read_partial_misses", reads),
            ("read full misses", "read_full_misses", reads),
            ("read pass-through", "pass_through_reads", reads),
            ("write hits", "write_hits", writes),
            ("write partial misses", "write_partial_misses", writes),
            ("write full misses", "write_full_misses", writes),
            ("write pass-through", "pass_through_writes", writes),
        ] {
            println!(
                "  {label:<24} {:>12} {:>8.1}",
                n(&c[key]),
                p(n(&c[key]), of)
            );
        }
        println!("  {:<24} {:>12}", "block", "bytes");
        for (label, key) in [
            ("reads from core", "core_read_bytes"),
            ("writes to core", "core_write_bytes"),
            ("reads from cache", "cache_read_bytes"),
            ("writes to cache", "cache_write_bytes"),
            ("reads by callers", "caller_read_bytes"),
            ("writes by callers", "caller_write_bytes"),
        ] {
            println!("  {label:<24} {:>12}", human_bytes(n(&c[key])));
        }
        println!("  {:<24} {:>12}", "core errors", n(&c["core_errors"]));
        println!("  {:<24} {:>12}", "cache errors", n(&c["cache_errors"]));
    };
    print_counters("Volume", &s["counters"]);
    println!(
        "\ncleaner: {} passes, {} lines written back, {} errors",
        n(&s["cleaner_passes"]),
        n(&s["cleaned_lines"]),
        n(&s["cleaner_errors"])
    );
    for c in s["classes"].as_array().into_iter().flatten() {
        let title = format!(
            "Class {} ({}): mode {}, priority {}, allocation {}, {}{} lines, {} dirty",
            c["id"],
            c["name"].as_str().unwrap_or("?"),
            c["mode"].as_str().unwrap_or("?"),
            c["priority"],
            c["allocation"],
            if c["pinned"].as_bool() == Some(true) {
                "pinned, "
            } else {
                ""
            },
            n(&c["occupancy_lines"]),
            n(&c["dirty_lines"])
        );
        print_counters(&title, &c["counters"]);
    }
}

fn flush(mountpoint: &Path) -> Result<()> {
    has_cache(mountpoint)?;
    let dirty = |s: &serde_json::Value| s["dirty_lines"].as_u64().unwrap_or(0);
    let start = dirty(&read_stats(mountpoint)?);
    let bar = indicatif::ProgressBar::new(start.max(1));
    bar.set_style(
        indicatif::ProgressStyle::with_template("flushing [{bar:30}] {pos}/{len} lines {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let target = mountpoint.to_path_buf();
    let worker = std::thread::spawn(move || xattr::set(&target, &format!("{PREFIX}flush"), b"1"));
    while !worker.is_finished() {
        if let Ok(s) = read_stats(mountpoint) {
            bar.set_position(start.saturating_sub(dirty(&s)));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let r = worker
        .join()
        .map_err(|_| Error::Usage("flush thread panicked".into()))?;
    bar.finish_and_clear();
    r.map_err(|e| match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            Error::Usage("only root or the user who mounted may flush the volume".into())
        }
        _ => Error::Usage(format!("flush {}: {e}", mountpoint.display())),
    })?;
    let left = dirty(&read_stats(mountpoint)?);
    println!(
        "{}: flushed {start} dirty lines; {left} dirty now",
        mountpoint.display()
    );
    Ok(())
}

pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn print_status(s: &serde_json::Value) {
    let b = |k: &str| human_bytes(s[k].as_u64().unwrap_or(0));
    println!("volume      {}", s["uuid"].as_str().unwrap_or("?"));
    println!(
        "mounted on  {} (pid {})",
        s["mountpoint"].as_str().unwrap_or("?"),
        s["pid"]
    );
    println!("config      {}", s["config"].as_str().unwrap_or("?"));
    println!("namespace   {}", s["namespace"].as_str().unwrap_or("?"));
    println!("layout      {}", s["layout"].as_str().unwrap_or("?"));
    println!(
        "contents    {} files, {} directories, {}",
        s["files"],
        s["directories"],
        b("bytes")
    );
    println!(
        "capacity    {} ({} available)",
        b("capacity_bytes"),
        b("available_bytes")
    );
    println!(
        "\n  #  {:<40} {:>12} {:>12} {:>12}",
        "device", "size", "used", "free"
    );
    for d in s["devices"].as_array().into_iter().flatten() {
        let h = |k: &str| human_bytes(d[k].as_u64().unwrap_or(0));
        let state = match d["state"].as_str() {
            Some("ok") | None => String::new(),
            Some(s) => format!("{} ", s.to_uppercase()),
        };
        println!(
            "  {:<2} {:<40} {:>12} {:>12} {:>12}  {state}{}",
            d["index"],
            d["path"].as_str().unwrap_or("?"),
            h("total_bytes"),
            h("used_bytes"),
            h("free_bytes"),
            d["emulated"].as_str().unwrap_or("")
        );
    }
    if let Some(c) = s["cache"].as_object() {
        println!(
            "\ncache       {} {}{}, lines of {}, default mode {}: {} lines used, {} dirty, {} targets",
            human_bytes(c["size_bytes"].as_u64().unwrap_or(0)),
            c["store"].as_str().unwrap_or("?"),
            c["path"].as_str().map(|p| format!(" at {p}")).unwrap_or_default(),
            human_bytes(c["line_size"].as_u64().unwrap_or(0)),
            c["default_mode"].as_str().unwrap_or("?"),
            c["occupancy_lines"],
            c["dirty_lines"],
            c["targets"]
        );
    }
    let o = &s["options"];
    println!(
        "\nio engine   {} (max_background={}, io_threads={} per device for the threads engine)",
        o["io_engine"].as_str().unwrap_or("?"),
        o["max_background"],
        o["io_threads"]
    );
    println!(
        "options     threads={} direct_io={} writeback_cache={} allow_other={} \
         default_permissions={} ro={} attr_timeout={}ms commit_interval={}ms",
        o["threads"],
        o["direct_io"].as_str().unwrap_or("?"),
        o["writeback_cache"],
        o["allow_other"],
        o["default_permissions"],
        o["read_only"],
        o["attr_timeout_ms"],
        o["commit_interval_ms"]
    );
}

fn demo(dir: &Path, devices: usize) -> Result<()> {
    if devices == 0 {
        return Err(Error::Usage("--devices must be at least 1".into()));
    }
    let io = |p: &Path, e: std::io::Error| Error::Usage(format!("{}: {e}", p.display()));
    let paths: Vec<PathBuf> = (0..devices).map(|i| dir.join(format!("dev{i}"))).collect();
    let mnt = dir.join("mnt");
    for p in paths.iter().chain([&mnt]) {
        std::fs::create_dir_all(p).map_err(|e| io(p, e))?;
    }
    let config_path = dir.join("demo.toml");
    let list: Vec<String> = paths
        .iter()
        .map(|p| format!("\"{}\"", p.display()))
        .collect();
    let text = format!(
        "# The stripefs demo volume: {devices} directories standing in for disks.\n\
         [volume]\ndevices = [{}]\nstripe_size = \"64K\"\n",
        list.join(", ")
    );
    std::fs::write(&config_path, text).map_err(|e| io(&config_path, e))?;
    let cfg = mountcfg::load(&config_path)?;
    let formatted = paths[0].join(".stripefs").join("superblock").exists();
    if !formatted {
        mkfs(&config_path, true)?;
    }
    println!(
        "\nstripefs demo: {devices} devices under {}, mounted on {}\n\
         Try, in another terminal:\n  \
         dd if=/dev/urandom of={m}/file bs=1M count=8\n  \
         stripefs layout get {m}/file\n  \
         stripefs status {m}\n  \
         ls -l {d}/dev*/.stripefs/objects/*/\n\
         Ctrl-C unmounts; the data stays for the next `stripefs demo`.\n",
        dir.display(),
        mnt.display(),
        m = mnt.display(),
        d = dir.display()
    );
    daemon::run_foreground(cfg, &mnt, CacheReset::Keep, Ready::none())
}
