//! `stripefs bench sweep`: a fresh volume per configuration, after a baseline.

use super::volume::{CacheSetup, Config, ControllerSetup, SweepVolume};
use super::{from_status, plan, BenchOpts, Ctx, Plan};
use crate::error::{Error, Result};
use bench::{Report, Target};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

pub(super) fn parse_stripes(list: &[String]) -> Result<Vec<u32>> {
    list.iter()
        .map(|s| {
            let b = mountcfg::parse_size(s)
                .map_err(|e| Error::Usage(format!("--stripe-sizes {s}: {e}")))?;
            if !b.is_power_of_two() || !(mountcfg::MIN_STRIPE..=mountcfg::MAX_STRIPE).contains(&b) {
                return Err(Error::Usage(format!(
                    "--stripe-sizes {s}: must be a power of two from 8K to 256K"
                )));
            }
            Ok(b as u32)
        })
        .collect()
}

pub(super) fn check_emulate(emulate: &Option<String>) -> Result<()> {
    match emulate {
        Some(p) if stripe::DeviceModel::profile(p).is_none() => Err(Error::Usage(format!(
            "--emulate {p}: must be one of {}",
            stripe::DeviceModel::profile_names().join(", ")
        ))),
        _ => Ok(()),
    }
}

/// The target a sweep configuration is measured as (its path is set once it is mounted).
pub(super) fn config_target(c: &Config) -> Target {
    let cache = c
        .cache
        .as_ref()
        .map_or("none".to_string(), CacheSetup::label);
    let mut emulated: Vec<String> = c
        .emulate
        .as_deref()
        .and_then(stripe::DeviceModel::profile)
        .map(|m| vec![format!("all devices: {}", m.describe())])
        .unwrap_or_default();
    if let Some(m) = c
        .cache
        .as_ref()
        .and_then(|c| c.emulate.as_deref())
        .and_then(stripe::DeviceModel::profile)
    {
        emulated.push(format!("cache device: {}", m.describe()));
    }
    if let Some(m) = c.controller.as_ref().and_then(ControllerSetup::model) {
        emulated.push(format!("controller (all devices): {}", m.describe()));
    }
    Target {
        label: format!(
            "{}, stripe {}, width {}, cache {cache}{}",
            bench::report::devices(c.devices.len()),
            mountcfg::format_size(c.stripe as u64),
            c.width,
            c.emulate
                .as_ref()
                .map(|e| format!(", emulated {e}"))
                .unwrap_or_default()
        ) + &c
            .controller
            .as_ref()
            .map(|k| format!(", controller {} cache {}", k.profile, k.cache_label()))
            .unwrap_or_default(),
        devices: Some(c.devices.len()),
        stripe_size: Some(c.stripe),
        width: Some(c.width),
        cache: Some(cache),
        controller_cache: c.controller.as_ref().map(|k| k.cache_label().into()),
        emulated,
        device_io: Some(
            if c.direct_device_io {
                "direct"
            } else {
                "buffered"
            }
            .into(),
        ),
        ..Target::default()
    }
}

