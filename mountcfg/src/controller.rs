//! `[volume.controller]`: devices behind an emulated RAID card, for experiments. Shaped like
//! `[[volume.emulate]]`: a profile, with any of its values overridden (the model lives in the
//! stripe crate).

use super::*;
use crate::values::*;
use crate::volume::{device_selection, DeviceSel};

/// Cards a volume can be put behind.
pub const CONTROLLER_PROFILES: &[&str] = &["lsi-9260-8i", "custom"];

/// A validated `[volume.controller]`; `None` fields keep the profile's value.
#[derive(Debug, Clone, PartialEq)]
pub struct ControllerSection {
    pub devices: Vec<usize>,
    pub profile: String,
    /// Host link, MB/s (10^6 bytes).
    pub link_mbps: Option<f64>,
    /// Processor time per command.
    pub command_cost: Option<Duration>,
    /// Processor data path, MB/s.
    pub processor_mbps: Option<f64>,
    pub max_commands: Option<usize>,
    /// `Some(false)`: the card's cache off.
    pub cache: Option<bool>,
    /// Bytes.
    pub cache_size: Option<u64>,
    /// MB/s.
    pub cache_mbps: Option<f64>,
    pub cache_command_cost: Option<Duration>,
    pub read_ahead: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawController {
    device: Spanned<DeviceSel>,
    profile: Spanned<String>,
    link_mbps: Option<Spanned<f64>>,
    command_cost: Option<Spanned<String>>,
    processor_mbps: Option<Spanned<f64>>,
    max_commands: Option<Spanned<i64>>,
    cache: Option<bool>,
    cache_size: Option<Spanned<SizeValue>>,
    cache_mbps: Option<Spanned<f64>>,
    cache_command_cost: Option<Spanned<String>>,
    read_ahead: Option<bool>,
}

pub(crate) fn validate_controller(
    ctx: &Ctx,
    raw: Spanned<RawController>,
    device_count: usize,
) -> Result<ControllerSection, ConfigError> {
    let span = raw.span();
    let c = raw.into_inner();
    let devices = device_selection(ctx, c.device, "volume.controller.device", device_count)?;
    let profile = profile_of(
        ctx,
        c.profile,
        "volume.controller.profile",
        CONTROLLER_PROFILES,
    )?;
    let rate = |v, key| positive_mbps(ctx, v, key);
    let cost =
        |v: Option<Spanned<String>>, key: &str| v.map(|v| duration_value(ctx, v, key)).transpose();
    let link_mbps = rate(c.link_mbps, "volume.controller.link_mbps")?;
    let processor_mbps = rate(c.processor_mbps, "volume.controller.processor_mbps")?;
    let cache_mbps = rate(c.cache_mbps, "volume.controller.cache_mbps")?;
    let command_cost = cost(c.command_cost, "volume.controller.command_cost")?;
    let cache_command_cost = cost(c.cache_command_cost, "volume.controller.cache_command_cost")?;
    let max_commands = count_in(
        ctx,
        c.max_commands,
        "volume.controller.max_commands",
        1..=65536,
        "must be from 1 to 65536",
    )?;
    let cache_size = match c.cache_size {
        None => None,
        Some(v) => {
            let (n, span, value) = size_value(ctx, v, "volume.controller.cache_size")?;
            if n == 0 {
                return Err(ctx.err(
                    span,
                    "volume.controller.cache_size",
                    format!("cache_size = {value}: must not be 0 (cache = false turns it off)"),
                ));
            }
            Some(n)
        }
    };
    if profile == "custom" {
        if link_mbps.is_none() || command_cost.is_none() || processor_mbps.is_none() {
            return Err(ctx.err(
                span,
                "volume.controller",
                "profile \"custom\" needs link_mbps, command_cost and processor_mbps",
            ));
        }
        if c.cache == Some(true) && (cache_size.is_none() || cache_mbps.is_none()) {
            return Err(ctx.err(
                span,
                "volume.controller",
                "profile \"custom\" with cache = true needs cache_size and cache_mbps",
            ));
        }
    }
    Ok(ControllerSection {
        devices,
        profile,
        link_mbps,
        command_cost,
        processor_mbps,
        max_commands,
        cache: c.cache,
        cache_size,
        cache_mbps,
        cache_command_cost,
        read_ahead: c.read_ahead,
    })
}
