//! `stripefs stats`: the cache statistics as tables (casadm -P's), JSON, CSV or the Prometheus
//! text format; `--watch` redraws a screen that fits 80x24; `--reset` zeroes the counters.

use super::resolve::resolve;
use super::{human_bytes, refusal};
use crate::error::{Error, Result};
use crate::xattr;
use serde_json::Value;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StatsFormat {
    Table,
    Json,
    Csv,
    Prometheus,
}

pub(super) fn read_stats(mountpoint: &Path) -> Result<Value> {
    let raw =
        xattr::control_get(mountpoint, "stats").map_err(refusal("stats", mountpoint, "stats"))?;
    serde_json::from_slice(&raw)
        .map_err(|e| Error::Usage(format!("bad statistics from the daemon: {e}")))
}

pub fn stats(path: &Path, format: StatsFormat, watch: bool, reset: bool) -> Result<()> {
    let root = resolve(path)?.root;
    let mountpoint = root.as_path();
    if reset {
        xattr::control_set(mountpoint, "stats", b"reset").map_err(refusal(
            "stats --reset",
            mountpoint,
            "stats",
        ))?;
        println!(
            "{}: cache statistics reset (every counter, per class and in total)",
            mountpoint.display()
        );
        return Ok(());
    }
    loop {
        let status = xattr::volume_status(mountpoint)?;
        let cache = if status["cache"].is_null() {
            Value::Null
        } else {
            read_stats(mountpoint)?
        };
        let mut out = String::new();
        match format {
            StatsFormat::Json => {
                let both = serde_json::json!({ "devices": status["devices"], "cache": cache });
                out = serde_json::to_string_pretty(&both).unwrap_or_default() + "\n";
            }
            StatsFormat::Csv => out = csv(&cache),
            StatsFormat::Prometheus => out = prometheus(&cache),
            StatsFormat::Table if watch => {
                out = screen(mountpoint, &status, &cache, 80, 24);
                print!("\x1b[2J\x1b[H");
            }
            StatsFormat::Table => {
                print_device_health(&status);
                if cache.is_null() {
                    println!("\n(no cache on this volume)");
                } else if cache["state"] == "detached" {
                    println!(
                        "\ncache: detached (`stripefs cache attach {}` brings it back); \
                         default mode {}",
                        mountpoint.display(),
                        cache["default_mode"].as_str().unwrap_or("?")
                    );
                } else {
                    print_stats(&cache);
                }
            }
        }
        print!("{out}");
        if !watch {
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// The policy as `key=value` words: durations as seconds, objects flattened.
pub fn policy_summary(policy: &Value) -> String {
    fn word(v: &Value) -> String {
        match v {
            Value::Object(o) if o.contains_key("secs") => {
                let secs = n(&o["secs"]) as f64 + n(&o["nanos"]) as f64 / 1e9;
                format!("{secs}s")
            }
            Value::Object(o) => o
                .iter()
                .map(|(k, v)| format!("{k}:{}", word(v)))
                .collect::<Vec<_>>()
                .join(","),
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }
    match policy.as_object() {
        Some(o) => o
            .iter()
            .map(|(k, v)| format!("{k}={}", word(v)))
            .collect::<Vec<_>>()
            .join(" "),
        None => "-".into(),
    }
}

/// The names of the counters of a scope (the volume or a class), in name order.
fn counter_keys(c: &Value) -> Vec<String> {
    c["counters"]
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

/// One row per scope: the volume (`total`), then each class.
fn csv(s: &Value) -> String {
    let mut out = String::new();
    if s.is_null() || s["state"] == "detached" {
        out += "scope,name,state\n";
        let state = if s.is_null() { "none" } else { "detached" };
        let _ = writeln!(out, "total,,{state}");
        return out;
    }
    let keys = counter_keys(s);
    let fixed = [
        "mode",
        "occupancy_lines",
        "dirty_lines",
        "dirty_for_secs",
        "serviced_requests",
        "total_requests",
    ];
    let field = |v: &Value| -> String {
        let t = match v {
            Value::Null => String::new(),
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        if t.contains([',', '"', '\n']) {
            format!("\"{}\"", t.replace('"', "\"\""))
        } else {
            t
        }
    };
    let _ = writeln!(out, "scope,name,{},{}", fixed.join(","), keys.join(","));
    let mut row = |scope: &str, name: &Value, v: &Value, mode: &Value| {
        let mut cells = vec![scope.to_string(), field(name), field(mode)];
        cells.extend(fixed[1..].iter().map(|k| field(&v[*k])));
        cells.extend(keys.iter().map(|k| field(&v["counters"][k])));
        let _ = writeln!(out, "{}", cells.join(","));
    };
    row("total", &Value::Null, s, &s["default_mode"]);
    for c in s["classes"].as_array().into_iter().flatten() {
        row("class", &c["name"], c, &c["mode"]);
    }
    out
}

/// A label value in the exposition format: backslash, double quote and newline escaped.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The Prometheus text exposition format: `stripefs_cache_*`, the volume's values without
/// labels and each class's with `class="NAME"` (a target's folder path, `class NAME`, or
/// `default`).
fn prometheus(s: &Value) -> String {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, samples: &[(Option<&str>, f64)]| {
        let _ = writeln!(out, "# HELP stripefs_cache_{name} {help}");
        let _ = writeln!(out, "# TYPE stripefs_cache_{name} {kind}");
        for (class, v) in samples {
            match class {
                Some(c) => {
                    let _ = writeln!(out, "stripefs_cache_{name}{{class=\"{}\"}} {v}", label(c));
                }
                None => {
                    let _ = writeln!(out, "stripefs_cache_{name} {v}");
                }
            }
        }
    };
    let attached = !s.is_null() && s["state"] != "detached";
    family(
        "attached",
        "gauge",
        "1 while a cache serves the volume, 0 without one or while detached.",
        &[(None, if attached { 1.0 } else { 0.0 })],
    );
    if !attached {
        return out;
    }
    let f = |v: &Value| v.as_f64().unwrap_or(0.0);
    let classes: Vec<&Value> = s["classes"].as_array().into_iter().flatten().collect();
    let per = |key: &str| -> Vec<(Option<&str>, f64)> {
        std::iter::once((None, f(&s[key])))
            .chain(classes.iter().map(|c| (c["name"].as_str(), f(&c[key]))))
            .collect()
    };
    for (key, help) in [
        ("lines", "Lines of the cache."),
        ("free_lines", "Lines holding nothing."),
        ("line_size_bytes", "Bytes per line."),
    ] {
        let src = if key == "line_size_bytes" {
            "line_size"
        } else {
            key
        };
        family(key, "gauge", help, &[(None, f(&s[src]))]);
    }
    family(
        "metadata_bytes",
        "gauge",
        "Bytes the line metadata takes in memory.",
        &[(None, f(&s["metadata_memory"]["total_bytes"]))],
    );
    family(
        "occupancy_lines",
        "gauge",
        "Lines holding data.",
        &per("occupancy_lines"),
    );
    family(
        "dirty_lines",
        "gauge",
        "Lines holding data not yet on the devices.",
        &per("dirty_lines"),
    );
    let age: Vec<(Option<&str>, f64)> = per("dirty_for_secs");
    family(
        "dirty_age_seconds",
        "gauge",
        "How long the oldest dirty line has been dirty (0: none).",
        &age,
    );
    family(
        "serviced_requests_total",
        "counter",
        "Requests the cache serviced (all but pass-through).",
        &per("serviced_requests"),
    );
    family(
        "requests_total",
        "counter",
        "Requests the cache got.",
        &per("total_requests"),
    );
    for key in counter_keys(s) {
        let samples: Vec<(Option<&str>, f64)> = std::iter::once((None, f(&s["counters"][&key])))
            .chain(
                classes
                    .iter()
                    .map(|c| (c["name"].as_str(), f(&c["counters"][&key]))),
            )
            .collect();
        let name = format!("{}_total", key.trim_end_matches("_total"));
        family(
            &name,
            "counter",
            &format!("The {} counter of casadm -P.", key.replace('_', " ")),
            &samples,
        );
    }
    for (key, help) in [
        ("cleaner_passes", "Passes of the cleaner."),
        ("cleaned_lines", "Lines the cleaner wrote back."),
        ("cleaner_errors", "Write-backs of the cleaner that failed."),
    ] {
        family(
            &format!("{key}_total"),
            "counter",
            help,
            &[(None, f(&s[key]))],
        );
    }
    out
}

/// `--watch`: what fits a `cols` x `rows` terminal (the last row left for the cursor).
fn screen(mountpoint: &Path, status: &Value, s: &Value, cols: usize, rows: usize) -> String {
    let mut lines: Vec<String> = Vec::new();
    let devices: Vec<&Value> = status["devices"].as_array().into_iter().flatten().collect();
    let ok = devices.iter().filter(|d| d["state"] == "ok").count();
    lines.push(format!(
        "stripefs stats {}  (every 1 s; Ctrl-C stops)",
        mountpoint.display()
    ));
    lines.push(format!("devices: {ok} of {} ok", devices.len()));
    if s.is_null() {
        lines.push("no cache on this volume".into());
    } else if s["state"] == "detached" {
        lines.push(format!(
            "cache: detached; default mode {}",
            s["default_mode"].as_str().unwrap_or("?")
        ));
    } else {
        let total = n(&s["lines"]).max(1);
        let pct = |x: u64| 100.0 * x as f64 / total as f64;
        lines.push(format!(
            "cache: {} {}, {} lines of {}, mode {}{}",
            s["store"].as_str().unwrap_or("?"),
            human_bytes(n(&s["size_bytes"])),
            n(&s["lines"]),
            human_bytes(n(&s["line_size"])),
            s["default_mode"].as_str().unwrap_or("?"),
            if s["failed"] == true { ", FAILED" } else { "" }
        ));
        lines.push(format!(
            "used {} ({:.1}%)  dirty {} ({:.1}%)  dirty for {}",
            n(&s["occupancy_lines"]),
            pct(n(&s["occupancy_lines"])),
            n(&s["dirty_lines"]),
            pct(n(&s["dirty_lines"])),
            s["dirty_for_secs"]
                .as_f64()
                .map_or("-".into(), |d| format!("{d:.1} s"))
        ));
        let c = &s["counters"];
        let reads = n(&c["read_hits"])
            + n(&c["read_partial_misses"])
            + n(&c["read_full_misses"])
            + n(&c["pass_through_reads"]);
        let ratio = |x: u64, of: u64| {
            if of == 0 {
                0.0
            } else {
                100.0 * x as f64 / of as f64
            }
        };
        lines.push(format!(
            "requests: {} serviced of {}, read hits {:.1}%",
            n(&s["serviced_requests"]),
            n(&s["total_requests"]),
            ratio(n(&c["read_hits"]), reads)
        ));
        lines.push(format!(
            "cleaner: {} passes, {} lines written back, {} errors",
            n(&s["cleaner_passes"]),
            n(&s["cleaned_lines"]),
            n(&s["cleaner_errors"])
        ));
        lines.push(format!("policy: {}", policy_summary(&s["policy"])));
        lines.push(format!(
            "metadata memory: {} ({} B/line)",
            human_bytes(n(&s["metadata_memory"]["total_bytes"])),
            n(&s["metadata_memory"]["bytes_per_line"])
        ));
        lines.push(String::new());
        lines.push(format!(
            "{:<28} {:<4} {:>9} {:>9} {:>8} {:>16}",
            "class", "mode", "lines", "dirty", "dirty s", "serviced/total"
        ));
        let classes: Vec<&Value> = s["classes"].as_array().into_iter().flatten().collect();
        let room = rows - 1 - lines.len();
        let shown = if classes.len() > room {
            room - 1
        } else {
            classes.len()
        };
        for c in &classes[..shown] {
            let mut name = c["name"].as_str().unwrap_or("?").to_string();
            if name.chars().count() > 28 {
                let tail: String = name.chars().rev().take(27).collect();
                name = format!("~{}", tail.chars().rev().collect::<String>());
            }
            lines.push(format!(
                "{:<28} {:<4} {:>9} {:>9} {:>8} {:>16}",
                name,
                c["mode"].as_str().unwrap_or("?"),
                n(&c["occupancy_lines"]),
                n(&c["dirty_lines"]),
                c["dirty_for_secs"]
                    .as_f64()
                    .map_or("-".into(), |d| format!("{d:.0}")),
                format!("{}/{}", n(&c["serviced_requests"]), n(&c["total_requests"]))
            ));
        }
        if shown < classes.len() {
            lines.push(format!(
                "... {} more classes (stripefs stats without --watch)",
                classes.len() - shown
            ));
        }
    }
    lines.truncate(rows - 1);
    let mut out = String::new();
    for l in lines {
        let cut: String = l.chars().take(cols).collect();
        out += &cut;
        out.push('\n');
    }
    out
}

fn print_device_health(status: &serde_json::Value) {
    println!(
        "  #  {:<40} {:>7} {:>12} {:>12} {:>7}",
        "device", "state", "read errors", "write errors", "faults"
    );
    for d in status["devices"].as_array().into_iter().flatten() {
        println!(
            "  {:<2} {:<40} {:>7} {:>12} {:>12} {:>7}",
            d["index"],
            d["path"].as_str().unwrap_or("?"),
            d["state"].as_str().unwrap_or("?"),
            d["read_errors"].to_string(),
            d["write_errors"].to_string(),
            d["injected_faults"].to_string()
        );
    }
}

fn print_stats(s: &serde_json::Value) {
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    let lines = n(&s["lines"]).max(1);
    let pct = |x: u64| 100.0 * x as f64 / lines as f64;
    println!(
        "cache: {} store{}, {} in {} lines of {} ({} metadata shards), default mode {}",
        s["store"].as_str().unwrap_or("?"),
        s["path"]
            .as_str()
            .map(|p| format!(" at {p}"))
            .unwrap_or_default(),
        human_bytes(n(&s["size_bytes"])),
        n(&s["lines"]),
        human_bytes(n(&s["line_size"])),
        n(&s["shards"]),
        s["default_mode"].as_str().unwrap_or("?")
    );
    if s["failed"].as_bool() == Some(true) {
        println!(
            "CACHE DEVICE FAILED: running pass-through; dirty lines stay until it can be read"
        );
    }
    println!("\nUsage statistics         lines        %");
    for (label, key) in [
        ("occupancy", "occupancy_lines"),
        ("free", "free_lines"),
        ("clean", "clean_lines"),
        ("dirty", "dirty_lines"),
    ] {
        println!("  {label:<20} {:>9} {:>8.1}", n(&s[key]), pct(n(&s[key])));
    }
    let print_counters = |title: &str, scope: &serde_json::Value| {
        let c = &scope["counters"];
        let reads = n(&c["read_hits"])
            + n(&c["read_partial_misses"])
            + n(&c["read_full_misses"])
            + n(&c["pass_through_reads"]);
        let writes = n(&c["write_hits"])
            + n(&c["write_partial_misses"])
            + n(&c["write_full_misses"])
            + n(&c["pass_through_writes"]);
        let p = |x: u64, of: u64| {
            if of == 0 {
                0.0
            } else {
                100.0 * x as f64 / of as f64
            }
        };
        println!("\n{title}");
        println!(
            "  serviced requests {} of {} ({:.1} %)",
            n(&scope["serviced_requests"]),
            n(&scope["total_requests"]),
            p(n(&scope["serviced_requests"]), n(&scope["total_requests"]))
        );
        println!("  {:<24} {:>12} {:>8}", "request", "count", "%");
        for (label, key, of) in [
            ("read hits", "read_hits", reads),
            ("read partial misses", "read_partial_misses", reads),
            ("read full misses", "read_full_misses", reads),
            ("read pass-through", "pass_through_reads", reads),
            ("write hits", "write_hits", writes),
            ("write partial misses", "write_partial_misses", writes),
            ("write full misses", "write_full_misses", writes),
            ("write pass-through", "pass_through_writes", writes),
        ] {
            println!(
                "  {label:<24} {:>12} {:>8.1}",
                n(&c[key]),
                p(n(&c[key]), of)
            );
        }
        println!("  {:<24} {:>12}", "block", "bytes");
        for (label, key) in [
            ("reads from core", "core_read_bytes"),
            ("writes to core", "core_write_bytes"),
            ("reads from cache", "cache_read_bytes"),
            ("writes to cache", "cache_write_bytes"),
            ("reads by callers", "caller_read_bytes"),
            ("writes by callers", "caller_write_bytes"),
        ] {
            println!("  {label:<24} {:>12}", human_bytes(n(&c[key])));
        }
        println!("  {:<24} {:>12} {:>8}", "errors", "read", "write");
        for (label, dev) in [("core errors", "core"), ("cache errors", "cache")] {
            println!(
                "  {label:<24} {:>12} {:>8}",
                n(&c[format!("{dev}_read_errors").as_str()]),
                n(&c[format!("{dev}_write_errors").as_str()])
            );
        }
    };
    println!(
        "  {:<20} {:>9}",
        "dirty for",
        s["dirty_for_secs"]
            .as_f64()
            .map_or("-".to_string(), |d| format!("{d:.1} s"))
    );
    println!(
        "\npolicy: mode {}, {}",
        s["default_mode"].as_str().unwrap_or("?"),
        policy_summary(&s["policy"])
    );
    let m = &s["metadata_memory"];
    println!(
        "metadata memory: {} ({} B per line: slots {}, LRU {}, index {}, objects {})",
        human_bytes(n(&m["total_bytes"])),
        n(&m["bytes_per_line"]),
        human_bytes(n(&m["slots_bytes"])),
        human_bytes(n(&m["lru_bytes"])),
        human_bytes(n(&m["index_bytes"])),
        human_bytes(n(&m["objects_bytes"])),
    );
    print_counters("Volume", s);
    println!(
        "\ncleaner: {} passes, {} lines written back, {} errors",
        n(&s["cleaner_passes"]),
        n(&s["cleaned_lines"]),
        n(&s["cleaner_errors"])
    );
    println!("  policy {}", s["cleaner"].as_str().unwrap_or("?"));
    let threshold = n(&s["error_threshold"]);
    println!(
        "requests that met a cache device error: {}{}",
        n(&s["error_requests"]),
        if threshold == 0 {
            " (never pass-through for them)".to_string()
        } else {
            format!(" (pass-through at {threshold})")
        }
    );
    for c in s["classes"].as_array().into_iter().flatten() {
        let title = format!(
            "Class {} ({}): mode {}, priority {}, allocation {}, {}{} lines, {} dirty{}",
            c["id"],
            c["name"].as_str().unwrap_or("?"),
            c["mode"].as_str().unwrap_or("?"),
            c["priority"],
            c["allocation"],
            if c["pinned"].as_bool() == Some(true) {
                "pinned, "
            } else {
                ""
            },
            n(&c["occupancy_lines"]),
            n(&c["dirty_lines"]),
            c["dirty_for_secs"]
                .as_f64()
                .map(|d| format!(" for {d:.1} s"))
                .unwrap_or_default()
        );
        print_counters(&title, c);
    }
}
