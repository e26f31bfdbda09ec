//! `stripefs device`: the volume's device set, and devices joining it online.

use super::refusal;
use super::resolve::resolve;
use crate::error::{Error, Result};
use crate::xattr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(clap::Subcommand)]
pub enum DeviceAction {
    /// Add an empty directory to the mounted volume as its next device, online
    #[command(
        after_help = "The directory gets a superblock and joins the volume while it stays \
        mounted (as `btrfs device add`); the config file the volume was mounted from gains it \
        (edited in place, comments kept). Existing files keep their layouts; new files are \
        striped over the new device set (the volume's width follows it unless the config sets \
        `width`). A crash at any step leaves the volume as before the add or as after it. \
        Root or the user who mounted only.\n\nExample:\n  stripefs device add /mnt/vol /disks/d4"
    )]
    Add {
        /// Any path on the mounted volume
        mountpoint: PathBuf,
        /// The directory to add (empty, or left by an add of this volume that was cut short)
        dir: PathBuf,
    },
    /// Move every file off a device, then drop it from the volume, online
    #[command(
        after_help = "DEV is the device's id or its directory, as `stripefs device list` \
        shows them. New files avoid the device at once; then the daemon moves every file with \
        data on it to the other devices (each move atomic, as `stripefs migrate`), as a \
        rebalance runs: this command watches it (bytes, ETA) and Ctrl-C asks whether to stop \
        it. Refused, with the numbers, when the other devices cannot hold what it has. When \
        nothing is left on it, it leaves the device set and the config file; an unmount or a \
        crash pauses it, and the next mount goes on with it. The device holding the namespace \
        store (device 0 unless volume.meta) cannot be removed. Root or the mounter.\n\n\
        Example:\n  stripefs device remove /mnt/vol 2"
    )]
    Remove {
        /// Any path on the mounted volume
        mountpoint: PathBuf,
        /// The device: its id or its directory
        device: String,
        /// At most this many MB/s of moved data (0: no limit)
        #[arg(long)]
        max_mbps: Option<u64>,
        /// Print the final progress as JSON, and no progress bar
        #[arg(long)]
        json: bool,
    },
    /// Copy a device's data to an empty directory that takes its place, online
    #[command(
        after_help = "OLD is the device's id or its directory, as `stripefs device list` \
        shows them. NEW joins the volume in OLD's place at once (new files use it, not OLD); \
        then the daemon copies OLD's share of every file to NEW while the volume stays in use \
        (writes meanwhile are copied again; each file's switch to NEW is one durable commit, \
        so a crash shows it on OLD or on NEW, whole), and when no file is left on OLD, OLD \
        leaves the device set and the config file. Ranges a failing OLD cannot give are \
        retried, then left as holes (they read as zeros) and reported by file and byte range, \
        and the copy goes on. Watched as a rebalance is (bytes, ETA; Ctrl-C asks whether to \
        stop it); an unmount or a crash pauses it and the next mount goes on with it. The \
        device holding the namespace store cannot be replaced. Root or the mounter.\n\n\
        Exit status: 0 done, every byte copied; 1 failed (some files are still on OLD, which \
        stays); 2 stopped before its end (it goes on when asked again); 3 done, but ranges \
        were lost (listed).\n\n\
        Example:\n  stripefs device replace /mnt/vol 2 /disks/new2"
    )]
    Replace {
        /// Any path on the mounted volume
        mountpoint: PathBuf,
        /// The device to replace: its id or its directory
        old: String,
        /// The empty directory that takes its place
        new: PathBuf,
        /// At most this many MB/s of copied data (0: no limit)
        #[arg(long)]
        max_mbps: Option<u64>,
        /// Print the final progress (with the lost ranges) as JSON, and no progress bar
        #[arg(long)]
        json: bool,
    },
    /// List the volume's devices by id, with the device set's generation
    List {
        /// Any path on the mounted volume
        mountpoint: PathBuf,
        /// Print JSON (generation, rings, devices)
        #[arg(long)]
        json: bool,
    },
}

/// `stripefs device add MNT DIR`.
pub fn add(mountpoint: &Path, dir: &Path) -> Result<i32> {
    let root = resolve(mountpoint)?.root;
    let dir = dir
        .canonicalize()
        .map_err(|e| Error::Usage(format!("device add: {}: {e}", dir.display())))?;
    if dir.starts_with(&root) {
        return Err(Error::Usage(format!(
            "device add: {} is inside the volume itself; a device is a directory on a disk",
            dir.display()
        )));
    }
    let value = format!("add {}", dir.display());
    xattr::control_set(&root, "devices", value.as_bytes()).map_err(refusal(
        "device add",
        &root,
        "devices",
    ))?;
    let set = device_set(&root)?;
    let id = set["devices"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["path"].as_str() == dir.to_str()))
        .and_then(|d| d["id"].as_u64());
    println!(
        "{}: {} joined as device {} (generation {}); new files are striped over {} devices, \
         existing files keep their layout (`stripefs migrate` restripes one)",
        root.display(),
        dir.display(),
        id.map_or("?".into(), |i| i.to_string()),
        set["generation"],
        set["devices"].as_array().map_or(0, |d| d.len())
    );
    Ok(0)
}

