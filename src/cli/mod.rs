//! The command line: one binary, subcommands. The top-level clap definition and the dispatch
//! live here; each command group has its own module, with its subcommands' definitions.

use crate::daemon::DAEMON_ENV;
use crate::error::Result;
use cache::{ClassAction, TargetAction};
use clap::{Parser, Subcommand};
use device::DeviceAction;
use layout::LayoutAction;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "stripefs",
    version,
    about = "A FUSE filesystem that stripes files RAID-0 style across backing devices",
    after_help = "RAID-0 has no redundancy: losing one device loses the volume.\n\n\
                  Example:\n  stripefs mkfs vol.toml && stripefs mount vol.toml /mnt/vol"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Format the devices a config lists into a new, empty volume
    #[command(
        after_help = "The config lists 1 to 256 device directories and the default \
        layout (stripe_size 8K to 256K, a power of two).\n\n\
        Example:\n  stripefs mkfs /etc/stripefs/vol.toml"
    )]
    Mkfs {
        /// The volume's config file (TOML), which lists the devices
        config: PathBuf,
        /// Overwrite devices that already hold a stripefs volume (their data is lost)
        #[arg(long)]
        force: bool,
    },
    /// Mount a volume; returns once the mount is ready unless --foreground.
    /// `stripefs mount -o remount,ro MOUNTPOINT` changes a mounted volume
    #[command(after_help = "Options (-o): allow_other, default_permissions, \
        no_default_permissions, ro, rw, nosuid, nodev, noexec (and suid, dev, exec), relatime, \
        strictatime, noatime, nodiratime, lazytime, sync, dirsync, writeback_cache, \
        threads=N (1 to 64), direct_io=auto|always|never, fsname=NAME.\n\n\
        Example:\n  stripefs mount vol.toml /mnt/vol -o allow_other,noatime")]
    Mount(volume::MountArgs),
    /// Unmount, after the daemon has written everything back
    #[command(after_help = "Example:\n  stripefs umount /mnt/vol")]
    Umount {
        /// The mountpoint itself
        mountpoint: PathBuf,
        /// Detach now even if busy; the daemon finishes when the last user leaves
        #[arg(long)]
        lazy: bool,
    },
    /// Link /sbin/mount.fuse.stripefs and /sbin/umount.fuse.stripefs to this binary, for
    /// mount(8), umount(8) and /etc/fstab (idempotent; root)
    #[command(
        after_help = "Example:\n  stripefs install-helper\n  stripefs install-helper --uninstall"
    )]
    InstallHelper {
        /// Put the links in PREFIX/sbin
        #[arg(long, default_value = "/")]
        prefix: PathBuf,
        /// Remove the links instead
        #[arg(long)]
        uninstall: bool,
    },
    /// Volume status: uuid, layout, files, options, and per device what stripefs keeps there
    /// beside its filesystem's space
    #[command(after_help = "Example:\n  stripefs status /mnt/vol --json")]
    Status {
        /// Any path on the mounted volume
        mountpoint: PathBuf,
        /// Print JSON instead of tables
        #[arg(long)]
        json: bool,
    },
    /// Show or set a file's or directory's layout
    Layout {
        #[command(subcommand)]
        action: LayoutAction,
    },
    /// Restripe an existing file to a new layout, content unchanged
    #[command(
        after_help = "--stripe-size: a power of two from 8K to 256K; --width: 1 to the \
        number of devices. Readers and writers of the file wait meanwhile.\n\n\
        Example:\n  stripefs migrate /mnt/vol/vm/disk.img --stripe-size 256K --width 2"
    )]
    Migrate {
        /// A regular file on a mounted volume
        file: PathBuf,
        /// Stripe size: 8K to 256K, a power of two
        #[arg(long, value_name = "SIZE")]
        stripe_size: Option<String>,
        /// Devices the file spans: 1 to the number of devices
        #[arg(long)]
        width: Option<u32>,
    },
    /// Take whole stripe rows out of a file, the rest moving down (fallocate --collapse-range)
    #[command(
        after_help = "OFFSET and LENGTH: multiples of the file's stripe row (stripe size x \
        width, as `stripefs layout get` shows); the range must end before the end of the \
        file. Done in one step: a crash leaves the file as before or as after. (The kernel \
        does not pass fallocate's COLLAPSE_RANGE to FUSE filesystems, so this command does \
        it.)\n\nExample:\n  stripefs collapse /mnt/vol/vm/disk.img 1M 256K"
    )]
    Collapse {
        /// A regular file on a mounted volume
        file: PathBuf,
        /// Where the range starts (bytes; K, M, G suffixes)
        offset: String,
        /// How long it is
        length: String,
    },
    /// Put zeros (a hole) of whole stripe rows into a file, the rest moving up
    /// (fallocate --insert-range)
    #[command(
        after_help = "OFFSET and LENGTH: multiples of the file's stripe row (stripe size x \
        width); OFFSET before the end of the file. Done in one step: a crash leaves the \
        file as before or as after.\n\nExample:\n  stripefs insert /mnt/vol/vm/disk.img 1M 256K"
    )]
    Insert {
        /// A regular file on a mounted volume
        file: PathBuf,
        /// Where the hole goes (bytes; K, M, G suffixes)
        offset: String,
        /// How long it is
        length: String,
    },
    /// Check a volume (not mounted) for namespace and object inconsistencies
    #[command(after_help = FSCK_EXIT_CODES)]
    Fsck {
        /// The volume's config file
        config: PathBuf,
        /// Mend what can be mended safely
        #[arg(long)]
        repair: bool,
        /// Print the report as JSON
        #[arg(long)]
        json: bool,
    },
    /// Cache targets: folders with their own cache mode
    Target {
        #[command(subcommand)]
        action: TargetAction,
    },
    /// IO classes: cache settings by file size, name extension, direction and folder
    Class {
        #[command(subcommand)]
        action: ClassAction,
    },
    /// Cache statistics, as casadm -P shows them
    #[command(
        after_help = "Example:\n  stripefs stats /mnt/vol --watch\n  stripefs stats \
        /mnt/vol --format prometheus\n  stripefs stats /mnt/vol --reset"
    )]
    Stats {
        /// Any path on the mounted volume
        mountpoint: PathBuf,
        /// Print JSON instead of tables (--format json)
        #[arg(long, conflicts_with = "format")]
        json: bool,
        /// table, json, csv (a row per class) or prometheus (the text exposition format)
        #[arg(long, value_enum)]
        format: Option<stats::StatsFormat>,
        /// Print again every second until Ctrl-C (the table fits 80x24)
        #[arg(long)]
        watch: bool,
        /// Every counter to zero, per class and in total (root or the user who mounted)
        #[arg(long, conflicts_with_all = ["watch", "json", "format"])]
        reset: bool,
    },
    /// Write dirty cache lines back: all of them, or a target folder's or a file's
    #[command(
        after_help = "The whole cache: root or the user who mounted only; a target \
        folder or a file: its owner too.\n\n\
        Example:\n  stripefs flush /mnt/vol\n  stripefs flush /mnt/vol vm-images"
    )]
    Flush {
        /// Any path on the mounted volume
        mountpoint: PathBuf,
        /// A target folder or a file (a path, or from the mount's root); none: everything
        path: Option<PathBuf>,
    },
    /// The cache itself: purge clean lines, detach it, attach it
    Cache {
        #[command(subcommand)]
        action: cache_admin::CacheAction,
    },
    /// Show or set the volume's default cache mode (wt, wb, wa, wi, wo, pt)
    #[command(
        after_help = "Modes: wt write-through, wb write-back, wa write-around, wi \
        write-invalidate, wo write-only, pt pass-through. Leaving wb or wo writes the dirty \
        lines back first, unless --no-flush. Setting it: root or the user who mounted only.\n\n\
        Example:\n  stripefs mode /mnt/vol wb\n  stripefs mode /mnt/vol pt --no-flush"
    )]
    Mode {
        /// Any path on the mounted volume
        mountpoint: PathBuf,
        /// The new mode; without it, the mode is printed
        mode: Option<String>,
        /// Leave the dirty lines in the cache (the cleaner writes them back later), as
        /// casadm -Q -f no
        #[arg(long, requires = "mode")]
        no_flush: bool,
    },
    /// Show or change the cache's cleaning policy and its settings, live
    #[command(
        after_help = "Policies (Open CAS's): alru cleans dirty lines whose last write is \
        older than --staleness, --flush-max-buffers a pass, the next pass at once while there is \
        work and after --wake-up when there is none; not while a request came within \
        --activity-threshold (0: clean under load), and age regardless above \
        --dirty-ratio-threshold percent dirty down to that minus --dirty-ratio-inertia. acp \
        cleans the 100 MiB region with the most dirty lines, --flush-max-buffers lines every \
        --wake-up (10 ms). nop never cleans: once every line is dirty, requests pass through. \
        --max-mbps limits the write-back of any policy (0: none). Settings not given stay; \
        changing them: root or the user who mounted only.\n\n\
        Example:\n  stripefs cleaner /mnt/vol --policy alru --activity-threshold 0 --max-mbps 200"
    )]
    Cleaner {
        /// Any path on the mounted volume
        mountpoint: PathBuf,
        /// alru | acp | nop
        #[arg(long)]
        policy: Option<String>,
        /// Duration: alru's sleep after a pass with nothing to clean; acp's time between passes
        #[arg(long)]
        wake_up: Option<String>,
        /// Duration (alru): a dirty line whose last write is older is written back
        #[arg(long)]
        staleness: Option<String>,
        /// Lines written back per pass
        #[arg(long)]
        flush_max_buffers: Option<u64>,
        /// Duration (alru): no cleaning while a request came within it; 0: clean under load
        #[arg(long)]
        activity_threshold: Option<String>,
        /// Percent (alru): above it, clean dirty lines whatever their age; 100: off
        #[arg(long)]
        dirty_ratio_threshold: Option<u64>,
        /// Size (alru): once over the threshold, clean down to threshold minus this
        #[arg(long)]
        dirty_ratio_inertia: Option<String>,
        /// Write-back limit in MB/s (10^6 bytes); 0: none
        #[arg(long)]
        max_mbps: Option<u64>,
    },
    /// List the files that hold data on a device (as Lustre's lfs find --ost)
    #[command(
        after_help = "The device is its index or its directory, as `stripefs status` lists them. \
        What a file keeps on a device follows from its layout and size, so a failed device can \
        be asked: this is what it takes with it. --json adds each file's size and bytes on the \
        device.\n\nExample:\n  stripefs find /mnt/vol --device 2"
    )]
    Find {
        /// A directory on the mounted volume (its whole tree is searched)
        path: PathBuf,
        /// The device: its index or its directory
        #[arg(long)]
        device: String,
        /// JSON: path, size and bytes on the device of each file
        #[arg(long)]
        json: bool,
    },
    /// The volume's devices: list them, add one online
    Device {
        #[command(subcommand)]
        action: DeviceAction,
    },
    /// Restripe files onto every device after devices were added, in the daemon
    #[command(
        after_help = "Files laid on the device set before devices joined are restriped \
        (each move atomic, as `stripefs migrate`) onto the current devices, the files on the \
        fullest devices first: those striped over every device then span every device again, \
        narrower ones move to the least used devices. It runs inside the daemon, so it goes \
        on if this command ends; this command watches it (bytes moved, ETA) until it ends. \
        Ctrl-C asks whether to stop it. Stopped by an unmount or a crash, it goes on at the \
        next mount; `--stop` stops it for good. Files stay readable and writable meanwhile \
        (a file being moved waits its turn). Root or the user who mounted only.\n\n\
        Example:\n  stripefs rebalance /mnt/vol --max-mbps 200"
    )]
    Rebalance {
        /// A directory on the mounted volume: its tree is rebalanced (the mount root: all)
        path: PathBuf,
        /// At most this many MB/s of moved data (0: no limit); given to a running one, changes it
        #[arg(long)]
        max_mbps: Option<u64>,
        /// Stop the running rebalance (the next mount does not go on with it)
        #[arg(long)]
        stop: bool,
        /// Print the final progress as JSON, and no progress bar
        #[arg(long)]
        json: bool,
    },
    /// Show or change the cache's sequential cutoff, promotion and error threshold, live
    #[command(
        after_help = "Open CAS's parameters (casadm --set-param seq-cutoff, promotion, \
        promotion-nhit, fallback-pt). Sequential cutoff: a request that continues a stream \
        seen --seq-promotion-count times (or holding --seq-promotion-threshold bytes) whose \
        bytes reach --seq-threshold passes through: always, or only when the cache is nearly \
        full (full), or never. Promotion nhit: above --nhit-trigger percent of the cache in \
        use, a line is inserted at its --nhit-hits'th miss. --error-threshold: requests that \
        met a cache device error before the cache goes pass-through for good (0: never). \
        Settings not given stay; the config's come back at the next mount; changing them: \
        root or the user who mounted only.\n\n\
        Example:\n  stripefs params /mnt/vol --seq-cutoff always --seq-threshold 4M --promotion nhit"
    )]
    Params {
        /// Any path on the mounted volume
        mountpoint: PathBuf,
        /// always | full | never
        #[arg(long)]
        seq_cutoff: Option<String>,
        /// Size: a stream's bytes at which its requests pass through
        #[arg(long)]
        seq_threshold: Option<String>,
        /// Requests seen in a stream before it may be cut
        #[arg(long)]
        seq_promotion_count: Option<u64>,
        /// Size: ...or bytes seen in it (0: by count only)
        #[arg(long)]
        seq_promotion_threshold: Option<String>,
        /// always | nhit
        #[arg(long)]
        promotion: Option<String>,
        /// nhit: misses of a line before it is inserted (2 to 1000)
        #[arg(long)]
        nhit_hits: Option<u64>,
        /// nhit: percent of the cache in use below which every miss inserts
        #[arg(long)]
        nhit_trigger: Option<u64>,
        /// Requests that met a cache device error before pass-through for good; 0: never
        #[arg(long)]
        error_threshold: Option<u64>,
    },
    /// Benchmark a directory (CrystalDiskMark profiles), sweep fresh volumes, or run a preset
    #[command(
        args_conflicts_with_subcommands = true,
        after_help = "Example:\n  stripefs bench /mnt/vol --size 256M --duration 4s"
    )]
    Bench {
        #[command(subcommand)]
        action: Option<crate::bench_cmd::BenchAction>,
        /// Any directory: a stripefs mount, a backing directory, anything
        target: Option<PathBuf>,
        #[command(flatten)]
        opts: crate::bench_cmd::BenchOpts,
    },
    /// Zero-config first contact: a 4-device volume in a temporary directory, mounted until Ctrl-C
    #[command(after_help = "Example:\n  stripefs demo --devices 2")]
    Demo {
        /// Where the demo's devices and mountpoint live
        #[arg(long, default_value = "/tmp/stripefs-demo")]
        dir: PathBuf,
        /// How many directories stand in for disks: 1 to 256
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
        devices: u16,
    },
    /// Print the man page (roff) of stripefs and its commands
    #[command(after_help = "Example:\n  stripefs man > /usr/local/share/man/man8/stripefs.8")]
    Man,
    /// Print shell completions
    #[command(after_help = "Example:\n  stripefs completions bash > \
        /usr/share/bash-completion/completions/stripefs")]
    Completions {
        /// bash, zsh, fish (also elvish, powershell)
        shell: clap_complete::Shell,
    },
}

