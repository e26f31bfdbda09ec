//! Cache commands: target add/rm/ls, stats, flush, mode.

use super::resolve::resolve;
use super::{human_bytes, refusal, ClassAction, TargetAction};
use crate::error::{Error, Result};
use crate::xattr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub fn mode(path: &Path, mode: Option<String>) -> Result<i32> {
    let root = has_cache(path)?;
    if let Some(m) = &mode {
        xattr::control_set(&root, "mode", m.as_bytes()).map_err(refusal("mode", &root, "mode"))?;
    }
    let now = xattr::control_get(&root, "mode").map_err(refusal("mode", &root, "mode"))?;
    println!(
        "{}: default cache mode {}{}",
        root.display(),
        String::from_utf8_lossy(&now),
        if mode.is_some() { " (changed)" } else { "" }
    );
    Ok(0)
}

/// `stripefs cleaner`: changes the settings given, then prints them all.
pub fn cleaner(path: &Path, settings: &[(&str, Option<String>)]) -> Result<i32> {
    let root = has_cache(path)?;
    let spec: Vec<String> = settings
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={v}")))
        .collect();
    if !spec.is_empty() {
        xattr::control_set(&root, "cleaner", spec.join(" ").as_bytes())
            .map_err(refusal("cleaner", &root, "cleaner"))?;
    }
    let now = xattr::control_get(&root, "cleaner").map_err(refusal("cleaner", &root, "cleaner"))?;
    println!(
        "{}: cleaner{}",
        root.display(),
        if spec.is_empty() { "" } else { " (changed)" }
    );
    for word in String::from_utf8_lossy(&now).split_whitespace() {
        let (k, v) = word.split_once('=').unwrap_or((word, ""));
        println!("  {k:<22} {v}");
    }
    Ok(0)
}

/// The root of the stripefs mount `path` is on, which must have a cache.
fn has_cache(path: &Path) -> Result<PathBuf> {
    let root = resolve(path)?.root;
    let status = xattr::volume_status(&root)?;
    if status["cache"].is_null() {
        return Err(Error::Usage(format!(
            "{} has no cache (add a [cache] section to its config)",
            root.display()
        )));
    }
    Ok(root)
}

/// The folder targets of the volume mounted at `root`, as the daemon lists them.
fn target_list(root: &Path, command: &str) -> Result<serde_json::Value> {
    let raw = xattr::control_get(root, "targets").map_err(refusal(command, root, "targets"))?;
    serde_json::from_slice(&raw)
        .map_err(|e| Error::Usage(format!("bad target list from the daemon: {e}")))
}

pub fn target(action: TargetAction) -> Result<()> {
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
            resolve(&dir)?;
            xattr::control_set(&dir, "cache", value.as_bytes()).map_err(refusal(
                "target add",
                &dir,
                "cache",
            ))?;
            let now =
                xattr::control_get(&dir, "cache").map_err(refusal("target add", &dir, "cache"))?;
            println!("{}: {}", dir.display(), String::from_utf8_lossy(&now));
            Ok(())
        }
        TargetAction::Rm { dir } => {
            let root = has_cache(&dir)?;
            let was =
                xattr::control_get(&dir, "cache").map_err(refusal("target rm", &dir, "cache"))?;
            let ino = std::fs::metadata(&dir).map(|m| m.ino()).ok();
            let listed = target_list(&root, "target rm")?;
            let entry = listed
                .as_array()
                .into_iter()
                .flatten()
                .find(|t| t["inode"].as_u64().is_some() && t["inode"].as_u64() == ino)
                .cloned();
            xattr::control_remove(&dir, "cache").map_err(refusal("target rm", &dir, "cache"))?;
            println!(
                "{}: no longer a cache target (it was {}); its dirty lines were written back, \
                 and its files now follow the enclosing target or the volume default",
                dir.display(),
                String::from_utf8_lossy(&was)
            );
            // A config target (changed live or not) is applied again at the next mount.
            if let Some(t) = entry.filter(|t| {
                t["from_config"].as_bool() == Some(true) || t["config_path"].is_string()
            }) {
                let config = xattr::volume_status(&root)
                    .ok()
                    .and_then(|s| s["config"].as_str().map(str::to_string))
                    .unwrap_or_else(|| "the volume's config".into());
                eprintln!(
                    "stripefs: warning: {} is a target of the config ([[cache.target]] path = \
                     \"{}\" in {config}): it comes back on this folder at the next mount; \
                     remove it from the config for good",
                    dir.display(),
                    t["config_path"]
                        .as_str()
                        .or(t["path"].as_str())
                        .unwrap_or("?"),
                );
            }
            Ok(())
        }
        TargetAction::Ls { mountpoint, json } => {
            let root = has_cache(&mountpoint)?;
            let list = target_list(&root, "target ls")?;
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
                    match (t["from_config"].as_bool(), t["config_path"].as_str()) {
                        (Some(true), Some(p)) => format!("config {p}"),
                        (Some(true), None) => "config".into(),
                        _ => "live".into(),
                    }
                );
            }
            Ok(())
        }
    }
}

