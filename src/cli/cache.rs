//! Cache commands: target add/rm/ls, stats, flush, mode.

use super::{human_bytes, TargetAction};
use crate::control::PREFIX;
use crate::error::{Error, Result};
use crate::xattr;
use std::path::Path;
use std::time::Duration;

pub fn mode(mountpoint: &Path, mode: Option<String>) -> Result<i32> {
    has_cache(mountpoint)?;
    let key = format!("{PREFIX}mode");
    if let Some(m) = mode {
        xattr::set(mountpoint, &key, m.as_bytes()).map_err(|e| match e.raw_os_error() {
            Some(libc::EINVAL) => {
                Error::Usage(format!("mode {m}: must be wt, wb, wa, wi, wo or pt"))
            }
            _ => xattr::explain(mountpoint, "mode", e),
        })?;
    }
    let now = xattr::get(mountpoint, &key).map_err(|e| xattr::explain(mountpoint, "mode", e))?;
    println!(
        "{}: default cache mode {}",
        mountpoint.display(),
        String::from_utf8_lossy(&now)
    );
    Ok(0)
}

/// Fails unless `mountpoint` is a stripefs mount with a cache.
fn has_cache(mountpoint: &Path) -> Result<serde_json::Value> {
    let status = xattr::volume_status(mountpoint)?;
    if status["cache"].is_null() {
        return Err(Error::Usage(format!(
            "{} has no cache (add a [cache] section to its config)",
            mountpoint.display()
        )));
    }
    Ok(status)
}

pub fn target(action: TargetAction) -> Result<()> {
    let key = format!("{PREFIX}cache");
    match action {
        TargetAction::Add {
            dir,
            mode,
            priority,
            allocation,
            pin,
            unpin,
        } => {
            if cache::Mode::parse(&mode).is_none() {
                return Err(Error::Usage(format!(
                    "--mode {mode}: must be wt, wb, wa, wi, wo or pt"
                )));
            }
            // Only what was asked: the rest keeps the target's current value.
            let mut value = format!("mode={mode}");
            if let Some(p) = priority {
                value += &format!(" priority={p}");
            }
            if let Some(a) = allocation {
                if !(a > 0.0 && a <= 1.0) {
                    return Err(Error::Usage(format!(
                        "--allocation {a}: must be above 0 and at most 1"
                    )));
                }
                value += &format!(" allocation={a}");
            }
            if pin || unpin {
                value += &format!(" pinned={}", u8::from(pin));
            }
            xattr::set(&dir, &key, value.as_bytes())
                .map_err(|e| xattr::explain(&dir, "cache", e))?;
            let now = xattr::get(&dir, &key).map_err(|e| xattr::explain(&dir, "cache", e))?;
            println!("{}: {}", dir.display(), String::from_utf8_lossy(&now));
            Ok(())
        }
        TargetAction::Rm { dir } => xattr::remove(&dir, &key).map_err(|e| match e.raw_os_error() {
            Some(libc::ENODATA) => Error::Usage(format!("{} is not a cache target", dir.display())),
            _ => xattr::explain(&dir, "cache", e),
        }),
        TargetAction::Ls { mountpoint, json } => {
            has_cache(&mountpoint)?;
            let raw = xattr::get(&mountpoint, &format!("{PREFIX}targets"))
                .map_err(|e| xattr::explain(&mountpoint, "targets", e))?;
            let list: serde_json::Value = serde_json::from_slice(&raw)
                .map_err(|e| Error::Usage(format!("bad target list from the daemon: {e}")))?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&list).unwrap_or_default()
                );
                return Ok(());
            }
            println!(
                "{:<32} {:<5} {:>8} {:>10} {:>6} {:>10} {:>10}  from",
                "folder", "mode", "priority", "allocation", "pinned", "lines", "dirty"
            );
            for t in list.as_array().into_iter().flatten() {
                println!(
                    "{:<32} {:<5} {:>8} {:>10} {:>6} {:>10} {:>10}  {}",
                    t["path"].as_str().unwrap_or("?"),
                    t["mode"].as_str().unwrap_or("?"),
                    t["priority"].to_string(),
                    t["allocation"].to_string(),
                    t["pinned"].to_string(),
                    t["occupancy_lines"].to_string(),
                    t["dirty_lines"].to_string(),
                    if t["from_config"].as_bool() == Some(true) {
                        "config"
                    } else {
                        "live"
                    }
                );
            }
            Ok(())
        }
    }
}

