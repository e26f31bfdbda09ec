//! `bench preset raidcard`: the seed's RAID-card experiment. ACARD RAM disks on the SATA
//! ports of an LSI MegaRAID 9260-8i, 4 and 8 of them, stripes 8K/64K/256K, the card's cache
//! on (100 MB and 1000 MB test files) and off (1000 MB), every CrystalDiskMark profile; here
//! tmpfs directories behind emulated ports and an emulated card, each panel beside the seed.

use super::presets::RamDisk;
use super::sweep::run_sweep;
use super::volume::{Config, ControllerSetup};
use super::{plan_with, BenchOpts};
use crate::error::{Error, Result};
use bench::{Report, Target};
use std::path::{Path, PathBuf};

const CARD: &str = "lsi-9260-8i";
const PORTS: [usize; 2] = [4, 8];
const STRIPES: [u32; 3] = [8192, 65536, 262144];

/// The seed's figures: (ports, direction, what it found) for a sequential test.
const SEEDS: [(usize, &str, &str); 4] = [
    (4, "read", "658"),
    (8, "read", "<1000"),
    (1, "read", "175.8/port"),
    (1, "write", "146.6/port"),
];

/// One panel of the grid: a test size and the card's cache.
struct Panel {
    size: String,
    card_cache: bool,
    report: Report,
    /// The model's own MB/s for each sequential test (no FUSE): (test, direction, per
    /// ports × stripe cell).
    model: Vec<(String, String, Vec<f64>)>,
}

/// The card and ports alone on the virtual clock, for each sequential test of the profile.
fn model_rows(
    plan: &super::Plan,
    card: &ControllerSetup,
    card_cache: bool,
) -> Vec<(String, String, Vec<f64>)> {
    let (Some(mut model), Some(port)) = (card.model(), stripe::DeviceModel::profile("sata-port"))
    else {
        return Vec::new();
    };
    if !card_cache {
        model.cache = None;
    }
    let mut rows = Vec::new();
    for job in plan
        .jobs
        .iter()
        .filter(|j| j.pattern == bench::profile::Pattern::Seq)
    {
        for dir in job.directions() {
            // The model predicts reads or writes; a mixed test has no model row.
            let write = match dir {
                bench::profile::Dir::Read => false,
                bench::profile::Dir::Write => true,
                bench::profile::Dir::Mixed => continue,
            };
            let cells = PORTS
                .iter()
                .flat_map(|&n| STRIPES.iter().map(move |&st| (n, st)))
                .map(|(n, st)| {
                    stripe::predict_sequential(
                        &model,
                        &port,
                        n,
                        st,
                        write,
                        job.queue_depth * job.threads,
                        job.block_size as u64,
                        plan.spec.size,
                        plan.spec.duration,
                    )
                })
                .collect();
            rows.push((job.name(), dir.name().to_string(), cells));
        }
    }
    rows
}

