//! The stripefs volume config: a TOML file parsed with serde, validated, and every error tied to
//! the file, line and key it came from.

mod cache;
mod class;
mod controller;
pub mod edit;
mod mount;
mod size;
mod values;
mod volume;

use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

pub use cache::{CacheSection, CacheStore, TargetSection, CACHE_MODES};
pub use class::{
    check_class_name, check_min_allocation, check_size_range, normalize_extension, volume_folder,
    ClassSection, Direction, MAX_CLASSES, NO_CONDITION,
};
pub use controller::{ControllerSection, CONTROLLER_PROFILES};
pub use mount::{Atime, DevWait, DirectIo, IoEngine, MountSection, Transport, UringAffinity};
pub use size::{format_size, parse_duration, parse_size};
pub use volume::{Emulation, FaultSection, SpindleKeys, VolumeSection, EMULATION_PROFILES};

use cache::{validate_cache, RawCache};
use mount::{validate_mount, RawMount};
use values::Ctx;
use volume::{validate_volume, RawVolume};

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

#[cfg(test)]
mod tests;
