//! Volume commands: mkfs, mount, umount, status, fsck, demo.

use super::resolve::{find, resolve, Found};
use super::{human_bytes, FSCK_CLEAN, FSCK_ERROR, FSCK_LEFT, FSCK_REPAIRED};
use crate::caching::CacheReset;
use crate::daemon::{self, Ready};
use crate::engine::namespace_path;
use crate::error::{Error, Result};
use crate::namespace::Namespace;
use crate::{fsck, xattr};
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
        ready_fd,
    } = args;
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
    let status = xattr::volume_status(&root)?;
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
    let report = match checked(config, repair) {
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

pub fn mkfs(config: &Path, force: bool) -> Result<()> {
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

pub fn demo(dir: &Path, devices: usize) -> Result<()> {
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