pub(super) fn raidcard(opts: &BenchOpts, dir: &Path) -> Result<()> {
    // The grid: the card's cache on at 100 MB and 1000 MB, off at 1000 MB; one size with --size.
    let runs: Vec<(String, Vec<bool>)> = match &opts.size {
        Some(s) => vec![(s.clone(), vec![true, false])],
        None => vec![
            ("100M".into(), vec![true]),
            ("1000M".into(), vec![true, false]),
        ],
    };
    std::fs::create_dir_all(dir).map_err(|e| Error::Usage(format!("{}: {e}", dir.display())))?;
    let ram = RamDisk::mount(dir, "6G")?;
    let devices: Vec<PathBuf> = (0..8).map(|i| ram.dir.join(format!("port{i}"))).collect();
    for d in &devices {
        std::fs::create_dir_all(d).map_err(|e| Error::Usage(format!("{}: {e}", d.display())))?;
    }
    let card = ControllerSetup {
        profile: CARD.into(),
        cache: true,
    };
    eprintln!(
        "raidcard preset: RAM disks under {} on EMULATED SATA ports ({}) behind an EMULATED \
         card: {}",
        ram.dir.display(),
        stripe::DeviceModel::profile("sata-port")
            .map(|m| m.describe())
            .unwrap_or_default(),
        card.model().map(|m| m.describe()).unwrap_or_default()
    );
    let mut log = None;
    let mut panels = Vec::new();
    for (size, caches) in runs {
        let mut sized = opts.clone();
        sized.size = Some(size.clone());
        // One CSV for every run: the size and the card's cache are part of each row's key.
        let plan = plan_with(&sized, log.take())?;
        log = plan.log.clone();
        let mut configs = Vec::new();
        for &card_cache in &caches {
            for n in PORTS {
                for stripe in STRIPES {
                    configs.push(Config {
                        devices: devices[..n].to_vec(),
                        stripe,
                        width: n as u32,
                        emulate: Some("sata-port".into()),
                        cache: None,
                        direct_device_io: false,
                        controller: Some(ControllerSetup {
                            cache: card_cache,
                            ..card.clone()
                        }),
                    });
                }
            }
        }
        println!("\n##### raidcard, test size {size}");
        let report = run_sweep(
            &plan,
            &devices[0],
            &configs,
            Path::new(&format!("stripefs-raidcard-{size}.svg")),
        )?;
        for &card_cache in &caches {
            let mut part = report.clone();
            part.targets
                .retain(|t| t.controller_cache.as_deref() == Some(on_off(card_cache)));
            panels.push(Panel {
                size: size.clone(),
                card_cache,
                report: part,
                model: model_rows(&plan, &card, card_cache),
            });
        }
    }
    if !opts.json {
        for p in &panels {
            print!("{}", panel(p));
        }
        print!("{}", shape(&panels));
    }
    Ok(())
}

fn on_off(cache: bool) -> &'static str {
    if cache {
        "on"
    } else {
        "off"
    }
}

fn mb(t: &Target, test: &str, direction: &str) -> Option<f64> {
    t.results
        .iter()
        .find(|r| r.test == test && r.direction == direction)
        .map(|r| r.median.mb_per_s)
}

fn target(r: &Report, ports: usize, stripe: u32) -> Option<&Target> {
    r.targets
        .iter()
        .find(|t| t.devices == Some(ports) && t.stripe_size == Some(stripe))
}

/// The tests measured, in their order.
fn tests(r: &Report) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for t in &r.targets {
        for x in &t.results {
            let k = (x.test.clone(), x.direction.clone());
            if !out.contains(&k) {
                out.push(k);
            }
        }
    }
    out
}

/// The seed's figure for a row of a panel, where it gives one.
fn seed(test: &str, direction: &str, ports: usize) -> Option<&'static str> {
    if !test.starts_with("SEQ") {
        return None;
    }
    SEEDS
        .iter()
        .find(|(p, d, _)| (*p == ports || *p == 1) && *d == direction)
        .map(|s| s.2)
}

/// A panel: MB/s per test (rows) and ports × stripe (columns), the seed's figure beside.
fn panel(p: &Panel) -> String {
    use std::fmt::Write as _;
    let mut s = format!(
        "\nraidcard panel, EMULATED: test size {}, card cache {}, MB/s\n{:<15} {:<5}",
        p.size,
        on_off(p.card_cache),
        "test",
        ""
    );
    for n in PORTS {
        for st in STRIPES {
            let _ = write!(s, " {:>9}", format!("{n}p {}K", st / 1024));
        }
        let _ = write!(s, " {:>11}", format!("seed {n}p"));
    }
    s.push('\n');
    for (test, dir) in tests(&p.report) {
        let _ = write!(s, "{test:<15} {dir:<5}");
        for n in PORTS {
            for st in STRIPES {
                let v = target(&p.report, n, st).and_then(|t| mb(t, &test, &dir));
                let _ = write!(s, " {:>9}", v.map_or("-".into(), |v| format!("{v:.1}")));
            }
            let _ = write!(s, " {:>11}", seed(&test, &dir, n).unwrap_or("-"));
        }
        s.push('\n');
        if let Some((_, _, cells)) = p.model.iter().find(|m| m.0 == test && m.1 == dir) {
            let _ = write!(s, "{:<15} {:<5}", "  model alone", "");
            for (k, v) in cells.iter().enumerate() {
                let _ = write!(s, " {v:>9.1}");
                if k % STRIPES.len() == STRIPES.len() - 1 {
                    let _ = write!(s, " {:>11}", "");
                }
            }
            s.push('\n');
        }
    }
    s.push_str("(model alone: the emulated card and ports on their virtual clock, without FUSE)\n");
    s
}

