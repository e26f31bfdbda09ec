//! `[mount]`: how the volume is served (FUSE options, transport, I/O engine, timeouts).

use crate::values::*;
use crate::ConfigError;
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;
use toml::Spanned;

/// When files get FOPEN_DIRECT_IO (no kernel page cache).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectIo {
    /// Only opens that asked for O_DIRECT.
    Auto,
    Always,
    Never,
}

/// When reads update a file's access time (mount(8)'s atime options).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Atime {
    /// When it is older than the last change, or a day old (the kernel's default).
    #[default]
    Relatime,
    /// On every read.
    Strict,
    Never,
}

/// How FUSE requests travel between the kernel and the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// FUSE over io_uring where the kernel allows it (`enable_uring` = Y), else /dev/fuse.
    Auto,
    Uring,
    Dev,
}

/// How /dev/fuse workers wait for requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DevWait {
    /// `ring` where the device I/O engine is io_uring, a device is a disk (not memory), no
    /// cache sits in front and there are 2 workers or more; else `read`.
    Auto,
    /// On an io_uring of their own, which their requests' device I/O completes on.
    Ring,
    /// In read(2).
    Read,
}

/// Where FUSE over io_uring's ring threads run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UringAffinity {
    /// On their queue's CPU when every device keeps its files in memory, else anywhere.
    Auto,
    /// On the CPUs of the queues each serves.
    Queue,
    /// Wherever the scheduler puts them.
    Any,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoEngine {
    /// io_uring if the kernel and sandbox allow it, else threads.
    Auto,
    Uring,
    Threads,
}

#[derive(Debug, Clone, PartialEq)]
pub struct MountSection {
    pub allow_other: bool,
    pub default_permissions: bool,
    pub read_only: bool,
    /// FUSE session threads, or `None` for the default (`fuse_threads`).
    pub threads: Option<usize>,
    pub direct_io: DirectIo,
    pub writeback_cache: bool,
    /// How FUSE requests reach the daemon (`uring` fails the mount where the kernel refuses).
    pub transport: Transport,
    /// Over /dev/fuse: how its workers wait for requests.
    pub dev_wait: DevWait,
    /// What runs device I/O: io_uring where the kernel allows it (`auto`), or forced.
    pub io_engine: IoEngine,
    /// I/O threads per device of the threads engine (its queue depth per device).
    pub io_threads: usize,
    /// FUSE over io_uring: requests in flight per kernel queue (one queue per CPU); 32 lets a
    /// Q32 application on one CPU reach the daemon whole.
    pub uring_depth: usize,
    /// FUSE over io_uring: ring threads; 0: one per kernel queue where every device is in
    /// memory, two per queue over disks.
    pub uring_threads: usize,
    pub uring_affinity: UringAffinity,
    /// Readahead of buffered reads, in bytes (the kernel's default for FUSE is 128 KiB).
    pub readahead: u64,
    /// FUSE requests the kernel keeps in flight to the daemon (background requests: async
    /// direct I/O, readahead, writeback), so a Q32 application keeps 32 I/Os at the devices.
    pub max_background: u16,
    pub attr_timeout: Duration,
    /// Seconds between background durable commits of the namespace (ext4's commit=).
    pub commit_interval: Duration,
    pub fsname: Option<String>,
    /// Size cap of a background daemon's log file; past it the file becomes `FILE.1`.
    pub log_size: u64,
    /// Set-id bits and file capabilities are ignored for programs run from the volume (the
    /// default, as for FUSE mounts generally; `-o suid` lifts it).
    pub nosuid: bool,
    /// Device nodes on the volume cannot be opened (the default; `-o dev` lifts it).
    pub nodev: bool,
    /// Programs on the volume cannot be run.
    pub noexec: bool,
    pub atime: Atime,
    /// Directories' access times are never updated.
    pub nodiratime: bool,
    /// Every write is durable when it returns (O_SYNC on every file), and so is every change
    /// to the tree.
    pub sync: bool,
    /// Every change to the tree (create, rename, unlink...) is durable when it returns.
    pub dirsync: bool,
    /// A program run on events (a device failed, the cache gave up, write-back failing), as
    /// `mdadm --monitor --program`: `PROGRAM EVENT MOUNTPOINT [DEVICE]`.
    pub on_event: Option<PathBuf>,
    /// Mount with listed devices missing, read-only (`-o degraded`, `--degraded`): a rescue.
    pub degraded: bool,
}

