//! The fresh volume each sweep configuration is built, mounted and measured on.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A volume built for one sweep configuration; unmounted and removed when dropped.
pub(super) struct SweepVolume {
    pub(super) dirs: Vec<PathBuf>,
    pub(super) mnt: PathBuf,
    pub(super) mounted: bool,
}

impl SweepVolume {
    pub(super) fn build(c: &Config, tag: &str, test_size: u64) -> Result<SweepVolume> {
        let (stripe, width, emulate) = (c.stripe, c.width, c.emulate.as_deref());
        let io = |p: &Path, e: std::io::Error| Error::Usage(format!("{}: {e}", p.display()));
        let dirs: Vec<PathBuf> = c
            .devices
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
            "[volume]\ndevices = [{}]\nstripe_size = {stripe}\nwidth = {width}\ndevice_io = \"{}\"\n",
            list.join(", "),
            if c.direct_device_io { "direct" } else { "buffered" }
        );
        if let Some(profile) = emulate {
            text.push_str(&format!(
                "[[volume.emulate]]\ndevice = \"all\"\nprofile = \"{profile}\"\n"
            ));
        }
        if let Some(card) = &c.controller {
            text.push_str(&format!(
                "[volume.controller]\ndevice = \"all\"\nprofile = \"{}\"\ncache = {}\n",
                card.profile, card.cache
            ));
        }
        if let Some(cache) = &c.cache {
            let size = cache.size.unwrap_or(2 * test_size).max(1 << 20);
            text.push_str(&format!(
                "[cache]\nsize = {size}\nline_size = \"64K\"\nmode = \"{}\"\n",
                cache.mode
            ));
            if let Some(dir) = &cache.dir {
                let own = dir.join(format!("stripefs-sweep-cache-{tag}"));
                let _ = std::fs::remove_dir_all(&own);
                std::fs::create_dir_all(&own).map_err(|e| io(&own, e))?;
                text.push_str(&format!("store = \"file\"\npath = \"{}\"\n", own.display()));
                v.dirs.push(own);
            }
            if let Some(e) = &cache.emulate {
                text.push_str(&format!("emulate = \"{e}\"\n"));
            }
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

/// Whether `path` is a mount point now (a mount whose `stripefs mount` was interrupted after
/// its daemon had mounted still counts).
pub(super) fn is_mount_point(path: &Path) -> bool {
    let want = path.display().to_string().replace(' ', "\\040");
    std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|m| {
        m.lines()
            .any(|l| l.split(' ').nth(4) == Some(want.as_str()))
    })
}

impl Drop for SweepVolume {
    fn drop(&mut self) {
        if self.mounted || is_mount_point(&self.mnt) {
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
pub(super) fn run_self(args: &[&str]) -> Result<()> {
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
pub(super) struct Config {
    pub(super) devices: Vec<PathBuf>,
    pub(super) stripe: u32,
    pub(super) width: u32,
    pub(super) emulate: Option<String>,
    pub(super) cache: Option<CacheSetup>,
    pub(super) direct_device_io: bool,
    /// The emulated RAID card every device is behind.
    pub(super) controller: Option<ControllerSetup>,
}

/// An emulated RAID card for a sweep configuration: `lsi-9260-8i` (its cache on) or
/// `lsi-9260-8i:nocache`.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct ControllerSetup {
    pub(super) profile: String,
    pub(super) cache: bool,
}

impl ControllerSetup {
    pub(super) fn parse(spec: &str) -> Result<Option<ControllerSetup>> {
        if spec == "none" {
            return Ok(None);
        }
        let (profile, cache) = match spec.split_once(':') {
            None => (spec, true),
            Some((p, "nocache")) => (p, false),
            Some((p, "cache")) => (p, true),
            Some(_) => {
                return Err(Error::Usage(format!(
                    "--controller {spec}: none, PROFILE, PROFILE:cache or PROFILE:nocache"
                )))
            }
        };
        if stripe::ControllerModel::profile(profile).is_none() {
            return Err(Error::Usage(format!(
                "--controller {spec}: the profile must be one of {}",
                stripe::ControllerModel::profile_names().join(", ")
            )));
        }
        Ok(Some(ControllerSetup {
            profile: profile.into(),
            cache,
        }))
    }

    /// The card's model as the volume will have it.
    pub(super) fn model(&self) -> Option<stripe::ControllerModel> {
        let mut m = stripe::ControllerModel::profile(&self.profile)?;
        if !self.cache {
            m.cache = None;
        }
        Some(m)
    }

    pub(super) fn cache_label(&self) -> &'static str {
        if self.cache {
            "on"
        } else {
            "off"
        }
    }
}

/// A cache for a sweep configuration: `ram:wb`, `file:wb:/ssd`, with an optional size.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct CacheSetup {
    pub(super) mode: String,
    /// File store in this directory; RAM when None.
    pub(super) dir: Option<PathBuf>,
    pub(super) size: Option<u64>,
    /// The cache device's model (presets).
    pub(super) emulate: Option<String>,
}

impl CacheSetup {
    pub(super) fn parse(spec: &str) -> Result<Option<CacheSetup>> {
        if spec == "none" {
            return Ok(None);
        }
        let bad = |why: &str| {
            Error::Usage(format!(
                "--cache {spec}: {why} (none, ram:MODE[:SIZE], file:MODE:DIR[:SIZE])"
            ))
        };
        let parts: Vec<&str> = spec.split(':').collect();
        let mode = parts.get(1).copied().ok_or_else(|| bad("no mode"))?;
        if cache::Mode::parse(mode).is_none() {
            return Err(bad("the mode must be wt, wb, wa, wi, wo or pt"));
        }
        let size = |s: Option<&&str>| -> Result<Option<u64>> {
            s.map(|s| mountcfg::parse_size(s).map_err(|e| bad(&e)))
                .transpose()
        };
        match parts[0] {
            "ram" if parts.len() <= 3 => Ok(Some(CacheSetup {
                mode: mode.into(),
                dir: None,
                size: size(parts.get(2))?,
                emulate: None,
            })),
            "file" if (3..=4).contains(&parts.len()) => {
                let dir = PathBuf::from(parts[2]);
                if !dir.is_dir() {
                    return Err(bad(&format!("{} is not a directory", dir.display())));
                }
                Ok(Some(CacheSetup {
                    mode: mode.into(),
                    dir: Some(dir),
                    size: size(parts.get(3))?,
                    emulate: None,
                }))
            }
            _ => Err(bad("unknown form")),
        }
    }

    pub(super) fn label(&self) -> String {
        format!(
            "{}:{}{}",
            if self.dir.is_some() { "file" } else { "ram" },
            self.mode,
            self.emulate
                .as_ref()
                .map(|e| format!(" on {e}"))
                .unwrap_or_default()
        )
    }
}