fn read_stats(mountpoint: &Path) -> Result<serde_json::Value> {
    let raw =
        xattr::control_get(mountpoint, "stats").map_err(refusal("stats", mountpoint, "stats"))?;
    serde_json::from_slice(&raw)
        .map_err(|e| Error::Usage(format!("bad statistics from the daemon: {e}")))
}

pub fn stats(path: &Path, json: bool, watch: bool) -> Result<()> {
    let root = resolve(path)?.root;
    let mountpoint = root.as_path();
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
        println!("  {:<24} {:>12} {:>8}", "errors", "read", "write");
        for (label, dev) in [("core errors", "core"), ("cache errors", "cache")] {
            println!(
                "  {label:<24} {:>12} {:>8}",
                n(&c[format!("{dev}_read_errors").as_str()]),
                n(&c[format!("{dev}_write_errors").as_str()])
            );
        }
    };
    print_counters("Volume", &s["counters"]);
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

pub fn flush(path: &Path) -> Result<()> {
    let root = has_cache(path)?;
    let mountpoint = root.as_path();
    let dirty = |s: &serde_json::Value| s["dirty_lines"].as_u64().unwrap_or(0);
    let start = dirty(&read_stats(mountpoint)?);
    let bar = indicatif::ProgressBar::new(start.max(1));
    bar.set_style(
        indicatif::ProgressStyle::with_template("flushing [{bar:30}] {pos}/{len} lines {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let target = mountpoint.to_path_buf();
    // The daemon keeps a refusal's reason for the requesting thread: the worker reads it.
    let worker = std::thread::spawn(move || xattr::control_set(&target, "flush", b"1"));
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
    r.map_err(refusal("flush", mountpoint, "flush"))?;
    let left = dirty(&read_stats(mountpoint)?);
    println!(
        "{}: flushed {start} dirty lines; {left} dirty now",
        mountpoint.display()
    );
    Ok(())
}

/// The IO classes of the volume mounted at `root`, as the daemon lists them.
fn class_list(root: &Path, command: &str) -> Result<serde_json::Value> {
    let raw = xattr::control_get(root, "classes").map_err(refusal(command, root, "classes"))?;
    serde_json::from_slice(&raw)
        .map_err(|e| Error::Usage(format!("bad class list from the daemon: {e}")))
}

pub fn class(action: ClassAction) -> Result<()> {
    match action {
        ClassAction::Add {
            mountpoint,
            name,
            directory,
            extension,
            min_size,
            max_size,
            direction,
            mode,
            priority,
            allocation,
            min_allocation,
            pin,
        } => {
            let root = has_cache(&mountpoint)?;
            let mut spec = format!("name={name}");
            if let Some(dir) = directory {
                // A folder on the mount, named as the volume knows it: from its root.
                let full = std::fs::canonicalize(&dir)
                    .map_err(|e| Error::Usage(format!("--directory {}: {e}", dir.display())))?;
                let inside = full.strip_prefix(&root).map_err(|_| {
                    Error::Usage(format!(
                        "--directory {}: not on the volume mounted at {}",
                        dir.display(),
                        root.display()
                    ))
                })?;
                spec += &format!(" directory=/{}", inside.display());
            }
            for (key, value) in [
                ("extension", extension),
                ("min_size", min_size),
                ("max_size", max_size),
                ("direction", direction),
                ("mode", mode),
                ("priority", priority.map(|p| p.to_string())),
                ("allocation", allocation.map(|a| a.to_string())),
                ("min_allocation", min_allocation.map(|a| a.to_string())),
            ] {
                if let Some(v) = value {
                    if v.contains(char::is_whitespace) {
                        return Err(Error::Usage(format!("--{key} \"{v}\": no spaces")));
                    }
                    spec += &format!(" {key}={v}");
                }
            }
            if pin {
                spec += " pinned=1";
            }
            xattr::control_set(&root, "classes", format!("add {spec}").as_bytes())
                .map_err(refusal("class add", &root, "classes"))?;
            let list = class_list(&root, "class add")?;
            let now = list
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["name"].as_str() == Some(name.as_str()))
                .and_then(|c| c["spec"].as_str().map(str::to_string))
                .unwrap_or_default();
            println!("{}: class {now}", root.display());
            Ok(())
        }
        ClassAction::Rm { mountpoint, name } => {
            let root = has_cache(&mountpoint)?;
            let list = class_list(&root, "class rm")?;
            let from_config = list
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["name"].as_str() == Some(name.as_str()) && c["from_config"] == true);
            xattr::control_set(&root, "classes", format!("rm {name}").as_bytes())
                .map_err(refusal("class rm", &root, "classes"))?;
            println!(
                "{}: IO class {name} removed; its dirty lines were written back, and its files' \
                 requests now go to the other classes, their folder's target or the default",
                root.display()
            );
            if from_config {
                eprintln!(
                    "stripefs: warning: {name} is a [[cache.class]] of the config: it comes back \
                     at the next mount; remove it from the config for good"
                );
            }
            Ok(())
        }
        ClassAction::Ls { mountpoint, json } => {
            let root = has_cache(&mountpoint)?;
            let list = class_list(&root, "class ls")?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&list).unwrap_or_default()
                );
                return Ok(());
            }
            println!(
                "{:<16} {:<5} {:>8} {:>10} {:>6} {:>6} {:>8} {:>8}  from    conditions",
                "class", "mode", "priority", "allocation", "min", "pinned", "lines", "dirty"
            );
            let size = |v: &serde_json::Value| v.as_u64().map(mountcfg::format_size);
            for c in list.as_array().into_iter().flatten() {
                let mut when = Vec::new();
                if let Some(d) = c["directory_now"].as_str() {
                    let given = c["directory"].as_str().unwrap_or(d);
                    when.push(if given == d {
                        format!("under {d}")
                    } else {
                        format!("under {d} (config {given})")
                    });
                }
                let exts: Vec<&str> = c["extensions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|e| e.as_str())
                    .collect();
                if !exts.is_empty() {
                    when.push(format!("*.{}", exts.join(" *.")));
                }
                match (size(&c["min_size"]), size(&c["max_size"])) {
                    (Some(lo), Some(hi)) => when.push(format!("{lo}..{hi}")),
                    (Some(lo), None) => when.push(format!(">= {lo}")),
                    (None, Some(hi)) => when.push(format!("<= {hi}")),
                    (None, None) => {}
                }
                if let Some(d) = c["direction"].as_str() {
                    when.push(format!("{d}s"));
                }
                println!(
                    "{:<16} {:<5} {:>8} {:>10} {:>6} {:>6} {:>8} {:>8}  {:<7} {}",
                    c["name"].as_str().unwrap_or("?"),
                    c["mode"].as_str().unwrap_or("?"),
                    c["priority"].to_string(),
                    c["allocation"].to_string(),
                    c["min_allocation"].to_string(),
                    c["pinned"].to_string(),
                    c["occupancy_lines"].to_string(),
                    c["dirty_lines"].to_string(),
                    if c["from_config"] == true {
                        "config"
                    } else {
                        "live"
                    },
                    when.join(", ")
                );
            }
            Ok(())
        }
    }
}