impl MountSection {
    /// Why these options cannot be mounted, if they cannot: stripefs leaves permission checks
    /// to the kernel (`default_permissions`), so without them `allow_other` would give every
    /// local user the daemon's (root's) access to every file.
    pub fn permissions_refusal(&self) -> Option<String> {
        (self.allow_other && !self.default_permissions).then(|| {
            "default_permissions = false with allow_other: stripefs does not check \
             permissions itself, so every local user would get root's access to every file; \
             keep default_permissions (the kernel checks permissions), or drop allow_other"
                .to_string()
        })
    }

    /// FUSE session threads. Without a cache they only decode requests and hand them to the
    /// I/O engine (a request that must wait for a file's data lock waits on the janitor), and
    /// one per core does best: on 2 cores, RND4K Q1T1 on tmpfs 70k IOPS with 2 threads and 48k
    /// with 4, Q32T1 250k and 235k. With a cache 8 do better: its requests that may wait on a
    /// device go to its own threads, but a lone one runs on the FUSE thread, and 8 reading
    /// /dev/fuse kept the CAS preset's Q32T1 figures 10-25 % above 2.
    pub fn fuse_threads(&self, cached: bool) -> usize {
        self.threads.unwrap_or_else(|| {
            if cached {
                8
            } else {
                std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8))
            }
        })
    }
}

