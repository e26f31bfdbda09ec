//! Volume commands: mkfs, mount, umount, status, fsck, demo.

use super::resolve::{find, resolve, Found};
use super::{human_bytes, FSCK_CLEAN, FSCK_ERROR, FSCK_LEFT, FSCK_REPAIRED};
use crate::caching::CacheReset;
use crate::daemon::{self, Ready};
use crate::engine::namespace_path;
use crate::error::{Error, Result};
use crate::namespace::Namespace;
use crate::{fsck, usage, xattr};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The arguments of `stripefs mount`.
#[derive(clap::Args)]
pub struct MountArgs {
    pub config: PathBuf,
    pub mountpoint: Option<PathBuf>,
    /// Stay in the foreground; SIGTERM or Ctrl-C unmounts cleanly
    #[arg(short, long)]
    pub foreground: bool,
    /// Mount options over the config's [mount] section, e.g. allow_other,ro,threads=4
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Option<String>,
    /// Log file of a background daemon [default: on the first device]
    #[arg(long)]
    pub log: Option<PathBuf>,
    /// Replace a cache file that does not fit (another volume's, other settings, damaged);
    /// refused while it holds data not yet written to the devices
    #[arg(long)]
    pub cache_reset: bool,
    /// With --cache-reset: replace it even then, LOSING that unwritten data
    #[arg(long, requires = "cache_reset")]
    pub discard_dirty: bool,
    /// Mount with a lost device, read-only (-o degraded): files without data on it read as
    /// ever, the others give EIO where their data was on it
    #[arg(long)]
    pub degraded: bool,
    #[arg(long, hide = true)]
    pub ready_fd: Option<i32>,
}