/// The seed's shape, checked on what was measured: each line says the figure and the bound.
fn shape(panels: &[Panel]) -> String {
    use std::fmt::Write as _;
    let mut s = String::from("\nthe seed's shape, on these (EMULATED) figures:\n");
    let seq_read = |p: &Panel| {
        tests(&p.report)
            .into_iter()
            .find(|(t, d)| t.starts_with("SEQ") && d == "read")
    };
    let at = |p: &Panel, n: usize, st: u32, test: &(String, String)| {
        target(&p.report, n, st).and_then(|t| mb(t, &test.0, &test.1))
    };
    // The model alone's MB/s for a cell, and the same ratio from it.
    let cell = |p: &Panel, test: &(String, String), (n, st): (usize, u32)| {
        let (_, _, cells) = p.model.iter().find(|m| m.0 == test.0 && m.1 == test.1)?;
        let i = PORTS.iter().position(|&x| x == n)? * STRIPES.len()
            + STRIPES.iter().position(|&x| x == st)?;
        cells.get(i).copied()
    };
    let model = |p: &Panel, test: &(String, String), a: (usize, u32), b: (usize, u32)| {
        let ratio = cell(p, test, a)? / cell(p, test, b)?.max(f64::MIN_POSITIVE);
        Some(format!("; model alone {ratio:.2}"))
    };
    let mut said = false;
    for p in panels {
        let Some(test) = seq_read(p) else { continue };
        let name = format!(
            "{} read, {} test, card cache {}",
            test.0,
            p.size,
            on_off(p.card_cache)
        );
        if !p.card_cache {
            if let (Some(four), Some(eight)) = (at(p, 4, 65536, &test), at(p, 8, 65536, &test)) {
                let _ = writeln!(
                    s,
                    "  {name}: 8 ports / 4 ports at 64K = {:.2} (want < 1.6; seed < 1.52{})",
                    eight / four.max(f64::MIN_POSITIVE),
                    model(p, &test, (8, 65536), (4, 65536)).unwrap_or_default()
                );
                said = true;
            }
        } else {
            for n in PORTS {
                if let (Some(small), Some(mid)) = (at(p, n, 8192, &test), at(p, n, 65536, &test)) {
                    let _ = writeln!(
                        s,
                        "  {name}, {n} ports: 8K / 64K = {:.2} (want <= 0.7: the cache collapses \
                         at small stripes{})",
                        small / mid.max(f64::MIN_POSITIVE),
                        model(p, &test, (n, 8192), (n, 65536)).unwrap_or_default()
                    );
                    said = true;
                }
            }
        }
        for n in PORTS {
            let row: Vec<f64> = STRIPES
                .iter()
                .filter_map(|&st| at(p, n, st, &test))
                .collect();
            let best = row.iter().cloned().fold(0.0, f64::max);
            if let (Some(mid), true) = (at(p, n, 65536, &test), best > 0.0) {
                let v = |st| cell(p, &test, (n, st)).unwrap_or(0.0);
                let best_model = STRIPES
                    .iter()
                    .copied()
                    .max_by(|&a, &b| v(a).total_cmp(&v(b)))
                    .unwrap_or(65536);
                let _ = writeln!(
                    s,
                    "  {name}, {n} ports: 64K / best stripe = {:.2} (want >= 0.9{})",
                    mid / best,
                    model(p, &test, (n, 65536), (n, best_model)).unwrap_or_default()
                );
                said = true;
            }
        }
    }
    if !said {
        s.push_str("  (no sequential read measured: nothing to compare)\n");
    }
    s
}
