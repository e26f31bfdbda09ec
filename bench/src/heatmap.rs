//! A sweep as a heat map: per test, direction and setting (cache, RAID card cache), one cell
//! per stripe size (across) and device count (up), shaded by MB/s and labelled with it, so the
//! stripe size where more devices stop helping shows at a glance.

use crate::chart::{format_of, register_font, stripe_label};
use crate::report::{Report, Target};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// One panel: (test, direction, setting).
type PanelKey = (String, String, String);

fn setting(t: &Target) -> String {
    let mut s = format!("cache {}", t.cache.as_deref().unwrap_or("none"));
    if let Some(c) = &t.controller_cache {
        s.push_str(&format!(", card cache {c}"));
    }
    s
}

/// Where the heat map of a sweep charted at `chart` goes: `NAME-heatmap.EXT` beside it.
pub fn path_beside(chart: &Path) -> PathBuf {
    let stem = chart
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("chart");
    let ext = chart.extension().and_then(|s| s.to_str()).unwrap_or("svg");
    chart.with_file_name(format!("{stem}-heatmap.{ext}"))
}

/// Whether the report is a sweep a heat map says something of: more than one stripe size or
/// device count among its volumes.
pub fn fits(report: &Report) -> bool {
    let count = |f: &dyn Fn(&Target) -> Option<u64>| {
        let mut v: Vec<u64> = report.targets.iter().filter_map(f).collect();
        v.sort();
        v.dedup();
        v.len()
    };
    let stripes = count(&|t| t.stripe_size.map(u64::from));
    let devices = count(&|t| t.devices.map(|d| d as u64));
    stripes >= 1 && devices >= 1 && stripes + devices > 2
}

fn panels(report: &Report) -> Vec<PanelKey> {
    let mut out: Vec<PanelKey> = Vec::new();
    for t in report.targets.iter().filter(|t| t.stripe_size.is_some()) {
        for r in &t.results {
            let k = (r.test.clone(), r.direction.clone(), setting(t));
            if !out.contains(&k) {
                out.push(k);
            }
        }
    }
    out
}

/// Where more devices stop helping: per test, direction and setting, the gain of the widest
/// volume over one device at each stripe size, and the largest stripe size at which that
/// gain is under 10 % (below it, FUSE's per-request cost, not the devices, sets the pace).
pub fn crossover(report: &Report) -> String {
    use std::fmt::Write as _;
    let mut stripes: Vec<u32> = report
        .targets
        .iter()
        .filter_map(|t| t.stripe_size)
        .collect();
    stripes.sort();
    stripes.dedup();
    let mut devices: Vec<usize> = report.targets.iter().filter_map(|t| t.devices).collect();
    devices.sort();
    devices.dedup();
    let (Some(&one), Some(&most)) = (devices.first(), devices.last()) else {
        return String::new();
    };
    if one == most {
        return String::new();
    }
    let mut s = format!(
        "\nwhere more devices stop helping: MB/s of {most} devices / {one} device(s), by stripe size\n{:<15} {:<5} {:<28}",
        "test", "", "setting"
    );
    for &st in &stripes {
        let _ = write!(s, " {:>6}", stripe_label(st));
    }
    let _ = writeln!(s, "  no gain (<1.10x) up to");
    for (test, direction, set) in panels(report) {
        let mb = |d: usize, st: u32| {
            report
                .targets
                .iter()
                .find(|t| t.devices == Some(d) && t.stripe_size == Some(st) && setting(t) == set)?
                .results
                .iter()
                .find(|r| r.test == test && r.direction == direction)
                .map(|r| r.median.mb_per_s)
        };
        let _ = write!(s, "{test:<15} {direction:<5} {set:<28}");
        let mut flat = None;
        for &st in &stripes {
            match (mb(most, st), mb(one, st)) {
                (Some(w), Some(n)) if n > 0.0 => {
                    let gain = w / n;
                    if gain < 1.10 {
                        flat = Some(st);
                    }
                    let _ = write!(s, " {:>5.2}x", gain);
                }
                _ => {
                    let _ = write!(s, " {:>6}", "-");
                }
            }
        }
        let _ = writeln!(
            s,
            "  {}",
            flat.map_or("none: more devices help at every size".into(), stripe_label)
        );
    }
    s
}

/// Writes the heat map as SVG or PNG, as the path's extension says.
pub fn write(report: &Report, path: &Path) -> Result<(), String> {
    let png = format_of(path)? == "png";
    register_font()?;
    let panels = panels(report);
    let cols = 2.min(panels.len().max(1));
    let rows = panels.len().div_ceil(cols).max(1);
    // Wide enough for the title even with one panel.
    let size = ((480 * cols as u32).max(720), 320 * rows as u32 + 40);
    if png {
        let root = BitMapBackend::new(path, size).into_drawing_area();
        draw(report, &panels, cols, &root)?;
        root.present().map_err(|e| e.to_string())
    } else {
        let root = SVGBackend::new(path, size).into_drawing_area();
        draw(report, &panels, cols, &root)?;
        root.present().map_err(|e| e.to_string())
    }
}

/// White for nothing, deep blue for the panel's best.
fn shade(f: f64) -> RGBColor {
    let f = f.clamp(0.0, 1.0);
    let mix = |hi: f64| (255.0 - f * (255.0 - hi)).round() as u8;
    RGBColor(mix(20.0), mix(70.0), mix(150.0))
}

