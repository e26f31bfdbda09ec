//! The presets that reproduce the seeds' experiments: raidcard and cas.

use super::sweep::run_sweep;
use super::volume::{CacheSetup, Config};
use super::{plan, BenchOpts};
use crate::error::{Error, Result};
use bench::Target;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A seed experiment reproduced on emulated hardware.
pub fn preset(opts: &BenchOpts, name: &str, dir: &Path) -> Result<()> {
    // Refused before a RAM disk is mounted or anything measured.
    super::check_early(opts)?;
    match name {
        "raidcard" => super::raidcard::raidcard(opts, dir),
        "cas" => cas(opts, dir),
        _ => Err(Error::Usage(format!(
            "unknown preset \"{name}\": cas or raidcard"
        ))),
    }
}

/// The seeds' Intel CAS table: speedups of a SATA SSD and an NVMe cache (write-back) over a
/// 5400 rpm HDD, in CrystalDiskMark 6's tests (Seq, RND4K Q8T8, Q32T1, Q1T1; read, write).
pub(super) const CAS_SEEDS: [(&str, &str, f64, f64); 8] = [
    ("SEQ128K Q32T1", "read", 7.0, 22.0),
    ("SEQ128K Q32T1", "write", 5.0, 11.0),
    ("RND4K Q8T8", "read", 268.0, 648.0),
    ("RND4K Q8T8", "write", 192.0, 729.0),
    ("RND4K Q32T1", "read", 189.0, 265.0),
    ("RND4K Q32T1", "write", 185.0, 236.0),
    ("RND4K Q1T1", "read", 51.0, 68.0),
    ("RND4K Q1T1", "write", 48.0, 90.0),
];

/// An emulated HDD core with no cache, then with a write-back cache on an emulated SATA SSD
/// and on an emulated NVMe; CDM6's tests; the speedups beside the seeds'.
pub(super) fn cas(opts: &BenchOpts, dir: &Path) -> Result<()> {
    let mut opts = opts.clone();
    if opts.profile == "cdm8" {
        opts.profile = "cdm6".into();
    }
    opts.size.get_or_insert_with(|| "256M".into());
    let plan = plan(&opts)?;
    std::fs::create_dir_all(dir).map_err(|e| Error::Usage(format!("{}: {e}", dir.display())))?;
    let ram = RamDisk::mount(dir, "4G")?;
    let core = ram.dir.join("hdd");
    let ssd = ram.dir.join("ssd");
    for d in [&core, &ssd] {
        std::fs::create_dir_all(d).map_err(|e| Error::Usage(format!("{}: {e}", d.display())))?;
    }
    let configs: Vec<Config> = [None, Some("sata-ssd"), Some("nvme")]
        .iter()
        .map(|cache_device| Config {
            devices: vec![core.clone()],
            stripe: 65536,
            width: 1,
            emulate: Some("hdd-5400".into()),
            direct_device_io: false,
            controller: None,
            cache: cache_device.map(|d| CacheSetup {
                mode: "wb".into(),
                dir: Some(ssd.clone()),
                size: None,
                emulate: Some(d.into()),
            }),
        })
        .collect();
    eprintln!(
        "cas preset: core {}; caches write-back on emulated sata-ssd and nvme ({} test file)",
        stripe::DeviceModel::profile("hdd-5400")
            .map(|m| m.describe())
            .unwrap_or_default(),
        bench::report::human(plan.spec.size)
    );
    let report = run_sweep(&plan, &core, &configs, Path::new("stripefs-cas.svg"))?;
    if plan.opts.json || report.targets.len() < 3 {
        return Ok(());
    }
    let value = |t: &Target, test: &str, dir: &str| {
        t.results
            .iter()
            .find(|r| r.test == test && r.direction == dir)
            .map(|r| r.median.mb_per_s)
    };
    let (none, sata, nvme) = (&report.targets[0], &report.targets[1], &report.targets[2]);
    println!("\nIntel CAS experiment, EMULATED devices: speedup of a write-back cache over the HDD alone");
    println!(
        "{:<15} {:<5} {:>10} {:>12} {:>8} {:>7} {:>12} {:>8} {:>7}",
        "test", "", "HDD MB/s", "SATA-SSD", "x", "seed", "NVMe", "x", "seed"
    );
    // The tests measured, in their order (a custom profile's too); the seed's speedup beside
    // those it has.
    for r in &none.results {
        let (test, dir) = (r.test.as_str(), r.direction.as_str());
        let base = r.median.mb_per_s;
        let seed = CAS_SEEDS
            .iter()
            .find(|(t, d, _, _)| *t == test && *d == dir);
        let cell = |t: &Target, seed: Option<f64>| match value(t, test, dir) {
            Some(v) if base > 0.0 => format!(
                "{v:>12.1} {:>7.0}x {:>7}",
                v / base,
                seed.map_or("-".to_string(), |s| format!("{s:.0}x"))
            ),
            _ => format!("{:>12} {:>8} {:>7}", "-", "-", "-"),
        };
        println!(
            "{test:<15} {dir:<5} {base:>10.1} {} {}",
            cell(sata, seed.map(|s| s.2)),
            cell(nvme, seed.map(|s| s.3))
        );
    }
    Ok(())
}

/// A tmpfs mounted for a preset; unmounted when dropped.
pub(super) struct RamDisk {
    pub(super) dir: PathBuf,
}

impl RamDisk {
    pub(super) fn mount(dir: &Path, size: &str) -> Result<RamDisk> {
        let ok = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            return Err(Error::Usage(format!(
                "could not mount a tmpfs on {} (needs root)",
                dir.display()
            )));
        }
        Ok(RamDisk {
            dir: dir.to_path_buf(),
        })
    }
}

impl Drop for RamDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
    }
}
