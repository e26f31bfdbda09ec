//! The stripefs volume config: a TOML file parsed with serde, validated, and every error tied to
//! the file, line and key it came from.

mod class;
mod controller;
pub mod edit;
mod size;

use serde::Deserialize;
use std::collections::HashSet;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

pub use class::{
    check_class_name, check_min_allocation, check_size_range, normalize_extension, volume_folder,
    ClassSection, Direction, MAX_CLASSES, NO_CONDITION,
};
pub use controller::{ControllerSection, CONTROLLER_PROFILES};
pub use size::{format_size, parse_duration, parse_size};

/// The most devices one volume has.
pub const MAX_DEVICES: usize = 256;

/// Smallest and largest stripe size a layout may use.
pub const MIN_STRIPE: u64 = 8 * 1024;
pub const MAX_STRIPE: u64 = 256 * 1024;
pub const DEFAULT_STRIPE: u64 = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    /// `line` is 1-based; `key` is the dotted key the problem is about.
    #[error("{file}:{line}: {key}: {message}")]
    Invalid {
        file: String,
        line: usize,
        key: String,
        message: String,
    },
}

/// A validated volume config.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file this was read from, for messages.
    pub source: PathBuf,
    pub volume: VolumeSection,
    pub mount: MountSection,
    pub cache: Option<CacheSection>,
    /// What is accepted but probably not what was meant (`file:line: ...`), for the CLI to
    /// print as warnings.
    pub warnings: Vec<String>,
}

/// Cache mode names, short and long, as the config and the control plane accept them.
pub const CACHE_MODES: &[&str] = &[
    "wt",
    "wb",
    "wa",
    "wi",
    "wo",
    "pt",
    "write-through",
    "write-back",
    "write-around",
    "write-invalidate",
    "write-only",
    "pass-through",
];

#[derive(Debug, Clone, PartialEq)]
pub enum CacheStore {
    Ram,
    /// A cache file: this directory (holding `stripefs.cache`) or this file.
    File(PathBuf),
}

#[derive(Debug, Clone, PartialEq)]
pub struct CacheSection {
    pub store: CacheStore,
    pub size: u64,
    pub line_size: u64,
    pub mode: String,
    /// true: every file is cached by `mode`; false: only files under a target.
    pub default_all: bool,
    /// Eviction priority of the files outside every target (0 is kept longest).
    pub default_priority: u8,
    /// `[cache.cleaner]`: "alru", "acp" or "nop", and its settings.
    pub cleaner_policy: String,
    /// None: the policy's default (alru 1 s, acp 10 ms).
    pub wake_up: Option<Duration>,
    pub staleness: Duration,
    /// Lines per cleaning pass.
    pub flush_max_buffers: usize,
    pub activity_threshold: Duration,
    /// Percent (100: off).
    pub dirty_ratio_threshold: u8,
    /// Bytes.
    pub dirty_ratio_inertia: u64,
    /// MB/s (10^6 bytes), 0: none.
    pub max_mbps: u64,
    /// "always", "full" or "never".
    pub seq_cutoff: String,
    pub seq_threshold: u64,
    pub seq_promotion_count: u32,
    pub seq_promotion_threshold: u64,
    /// None: always; Some(n): after n misses.
    pub promotion_hits: Option<u32>,
    /// nhit: percent of the cache in use from which misses are counted.
    pub promotion_trigger: u8,
    /// Requests that met a cache device error before the cache goes pass-through (0: never).
    pub error_threshold: u64,
    pub targets: Vec<TargetSection>,
    /// IO classes (`[[cache.class]]`), in the config's order.
    pub classes: Vec<ClassSection>,
    /// The cache device is made to behave like this profile (for experiments).
    pub emulate: Option<String>,
}

/// A `[[cache.target]]`: a folder and how its files are cached.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetSection {
    /// Relative to the volume root, starting with '/'.
    pub path: String,
    pub mode: String,
    pub priority: u8,
    pub allocation: f64,
    pub pinned: bool,
    /// Where it is in the config file, for messages at mount.
    pub line: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct VolumeSection {
    pub devices: Vec<PathBuf>,
    pub stripe_size: u32,
    /// Devices per file; `None` means all of them.
    pub width: Option<u32>,
    /// Directory holding the namespace store; `None` means on the first device.
    pub meta: Option<PathBuf>,
    /// Device models for experiments: which devices behave like which drive.
    pub emulate: Vec<Emulation>,
    /// Devices behind an emulated RAID card (`[volume.controller]`).
    pub controller: Option<ControllerSection>,
    /// Injected faults, for tests and drills.
    pub faults: Vec<FaultSection>,
    /// Object I/O in whole 4K blocks with O_DIRECT (`device_io = "direct"`, the default), so the devices'
    /// own speed shows instead of the page cache's.
    pub direct_device_io: bool,
    /// Listed devices whose directory does not exist (line, message): an error, except for a
    /// degraded mount (`load_degraded`), which mounts without them.
    pub absent: Vec<(usize, String)>,
}

/// One `[[volume.fault]]`: I/O of these devices fails.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultSection {
    pub devices: Vec<usize>,
    /// `Some(true)` reads, `Some(false)` writes, `None` both.
    pub reads: Option<bool>,
    /// libc errno: EIO or ENOSPC.
    pub errno: i32,
    pub rate: f64,
    pub range: Option<(u64, u64)>,
}

/// Profiles a device can be made to behave like (the models live in the stripe crate).
pub const EMULATION_PROFILES: &[&str] = &["hdd-5400", "sata-ssd", "nvme", "sata-port", "custom"];