fn draw<DB: DrawingBackend>(
    report: &Report,
    panels: &[PanelKey],
    cols: usize,
    root: &DrawingArea<DB, Shift>,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let title = format!(
        "stripefs sweep: MB/s by stripe size and devices, {} test file{}",
        crate::report::human(report.size),
        if report.emulated() {
            "  (EMULATED)"
        } else {
            ""
        }
    );
    let (head, body) = root.split_vertically(40);
    head.titled(&title, ("sans-serif", 16)).map_err(err)?;
    let rows = panels.len().div_ceil(cols).max(1);
    let areas = body.split_evenly((rows, cols));
    let mut stripes: Vec<u32> = report
        .targets
        .iter()
        .filter_map(|t| t.stripe_size)
        .collect();
    stripes.sort();
    stripes.dedup();
    let mut devices: Vec<usize> = report.targets.iter().filter_map(|t| t.devices).collect();
    devices.sort();
    devices.dedup();
    let (nx, ny) = (stripes.len().max(1), devices.len().max(1));
    for (area, (test, direction, set)) in areas.iter().zip(panels) {
        let cells: Vec<(usize, usize, f64)> = report
            .targets
            .iter()
            .filter(|t| &setting(t) == set)
            .filter_map(|t| {
                let x = stripes.iter().position(|&s| Some(s) == t.stripe_size)?;
                let y = devices.iter().position(|&d| Some(d) == t.devices)?;
                let r = t
                    .results
                    .iter()
                    .find(|r| &r.test == test && &r.direction == direction)?;
                Some((x, y, r.median.mb_per_s))
            })
            .collect();
        let best = cells.iter().map(|c| c.2).fold(0.0f64, f64::max);
        let mut chart = ChartBuilder::on(area)
            .caption(format!("{test} {direction}, {set}"), ("sans-serif", 14))
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(40)
            .build_cartesian_2d(0f64..nx as f64, 0f64..ny as f64)
            .map_err(err)?;
        let xl: Vec<String> = stripes.iter().map(|&s| stripe_label(s)).collect();
        let yl: Vec<String> = devices.iter().map(|d| d.to_string()).collect();
        let at = |labels: &[String], v: f64| {
            let i = (v - 0.5).round();
            if (v - 0.5 - i).abs() < 0.01 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        chart
            .configure_mesh()
            .disable_mesh()
            .x_labels(nx * 2 + 1)
            .y_labels(ny * 2 + 1)
            .x_label_formatter(&|v| at(&xl, *v))
            .y_label_formatter(&|v| at(&yl, *v))
            .x_desc("stripe size")
            .y_desc("devices")
            .draw()
            .map_err(err)?;
        for &(x, y, mb) in &cells {
            let f = if best > 0.0 { mb / best } else { 0.0 };
            let (x, y) = (x as f64, y as f64);
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(x, y), (x + 1.0, y + 1.0)],
                    shade(f).filled(),
                )))
                .map_err(err)?;
            let ink = if f > 0.55 { WHITE } else { BLACK };
            chart
                .draw_series(std::iter::once(Text::new(
                    format!("{mb:.0}"),
                    (x + 0.38, y + 0.55),
                    ("sans-serif", 13).into_font().color(&ink),
                )))
                .map_err(err)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Measured;
    use crate::report::TestResult;

    fn target(stripe: u32, devices: usize, mb: f64) -> Target {
        let m = Measured {
            mb_per_s: mb,
            ..Measured::default()
        };
        Target {
            label: format!("{devices}x{stripe}"),
            stripe_size: Some(stripe),
            width: Some(devices as u32),
            devices: Some(devices),
            controller_cache: Some("off".into()),
            results: vec![TestResult {
                test: "SEQ1M Q8T1".into(),
                direction: "read".into(),
                runs: vec![m.clone()],
                median: m.clone(),
                best: m,
                fio: None,
                fio_runs: Vec::new(),
            }],
            ..Target::default()
        }
    }

    #[test]
    fn a_sweep_becomes_a_grid_of_cells_in_svg_and_png() {
        let report = Report {
            profile: "cdm8".into(),
            size: 1 << 20,
            duration_secs: 1.0,
            runs: 1,
            direct: true,
            measured_by: "engine".into(),
            cpus: None,
            baseline: None,
            targets: vec![
                target(8192, 4, 300.0),
                target(65536, 4, 650.0),
                target(8192, 8, 310.0),
                target(65536, 8, 940.0),
            ],
        };
        assert!(fits(&report));
        let dir = tempfile::tempdir().unwrap();
        let chart = dir.path().join("sweep.svg");
        let svg = path_beside(&chart);
        assert_eq!(svg.file_name().unwrap(), "sweep-heatmap.svg");
        write(&report, &svg).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        for want in ["940", "310", "64K", "card cache off", "<rect"] {
            assert!(text.contains(want), "{want}");
        }
        let png = path_beside(&dir.path().join("sweep.png"));
        write(&report, &png).unwrap();
        assert_eq!(&std::fs::read(&png).unwrap()[1..4], b"PNG");
        // 8 devices over 4: no gain at 8K, 45 % at 64K.
        let summary = crossover(&report);
        assert!(
            summary.contains("1.03x") && summary.contains("1.45x"),
            "{summary}"
        );
        assert!(summary.trim_end().ends_with("8K"), "{summary}");
        // One configuration is no sweep.
        let one = Report {
            targets: vec![target(8192, 4, 1.0)],
            ..report
        };
        assert!(!fits(&one));
    }
}
