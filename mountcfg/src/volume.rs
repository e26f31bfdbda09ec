//! `[volume]`: the devices, stripe size and width, emulated devices and injected faults.

use crate::controller::{self, ControllerSection};
use crate::values::*;
use crate::{parse_size, ConfigError, DEFAULT_STRIPE, MAX_DEVICES, MAX_STRIPE, MIN_STRIPE};
use serde::Deserialize;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawVolume {
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
pub(crate) enum DeviceSel {
    Index(i64),
    Word(String),
}

pub(crate) fn validate_volume(
    ctx: &Ctx,
    raw: RawVolume,
    base: &Path,
) -> Result<VolumeSection, ConfigError> {
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

pub(crate) fn device_selection(
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
            positive(ctx, v, key, "must be a positive number of I/Os per second")
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

fn describe_io(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "does not exist".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}