mod bench;
mod cache;
mod cache_admin;
mod device;
mod find;
mod layout;
pub mod resolve;
mod stats;
mod volume;

/// Turns a failed control request of `command` on `path` into the daemon's reason, or, when
/// it gave none (the kernel refused before asking it), words for the errno.
fn refusal<'a>(
    command: &'a str,
    path: &'a std::path::Path,
    key: &'a str,
) -> impl Fn(crate::xattr::Refused) -> crate::error::Error + 'a {
    move |r| match r.reason {
        Some(reason) => crate::error::Error::Usage(format!("{command}: {reason}")),
        None => crate::error::Error::Usage(format!(
            "{command}: {}",
            crate::xattr::explain(path, key, r.error)
        )),
    }
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
        Command::Mkfs { config, force } => volume::mkfs(&config, force).map(|()| 0),
        Command::Mount(args) => volume::mount(args),
        Command::Umount { mountpoint, lazy } => volume::umount(&mountpoint, lazy),
        Command::InstallHelper { prefix, uninstall } => {
            for line in crate::mount::helper::install_helper(&prefix, uninstall)? {
                println!("{line}");
            }
            Ok(0)
        }
        Command::Status { mountpoint, json } => volume::status(&mountpoint, json),
        Command::Layout { action } => layout::layout(action).map(|()| 0),
        Command::Migrate {
            file,
            stripe_size,
            width,
        } => layout::migrate(&file, stripe_size, width),
        Command::Fsck {
            config,
            repair,
            json,
        } => volume::fsck(&config, repair, json),
        Command::Collapse {
            file,
            offset,
            length,
        } => layout::shift(&file, "collapse", &offset, &length),
        Command::Insert {
            file,
            offset,
            length,
        } => layout::shift(&file, "insert", &offset, &length),
        Command::Demo { dir, devices } => volume::demo(&dir, devices.into()).map(|()| 0),
        Command::Man => man(&mut std::io::stdout().lock())
            .map(|()| 0)
            .map_err(|e| crate::error::Error::Usage(format!("man: {e}"))),
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "stripefs", &mut std::io::stdout());
            Ok(0)
        }
        Command::Target { action } => cache::target(action).map(|()| 0),
        Command::Class { action } => cache::class(action).map(|()| 0),
        Command::Stats {
            mountpoint,
            json,
            format,
            watch,
            reset,
        } => {
            let format = match (json, format) {
                (true, _) => stats::StatsFormat::Json,
                (false, f) => f.unwrap_or(stats::StatsFormat::Table),
            };
            stats::stats(&mountpoint, format, watch, reset).map(|()| 0)
        }
        Command::Flush { mountpoint, path } => cache::flush(&mountpoint, path).map(|()| 0),
        Command::Cache { action } => cache_admin::cache(action).map(|()| 0),
        Command::Mode {
            mountpoint,
            mode,
            no_flush,
        } => cache::mode(&mountpoint, mode, no_flush),
        Command::Cleaner {
            mountpoint,
            policy,
            wake_up,
            staleness,
            flush_max_buffers,
            activity_threshold,
            dirty_ratio_threshold,
            dirty_ratio_inertia,
            max_mbps,
        } => {
            let n = |v: Option<u64>| v.map(|n| n.to_string());
            let settings = [
                ("policy", policy),
                ("wake_up", wake_up),
                ("staleness", staleness),
                ("flush_max_buffers", n(flush_max_buffers)),
                ("activity_threshold", activity_threshold),
                ("dirty_ratio_threshold", n(dirty_ratio_threshold)),
                ("dirty_ratio_inertia", dirty_ratio_inertia),
                ("max_mbps", n(max_mbps)),
            ];
            cache::settings(&mountpoint, "cleaner", &settings)
        }
        Command::Find { path, device, json } => find::find(&path, &device, json),
        Command::Device {
            action: DeviceAction::Add { mountpoint, dir },
        } => device::add(&mountpoint, &dir),
        Command::Device {
            action: DeviceAction::List { mountpoint, json },
        } => device::list(&mountpoint, json),
        Command::Device {
            action:
                DeviceAction::Remove {
                    mountpoint,
                    device,
                    max_mbps,
                    json,
                },
        } => device::remove(&mountpoint, &device, max_mbps, json),
        Command::Device {
            action:
                DeviceAction::Replace {
                    mountpoint,
                    old,
                    new,
                    max_mbps,
                    json,
                },
        } => device::replace(&mountpoint, &old, &new, max_mbps, json),
        Command::Rebalance {
            path,
            max_mbps,
            stop,
            json,
        } => device::rebalance(&path, max_mbps, stop, json),
        Command::Params {
            mountpoint,
            seq_cutoff,
            seq_threshold,
            seq_promotion_count,
            seq_promotion_threshold,
            promotion,
            nhit_hits,
            nhit_trigger,
            error_threshold,
        } => {
            let n = |v: Option<u64>| v.map(|n| n.to_string());
            let settings = [
                ("seq_cutoff", seq_cutoff),
                ("seq_threshold", seq_threshold),
                ("seq_promotion_count", n(seq_promotion_count)),
                ("seq_promotion_threshold", seq_promotion_threshold),
                ("promotion", promotion),
                ("nhit_hits", n(nhit_hits)),
                ("nhit_trigger", n(nhit_trigger)),
                ("error_threshold", n(error_threshold)),
            ];
            cache::settings(&mountpoint, "params", &settings)
        }
        Command::Bench {
            action,
            target,
            opts,
        } => bench::bench(action, target, opts),
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
  16  usage error: bad arguments

