//! `[cache]` and `[[cache.target]]`: where the cache lives, its mode and policies, and the
//! folders with a setting of their own.

use crate::class::{self, ClassSection};
use crate::values::*;
use crate::{format_size, ConfigError, VolumeSection, EMULATION_PROFILES};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCache {
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

pub(crate) fn mode_value(
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

pub(crate) fn validate_cache(
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