/// One `[[volume.emulate]]` entry, with the profile's values to be overridden by the rest.
#[derive(Debug, Clone, PartialEq)]
pub struct Emulation {
    pub devices: Vec<usize>,
    pub profile: String,
    pub read_mbps: Option<f64>,
    pub write_mbps: Option<f64>,
    pub access: Option<Duration>,
    pub queue: Option<usize>,
    /// Random 4K I/O per second the drive completes at most.
    pub read_iops: Option<f64>,
    pub write_iops: Option<f64>,
    /// A spinning disk's geometry, each value overriding the profile's.
    pub spindle: SpindleKeys,
}

/// `rpm`, `track_seek`, `full_seek`, `capacity`, `ncq` of a `[[volume.emulate]]` entry: any
/// of them makes the device a spinning disk (seeks and rotation instead of `access`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpindleKeys {
    pub rpm: Option<f64>,
    pub track_seek: Option<Duration>,
    pub full_seek: Option<Duration>,
    pub capacity: Option<u64>,
    pub ncq: Option<usize>,
}

impl SpindleKeys {
    pub fn any(&self) -> bool {
        *self != SpindleKeys::default()
    }
}

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
    /// What runs device I/O: io_uring where the kernel allows it (`auto`), or forced.
    pub io_engine: IoEngine,
    /// I/O threads per device of the threads engine (its queue depth per device).
    pub io_threads: usize,
    /// FUSE over io_uring: requests in flight per kernel queue (one queue per CPU); 32 lets a
    /// Q32 application on one CPU reach the daemon whole.
    pub uring_depth: usize,
    /// FUSE over io_uring: ring threads; 0: one per kernel queue.
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

impl Config {
    /// A config for the given devices with every other setting at its default; used by `demo`.
    pub fn with_devices(devices: Vec<PathBuf>, stripe_size: u32) -> Config {
        Config {
            source: PathBuf::from("<built-in>"),
            volume: VolumeSection {
                devices,
                stripe_size,
                width: None,
                meta: None,
                emulate: Vec::new(),
                controller: None,
                faults: Vec::new(),
                direct_device_io: true,
                absent: Vec::new(),
            },
            mount: MountSection::default(),
            cache: None,
            warnings: Vec::new(),
        }
    }

    /// Devices per file for new files.
    pub fn width(&self) -> u32 {
        self.volume
            .width
            .unwrap_or(self.volume.devices.len() as u32)
    }
}

