//! Charts of a report: one panel per test, throughput against stripe size, one line per
//! device count (width) and cache setting, the no-FUSE baseline as a grey line.

use crate::report::Report;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;
use std::sync::Once;

const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

static FONT: Once = Once::new();

/// Text needs a TrueType font for its metrics; DejaVu (Debian: fonts-dejavu-core) is looked for.
pub(crate) fn register_font() -> Result<(), String> {
    let mut found = false;
    FONT.call_once(|| {
        for path in FONTS {
            if let Ok(bytes) = std::fs::read(path) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    found = true;
                    return;
                }
            }
        }
    });
    if found || FONTS.iter().any(|p| Path::new(p).exists()) {
        Ok(())
    } else {
        Err("charts need a TrueType font: apt-get install fonts-dejavu-core".into())
    }
}

/// The chart formats, by file extension.
pub const FORMATS: &[&str] = &["svg", "png"];

/// A chart's format, taken from its file's extension (case aside); anything but `.svg` or
/// `.png` is refused, with the formats listed, so no chart is written under a wrong name.
pub fn format_of(path: &Path) -> Result<&'static str, String> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext
        .as_deref()
        .and_then(|e| FORMATS.iter().find(|f| **f == e))
    {
        Some(f) => Ok(f),
        None => Err(format!(
            "{}: unknown chart format {}; the formats are {} (taken from the extension)",
            path.display(),
            ext.map_or("(no extension)".to_string(), |e| format!("\".{e}\"")),
            FORMATS
                .iter()
                .map(|f| format!(".{f}"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// Writes the chart as SVG or PNG, as the path's extension says.
pub fn write(report: &Report, path: &Path) -> Result<(), String> {
    let png = format_of(path)? == "png";
    register_font()?;
    let panels = panel_list(report);
    let cols = 2.min(panels.len().max(1));
    let rows = panels.len().div_ceil(cols).max(1);
    let size = (560 * cols as u32, 360 * rows as u32 + 40);
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

/// (test, direction) in report order.
fn panel_list(report: &Report) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for t in report.baseline.iter().chain(&report.targets) {
        for r in &t.results {
            let key = (r.test.clone(), r.direction.clone());
            if !out.contains(&key) {
                out.push(key);
            }
        }
    }
    out
}

pub(crate) fn stripe_label(bytes: u32) -> String {
    if bytes >= 1024 {
        format!("{}K", bytes / 1024)
    } else {
        bytes.to_string()
    }
}

fn draw<DB: DrawingBackend>(
    report: &Report,
    panels: &[(String, String)],
    cols: usize,
    root: &DrawingArea<DB, Shift>,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let title = format!(
        "stripefs bench: {}, {} test file{}",
        report.profile,
        crate::report::human(report.size),
        if report.emulated() {
            "  (EMULATED devices)"
        } else {
            ""
        }
    );
    let (head, body) = root.split_vertically(40);
    head.titled(&title, ("sans-serif", 22)).map_err(err)?;
    let rows = panels.len().div_ceil(cols).max(1);
    let areas = body.split_evenly((rows, cols));
    // X positions: the distinct stripe sizes (or target labels for plain directories).
    let mut xs: Vec<(Option<u32>, String)> = Vec::new();
    for t in &report.targets {
        let x = (
            t.stripe_size,
            t.stripe_size.map(stripe_label).unwrap_or(t.label.clone()),
        );
        if !xs.contains(&x) {
            xs.push(x);
        }
    }
    xs.sort();
    let x_of = |t: &crate::report::Target| {
        xs.iter()
            .position(|x| x.0 == t.stripe_size && (t.stripe_size.is_some() || x.1 == t.label))
            .unwrap_or(0)
    };
    // Series: one per (width, cache, RAID card cache).
    let mut series: Vec<(Option<u32>, Option<String>, Option<String>)> = Vec::new();
    for t in &report.targets {
        let s = (t.width, t.cache.clone(), t.controller_cache.clone());
        if !series.contains(&s) {
            series.push(s);
        }
    }
    series.sort();
    for (area, (test, direction)) in areas.iter().zip(panels) {
        let value = |t: &crate::report::Target| {
            t.results
                .iter()
                .find(|r| &r.test == test && &r.direction == direction)
                .map(|r| r.median.mb_per_s)
        };
        let base = report.baseline.as_ref().and_then(value);
        let top = report
            .targets
            .iter()
            .filter_map(value)
            .chain(base)
            .fold(1.0f64, f64::max)
            * 1.15;
        let n = xs.len().max(1);
        let mut chart = ChartBuilder::on(area)
            .caption(format!("{test} {direction}"), ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(56)
            .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..top)
            .map_err(err)?;
        let labels: Vec<String> = xs.iter().map(|x| x.1.clone()).collect();
        chart
            .configure_mesh()
            .x_labels(n)
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 0.01 && i >= 0.0 {
                    labels.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .x_desc("stripe size")
            .y_desc("MB/s")
            .draw()
            .map_err(err)?;
        if let Some(b) = base {
            chart
                .draw_series(LineSeries::new(
                    [(-0.5, b), (n as f64 - 0.5, b)],
                    ShapeStyle::from(&RGBColor(150, 150, 150)).stroke_width(2),
                ))
                .map_err(err)?
                .label("baseline (no FUSE)")
                .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], RGBColor(150, 150, 150)));
        }
        for (i, (width, cache, card)) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let mut points: Vec<(f64, f64)> = report
                .targets
                .iter()
                .filter(|t| &t.width == width && &t.cache == cache && &t.controller_cache == card)
                .filter_map(|t| Some((x_of(t) as f64, value(t)?)))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            let name = format!(
                "{}{}{}",
                width
                    .map(|w| crate::report::devices(w as usize))
                    .unwrap_or("target".into()),
                cache
                    .as_ref()
                    .map(|c| format!(", cache {c}"))
                    .unwrap_or_default(),
                card.as_ref()
                    .map(|c| format!(", card cache {c}"))
                    .unwrap_or_default()
            );
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
                .map_err(err)?
                .label(name)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color));
            chart
                .draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(err)?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 11))
            .draw()
            .map_err(err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Measured;
    use crate::report::{Target, TestResult};

    #[test]
    fn the_format_comes_from_the_extension() {
        assert_eq!(format_of(Path::new("a/out.svg")), Ok("svg"));
        assert_eq!(format_of(Path::new("OUT.PNG")), Ok("png"));
        for bad in ["out.jpg", "out", "out.svg.txt"] {
            let err = format_of(Path::new(bad)).unwrap_err();
            assert!(err.contains(".svg, .png"), "{bad}: {err}");
        }
        assert!(format_of(Path::new("out.jpg"))
            .unwrap_err()
            .contains("\".jpg\""));
    }

    fn target(stripe: u32, width: u32, mb: f64) -> Target {
        let m = Measured {
            mb_per_s: mb,
            ..Measured::default()
        };
        Target {
            label: format!("{width}x{stripe}"),
            stripe_size: Some(stripe),
            width: Some(width),
            devices: Some(width as usize),
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
    fn svg_and_png_are_written() {
        let report = Report {
            profile: "cdm8".into(),
            size: 1 << 20,
            duration_secs: 1.0,
            runs: 1,
            direct: true,
            measured_by: "engine".into(),
            cpus: None,
            baseline: Some(target(0, 0, 500.0)).map(|mut t| {
                t.stripe_size = None;
                t.width = None;
                t
            }),
            targets: vec![
                target(8192, 2, 300.0),
                target(65536, 2, 400.0),
                target(8192, 4, 450.0),
            ],
        };
        let dir = tempfile::tempdir().unwrap();
        let svg = dir.path().join("chart.svg");
        write(&report, &svg).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("<svg") && text.contains("SEQ1M Q8T1 read") && text.contains("64K"));
        let png = dir.path().join("chart.png");
        write(&report, &png).unwrap();
        assert_eq!(&std::fs::read(&png).unwrap()[1..4], b"PNG");
    }
}
