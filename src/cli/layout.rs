//! Layout commands: layout get/set/clear, migrate, and collapse/insert (rows of a file).

use super::refusal;
use super::resolve::resolve;
use crate::error::{Error, Result};
use crate::xattr;
use std::path::{Path, PathBuf};

#[derive(clap::Subcommand)]
pub enum LayoutAction {
    /// Print the layout of PATH
    #[command(after_help = "Example:\n  stripefs layout get /mnt/vol/vm/disk.img")]
    Get {
        /// A file or directory on a mounted volume
        path: PathBuf,
        /// Print JSON (with the bytes on each device)
        #[arg(long)]
        json: bool,
    },
    /// Set a directory's default layout for new files (or an empty file's own)
    #[command(
        after_help = "--stripe-size: a power of two from 8K to 256K; --width: 1 to the \
        number of devices. Files made under the directory from now on take it (the nearest \
        ancestor with a layout wins); a file with data keeps its layout (see migrate).\n\n\
        Example:\n  stripefs layout set /mnt/vol/vm --stripe-size 128K --width 2"
    )]
    Set {
        /// A directory, or an empty file, on a mounted volume
        path: PathBuf,
        /// Stripe size: 8K to 256K, a power of two
        #[arg(long, value_name = "SIZE")]
        stripe_size: Option<String>,
        /// Devices each file spans: 1 to the number of devices
        #[arg(long)]
        width: Option<u32>,
    },
    /// Make a directory inherit its layout again
    #[command(after_help = "Example:\n  stripefs layout clear /mnt/vol/vm")]
    Clear {
        /// A directory on a mounted volume
        path: PathBuf,
    },
}

pub fn migrate(file: &Path, stripe_size: Option<String>, width: Option<u32>) -> Result<i32> {
    let spec = layout_spec(stripe_size, width)?;
    resolve(file)?;
    let size = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
    let bar = super::spinner(format!(
        "migrating {} ({}) to {spec}",
        file.display(),
        super::human_bytes(size)
    ));
    let done = xattr::control_set(file, "migrate", spec.as_bytes());
    bar.finish_and_clear();
    done.map_err(refusal("migrate", file, "migrate"))?;
    let now = xattr::control_get(file, "layout").map_err(refusal("migrate", file, "layout"))?;
    println!("{}: {}", file.display(), String::from_utf8_lossy(&now));
    Ok(0)
}

/// `stripefs collapse|insert FILE OFFSET LENGTH`.
pub fn shift(file: &Path, how: &str, offset: &str, length: &str) -> Result<i32> {
    for (what, v) in [("OFFSET", offset), ("LENGTH", length)] {
        mountcfg::parse_size(v).map_err(|e| Error::Usage(format!("{what} {v}: {e}")))?;
    }
    resolve(file)?;
    let spec = format!("{how} {offset} {length}");
    xattr::control_set(file, "shift", spec.as_bytes()).map_err(refusal(how, file, "shift"))?;
    let size = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
    println!(
        "{}: {how} {length} at {offset}; now {size} bytes",
        file.display()
    );
    Ok(0)
}

fn layout_spec(stripe_size: Option<String>, width: Option<u32>) -> Result<String> {
    let mut parts = Vec::new();
    if let Some(s) = stripe_size {
        let bytes = mountcfg::parse_size(&s)
            .map_err(|e| Error::Usage(format!("--stripe-size {s}: {e}")))?;
        if !bytes.is_power_of_two()
            || !(mountcfg::MIN_STRIPE..=mountcfg::MAX_STRIPE).contains(&bytes)
        {
            return Err(Error::Usage(format!(
                "--stripe-size {s}: must be a power of two from 8K to 256K"
            )));
        }
        parts.push(format!("stripe_size={bytes}"));
    }
    if let Some(w) = width {
        parts.push(format!("width={w}"));
    }
    if parts.is_empty() {
        return Err(Error::Usage(
            "give --stripe-size and/or --width".to_string(),
        ));
    }
    Ok(parts.join(" "))
}

pub fn layout(action: LayoutAction) -> Result<()> {
    match action {
        LayoutAction::Get { path, json } => {
            resolve(&path)?;
            let raw = xattr::control_get(&path, "layout.json").map_err(refusal(
                "layout get",
                &path,
                "layout",
            ))?;
            let info: serde_json::Value = serde_json::from_slice(&raw)
                .map_err(|e| Error::Usage(format!("bad layout from the daemon: {e}")))?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&info).unwrap_or_default()
                );
                return Ok(());
            }
            println!(
                "{}: stripe_size={} width={} first_device={}{}",
                path.display(),
                mountcfg::format_size(info["stripe_size"].as_u64().unwrap_or(0)),
                info["width"],
                info["first_device"],
                match (
                    info["inherited"].as_bool(),
                    info["width_follows_devices"].as_bool()
                ) {
                    (_, Some(true)) =>
                        " (the volume's default: every device, as devices are added)",
                    (Some(true), _) => " (inherited)",
                    _ => "",
                }
            );
            if let Some(objects) = info["objects"].as_array() {
                for o in objects {
                    println!(
                        "  device {}: {} bytes  {}",
                        o["device"],
                        o["bytes"],
                        o["path"].as_str().unwrap_or("")
                    );
                }
            }
            Ok(())
        }
        LayoutAction::Set {
            path,
            stripe_size,
            width,
        } => {
            let spec = layout_spec(stripe_size, width)?;
            resolve(&path)?;
            xattr::control_set(&path, "layout", spec.as_bytes()).map_err(refusal(
                "layout set",
                &path,
                "layout",
            ))?;
            let now = xattr::control_get(&path, "layout").map_err(refusal(
                "layout set",
                &path,
                "layout",
            ))?;
            println!("{}: {}", path.display(), String::from_utf8_lossy(&now));
            Ok(())
        }
        LayoutAction::Clear { path } => {
            resolve(&path)?;
            xattr::control_remove(&path, "layout").map_err(refusal(
                "layout clear",
                &path,
                "layout",
            ))?;
            let now = xattr::control_get(&path, "layout").map_err(refusal(
                "layout clear",
                &path,
                "layout",
            ))?;
            println!(
                "{}: inherits its layout again: {}",
                path.display(),
                String::from_utf8_lossy(&now)
            );
            Ok(())
        }
    }
}
