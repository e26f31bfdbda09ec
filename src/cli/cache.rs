//! Cache commands: target add/rm/ls, flush, mode, class add/rm/ls (stats: `stats`; purge,
//! attach, detach: `cache_admin`).

use super::refusal;
use super::resolve::resolve;
use crate::error::{Error, Result};
use crate::xattr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(clap::Subcommand)]
pub enum TargetAction {
    /// Make DIR a cache target (or change it)
    #[command(
        after_help = "The folder's owner chooses its mode; priority, allocation and \
        pinning are for root or the user who mounted.\n\n\
        Example:\n  stripefs target add /mnt/vol/vm-images --mode wb --priority 0"
    )]
    Add {
        /// A directory on a mounted volume with a cache
        dir: PathBuf,
        /// Cache mode: wt, wb, wa, wi, wo or pt
        #[arg(long)]
        mode: String,
        /// Eviction priority, 0 to 255: 0 is kept longest (default for a new target: 0; root
        /// or the mounter only)
        #[arg(long)]
        priority: Option<u8>,
        /// Most of the cache this target may hold, above 0 and at most 1 (default for a new
        /// target: 1; root or the mounter only)
        #[arg(long)]
        allocation: Option<f64>,
        /// Never evict this target's lines (root or the mounter only)
        #[arg(long, conflicts_with = "unpin")]
        pin: bool,
        /// Evict this target's lines again
        #[arg(long)]
        unpin: bool,
    },
    /// Stop caching DIR by its own setting (its dirty lines are written back first)
    #[command(
        after_help = "A target from the config comes back at the next mount: remove \
        it from the config for good.\n\n\
        Example:\n  stripefs target rm /mnt/vol/vm-images"
    )]
    Rm {
        /// A cache target
        dir: PathBuf,
    },
    /// List the targets of a mounted volume
    #[command(after_help = "Example:\n  stripefs target ls /mnt/vol --json")]
    Ls {
        /// Any path on the mounted volume
        mountpoint: PathBuf,
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Subcommand)]
pub enum ClassAction {
    /// Add an IO class (or replace the one of that name); kept across mounts
    #[command(
        after_help = "A request goes to the IO class whose every condition it meets \
        (the lowest priority number first; a tie to the class listed first), else to its \
        file's folder target, else to the volume default. Sizes are the file's, both bounds \
        included (K, M, G, T are powers of 1024). Root or the user who mounted only.\n\n\
        Example:\n  stripefs class add /mnt/vol big-images --directory /mnt/vol/vm \
        --extension img,qcow2 --min-size 1G --direction write --mode wb --allocation 0.5 \
        --min-allocation 0.1"
    )]
    Add {
        /// Any path on the mounted volume
        mountpoint: PathBuf,
        /// The class's name: letters, digits, '-', '_' and '.'
        name: String,
        /// Only files with a name under this folder of the volume
        #[arg(long)]
        directory: Option<PathBuf>,
        /// Only files with a name ending so (comma-separated, without the dot: img,qcow2)
        #[arg(long)]
        extension: Option<String>,
        /// Only files at least this large (e.g. 1G)
        #[arg(long)]
        min_size: Option<String>,
        /// Only files at most this large (e.g. 64K)
        #[arg(long)]
        max_size: Option<String>,
        /// Only reads, or only writes
        #[arg(long, value_parser = ["read", "write"])]
        direction: Option<String>,
        /// Cache mode: wt, wb, wa, wi, wo or pt (default: the cache's mode)
        #[arg(long)]
        mode: Option<String>,
        /// Priority, 0 to 255: 0 is kept longest, and chosen first when classes overlap
        #[arg(long)]
        priority: Option<u8>,
        /// Most of the cache this class may hold, above 0 and at most 1
        #[arg(long)]
        allocation: Option<f64>,
        /// Least of the cache kept for this class, 0 to its allocation
        #[arg(long)]
        min_allocation: Option<f64>,
        /// Never evict this class's lines
        #[arg(long)]
        pin: bool,
    },
    /// Remove an IO class (its dirty lines are written back first)
    #[command(
        after_help = "A class of the config comes back at the next mount: remove \
        it from the config for good.\n\nExample:\n  stripefs class rm /mnt/vol big-images"
    )]
    Rm {
        /// Any path on the mounted volume
        mountpoint: PathBuf,
        name: String,
    },
    /// List the IO classes of a mounted volume
    #[command(after_help = "Example:\n  stripefs class ls /mnt/vol --json")]
    Ls {
        /// Any path on the mounted volume
        mountpoint: PathBuf,
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
    },
}

