//! The command line: one binary, subcommands.

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
    /// Mount a volume; returns once the mount is ready unless --foreground
    Mount {
        config: PathBuf,
        mountpoint: PathBuf,
        /// Stay in the foreground; SIGTERM or Ctrl-C unmounts cleanly
        #[arg(short, long)]
        foreground: bool,
        /// Mount options over the config's [mount] section, e.g. allow_other,ro,threads=4
        #[arg(short = 'o', value_name = "OPTIONS")]
        options: Option<String>,
        /// Log file of a background daemon [default: on the first device]
        #[arg(long)]
        log: Option<PathBuf>,
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
    Fsck {
        config: PathBuf,
        /// Mend what can be mended safely
        #[arg(long)]
        repair: bool,
        #[arg(long)]
        json: bool,
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
            return if e.use_stderr() { 2 } else { 0 };
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
            ready_fd,
        } => {
            let mut cfg = mountcfg::load(&config)?;
            if let Some(o) = &options {
                daemon::apply_mount_options(&mut cfg, o)?;
            }
            if foreground {
                // SAFETY: the fd was handed to us by our parent for this purpose.
                let ready = match ready_fd {
                    Some(fd) => unsafe { Ready::from_fd(fd) },
                    None => Ready::none(),
                };
                daemon::run_foreground(cfg, &mountpoint, ready)?;
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
                daemon::spawn_background(&args, &log)?;
            }
            Ok(0)
        }
        Command::Umount { mountpoint, lazy } => {
            daemon::umount(&mountpoint, lazy, Duration::from_secs(600))?;
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
            let cfg = mountcfg::load(&config)?;
            let report = fsck::check(&cfg, repair)?;
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
                0
            } else if report.unrepaired() == 0 {
                1
            } else {
                4
            })
        }
        Command::Demo { dir, devices } => demo(&dir, devices).map(|()| 0),
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
                }), _) => b::sweep(&opts, &devices, &stripe_sizes, &widths, &cache, emulate),
                (Some(BenchAction::Preset { name, dir }), _) => b::preset(&opts, &name, &dir),
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

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

fn mkfs(config: &Path, force: bool) -> Result<()> {
    let cfg = mountcfg::load(config)?;
    let uuid = stripe::format(&stripe::FormatOptions {
        devices: &cfg.volume.devices,
        stripe_size: cfg.volume.stripe_size,
        width: cfg.width(),
        force,
    })?;
    let ns_path = namespace_path(&cfg);
    if cfg.volume.meta.is_some() && ns_path.exists() && !force {
        return Err(Error::Usage(format!(
            "{} already holds a namespace; use --force to replace it",
            ns_path.display()
        )));
    }
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
        println!(
            "  {:<2} {:<40} {:>12} {:>12} {:>12}  {}",
            d["index"],
            d["path"].as_str().unwrap_or("?"),
            h("total_bytes"),
            h("used_bytes"),
            h("free_bytes"),
            d["emulated"].as_str().unwrap_or("")
        );
    }
    let o = &s["options"];
    println!(
        "\noptions     threads={} direct_io={} writeback_cache={} allow_other={} \
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
    daemon::run_foreground(cfg, &mnt, Ready::none())
}