Example:
  stripefs fsck /etc/stripefs/vol.toml --repair";

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

/// The man page: clap_mangen's page of `stripefs`, then a section per command with its full
/// help (arguments, accepted ranges, an example), as one page.
fn man(out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let mut cmd = <Cli as clap::CommandFactory>::command();
    clap_mangen::Man::new(cmd.clone())
        .section("8")
        .render(out)?;
    cmd.build();
    for sub in cmd.get_subcommands() {
        man_section(out, "stripefs", sub)?;
    }
    Ok(())
}

/// A man page section with the full help of `sub` (and of its own commands).
fn man_section(
    out: &mut dyn std::io::Write,
    parent: &str,
    sub: &clap::Command,
) -> std::io::Result<()> {
    let name = format!("{parent} {}", sub.get_name());
    if sub.get_name() == "help" {
        return Ok(());
    }
    writeln!(out, ".SH \"{}\"", name.to_uppercase())?;
    writeln!(out, ".nf")?;
    let help = sub.clone().bin_name(&name).render_long_help().to_string();
    for line in help.lines() {
        // roff: a backslash is \e; a line may not start with a control character.
        let line = line.replace('\\', "\\e");
        let lead = if line.starts_with('.') || line.starts_with('\'') {
            "\\&"
        } else {
            ""
        };
        writeln!(out, "{lead}{line}")?;
    }
    writeln!(out, ".fi")?;
    for nested in sub.get_subcommands() {
        man_section(out, &name, nested)?;
    }
    Ok(())
}