// Raw, span-carrying mirror of the file; validated into `Config`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    volume: RawVolume,
    #[serde(default)]
    mount: Option<RawMount>,
    cache: Option<RawCache>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCache {
    store: Option<Spanned<String>>,
    path: Option<Spanned<String>>,
    size: Spanned<SizeValue>,
    line_size: Option<Spanned<SizeValue>>,
    mode: Option<Spanned<String>>,
    default: Option<Spanned<String>>,
    default_priority: Option<Spanned<i64>>,
    error_threshold: Option<Spanned<i64>>,
    cleaner: Option<RawCleaner>,
    seq_cutoff: Option<RawSeqCutoff>,
    promotion: Option<RawPromotion>,
    #[serde(default)]
    target: Vec<Spanned<RawTarget>>,
    #[serde(default)]
    class: Vec<Spanned<class::RawClass>>,
    emulate: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCleaner {
    policy: Option<Spanned<String>>,
    staleness: Option<Spanned<String>>,
    wake_up: Option<Spanned<String>>,
    flush_max_buffers: Option<Spanned<i64>>,
    activity_threshold: Option<Spanned<String>>,
    dirty_ratio_threshold: Option<Spanned<i64>>,
    dirty_ratio_inertia: Option<Spanned<SizeValue>>,
    max_mbps: Option<Spanned<i64>>,
    /// Older names: `flush_max_buffers`, and `dirty_ratio_threshold` as a share.
    batch: Option<Spanned<i64>>,
    dirty_high: Option<Spanned<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSeqCutoff {
    policy: Option<Spanned<String>>,
    threshold: Option<Spanned<SizeValue>>,
    promotion_count: Option<Spanned<i64>>,
    promotion_threshold: Option<Spanned<SizeValue>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPromotion {
    policy: Option<Spanned<String>>,
    hits: Option<Spanned<i64>>,
    trigger_threshold: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTarget {
    path: Spanned<String>,
    mode: Option<Spanned<String>>,
    priority: Option<Spanned<i64>>,
    allocation: Option<Spanned<f64>>,
    pinned: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVolume {
    devices: Spanned<Vec<Spanned<String>>>,
    stripe_size: Option<Spanned<SizeValue>>,
    width: Option<Spanned<i64>>,
    meta: Option<Spanned<String>>,
    #[serde(default)]
    emulate: Vec<Spanned<RawEmulation>>,
    controller: Option<Spanned<controller::RawController>>,
    #[serde(default)]
    fault: Vec<Spanned<RawFault>>,
    device_io: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFault {
    device: Spanned<DeviceSel>,
    op: Option<Spanned<String>>,
    error: Option<Spanned<String>>,
    rate: Option<Spanned<f64>>,
    range: Option<Spanned<Vec<SizeValue>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEmulation {
    device: Spanned<DeviceSel>,
    profile: Spanned<String>,
    read_mbps: Option<Spanned<f64>>,
    write_mbps: Option<Spanned<f64>>,
    access: Option<Spanned<String>>,
    queue: Option<Spanned<i64>>,
    read_iops: Option<Spanned<f64>>,
    write_iops: Option<Spanned<f64>>,
    rpm: Option<Spanned<f64>>,
    track_seek: Option<Spanned<String>>,
    full_seek: Option<Spanned<String>>,
    capacity: Option<Spanned<SizeValue>>,
    ncq: Option<Spanned<i64>>,
}

/// The spinning-disk keys of a `RawEmulation`.
struct RawSpindle {
    rpm: Option<Spanned<f64>>,
    track_seek: Option<Spanned<String>>,
    full_seek: Option<Spanned<String>>,
    capacity: Option<Spanned<SizeValue>>,
    ncq: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum DeviceSel {
    Index(i64),
    Word(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMount {
    allow_other: Option<bool>,
    default_permissions: Option<Spanned<bool>>,
    read_only: Option<bool>,
    threads: Option<Spanned<i64>>,
    direct_io: Option<Spanned<String>>,
    writeback_cache: Option<bool>,
    transport: Option<Spanned<String>>,
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

#[derive(Deserialize, Clone)]
#[serde(untagged)]
enum SizeValue {
    Int(i64),
    Text(String),
}

impl std::fmt::Display for SizeValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SizeValue::Int(n) => write!(f, "{n}"),
            SizeValue::Text(s) => write!(f, "\"{s}\""),
        }
    }
}

/// Reads and validates a config file.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse(&text, path)
}

/// Reads and validates a config file for a degraded mount: listed devices that do not exist
/// are kept in `volume.absent` instead of refused.
pub fn load_degraded(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse_with(&text, path, true)
}

/// Parses and validates config text; `path` names it in messages and anchors relative paths.
pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
    parse_with(text, path, false)
}

fn parse_with(text: &str, path: &Path, allow_absent: bool) -> Result<Config, ConfigError> {
    let ctx = Ctx { text, path };
    let raw: RawConfig = toml::from_str(text).map_err(|e| ctx.toml_error(&e))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let volume = validate_volume(&ctx, raw.volume, base)?;
    if let (false, Some((line, message))) = (allow_absent, volume.absent.first()) {
        return Err(ConfigError::Invalid {
            file: path.display().to_string(),
            line: *line,
            key: "volume.devices".into(),
            message: message.clone(),
        });
    }
    let mount = match raw.mount {
        Some(m) => validate_mount(&ctx, m)?,
        None => MountSection::default(),
    };
    let mut warnings = Vec::new();
    let cache = match raw.cache {
        Some(c) => Some(validate_cache(&ctx, c, base, &volume, &mut warnings)?),
        None => None,
    };
    Ok(Config {
        source: path.to_path_buf(),
        volume,
        mount,
        cache,
        warnings,
    })
}

struct Ctx<'a> {
    text: &'a str,
    path: &'a Path,
}

impl Ctx<'_> {
    fn line_of(&self, offset: usize) -> usize {
        self.text[..offset.min(self.text.len())]
            .matches('\n')
            .count()
            + 1
    }

    fn err(&self, span: Range<usize>, key: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            file: self.path.display().to_string(),
            line: self.line_of(span.start),
            key: key.to_string(),
            message: message.into(),
        }
    }

    fn toml_error(&self, e: &toml::de::Error) -> ConfigError {
        let span = e.span().unwrap_or(0..0);
        let line = self.line_of(span.start);
        // The key is what stands before '=' on the offending line, or the table header.
        let line_text = self.text.lines().nth(line - 1).unwrap_or("").trim();
        let key = match line_text.split_once('=') {
            Some((k, _)) => k.trim().to_string(),
            None => line_text.trim_matches(|c| c == '[' || c == ']').to_string(),
        };
        let message = e.message().replace('\n', " ").trim().to_string();
        ConfigError::Invalid {
            file: self.path.display().to_string(),
            line,
            key: if key.is_empty() { "(file)".into() } else { key },
            message,
        }
    }
}

fn validate_volume(ctx: &Ctx, raw: RawVolume, base: &Path) -> Result<VolumeSection, ConfigError> {
    let devices_span = raw.devices.span();
    let list = raw.devices.into_inner();
    if list.is_empty() {
        return Err(ctx.err(
            devices_span,
            "volume.devices",
            "at least one device directory is needed",
        ));
    }
    if list.len() > MAX_DEVICES {
        return Err(ctx.err(
            devices_span,
            "volume.devices",
            format!(
                "{} devices: a volume has at most {MAX_DEVICES} (as md caps its members)",
                list.len()
            ),
        ));
    }
    let mut devices = Vec::with_capacity(list.len());
    let mut absent = Vec::new();
    let mut seen = HashSet::new();
    for dev in list {
        let span = dev.span();
        let text = dev.into_inner();
        if text.trim().is_empty() {
            return Err(ctx.err(span, "volume.devices", "a device path is empty"));
        }
        let path = base.join(&text);
        let meta = match std::fs::metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                absent.push((
                    ctx.line_of(span.start),
                    format!(
                        "\"{text}\": does not exist (a lost device: --degraded mounts the rest \
                         read-only)"
                    ),
                ));
                devices.push(path);
                continue;
            }
            Err(e) => {
                return Err(ctx.err(
                    span.clone(),
                    "volume.devices",
                    format!("\"{text}\": {}", describe_io(&e)),
                ))
            }
        };
        if !meta.is_dir() {
            return Err(ctx.err(
                span,
                "volume.devices",
                format!("\"{text}\" is not a directory; a device is a directory on its own disk"),
            ));
        }
        let canonical = std::fs::canonicalize(&path).unwrap_or(path);
        if !seen.insert(canonical.clone()) {
            return Err(ctx.err(
                span,
                "volume.devices",
                format!("\"{text}\" is listed twice; each device may appear once"),
            ));
        }
        devices.push(canonical);
    }
    for (i, a) in devices.iter().enumerate() {
        for b in &devices[i + 1..] {
            if a.starts_with(b) || b.starts_with(a) {
                return Err(ctx.err(
                    devices_span.clone(),
                    "volume.devices",
                    format!(
                        "{} and {} are nested; devices must be separate directories",
                        a.display(),
                        b.display()
                    ),
                ));
            }
        }
    }

    let stripe_size = match raw.stripe_size {
        None => DEFAULT_STRIPE as u32,
        Some(v) => {
            let span = v.span();
            let value = v.into_inner();
            let parsed = match &value {
                SizeValue::Int(n) if *n > 0 => Some(*n as u64),
                SizeValue::Int(_) => None,
                SizeValue::Text(s) => parse_size(s).ok(),
            };
            match parsed {
                Some(n) if n.is_power_of_two() && (MIN_STRIPE..=MAX_STRIPE).contains(&n) => {
                    n as u32
                }
                _ => {
                    return Err(ctx.err(
                        span,
                        "volume.stripe_size",
                        format!("stripe_size = {value}: must be a power of two from 8K to 256K"),
                    ))
                }
            }
        }
    };

    let n = devices.len();
    let width = raw
        .width
        .map(|w| {
            checked(
                ctx,
                w,
                "volume.width",
                |x| x >= 1 && x as usize <= n,
                &format!("must be from 1 to the number of devices ({n})"),
            )
        })
        .transpose()?
        .map(|w| w as u32);

    let meta = match raw.meta {
        None => None,
        Some(m) => {
            let span = m.span();
            let text = m.into_inner();
            let path = base.join(&text);
            match std::fs::metadata(&path) {
                Ok(md) if md.is_dir() => Some(std::fs::canonicalize(&path).unwrap_or(path)),
                Ok(_) => {
                    return Err(ctx.err(
                        span,
                        "volume.meta",
                        format!("\"{text}\" is not a directory"),
                    ))
                }
                Err(e) => {
                    return Err(ctx.err(
                        span,
                        "volume.meta",
                        format!("\"{text}\": {}", describe_io(&e)),
                    ))
                }
            }
        }
    };
    let emulate = validate_emulation(ctx, raw.emulate, devices.len())?;
    let controller = raw
        .controller
        .map(|c| controller::validate_controller(ctx, c, devices.len()))
        .transpose()?;
    let faults = raw
        .fault
        .into_iter()
        .map(|f| validate_fault(ctx, f.into_inner(), devices.len()))
        .collect::<Result<_, _>>()?;
    // Direct by default: buffered object I/O caches every byte twice (the volume's page cache
    // and the devices') and makes benchmarks of real disks measure RAM.
    let direct_device_io = match raw.device_io {
        None => true,
        Some(d) => one_of(
            ctx,
            d,
            "volume.device_io",
            &[(&["buffered"], false), (&["direct"], true)],
        )?,
    };
    Ok(VolumeSection {
        devices,
        stripe_size,
        width,
        meta,
        emulate,
        controller,
        faults,
        direct_device_io,
        absent,
    })
}

fn device_selection(
    ctx: &Ctx,
    sel: Spanned<DeviceSel>,
    key: &str,
    device_count: usize,
) -> Result<Vec<usize>, ConfigError> {
    let span = sel.span();
    match sel.into_inner() {
        DeviceSel::Word(w) if w == "all" => Ok((0..device_count).collect()),
        DeviceSel::Index(i) if i >= 0 && (i as usize) < device_count => Ok(vec![i as usize]),
        DeviceSel::Index(i) => Err(ctx.err(
            span,
            key,
            format!(
                "device = {i}: must be a device index from 0 to {}, or \"all\"",
                device_count - 1
            ),
        )),
        DeviceSel::Word(w) => Err(ctx.err(
            span,
            key,
            format!("device = \"{w}\": must be a device index or \"all\""),
        )),
    }
}

fn validate_fault(
    ctx: &Ctx,
    f: RawFault,
    device_count: usize,
) -> Result<FaultSection, ConfigError> {
    let devices = device_selection(ctx, f.device, "volume.fault.device", device_count)?;
    let reads = match f.op {
        None => None,
        Some(o) => one_of(
            ctx,
            o,
            "volume.fault.op",
            &[
                (&["read"], Some(true)),
                (&["write"], Some(false)),
                (&["any"], None),
            ],
        )?,
    };
    let errno = match f.error {
        None => 5,
        Some(e) => one_of(
            ctx,
            e,
            "volume.fault.error",
            &[(&["eio", "EIO"], 5), (&["enospc", "ENOSPC"], 28)],
        )?,
    };
    let rate = f
        .rate
        .map(|r| {
            checked(
                ctx,
                r,
                "volume.fault.rate",
                |x| (0.0..=1.0).contains(&x),
                "must be a share from 0 to 1",
            )
        })
        .transpose()?
        .unwrap_or(1.0);
    let range = match f.range {
        None => None,
        Some(r) => {
            let span = r.span();
            let vals: Vec<u64> = r
                .into_inner()
                .iter()
                .map(|v| match v {
                    SizeValue::Int(n) if *n >= 0 => Ok(*n as u64),
                    SizeValue::Int(_) => Err("negative".to_string()),
                    SizeValue::Text(t) => parse_size(t),
                })
                .collect::<Result<_, _>>()
                .map_err(|m| ctx.err(span.clone(), "volume.fault.range", format!("range: {m}")))?;
            match vals[..] {
                [a, b] if a < b => Some((a, b)),
                _ => {
                    return Err(ctx.err(
                        span,
                        "volume.fault.range",
                        "range = [start, end]: two offsets, start below end",
                    ))
                }
            }
        }
    };
    Ok(FaultSection {
        devices,
        reads,
        errno,
        rate,
        range,
    })
}

fn validate_emulation(
    ctx: &Ctx,
    raw: Vec<Spanned<RawEmulation>>,
    device_count: usize,
) -> Result<Vec<Emulation>, ConfigError> {
    let mut out = Vec::new();
    let mut taken = vec![false; device_count];
    for entry in raw {
        let entry_span = entry.span();
        let e = entry.into_inner();
        let dev_span = e.device.span();
        let devices = device_selection(ctx, e.device, "volume.emulate.device", device_count)?;
        for &d in &devices {
            if std::mem::replace(&mut taken[d], true) {
                return Err(ctx.err(
                    dev_span.clone(),
                    "volume.emulate.device",
                    format!("device {d} is emulated twice"),
                ));
            }
        }
        let profile = profile_of(ctx, e.profile, "volume.emulate.profile", EMULATION_PROFILES)?;
        let read_mbps = positive_mbps(ctx, e.read_mbps, "volume.emulate.read_mbps")?;
        let write_mbps = positive_mbps(ctx, e.write_mbps, "volume.emulate.write_mbps")?;
        let iops = |v: Option<Spanned<f64>>, key: &str| {
            v.map(|v| {
                checked(
                    ctx,
                    v,
                    key,
                    |x| x.is_finite() && x > 0.0,
                    "must be a positive number of I/Os per second",
                )
            })
            .transpose()
        };
        let read_iops = iops(e.read_iops, "volume.emulate.read_iops")?;
        let write_iops = iops(e.write_iops, "volume.emulate.write_iops")?;
        let access_span = e.access.as_ref().map(|a| a.span());
        let access = e
            .access
            .map(|a| {
                duration_at_most(
                    ctx,
                    a,
                    "volume.emulate.access",
                    Duration::from_secs(10),
                    "an access takes at most 10s",
                )
            })
            .transpose()?;
        let queue_span = e.queue.as_ref().map(|q| q.span());
        let queue = count_in(
            ctx,
            e.queue,
            "volume.emulate.queue",
            1..=1024,
            "must be from 1 to 1024",
        )?;
        let spindle = spindle_keys(
            ctx,
            RawSpindle {
                rpm: e.rpm,
                track_seek: e.track_seek,
                full_seek: e.full_seek,
                capacity: e.capacity,
                ncq: e.ncq,
            },
        )?;
        if let (Some(span), true) = (queue_span, spindle.any()) {
            return Err(ctx.err(
                span,
                "volume.emulate.queue",
                "a spinning disk has one actuator: its queue is ncq",
            ));
        }
        if let (Some(span), true) = (access_span, spindle.any()) {
            return Err(ctx.err(
                span,
                "volume.emulate.access",
                "a spinning disk (rpm, track_seek, full_seek, capacity, ncq) computes each \
                 access from its seeks and rotation: give one or the other",
            ));
        }
        if profile == "custom"
            && (read_mbps.is_none()
                || write_mbps.is_none()
                || (access.is_none() && spindle.rpm.is_none()))
        {
            return Err(ctx.err(
                entry_span,
                "volume.emulate",
                "profile \"custom\" needs read_mbps, write_mbps and access (or rpm)",
            ));
        }
        out.push(Emulation {
            devices,
            profile,
            read_mbps,
            write_mbps,
            access,
            queue,
            read_iops,
            write_iops,
            spindle,
        });
    }
    Ok(out)
}

fn spindle_keys(ctx: &Ctx, e: RawSpindle) -> Result<SpindleKeys, ConfigError> {
    let rpm = e
        .rpm
        .map(|v| {
            checked(
                ctx,
                v,
                "volume.emulate.rpm",
                |r| (1.0..=100_000.0).contains(&r),
                "must be revolutions per minute, from 1 to 100000",
            )
        })
        .transpose()?;
    let full_seek_span = e.full_seek.as_ref().map(|v| v.span());
    let seek = |v: Option<Spanned<String>>, key: &str| {
        v.map(|v| {
            duration_at_most(
                ctx,
                v,
                key,
                Duration::from_secs(1),
                "a seek takes at most 1s",
            )
        })
        .transpose()
    };
    let track_seek = seek(e.track_seek, "volume.emulate.track_seek")?;
    let full_seek = seek(e.full_seek, "volume.emulate.full_seek")?;
    if let (Some(t), Some(f), Some(span)) = (track_seek, full_seek, full_seek_span) {
        if f < t {
            return Err(ctx.err(
                span,
                "volume.emulate.full_seek",
                "must be at least track_seek",
            ));
        }
    }
    let capacity = match e.capacity {
        None => None,
        Some(v) => {
            let (n, span, text) = size_value(ctx, v, "volume.emulate.capacity")?;
            if n < 1 << 30 {
                return Err(ctx.err(
                    span,
                    "volume.emulate.capacity",
                    format!("capacity = {text}: a spinning disk holds at least 1G"),
                ));
            }
            Some(n)
        }
    };
    let ncq = count_in(
        ctx,
        e.ncq,
        "volume.emulate.ncq",
        1..=256,
        "must be from 1 (in order) to 256 commands",
    )?;
    Ok(SpindleKeys {
        rpm,
        track_seek,
        full_seek,
        capacity,
        ncq,
    })
}

fn validate_mount(ctx: &Ctx, raw: RawMount) -> Result<MountSection, ConfigError> {
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
            "must be from 0 (one per CPU queue) to 1024",
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

const SHARE_RULE: &str = "must be a share above 0 and at most 1";

/// A number that must pass `ok`; the message is `key = value: rule`.
/// A profile name that must be one of `known`.
fn profile_of(
    ctx: &Ctx,
    v: Spanned<String>,
    key: &str,
    known: &[&str],
) -> Result<String, ConfigError> {
    let span = v.span();
    let profile = v.into_inner();
    if !known.contains(&profile.as_str()) {
        return Err(ctx.err(
            span,
            key,
            format!(
                "profile = \"{profile}\": must be one of {}",
                known.join(", ")
            ),
        ));
    }
    Ok(profile)
}

/// An optional bandwidth in MB/s: positive and finite.
fn positive_mbps(
    ctx: &Ctx,
    v: Option<Spanned<f64>>,
    key: &str,
) -> Result<Option<f64>, ConfigError> {
    v.map(|v| {
        checked(
            ctx,
            v,
            key,
            |x| x.is_finite() && x > 0.0,
            "must be a positive number of MB/s",
        )
    })
    .transpose()
}

fn checked<N: Copy + std::fmt::Display>(
    ctx: &Ctx,
    v: Spanned<N>,
    key: &str,
    ok: impl Fn(N) -> bool,
    rule: &str,
) -> Result<N, ConfigError> {
    let span = v.span();
    let n = v.into_inner();
    if ok(n) {
        Ok(n)
    } else {
        let short = key.rsplit('.').next().unwrap_or(key);
        Err(ctx.err(span, key, format!("{short} = {n}: {rule}")))
    }
}

/// A count, if given, within `range`.
fn count_in(
    ctx: &Ctx,
    v: Option<Spanned<i64>>,
    key: &str,
    range: std::ops::RangeInclusive<i64>,
    rule: &str,
) -> Result<Option<usize>, ConfigError> {
    v.map(|v| checked(ctx, v, key, |n| range.contains(&n), rule).map(|n| n as usize))
        .transpose()
}

/// A duration no longer than `max`.
fn duration_at_most(
    ctx: &Ctx,
    v: Spanned<String>,
    key: &str,
    max: Duration,
    rule: &str,
) -> Result<Duration, ConfigError> {
    let span = v.span();
    let d = duration_value(ctx, v, key)?;
    if d > max {
        return Err(ctx.err(span, key, rule));
    }
    Ok(d)
}

/// One of a few words; each option is its spellings (the first is shown) and its value.
fn one_of<T: Copy>(
    ctx: &Ctx,
    v: Spanned<String>,
    key: &str,
    options: &[(&[&str], T)],
) -> Result<T, ConfigError> {
    let span = v.span();
    let text = v.into_inner();
    if let Some((_, value)) = options
        .iter()
        .find(|(names, _)| names.contains(&text.as_str()))
    {
        return Ok(*value);
    }
    let shown: Vec<String> = options
        .iter()
        .map(|(names, _)| format!("\"{}\"", names[0]))
        .collect();
    let list = match shown.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    };
    let short = key.rsplit('.').next().unwrap_or(key);
    Err(ctx.err(span, key, format!("{short} = \"{text}\": must be {list}")))
}

fn duration_value(ctx: &Ctx, v: Spanned<String>, key: &str) -> Result<Duration, ConfigError> {
    let span = v.span();
    let text = v.into_inner();
    let short = key.rsplit('.').next().unwrap_or(key);
    parse_duration(&text).map_err(|m| ctx.err(span, key, format!("{short} = \"{text}\": {m}")))
}

fn size_value(
    ctx: &Ctx,
    v: Spanned<SizeValue>,
    key: &str,
) -> Result<(u64, Range<usize>, SizeValue), ConfigError> {
    let span = v.span();
    let value = v.into_inner();
    let parsed = match &value {
        SizeValue::Int(n) if *n >= 0 => Ok(*n as u64),
        SizeValue::Int(_) => Err("must not be negative".to_string()),
        SizeValue::Text(t) => parse_size(t),
    };
    let short = key.rsplit('.').next().unwrap_or(key);
    match parsed {
        Ok(n) => Ok((n, span, value)),
        Err(m) => Err(ctx.err(span, key, format!("{short} = {value}: {m}"))),
    }
}

fn mode_value(
    ctx: &Ctx,
    v: Option<Spanned<String>>,
    key: &str,
    default: &str,
) -> Result<String, ConfigError> {
    match v {
        None => Ok(default.into()),
        Some(m) => {
            let span = m.span();
            let text = m.into_inner();
            if CACHE_MODES.contains(&text.to_ascii_lowercase().as_str()) {
                Ok(text.to_ascii_lowercase())
            } else {
                Err(ctx.err(
                    span,
                    key,
                    format!("mode = \"{text}\": must be wt, wb, wa, wi, wo or pt (or write-through, write-back, ...)"),
                ))
            }
        }
    }
}

fn validate_cache(
    ctx: &Ctx,
    raw: RawCache,
    base: &Path,
    volume: &VolumeSection,
    warnings: &mut Vec<String>,
) -> Result<CacheSection, ConfigError> {
    // `mode` with `default = "targets"` reaches only the targets that set no mode of their own.
    let mode_given = raw.mode.as_ref().map(|m| (m.span(), m.get_ref().clone()));
    let every_target_sets_its_mode = raw.target.iter().all(|t| t.get_ref().mode.is_some());
    let store = match raw.store {
        None => CacheStore::Ram,
        Some(s) => {
            let span = s.span();
            match s.into_inner().as_str() {
                "ram" => CacheStore::Ram,
                "file" => {
                    let Some(p) = raw.path.as_ref() else {
                        return Err(ctx.err(
                            span,
                            "cache.store",
                            "store = \"file\" needs cache.path (a directory on the fast device)",
                        ));
                    };
                    let text = p.get_ref().clone();
                    let path = base.join(&text);
                    let dir = if path.is_dir() {
                        path.clone()
                    } else {
                        path.parent().map(Path::to_path_buf).unwrap_or_default()
                    };
                    if !dir.is_dir() {
                        return Err(ctx.err(
                            p.span(),
                            "cache.path",
                            format!("path = \"{text}\": no such directory"),
                        ));
                    }
                    if volume.devices.iter().any(|d| path.starts_with(d)) {
                        return Err(ctx.err(p.span(), "cache.path", format!("path = \"{text}\" is inside a device; put the cache on its own fast device")));
                    }
                    CacheStore::File(path)
                }
                other => {
                    return Err(ctx.err(
                        span,
                        "cache.store",
                        format!("store = \"{other}\": must be \"ram\" or \"file\""),
                    ))
                }
            }
        }
    };
    if let (CacheStore::Ram, Some(p)) = (&store, &raw.path) {
        return Err(ctx.err(
            p.span(),
            "cache.path",
            "path is for store = \"file\"; a RAM cache has no path",
        ));
    }
    let (size, size_span, size_text) = size_value(ctx, raw.size, "cache.size")?;
    let line_size = match raw.line_size {
        None => 64 * 1024,
        Some(v) => {
            let (n, span, text) = size_value(ctx, v, "cache.line_size")?;
            if !n.is_power_of_two() || !(4096..=256 * 1024).contains(&n) {
                return Err(ctx.err(
                    span,
                    "cache.line_size",
                    format!("line_size = {text}: must be a power of two from 4K to 256K"),
                ));
            }
            n
        }
    };
    if size < line_size {
        return Err(ctx.err(
            size_span,
            "cache.size",
            format!(
                "size = {size_text}: must hold at least one line ({})",
                format_size(line_size)
            ),
        ));
    }
    if let CacheStore::File(p) = &store {
        let dir = if p.is_dir() {
            p.clone()
        } else {
            p.parent().map(Path::to_path_buf).unwrap_or_default()
        };
        if let Some(total) = fs_size(&dir) {
            if size > total {
                return Err(ctx.err(
                    size_span,
                    "cache.size",
                    format!(
                        "size = {size_text}: larger than the device holding {} ({})",
                        dir.display(),
                        format_size(total)
                    ),
                ));
            }
        }
    }
    let mode = mode_value(ctx, raw.mode, "cache.mode", "wt")?;
    let default_all = match raw.default {
        None => true,
        Some(d) => one_of(
            ctx,
            d,
            "cache.default",
            &[(&["all"], true), (&["targets"], false)],
        )?,
    };
    if let (Some((span, given)), false, true) =
        (mode_given, default_all, every_target_sets_its_mode)
    {
        warnings.push(format!(
            "{}:{}: cache.mode = \"{given}\" is not used: with default = \"targets\" only folder \
             targets are cached, and {}; files outside the targets are not cached (default = \
             \"all\" caches them in this mode)",
            ctx.path.display(),
            ctx.line_of(span.start),
            if raw.target.is_empty() {
                "the config has none (`stripefs target add` takes its own --mode)"
            } else {
                "every [[cache.target]] sets its own mode"
            }
        ));
    }
    let mut section = CacheSection {
        store,
        size,
        line_size,
        mode,
        default_all,
        default_priority: 1,
        cleaner_policy: "alru".into(),
        wake_up: None,
        staleness: Duration::from_secs(30),
        flush_max_buffers: 128,
        activity_threshold: Duration::ZERO,
        dirty_ratio_threshold: 80,
        dirty_ratio_inertia: 128 << 20,
        max_mbps: 0,
        seq_cutoff: "full".into(),
        seq_threshold: 1 << 20,
        seq_promotion_count: 8,
        seq_promotion_threshold: 0,
        promotion_hits: None,
        promotion_trigger: 80,
        error_threshold: 1000,
        targets: Vec::new(),
        classes: Vec::new(),
        emulate: None,
    };
    if let Some(p) = raw.default_priority {
        section.default_priority = checked(
            ctx,
            p,
            "cache.default_priority",
            |n| (0..=255).contains(&n),
            "must be from 0 (kept longest) to 255",
        )? as u8;
    }
    if let Some(e) = raw.emulate {
        let span = e.span();
        let name = e.into_inner();
        if name == "custom" || !EMULATION_PROFILES.contains(&name.as_str()) {
            return Err(ctx.err(
                span,
                "cache.emulate",
                format!("emulate = \"{name}\": must be one of hdd-5400, sata-ssd, nvme, sata-port"),
            ));
        }
        section.emulate = Some(name);
    }
    if let Some(e) = raw.error_threshold {
        section.error_threshold = checked(
            ctx,
            e,
            "cache.error_threshold",
            |n| (0..=1_000_000).contains(&n),
            "must be from 0 (never pass-through) to 1000000 requests",
        )? as u64;
    }
    if let Some(c) = raw.cleaner {
        if let Some(p) = c.policy {
            section.cleaner_policy = one_of(
                ctx,
                p,
                "cache.cleaner.policy",
                &[(&["alru"], "alru"), (&["acp"], "acp"), (&["nop"], "nop")],
            )?
            .to_string();
        }
        if let Some(t) = c.staleness {
            section.staleness = duration_value(ctx, t, "cache.cleaner.staleness")?;
        }
        if let Some(t) = c.wake_up {
            let w = duration_value(ctx, t, "cache.cleaner.wake_up")?;
            section.wake_up = Some(if w.is_zero() {
                Duration::from_millis(10)
            } else {
                w
            });
        }
        if let Some(t) = c.activity_threshold {
            section.activity_threshold =
                duration_value(ctx, t, "cache.cleaner.activity_threshold")?;
        }
        if let (Some(old), Some(_)) = (&c.batch, &c.flush_max_buffers) {
            return Err(ctx.err(
                old.span(),
                "cache.cleaner.batch",
                "batch is the older name of flush_max_buffers (lines per pass): give one",
            ));
        }
        if let Some(b) = c.flush_max_buffers.or(c.batch) {
            section.flush_max_buffers = checked(
                ctx,
                b,
                "cache.cleaner.flush_max_buffers",
                |n| (1..=65536).contains(&n),
                "must be from 1 to 65536 lines",
            )? as usize;
        }
        if let (Some(old), Some(_)) = (&c.dirty_high, &c.dirty_ratio_threshold) {
            return Err(ctx.err(
                old.span(),
                "cache.cleaner.dirty_high",
                "dirty_high (a share) is replaced by dirty_ratio_threshold (percent): give one",
            ));
        }
        if let Some(d) = c.dirty_high {
            section.dirty_ratio_threshold = (checked(
                ctx,
                d,
                "cache.cleaner.dirty_high",
                |x| x > 0.0 && x <= 1.0,
                SHARE_RULE,
            )? * 100.0)
                .round() as u8;
        }
        if let Some(d) = c.dirty_ratio_threshold {
            section.dirty_ratio_threshold = checked(
                ctx,
                d,
                "cache.cleaner.dirty_ratio_threshold",
                |n| (0..=100).contains(&n),
                "must be a percent from 0 to 100 (100: off)",
            )? as u8;
        }
        if let Some(i) = c.dirty_ratio_inertia {
            section.dirty_ratio_inertia =
                size_value(ctx, i, "cache.cleaner.dirty_ratio_inertia")?.0;
        }
        if let Some(m) = c.max_mbps {
            section.max_mbps = checked(
                ctx,
                m,
                "cache.cleaner.max_mbps",
                |n| (0..=1_000_000).contains(&n),
                "must be from 0 (no limit) to 1000000 MB/s",
            )? as u64;
        }
    }
    if let Some(c) = raw.seq_cutoff {
        if let Some(p) = c.policy {
            section.seq_cutoff = one_of(
                ctx,
                p,
                "cache.seq_cutoff.policy",
                &[
                    (&["always"], "always"),
                    (&["full"], "full"),
                    (&["never"], "never"),
                ],
            )?
            .to_string();
        }
        if let Some(t) = c.threshold {
            let (n, span, v) = size_value(ctx, t, "cache.seq_cutoff.threshold")?;
            if n == 0 {
                return Err(ctx.err(
                    span,
                    "cache.seq_cutoff.threshold",
                    format!("threshold = {v}: must be at least 1 byte"),
                ));
            }
            section.seq_threshold = n;
        }
        if let Some(n) = c.promotion_count {
            section.seq_promotion_count = checked(
                ctx,
                n,
                "cache.seq_cutoff.promotion_count",
                |n| (1..=65535).contains(&n),
                "must be from 1 to 65535 requests",
            )? as u32;
        }
        if let Some(t) = c.promotion_threshold {
            section.seq_promotion_threshold =
                size_value(ctx, t, "cache.seq_cutoff.promotion_threshold")?.0;
        }
    }
    if let Some(p) = raw.promotion {
        let nhit = match p.policy {
            None => false,
            Some(policy) => one_of(
                ctx,
                policy,
                "cache.promotion.policy",
                &[(&["always"], false), (&["nhit"], true)],
            )?,
        };
        if nhit {
            let hits = p
                .hits
                .map(|h| {
                    checked(
                        ctx,
                        h,
                        "cache.promotion.hits",
                        |n| (2..=1000).contains(&n),
                        "must be from 2 to 1000 (OCF's range; one miss is policy \"always\")",
                    )
                })
                .transpose()?
                .unwrap_or(3);
            section.promotion_hits = Some(hits as u32);
        }
        if let Some(t) = p.trigger_threshold {
            section.promotion_trigger = checked(
                ctx,
                t,
                "cache.promotion.trigger_threshold",
                |n| (0..=100).contains(&n),
                "must be a percent of the cache in use, from 0 to 100",
            )? as u8;
        }
    }
    for t in raw.target {
        let entry_line = ctx.line_of(t.span().start);
        let t = t.into_inner();
        let span = t.path.span();
        let path = t.path.into_inner();
        let clean = path.trim_end_matches('/');
        if !path.starts_with('/') || path.split('/').any(|c| c == ".." || c == ".") {
            return Err(ctx.err(span, "cache.target.path", format!("path = \"{path}\": must be a folder of the volume, from its root (\"/vm-images\"), without . or ..")));
        }
        if section.targets.iter().any(|o| o.path == clean) {
            return Err(ctx.err(
                span,
                "cache.target.path",
                format!("path = \"{path}\" is a target twice"),
            ));
        }
        let mode = mode_value(ctx, t.mode, "cache.target.mode", &section.mode)?;
        let priority = t
            .priority
            .map(|p| {
                checked(
                    ctx,
                    p,
                    "cache.target.priority",
                    |n| (0..=255).contains(&n),
                    "must be from 0 (kept longest) to 255",
                )
            })
            .transpose()?
            .unwrap_or(0) as u8;
        let allocation = t
            .allocation
            .map(|a| {
                checked(
                    ctx,
                    a,
                    "cache.target.allocation",
                    |x| x > 0.0 && x <= 1.0,
                    SHARE_RULE,
                )
            })
            .transpose()?
            .unwrap_or(1.0);
        section.targets.push(TargetSection {
            path: if clean.is_empty() {
                "/".into()
            } else {
                clean.into()
            },
            mode,
            priority,
            allocation,
            pinned: t.pinned.unwrap_or(false),
            line: entry_line,
        });
    }
    section.classes = class::validate_classes(ctx, raw.class, &section.mode)?;
    Ok(section)
}

fn fs_size(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs fills the zeroed struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    (unsafe { libc::statvfs(c.as_ptr(), &mut st) } == 0).then(|| st.f_blocks * st.f_frsize)
}

fn describe_io(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "does not exist".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests;