/// Measures the baseline (one backing directory, no FUSE) and then every configuration. With
/// --resume, rows measured before are taken from the file, and a configuration whose rows all
/// are is not even mounted.
pub(super) fn run_sweep(
    plan: &Plan,
    base_dir: &Path,
    configs: &[Config],
    chart: &Path,
) -> Result<Report> {
    let mut baseline = Target {
        label: format!("{} (backing directory)", base_dir.display()),
        path: base_dir.to_path_buf(),
        devices: Some(1),
        device_list: vec![format!("{}: real directory, no FUSE", base_dir.display())],
        ..Target::default()
    };
    let config_targets: Vec<Target> = configs.iter().map(config_target).collect();
    let left = plan.tests_left(&baseline, true)
        + config_targets
            .iter()
            .map(|t| plan.tests_left(t, false))
            .sum::<u64>();
    let ctx = Ctx::new(left, plan.spec.duration)?;
    let (mut mounted, mut resumed) = (0usize, 0usize);
    let result = (|| -> Result<Report> {
        if plan.all_done(&baseline, true) {
            plan.measure(base_dir, &mut baseline, true, &ctx)?;
        } else {
            let dir = base_dir.join(format!("stripefs-baseline-{}", std::process::id()));
            std::fs::create_dir_all(&dir)
                .map_err(|e| Error::Usage(format!("{}: {e}", dir.display())))?;
            let measured = plan.measure(&dir, &mut baseline, true, &ctx);
            let _ = std::fs::remove_dir_all(&dir);
            measured?;
        }
        let mut targets = Vec::new();
        for (k, (c, t)) in configs.iter().zip(config_targets).enumerate() {
            let mut t = t;
            if plan.all_done(&t, false) {
                // Every row is in the resumed file: taken from it, nothing mounted.
                resumed += 1;
                let dir = c.devices[0].clone();
                plan.measure(&dir, &mut t, false, &ctx)?;
                t.device_list = vec![format!(
                    "(every row resumed from {}: devices as configured above)",
                    plan.log
                        .as_ref()
                        .map(|l| l.borrow().csv_path.display().to_string())
                        .unwrap_or_default()
                )];
                targets.push(t);
                continue;
            }
            let tag = format!("{}-{k}", std::process::id());
            // A Ctrl-C from a terminal also hits mkfs and mount, which then fail.
            let volume = SweepVolume::build(c, &tag, plan.spec.size).map_err(|e| {
                if ctx.stop.load(Ordering::Relaxed) {
                    plan.stopped()
                } else {
                    e
                }
            })?;
            mounted += 1;
            t.path = volume.mnt.clone();
            if let Ok(status) = crate::xattr::volume_status(&volume.mnt) {
                from_status(&mut t, &status);
            }
            if let Some(cache) = &c.cache {
                t.device_list.push(match (&cache.dir, &cache.emulate) {
                    (None, _) => "cache: in RAM".to_string(),
                    (Some(d), None) => format!("cache device {}: real", d.display()),
                    (Some(d), Some(e)) => format!("cache device {}: EMULATED {e}", d.display()),
                });
            }
            plan.measure(&volume.mnt, &mut t, false, &ctx)?;
            targets.push(t);
            if ctx.stop.load(Ordering::Relaxed) {
                return Err(plan.stopped());
            }
        }
        Ok(plan.report(Some(baseline), targets))
    })();
    ctx.finish();
    if plan.log.is_some() {
        eprintln!(
            "{mounted} configurations mounted and measured, {resumed} taken whole from the \
             resumed file"
        );
    }
    let report = result?;
    plan.output(&report, Some(chart))?;
    if !plan.opts.json && bench::heatmap::fits(&report) {
        print!("{}", bench::heatmap::crossover(&report));
    }
    Ok(report)
}

/// What `bench sweep` was asked to sweep over.
pub struct SweepArgs {
    pub devices: Vec<PathBuf>,
    pub stripe_sizes: Vec<String>,
    pub widths: Vec<u32>,
    pub cache: Vec<String>,
    pub emulate: Option<String>,
    pub device_io: String,
    pub controller: Vec<String>,
}

pub fn sweep(opts: &BenchOpts, args: &SweepArgs) -> Result<()> {
    let SweepArgs {
        devices,
        stripe_sizes,
        widths,
        cache,
        emulate,
        device_io,
        controller,
    } = args;
    let plan = plan(opts)?;
    let direct_device_io = match device_io.as_str() {
        "buffered" => false,
        "direct" => true,
        other => {
            return Err(Error::Usage(format!(
                "--device-io {other}: must be buffered or direct"
            )))
        }
    };
    let caches: Vec<Option<CacheSetup>> = cache
        .iter()
        .map(|c| CacheSetup::parse(c))
        .collect::<Result<_>>()?;
    let controllers: Vec<Option<ControllerSetup>> = controller
        .iter()
        .map(|c| ControllerSetup::parse(c))
        .collect::<Result<_>>()?;
    check_emulate(emulate)?;
    for d in devices {
        if !d.is_dir() {
            return Err(Error::Usage(format!(
                "--devices: {} is not a directory",
                d.display()
            )));
        }
    }
    let stripes = parse_stripes(stripe_sizes)?;
    let mut configs = Vec::new();
    for &w in widths {
        if w == 0 || w as usize > devices.len() {
            eprintln!("width {w} skipped: {} devices given", devices.len());
            continue;
        }
        for controller in &controllers {
            for cache in &caches {
                for &s in &stripes {
                    configs.push(Config {
                        devices: devices[..w as usize].to_vec(),
                        stripe: s,
                        width: w,
                        emulate: emulate.clone(),
                        cache: cache.clone(),
                        direct_device_io,
                        controller: controller.clone(),
                    });
                }
            }
        }
    }
    if configs.is_empty() {
        return Err(Error::Usage("no configuration to measure".into()));
    }
    run_sweep(
        &plan,
        &devices[0],
        &configs,
        Path::new("stripefs-sweep.svg"),
    )
    .map(|_| ())
}