/// A spinner on stderr for long work, drawn only when stderr is a terminal.
pub(crate) fn spinner(message: String) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    bar.set_message(message);
    bar.tick();
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}

#[cfg(test)]
mod tests {
    use super::Cli;

    /// Every text `--help` and the man page show, of every command: prose that a line break
    /// left without its `\` continuation carries the next line's indentation into the middle
    /// of a sentence ("stays         mounted").
    #[test]
    fn no_help_text_has_a_run_of_spaces_inside_a_line() {
        fn texts(cmd: &clap::Command, out: &mut Vec<(String, String)>) {
            let name = cmd.get_name().to_string();
            for t in [cmd.get_about(), cmd.get_long_about(), cmd.get_after_help()]
                .into_iter()
                .flatten()
            {
                out.push((name.clone(), t.to_string()));
            }
            for a in cmd.get_arguments() {
                for t in [a.get_help(), a.get_long_help()].into_iter().flatten() {
                    out.push((format!("{name} {}", a.get_id()), t.to_string()));
                }
            }
            for sub in cmd.get_subcommands() {
                texts(sub, out);
            }
        }
        let mut all = Vec::new();
        texts(&<Cli as clap::CommandFactory>::command(), &mut all);
        assert!(all.len() > 100, "only {} texts found", all.len());
        let bad: Vec<_> = all
            .iter()
            .filter(|(_, t)| t.lines().any(|l| l.trim().contains("   ")))
            .collect();
        assert!(bad.is_empty(), "{bad:#?}");
    }
}
