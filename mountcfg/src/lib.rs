//! The stripefs volume config: a TOML file parsed with serde, validated, and every error tied to
//! the file, line and key it came from.

mod size;

use serde::Deserialize;
use std::collections::HashSet;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

pub use size::{format_size, parse_duration, parse_size};

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
}

/// When files get FOPEN_DIRECT_IO (no kernel page cache).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectIo {
    /// Only opens that asked for O_DIRECT.
    Auto,
    Always,
    Never,
}

#[derive(Debug, Clone, PartialEq)]
pub struct MountSection {
    pub allow_other: bool,
    pub default_permissions: bool,
    pub read_only: bool,
    pub threads: usize,
    pub direct_io: DirectIo,
    pub writeback_cache: bool,
    pub attr_timeout: Duration,
    /// Seconds between background durable commits of the namespace (ext4's commit=).
    pub commit_interval: Duration,
    pub fsname: Option<String>,
}

impl Default for MountSection {
    fn default() -> Self {
        MountSection {
            allow_other: false,
            default_permissions: true,
            read_only: false,
            threads: 2,
            direct_io: DirectIo::Auto,
            writeback_cache: false,
            attr_timeout: Duration::from_secs(1),
            commit_interval: Duration::from_secs(5),
            fsname: None,
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
            },
            mount: MountSection::default(),
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
    default_permissions: Option<bool>,
    read_only: Option<bool>,
    threads: Option<Spanned<i64>>,
    direct_io: Option<Spanned<String>>,
    writeback_cache: Option<bool>,
    attr_timeout: Option<Spanned<String>>,
    commit_interval: Option<Spanned<String>>,
    fsname: Option<String>,
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

/// Parses and validates config text; `path` names it in messages and anchors relative paths.
pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
    let ctx = Ctx { text, path };
    let raw: RawConfig = toml::from_str(text).map_err(|e| ctx.toml_error(&e))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let volume = validate_volume(&ctx, raw.volume, base)?;
    let mount = match raw.mount {
        Some(m) => validate_mount(&ctx, m)?,
        None => MountSection::default(),
    };
    Ok(Config {
        source: path.to_path_buf(),
        volume,
        mount,
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
    let mut devices = Vec::with_capacity(list.len());
    let mut seen = HashSet::new();
    for dev in list {
        let span = dev.span();
        let text = dev.into_inner();
        if text.trim().is_empty() {
            return Err(ctx.err(span, "volume.devices", "a device path is empty"));
        }
        let path = base.join(&text);
        let meta = std::fs::metadata(&path).map_err(|e| {
            ctx.err(
                span.clone(),
                "volume.devices",
                format!("\"{text}\": {}", describe_io(&e)),
            )
        })?;
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

    let width = match raw.width {
        None => None,
        Some(w) => {
            let span = w.span();
            let n = w.into_inner();
            if n < 1 || n as usize > devices.len() {
                return Err(ctx.err(
                    span,
                    "volume.width",
                    format!(
                        "width = {n}: must be from 1 to the number of devices ({})",
                        devices.len()
                    ),
                ));
            }
            Some(n as u32)
        }
    };

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
    Ok(VolumeSection {
        devices,
        stripe_size,
        width,
        meta,
        emulate,
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
        let devices: Vec<usize> = match e.device.into_inner() {
            DeviceSel::Word(w) if w == "all" => (0..device_count).collect(),
            DeviceSel::Index(i) if i >= 0 && (i as usize) < device_count => vec![i as usize],
            DeviceSel::Index(i) => {
                return Err(ctx.err(
                    dev_span,
                    "volume.emulate.device",
                    format!(
                        "device = {i}: must be a device index from 0 to {}, or \"all\"",
                        device_count - 1
                    ),
                ))
            }
            DeviceSel::Word(w) => {
                return Err(ctx.err(
                    dev_span,
                    "volume.emulate.device",
                    format!("device = \"{w}\": must be a device index or \"all\""),
                ))
            }
        };
        for &d in &devices {
            if std::mem::replace(&mut taken[d], true) {
                return Err(ctx.err(
                    dev_span.clone(),
                    "volume.emulate.device",
                    format!("device {d} is emulated twice"),
                ));
            }
        }
        let profile_span = e.profile.span();
        let profile = e.profile.into_inner();
        if !EMULATION_PROFILES.contains(&profile.as_str()) {
            return Err(ctx.err(
                profile_span,
                "volume.emulate.profile",
                format!(
                    "profile = \"{profile}\": must be one of {}",
                    EMULATION_PROFILES.join(", ")
                ),
            ));
        }
        let rate = |v: Option<Spanned<f64>>, key: &str| -> Result<Option<f64>, ConfigError> {
            match v {
                None => Ok(None),
                Some(v) => {
                    let span = v.span();
                    let x = v.into_inner();
                    if x.is_finite() && x > 0.0 {
                        Ok(Some(x))
                    } else {
                        Err(ctx.err(
                            span,
                            key,
                            format!(
                                "{} = {x}: must be a positive number of MB/s",
                                key.rsplit('.').next().unwrap_or(key)
                            ),
                        ))
                    }
                }
            }
        };
        let read_mbps = rate(e.read_mbps, "volume.emulate.read_mbps")?;
        let write_mbps = rate(e.write_mbps, "volume.emulate.write_mbps")?;
        let access = match e.access {
            None => None,
            Some(a) => {
                let span = a.span();
                let text = a.into_inner();
                Some(parse_duration(&text).map_err(|m| {
                    ctx.err(
                        span,
                        "volume.emulate.access",
                        format!("access = \"{text}\": {m}"),
                    )
                })?)
            }
        };
        let queue = match e.queue {
            None => None,
            Some(q) => {
                let span = q.span();
                let n = q.into_inner();
                if !(1..=1024).contains(&n) {
                    return Err(ctx.err(
                        span,
                        "volume.emulate.queue",
                        format!("queue = {n}: must be from 1 to 1024"),
                    ));
                }
                Some(n as usize)
            }
        };
        if profile == "custom" && (read_mbps.is_none() || write_mbps.is_none() || access.is_none())
        {
            return Err(ctx.err(
                entry_span,
                "volume.emulate",
                "profile \"custom\" needs read_mbps, write_mbps and access",
            ));
        }
        out.push(Emulation {
            devices,
            profile,
            read_mbps,
            write_mbps,
            access,
            queue,
        });
    }
    Ok(out)
}

fn validate_mount(ctx: &Ctx, raw: RawMount) -> Result<MountSection, ConfigError> {
    let mut m = MountSection::default();
    if let Some(v) = raw.allow_other {
        m.allow_other = v;
    }
    if let Some(v) = raw.default_permissions {
        m.default_permissions = v;
    }
    if let Some(v) = raw.read_only {
        m.read_only = v;
    }
    if let Some(v) = raw.writeback_cache {
        m.writeback_cache = v;
    }
    if let Some(t) = raw.threads {
        let span = t.span();
        let n = t.into_inner();
        if !(1..=64).contains(&n) {
            return Err(ctx.err(
                span,
                "mount.threads",
                format!("threads = {n}: must be from 1 to 64"),
            ));
        }
        m.threads = n as usize;
    }
    if let Some(d) = raw.direct_io {
        let span = d.span();
        m.direct_io = match d.into_inner().as_str() {
            "auto" => DirectIo::Auto,
            "always" => DirectIo::Always,
            "never" => DirectIo::Never,
            other => {
                return Err(ctx.err(
                    span,
                    "mount.direct_io",
                    format!("direct_io = \"{other}\": must be \"auto\", \"always\" or \"never\""),
                ))
            }
        };
    }
    for (value, key, slot) in [
        (raw.attr_timeout, "mount.attr_timeout", &mut m.attr_timeout),
        (
            raw.commit_interval,
            "mount.commit_interval",
            &mut m.commit_interval,
        ),
    ] {
        if let Some(t) = value {
            let span = t.span();
            let text = t.into_inner();
            *slot = parse_duration(&text).map_err(|msg| {
                ctx.err(
                    span,
                    key,
                    format!(
                        "{} = \"{text}\": {msg}",
                        key.rsplit('.').next().unwrap_or(key)
                    ),
                )
            })?;
        }
    }
    if m.commit_interval.is_zero() {
        m.commit_interval = Duration::from_millis(100);
    }
    m.fsname = raw.fsname;
    Ok(m)
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