pub fn mode(path: &Path, mode: Option<String>, no_flush: bool) -> Result<i32> {
    let root = has_cache(path)?;
    let dirty_before = if no_flush {
        super::cache_admin::lines_in_reach(&root)?.1
    } else {
        0
    };
    if let Some(m) = &mode {
        let value = if no_flush {
            format!("{m} no-flush")
        } else {
            m.clone()
        };
        xattr::control_set(&root, "mode", value.as_bytes())
            .map_err(refusal("mode", &root, "mode"))?;
    }
    let now = xattr::control_get(&root, "mode").map_err(refusal("mode", &root, "mode"))?;
    println!(
        "{}: default cache mode {}{}",
        root.display(),
        String::from_utf8_lossy(&now),
        if mode.is_some() { " (changed)" } else { "" }
    );
    if no_flush && dirty_before > 0 {
        println!(
            "{dirty_before} dirty lines were not written back: they stay in the cache, and the \
             cleaner writes them back (`stripefs flush` does it now)"
        );
    }
    Ok(0)
}

/// `stripefs cleaner` and `stripefs params`: changes the settings given of the control key
/// `key`, then prints them all.
pub fn settings(path: &Path, key: &str, settings: &[(&str, Option<String>)]) -> Result<i32> {
    let root = has_cache(path)?;
    let spec: Vec<String> = settings
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={v}")))
        .collect();
    if !spec.is_empty() {
        xattr::control_set(&root, key, spec.join(" ").as_bytes())
            .map_err(refusal(key, &root, key))?;
    }
    let now = xattr::control_get(&root, key).map_err(refusal(key, &root, key))?;
    println!(
        "{}: {key}{}",
        root.display(),
        if spec.is_empty() { "" } else { " (changed)" }
    );
    for word in String::from_utf8_lossy(&now).split_whitespace() {
        let (k, v) = word.split_once('=').unwrap_or((word, ""));
        println!("  {k:<24} {v}");
    }
    Ok(0)
}

/// The root of the stripefs mount `path` is on, which must have a cache.
pub(super) fn has_cache(path: &Path) -> Result<PathBuf> {
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

/// `stripefs flush MNT [PATH]`: every dirty line, or those of a target folder or a file.
pub fn flush(path: &Path, within: Option<PathBuf>) -> Result<()> {
    let root = has_cache(path)?;
    let at = match within {
        Some(p) => super::cache_admin::on_volume(&root, &p)?,
        None => root.clone(),
    };
    let dirty = || super::cache_admin::lines_in_reach(&at).map(|l| l.1);
    let start = dirty()?;
    let bar = indicatif::ProgressBar::new(start.max(1));
    bar.set_style(
        indicatif::ProgressStyle::with_template("flushing [{bar:30}] {pos}/{len} lines {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let target = at.clone();
    // The daemon keeps a refusal's reason for the requesting thread: the worker reads it.
    let worker = std::thread::spawn(move || xattr::control_set(&target, "flush", b"1"));
    while !worker.is_finished() {
        if let Ok(now) = dirty() {
            bar.set_position(start.saturating_sub(now));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let r = worker
        .join()
        .map_err(|_| Error::Usage("flush thread panicked".into()))?;
    bar.finish_and_clear();
    r.map_err(refusal("flush", &at, "flush"))?;
    let left = dirty()?;
    println!(
        "{}: flushed {start} dirty lines; {left} dirty now",
        at.display()
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