fn read_stats(mountpoint: &Path) -> Result<serde_json::Value> {
    let raw = xattr::get(mountpoint, &format!("{PREFIX}stats"))
        .map_err(|e| xattr::explain(mountpoint, "stats", e))?;
    serde_json::from_slice(&raw)
        .map_err(|e| Error::Usage(format!("bad statistics from the daemon: {e}")))
}

pub fn stats(mountpoint: &Path, json: bool, watch: bool) -> Result<()> {
    loop {
        let status = xattr::volume_status(mountpoint)?;
        let cache = if status["cache"].is_null() {
            serde_json::Value::Null
        } else {
            read_stats(mountpoint)?
        };
        if json {
            let both = serde_json::json!({ "devices": status["devices"], "cache": cache });
            println!(
                "{}",
                serde_json::to_string_pretty(&both).unwrap_or_default()
            );
        } else {
            if watch {
                print!("\x1b[2J\x1b[H");
            }
            print_device_health(&status);
            if cache.is_null() {
                println!("\n(no cache on this volume)");
            } else {
                print_stats(&cache);
            }
        }
        if !watch {
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
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
        "cache: {} store{}, {} in {} lines of {}, default mode {}",
        s["store"].as_str().unwrap_or("?"),
        s["path"]
            .as_str()
            .map(|p| format!(" at {p}"))
            .unwrap_or_default(),
        human_bytes(n(&s["size_bytes"])),
        n(&s["lines"]),
        human_bytes(n(&s["line_size"])),
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
    let print_counters = |title: &str, c: &serde_json::Value| {
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
        println!("  {:<24} {:>12}", "core errors", n(&c["core_errors"]));
        println!("  {:<24} {:>12}", "cache errors", n(&c["cache_errors"]));
    };
    print_counters("Volume", &s["counters"]);
    println!(
        "\ncleaner: {} passes, {} lines written back, {} errors",
        n(&s["cleaner_passes"]),
        n(&s["cleaned_lines"]),
        n(&s["cleaner_errors"])
    );
    for c in s["classes"].as_array().into_iter().flatten() {
        let title = format!(
            "Class {} ({}): mode {}, priority {}, allocation {}, {}{} lines, {} dirty",
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
            n(&c["dirty_lines"])
        );
        print_counters(&title, &c["counters"]);
    }
}

pub fn flush(mountpoint: &Path) -> Result<()> {
    has_cache(mountpoint)?;
    let dirty = |s: &serde_json::Value| s["dirty_lines"].as_u64().unwrap_or(0);
    let start = dirty(&read_stats(mountpoint)?);
    let bar = indicatif::ProgressBar::new(start.max(1));
    bar.set_style(
        indicatif::ProgressStyle::with_template("flushing [{bar:30}] {pos}/{len} lines {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let target = mountpoint.to_path_buf();
    let worker = std::thread::spawn(move || xattr::set(&target, &format!("{PREFIX}flush"), b"1"));
    while !worker.is_finished() {
        if let Ok(s) = read_stats(mountpoint) {
            bar.set_position(start.saturating_sub(dirty(&s)));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let r = worker
        .join()
        .map_err(|_| Error::Usage("flush thread panicked".into()))?;
    bar.finish_and_clear();
    r.map_err(|e| match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            Error::Usage("only root or the user who mounted may flush the volume".into())
        }
        _ => Error::Usage(format!("flush {}: {e}", mountpoint.display())),
    })?;
    let left = dirty(&read_stats(mountpoint)?);
    println!(
        "{}: flushed {start} dirty lines; {left} dirty now",
        mountpoint.display()
    );
    Ok(())
}