/// `stripefs device list MNT`.
pub fn list(mountpoint: &Path, json: bool) -> Result<i32> {
    let root = resolve(mountpoint)?.root;
    let set = device_set(&root)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&set).unwrap_or_default());
        return Ok(0);
    }
    println!(
        "{}: generation {}, new files on ring {}",
        root.display(),
        set["generation"],
        set["rings"]
            .as_array()
            .map_or(0, |r| r.len().saturating_sub(1))
    );
    println!("{:>4}  path", "id");
    for d in set["devices"].as_array().into_iter().flatten() {
        println!("{:>4}  {}", d["id"], d["path"].as_str().unwrap_or("?"));
    }
    Ok(0)
}

fn device_set(root: &Path) -> Result<serde_json::Value> {
    let raw = xattr::control_get(root, "devices").map_err(refusal("device", root, "devices"))?;
    serde_json::from_slice(&raw)
        .map_err(|e| Error::Usage(format!("device: the daemon's answer is not JSON: {e}")))
}

/// `stripefs rebalance PATH`: starts (or joins) the daemon's rebalance of PATH's tree and
/// watches it until it ends; `--stop` stops it. Ctrl-C asks whether to stop it or leave it
/// running in the daemon.
pub fn rebalance(path: &Path, max_mbps: Option<u64>, stop: bool, json: bool) -> Result<i32> {
    let dir = path
        .canonicalize()
        .map_err(|e| Error::Usage(format!("rebalance: {}: {e}", path.display())))?;
    resolve(&dir)?;
    let set = |value: &str| {
        xattr::control_set(&dir, "rebalance", value.as_bytes()).map_err(refusal(
            "rebalance",
            &dir,
            "rebalance",
        ))
    };
    if stop {
        set("stop")?;
        let p = progress(&dir)?;
        print_end(&p, json);
        return Ok(0);
    }
    set(&match max_mbps {
        Some(m) => format!("start max_mbps={m}"),
        None => "start".into(),
    })?;
    watch(&dir, json, || set("stop"))
}

/// `stripefs device remove MNT DEV`: the daemon moves every file off the device, then drops
/// it; watched as a rebalance is.
pub fn remove(mountpoint: &Path, device: &str, max_mbps: Option<u64>, json: bool) -> Result<i32> {
    let root = resolve(mountpoint)?.root;
    let id = super::find::device_index(&root, device)?;
    let value = match max_mbps {
        Some(m) => format!("remove {id} max_mbps={m}"),
        None => format!("remove {id}"),
    };
    xattr::control_set(&root, "devices", value.as_bytes()).map_err(refusal(
        "device remove",
        &root,
        "devices",
    ))?;
    let code = watch(&root, json, || {
        xattr::control_set(&root, "rebalance", b"stop").map_err(refusal(
            "device remove",
            &root,
            "rebalance",
        ))
    })?;
    let set = device_set(&root)?;
    if !json
        && set["removed"]
            .as_array()
            .is_some_and(|r| r.contains(&id.into()))
    {
        println!("{}: device {id} left the volume", root.display());
    }
    Ok(code)
}

/// `stripefs device replace MNT OLD NEW`: NEW takes OLD's place, the daemon copies OLD's share
/// of every file over, then drops OLD; watched as a rebalance is. Exit status 3 when ranges
/// were lost.
pub fn replace(
    mountpoint: &Path,
    old: &str,
    new: &Path,
    max_mbps: Option<u64>,
    json: bool,
) -> Result<i32> {
    let root = resolve(mountpoint)?.root;
    let id = super::find::device_index(&root, old)?;
    let new = new
        .canonicalize()
        .map_err(|e| Error::Usage(format!("device replace: {}: {e}", new.display())))?;
    if new.starts_with(&root) {
        return Err(Error::Usage(format!(
            "device replace: {} is inside the volume itself; a device is a directory on a disk",
            new.display()
        )));
    }
    let mut value = format!("replace {id} {}", new.display());
    if let Some(m) = max_mbps {
        value += &format!(" max_mbps={m}");
    }
    xattr::control_set(&root, "devices", value.as_bytes()).map_err(refusal(
        "device replace",
        &root,
        "devices",
    ))?;
    let code = watch(&root, json, || {
        xattr::control_set(&root, "rebalance", b"stop").map_err(refusal(
            "device replace",
            &root,
            "rebalance",
        ))
    })?;
    if !json && matches!(code, 0 | 3) {
        println!(
            "{}: device {id} was replaced by {}",
            root.display(),
            new.display()
        );
    }
    Ok(code)
}