impl Default for MountSection {
    fn default() -> Self {
        MountSection {
            allow_other: false,
            default_permissions: true,
            read_only: false,
            threads: None,
            direct_io: DirectIo::Auto,
            writeback_cache: false,
            transport: Transport::Auto,
            dev_wait: DevWait::Auto,
            io_engine: IoEngine::Auto,
            io_threads: 8,
            uring_depth: 32,
            uring_threads: 0,
            uring_affinity: UringAffinity::Auto,
            max_background: 128,
            readahead: 1 << 20,
            attr_timeout: Duration::from_secs(1),
            commit_interval: Duration::from_secs(5),
            fsname: None,
            log_size: 8 << 20,
            nosuid: true,
            nodev: true,
            noexec: false,
            atime: Atime::Relatime,
            nodiratime: false,
            sync: false,
            dirsync: false,
            on_event: None,
            degraded: false,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMount {
    allow_other: Option<bool>,
    default_permissions: Option<Spanned<bool>>,
    read_only: Option<bool>,
    threads: Option<Spanned<i64>>,
    direct_io: Option<Spanned<String>>,
    writeback_cache: Option<bool>,
    transport: Option<Spanned<String>>,
    dev_wait: Option<Spanned<String>>,
    io_engine: Option<Spanned<String>>,
    io_threads: Option<Spanned<i64>>,
    uring_depth: Option<Spanned<i64>>,
    uring_threads: Option<Spanned<i64>>,
    uring_affinity: Option<Spanned<String>>,
    max_background: Option<Spanned<i64>>,
    readahead: Option<Spanned<SizeValue>>,
    attr_timeout: Option<Spanned<String>>,
    commit_interval: Option<Spanned<String>>,
    fsname: Option<String>,
    log_size: Option<Spanned<SizeValue>>,
    on_event: Option<Spanned<String>>,
}

pub(crate) fn validate_mount(ctx: &Ctx, raw: RawMount) -> Result<MountSection, ConfigError> {
    let mut m = MountSection::default();
    if let Some(v) = raw.allow_other {
        m.allow_other = v;
    }
    if let Some(v) = &raw.default_permissions {
        m.default_permissions = *v.get_ref();
    }
    if let (Some(v), Some(why)) = (&raw.default_permissions, m.permissions_refusal()) {
        return Err(ctx.err(v.span(), "mount.default_permissions", why));
    }
    if let Some(v) = raw.read_only {
        m.read_only = v;
    }
    if let Some(v) = raw.writeback_cache {
        m.writeback_cache = v;
    }
    if let Some(t) = raw.threads {
        m.threads = Some(checked(
            ctx,
            t,
            "mount.threads",
            |n| (1..=64).contains(&n),
            "must be from 1 to 64",
        )? as usize);
    }
    if let Some(d) = raw.direct_io {
        m.direct_io = one_of(
            ctx,
            d,
            "mount.direct_io",
            &[
                (&["auto"], DirectIo::Auto),
                (&["always"], DirectIo::Always),
                (&["never"], DirectIo::Never),
            ],
        )?;
    }
    if let Some(t) = raw.transport {
        m.transport = one_of(
            ctx,
            t,
            "mount.transport",
            &[
                (&["auto"], Transport::Auto),
                (&["uring"], Transport::Uring),
                (&["dev"], Transport::Dev),
            ],
        )?;
    }
    if let Some(w) = raw.dev_wait {
        m.dev_wait = one_of(
            ctx,
            w,
            "mount.dev_wait",
            &[
                (&["auto"], DevWait::Auto),
                (&["ring"], DevWait::Ring),
                (&["read"], DevWait::Read),
            ],
        )?;
    }
    if let Some(a) = raw.uring_affinity {
        m.uring_affinity = one_of(
            ctx,
            a,
            "mount.uring_affinity",
            &[
                (&["auto"], UringAffinity::Auto),
                (&["queue"], UringAffinity::Queue),
                (&["any"], UringAffinity::Any),
            ],
        )?;
    }
    if let Some(e) = raw.io_engine {
        m.io_engine = one_of(
            ctx,
            e,
            "mount.io_engine",
            &[
                (&["auto"], IoEngine::Auto),
                (&["uring", "io_uring"], IoEngine::Uring),
                (&["threads"], IoEngine::Threads),
            ],
        )?;
    }
    let counts = [
        (
            raw.io_threads,
            "mount.io_threads",
            1..=256,
            "must be from 1 to 256",
            &mut m.io_threads,
        ),
        (
            raw.uring_depth,
            "mount.uring_depth",
            1..=256,
            "must be from 1 to 256",
            &mut m.uring_depth,
        ),
        (
            raw.uring_threads,
            "mount.uring_threads",
            0..=1024,
            "must be from 0 (as many as the devices need) to 1024",
            &mut m.uring_threads,
        ),
    ];
    for (v, key, range, rule, into) in counts {
        if let Some(n) = count_in(ctx, v, key, range, rule)? {
            *into = n;
        }
    }
    if let Some(b) = raw.max_background {
        m.max_background = checked(
            ctx,
            b,
            "mount.max_background",
            |n| (1..=65535).contains(&n),
            "must be from 1 to 65535",
        )? as u16;
    }
    if let Some(v) = raw.readahead {
        let (n, span, text) = size_value(ctx, v, "mount.readahead")?;
        if n % 4096 != 0 || n > 64 << 20 {
            return Err(ctx.err(
                span,
                "mount.readahead",
                format!("readahead = {text}: must be whole 4K pages, at most 64M"),
            ));
        }
        m.readahead = n;
    }
    if let Some(t) = raw.attr_timeout {
        m.attr_timeout = duration_value(ctx, t, "mount.attr_timeout")?;
    }
    if let Some(t) = raw.commit_interval {
        m.commit_interval = duration_value(ctx, t, "mount.commit_interval")?;
    }
    if m.commit_interval.is_zero() {
        m.commit_interval = Duration::from_millis(100);
    }
    m.fsname = raw.fsname;
    if let Some(v) = raw.log_size {
        let (n, span, text) = size_value(ctx, v, "mount.log_size")?;
        if n < 64 << 10 {
            return Err(ctx.err(
                span,
                "mount.log_size",
                format!("log_size = {text}: must be at least 64K"),
            ));
        }
        m.log_size = n;
    }
    if let Some(p) = raw.on_event {
        let span = p.span();
        let path = PathBuf::from(p.into_inner());
        let executable = std::fs::metadata(&path)
            .map(|md| {
                use std::os::unix::fs::PermissionsExt;
                md.is_file() && md.permissions().mode() & 0o111 != 0
            })
            .unwrap_or(false);
        if !path.is_absolute() || !executable {
            return Err(ctx.err(
                span,
                "mount.on_event",
                format!(
                    "on_event = \"{}\": must be the absolute path of an executable program",
                    path.display()
                ),
            ));
        }
        m.on_event = Some(path);
    }
    Ok(m)
}