pub fn mount(args: MountArgs) -> Result<i32> {
    let MountArgs {
        config,
        mountpoint,
        foreground,
        options,
        log,
        cache_reset,
        discard_dirty,
        degraded,
        ready_fd,
    } = args;
    let options = match (degraded, options) {
        (true, Some(o)) => Some(format!("{o},degraded")),
        (true, None) => Some("degraded".to_string()),
        (false, o) => o,
    };
    let remounting = options
        .as_deref()
        .is_some_and(|o| o.split(',').any(|x| x.trim() == "remount"));
    if remounting {
        // mount(8) passes the source too; `stripefs mount -o remount MNT` does not.
        let target = mountpoint.as_ref().unwrap_or(&config);
        crate::mount::options::remount(target, options.as_deref().unwrap_or_default())?;
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
    // The background daemon is this command again (with --ready-fd): warn once, here.
    let degraded = options
        .as_deref()
        .is_some_and(|o| o.split(',').any(|x| x.trim() == "degraded"));
    let mut cfg = load_config_as(
        "mount",
        &config,
        Some(&mountpoint),
        ready_fd.is_none(),
        degraded,
    )?;
    if mountpoint.is_file() {
        return Err(Error::Usage(format!(
            "the mountpoint {} is a file: it must be the directory the volume appears on \
             (stripefs mount CONFIG MOUNTPOINT)",
            mountpoint.display()
        )));
    }
    if ready_fd.is_none() {
        warn_shared_filesystems(&cfg.volume.devices);
        warn_namespace_reserve(&namespace_path(&cfg));
    }
    if let Some(o) = &options {
        crate::mount::options::apply_mount_options(&mut cfg, o)?;
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

pub fn umount(mountpoint: &Path, lazy: bool) -> Result<i32> {
    // A dead mount cannot answer the handshake: the daemon module detaches it.
    if let Found::Stripefs(m) = find(mountpoint)? {
        let given = std::fs::canonicalize(mountpoint).unwrap_or_else(|_| mountpoint.into());
        if given != m.root {
            return Err(Error::Usage(format!(
                "{} is inside the stripefs mount at {r}, not its mountpoint: `stripefs umount {r}` \
                 unmounts the volume",
                mountpoint.display(),
                r = m.root.display()
            )));
        }
    }
    daemon::umount(mountpoint, lazy, Duration::from_secs(600))?;
    Ok(0)
}

pub fn status(path: &Path, json: bool) -> Result<i32> {
    let root = resolve(path)?.root;
    let mut status = xattr::volume_status(&root)?;
    let raw =
        xattr::control_get(&root, "usage").map_err(super::refusal("status", &root, "usage"))?;
    let usage: serde_json::Value = serde_json::from_slice(&raw)
        .map_err(|e| Error::Usage(format!("bad usage from the daemon: {e}")))?;
    status["usage"] = usage;
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

pub fn fsck(config: &Path, repair: bool, json: bool) -> Result<i32> {
    let bar = super::spinner(format!(
        "{} {}",
        if repair {
            "checking and repairing"
        } else {
            "checking"
        },
        config.display()
    ));
    let checked = checked(config, repair);
    bar.finish_and_clear();
    let report = match checked {
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

/// Loads the config and runs fsck; a panic anywhere in it is an error, not a crash.
fn checked(config: &Path, repair: bool) -> Result<fsck::Report> {
    let cfg = load_config("fsck", config, None, true)?;
    crate::panics::catch(|| fsck::check(&cfg, repair)).unwrap_or_else(|panic| {
        Err(Error::Usage(format!(
            "fsck stopped: internal error ({panic})"
        )))
    })
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Loads the config argument of `command`. A directory there is the usual slip (the arguments
/// swapped, or a device given): say which argument is which. The config's warnings are
/// printed when `warn`.
fn load_config(
    command: &str,
    config: &Path,
    other: Option<&Path>,
    warn: bool,
) -> Result<mountcfg::Config> {
    load_config_as(command, config, other, warn, false)
}

/// As `load_config`; `degraded`: listed devices that do not exist are allowed (a degraded
/// mount takes them as lost).
fn load_config_as(
    command: &str,
    config: &Path,
    other: Option<&Path>,
    warn: bool,
    degraded: bool,
) -> Result<mountcfg::Config> {
    if config.is_dir() {
        let c = config.display();
        let swapped = other.filter(|o| {
            o.is_file()
                || o.extension()
                    .is_some_and(|e| e.eq_ignore_ascii_case("toml"))
        });
        return Err(Error::Usage(match swapped {
            Some(o) => format!(
                "{c} is a directory and {o} looks like a config file: the arguments are \
                 swapped; the config file comes first: stripefs {command} {o} {c}",
                o = o.display()
            ),
            None => format!(
                "{c} is a directory, not a config file: stripefs {command} takes the volume's \
                 config file (e.g. vol.toml, which lists the devices) as its first argument"
            ),
        }));
    }
    let cfg = if degraded {
        mountcfg::load_degraded(config)?
    } else {
        mountcfg::load(config)?
    };
    if warn {
        for w in &cfg.warnings {
            eprintln!("stripefs: warning: {w}");
        }
    }
    Ok(cfg)
}

/// Warns about devices that sit on one filesystem.
fn warn_shared_filesystems(devices: &[PathBuf]) {
    for w in shared_filesystem_warnings(devices) {
        eprintln!("stripefs: warning: {w}");
    }
}

fn shared_filesystem_warnings(devices: &[PathBuf]) -> Vec<String> {
    let paths: Vec<&Path> = devices.iter().map(PathBuf::as_path).collect();
    usage::shared_filesystems(&paths)
        .into_iter()
        .map(|group| {
            let names: Vec<String> = group
                .iter()
                .map(|&i| format!("{i} ({})", devices[i].display()))
                .collect();
            format!(
                "devices {} are on one filesystem: striping over them is no faster than one \
                 disk, and they share its space (counted once in df and status)",
                names.join(", ")
            )
        })
        .collect()
}

pub fn mkfs(config: &Path, force: bool) -> Result<()> {
    mkfs_with(config, force, true)
}

fn mkfs_with(config: &Path, force: bool, warn: bool) -> Result<()> {
    let cfg = load_config("mkfs", config, None, warn)?;
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
        "stripefs volume {uuid}: {} device{}, stripe_size={} width={}, namespace in {}",
        cfg.volume.devices.len(),
        if cfg.volume.devices.len() == 1 {
            ""
        } else {
            "s"
        },
        mountcfg::format_size(cfg.volume.stripe_size as u64),
        cfg.width(),
        ns_path.display()
    );
    for (i, d) in cfg.volume.devices.iter().enumerate() {
        println!("  device {i}: {}", d.display());
    }
    if warn {
        warn_shared_filesystems(&cfg.volume.devices);
        warn_namespace_reserve(&ns_path);
    }
    Ok(())
}

/// Warns when the namespace's filesystem is too small for its reserve.
fn warn_namespace_reserve(ns_path: &Path) {
    if let Some(w) = Namespace::reserve_shortfall(ns_path) {
        eprintln!("stripefs: warning: {w}");
    }
}

/// The devices as `lfs df` shows its targets: what stripefs keeps on each (objects, bytes,
/// share of the volume's), beside the backing filesystem's size and free space; then why a
/// device failed and what to do, and devices that share a filesystem.
fn print_devices(s: &serde_json::Value) {
    let usage = s["usage"].as_array().cloned().unwrap_or_default();
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    let ours: u64 = usage.iter().map(|u| n(&u["bytes"])).sum();
    let width = usage
        .iter()
        .map(|u| u["path"].as_str().map_or(1, str::len))
        .max()
        .unwrap_or(6)
        .max(6);
    println!(
        "\n  #  {:<width$}  {:<6} {:>9} {:>11} {:>6} {:>11} {:>11}",
        "device", "state", "objects", "stripefs", "share", "fs size", "fs free"
    );
    for (i, d) in s["devices"].as_array().into_iter().flatten().enumerate() {
        let u = usage.get(i).cloned().unwrap_or_default();
        let share = if ours == 0 {
            0.0
        } else {
            100.0 * n(&u["bytes"]) as f64 / ours as f64
        };
        println!(
            "  {:<2} {:<width$}  {:<6} {:>9} {:>11} {:>5.1}% {:>11} {:>11}  {}",
            d["index"],
            d["path"].as_str().unwrap_or("?"),
            d["state"].as_str().unwrap_or("?").to_uppercase(),
            n(&u["objects"]),
            human_bytes(n(&u["bytes"])),
            share,
            human_bytes(n(&d["total_bytes"])),
            human_bytes(n(&d["free_bytes"])),
            d["emulated"].as_str().unwrap_or("")
        );
        if d["config_entry"].is_null() {
            println!("     (not in the config: found where it was added; add it to `devices`)");
        } else if d["config_entry"] != d["index"] {
            println!(
                "     (config entry {}: the config lists the devices in another order)",
                d["config_entry"]
            );
        }
    }
    if let Some(c) = s["controller"].as_str() {
        println!("\n  controller: {c}");
    }
    for u in &usage {
        if let Some(reason) = u["reason"].as_str() {
            println!("\n  device {}: {reason}", u["index"]);
            if let Some(hint) = u["hint"].as_str() {
                println!("  hint: {hint}");
            }
        }
    }
    let devices: Vec<PathBuf> = usage
        .iter()
        .filter_map(|u| u["path"].as_str().map(PathBuf::from))
        .collect();
    for w in shared_filesystem_warnings(&devices) {
        println!("\n  warning: {w}");
    }
}

/// The rebalance, removal or replacement running (or the last one, when it lost data).
fn print_device_job(p: &serde_json::Value) {
    let state = p["state"].as_str().unwrap_or("idle");
    let lost = p["lost"].as_array().map_or(0, |l| l.len());
    if state != "running" && lost == 0 {
        return;
    }
    let what = match (&p["replacing"], &p["removing"]) {
        (serde_json::Value::Array(r), _) => format!("replace of device {} by {}", r[0], r[1]),
        (_, serde_json::Value::Number(d)) => format!("removal of device {d}"),
        _ => "rebalance".into(),
    };
    println!(
        "\n{what}: {state}, {} of {} files, {} of {}{}",
        p["files_done"],
        p["files_total"],
        human_bytes(p["bytes_moved"].as_u64().unwrap_or(0)),
        human_bytes(p["bytes_total"].as_u64().unwrap_or(0)),
        match lost {
            0 => String::new(),
            n => format!("; {n} file ranges lost (`stripefs status --json` lists them)"),
        }
    );
}

fn print_status(s: &serde_json::Value) {
    let b = |k: &str| human_bytes(s[k].as_u64().unwrap_or(0));
    println!("volume      {}", s["uuid"].as_str().unwrap_or("?"));
    if s["degraded"] == true {
        println!(
            "DEGRADED    mounted read-only with devices missing: files with data on them give \
             EIO there (`stripefs find MNT --device N` lists them)"
        );
    }
    println!(
        "mounted on  {} (pid {})",
        s["mountpoint"].as_str().unwrap_or("?"),
        s["pid"]
    );
    println!("config      {}", s["config"].as_str().unwrap_or("?"));
    println!("namespace   {}", s["namespace"].as_str().unwrap_or("?"));
    let store = &s["namespace_store"];
    let recoveries = store["recoveries"].as_u64().unwrap_or(0);
    println!(
        "            {}; reserve {}{}",
        store["state"].as_str().unwrap_or("?"),
        match store["reserve_bytes"].as_u64().unwrap_or(0) {
            0 => "spent (new names get ENOSPC until its filesystem has room)".to_string(),
            n => human_bytes(n),
        },
        match recoveries {
            0 => String::new(),
            n => format!("; came back from {n} failed write(s)"),
        }
    );
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
    print_devices(s);
    print_device_job(&s["rebalance"]);
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
        "\ntransport   {}{}{}{}",
        o["transport"].as_str().unwrap_or("?"),
        o["dev_ring_workers"]
            .as_u64()
            .map(|n| match (n, o["threads"].as_u64().unwrap_or(0)) {
                (0, _) => ", workers wait in read(2)".to_string(),
                (n, t) => format!(", {n} of {t} workers with rings of their own"),
            })
            .unwrap_or_default(),
        o["ring_threads"]
            .as_u64()
            .map(|n| format!(", {n} ring threads"))
            .unwrap_or_default(),
        o["transport_note"]
            .as_str()
            .map(|n| format!(" (not io_uring: {n})"))
            .unwrap_or_default()
    );
    println!(
        "io engine   {} (max_background={}, io_threads={} per device for the threads engine)",
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

/// How to call this binary in a hint: `stripefs` when that is what PATH finds, else its
/// real path (`cargo run` puts nothing on PATH).
pub fn self_command() -> String {
    let me = std::env::current_exe().and_then(std::fs::canonicalize).ok();
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("stripefs"))
            .find(|p| p.is_file())
            .and_then(|p| std::fs::canonicalize(p).ok())
    });
    match (me, on_path) {
        (Some(me), Some(found)) if me == found => "stripefs".into(),
        (Some(me), _) => me.display().to_string(),
        (None, _) => "stripefs".into(),
    }
}

pub fn demo(dir: &Path, devices: usize) -> Result<()> {
    if devices == 0 {
        return Err(Error::Usage("--devices must be at least 1".into()));
    }
    let io = |p: &Path, e: std::io::Error| Error::Usage(format!("{}: {e}", p.display()));
    let paths: Vec<PathBuf> = (0..devices).map(|i| dir.join(format!("dev{i}"))).collect();
    let mnt = dir.join("mnt");
    let me = self_command();
    // Everything is checked before anything is said: a demo already running is the usual case.
    if mnt.is_dir() {
        daemon::clear_mountpoint(&mnt)?;
        if let Ok(Found::Stripefs(m)) = find(&mnt) {
            if std::fs::canonicalize(&mnt).is_ok_and(|c| c == m.root) {
                return Err(Error::Usage(format!(
                    "the demo is already mounted on {} (daemon pid {}): use it, or stop it \
                     (Ctrl-C where it runs, or `{me} umount {}`) first",
                    m.root.display(),
                    m.pid,
                    m.root.display()
                )));
            }
        }
        let dev_of = |p: &Path| std::fs::metadata(p).map(|m| m.dev()).ok();
        if dev_of(&mnt) != dev_of(dir) {
            return Err(Error::Usage(format!(
                "{} has something else mounted on it: unmount it, or give the demo another \
                 --dir",
                mnt.display()
            )));
        }
    }
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
        // The demo's devices share one filesystem on purpose: no warning for that here.
        mkfs_with(&config_path, true, false)?;
    }
    // The hints are printed once the mount is ready, from the daemon's readiness pipe.
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills the two fds.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::Usage(format!(
            "pipe: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: both fds are ours alone, just made.
    let (reader, ready) = unsafe {
        (
            <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fds[0]),
            Ready::from_fd(fds[1]),
        )
    };
    let hints = format!(
        "\nstripefs demo: {devices} devices under {}, mounted on {}\n\
         Try, in another terminal:\n  \
         dd if=/dev/urandom of={m}/file bs=1M count=8\n  \
         {me} layout get {m}/file\n  \
         {me} status {m}\n  \
         find {d}/dev*/.stripefs/objects -type f -ls\n\
         The devices are directories of one filesystem here: a real volume puts each on its \
         own disk.\n\
         Ctrl-C unmounts; the data stays for the next `{me} demo`.\n",
        dir.display(),
        mnt.display(),
        m = mnt.display(),
        d = dir.display()
    );
    let announcer = std::thread::spawn(move || {
        let mut said = String::new();
        let _ = std::io::Read::read_to_string(&mut { reader }, &mut said);
        if said.starts_with("ok") {
            println!("{hints}");
        }
    });
    let r = daemon::run_foreground(cfg, &mnt, CacheReset::Keep, ready);
    let _ = announcer.join();
    r
}