/// Watches the daemon's rebalance (or removal, or replacement) at `dir` until it ends; Ctrl-C
/// asks whether to `stop` it or leave it running. Exit status: 1 failed, 2 stopped (or
/// paused by an unmount) before its end, 3 done with data lost.
fn watch(dir: &Path, json: bool, stop: impl Fn() -> Result<()>) -> Result<i32> {
    use std::io::IsTerminal;
    use std::sync::atomic::{AtomicBool, Ordering};
    let interrupted = Arc::new(AtomicBool::new(false));
    let _ = signal_hook::flag::register(signal_hook::consts::SIGINT, interrupted.clone());
    let bar = (!json && std::io::stderr().is_terminal()).then(|| {
        let bar = indicatif::ProgressBar::new(1);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "rebalancing [{bar:30}] {bytes}/{total_bytes} {msg} (ETA {eta})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    });
    loop {
        let p = progress(dir)?;
        if let Some(bar) = &bar {
            bar.set_length(p["bytes_total"].as_u64().unwrap_or(0).max(1));
            bar.set_position(p["bytes_moved"].as_u64().unwrap_or(0));
            bar.set_message(format!("{}/{} files", p["files_done"], p["files_total"]));
        }
        if p["state"] != "running" {
            if let Some(bar) = &bar {
                bar.finish_and_clear();
            }
            print_end(&p, json);
            let lost = p["lost"].as_array().is_some_and(|l| !l.is_empty());
            return Ok(match (p["state"].as_str(), lost) {
                (Some("failed"), _) => 1,
                (Some("stopped"), _) => 2,
                (_, true) => 3,
                _ => 0,
            });
        }
        if interrupted.swap(false, Ordering::SeqCst) {
            if let Some(bar) = &bar {
                bar.suspend(|| {});
            }
            let stop_it = std::io::stdin().is_terminal() && {
                eprint!("\nstop the rebalance? it goes on in the daemon otherwise [y/N] ");
                let mut answer = String::new();
                std::io::stdin().read_line(&mut answer).is_ok()
                    && answer.trim().eq_ignore_ascii_case("y")
            };
            if stop_it {
                stop()?;
                continue;
            }
            if let Some(bar) = &bar {
                bar.finish_and_clear();
            }
            eprintln!(
                "it goes on in the daemon: `stripefs rebalance {}` watches it, `stripefs \
                 rebalance {0} --stop` stops it",
                dir.display()
            );
            return Ok(0);
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
}

fn progress(dir: &Path) -> Result<serde_json::Value> {
    let raw =
        xattr::control_get(dir, "rebalance").map_err(refusal("rebalance", dir, "rebalance"))?;
    serde_json::from_slice(&raw)
        .map_err(|e| Error::Usage(format!("rebalance: the daemon's answer is not JSON: {e}")))
}

fn print_end(p: &serde_json::Value, json: bool) {
    if json {
        println!("{}", serde_json::to_string_pretty(p).unwrap_or_default());
        return;
    }
    let secs = p["elapsed_secs"].as_f64().unwrap_or(0.0);
    let bytes = p["bytes_moved"].as_u64().unwrap_or(0);
    println!(
        "rebalance {}: {} of {} files moved, {} in {secs:.1} s ({:.1} MB/s){}",
        p["state"].as_str().unwrap_or("?"),
        p["files_done"],
        p["files_total"],
        super::human_bytes(bytes),
        bytes as f64 / 1e6 / secs.max(1e-3),
        match p["files_failed"].as_u64() {
            Some(0) | None => String::new(),
            Some(n) => format!(
                "; {n} not moved (last: {})",
                p["last_error"].as_str().unwrap_or("?")
            ),
        }
    );
    let lost = p["lost"].as_array().map_or(&[][..], |l| l.as_slice());
    if !lost.is_empty() {
        println!(
            "{} ranges could not be read from the old device; they read as zeros now:",
            lost.len()
        );
        println!("{:>14} {:>12}  file", "offset", "bytes");
        for l in lost {
            println!(
                "{:>14} {:>12}  {}",
                l["offset"],
                l["len"],
                l["path"].as_str().unwrap_or("?")
            );
        }
    }
}
