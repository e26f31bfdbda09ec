//! `stripefs find MNT --device N`: the files that hold data on a device (Lustre's `lfs find
//! --ost`), so a user knows what a failing or retired disk holds. Walks the mounted tree and
//! reads each file's layout (`user.stripefs.layout.json`): the bytes a file keeps on a device
//! follow from its layout and size, without reading the device, so a dead one can be asked.

use super::resolve::resolve;
use crate::error::{Error, Result};
use crate::xattr;
use std::path::{Path, PathBuf};
use stripe::Layout;

/// What a refused control read says: the daemon's reason, or the error.
fn why(r: xattr::Refused) -> String {
    r.reason.unwrap_or_else(|| r.error.to_string())
}

/// A file with data on the device.
#[derive(serde::Serialize)]
struct Hit {
    path: PathBuf,
    size: u64,
    /// Bytes of the file that live on the device (its object's length there).
    bytes_on_device: u64,
}

/// Which device `spec` names: its index, or its directory as `status` lists it.
pub(super) fn device_index(root: &Path, spec: &str) -> Result<usize> {
    let status = xattr::control_get(root, "status")
        .map_err(|r| Error::Usage(format!("{}: status: {}", root.display(), why(r))))?;
    let status: serde_json::Value = serde_json::from_slice(&status)
        .map_err(|e| Error::Usage(format!("status of {}: {e}", root.display())))?;
    let devices = status["devices"].as_array().cloned().unwrap_or_default();
    let found = devices.iter().find(|d| {
        d["index"].as_u64().map(|i| i.to_string()).as_deref() == Some(spec)
            || d["path"].as_str().map(Path::new) == Some(Path::new(spec))
    });
    match found.and_then(|d| d["index"].as_u64()) {
        Some(i) => Ok(i as usize),
        None => Err(Error::Usage(format!(
            "no device {spec} in the volume at {}: its devices are {}",
            root.display(),
            devices
                .iter()
                .map(|d| format!("{} ({})", d["index"], d["path"].as_str().unwrap_or("?")))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// Bytes of a file of `layout` and `size` on `device` (0: none).
fn bytes_on(layout: &serde_json::Value, device: usize) -> Option<u64> {
    let slot = layout["device_indices"]
        .as_array()?
        .iter()
        .position(|d| d.as_u64() == Some(device as u64))?;
    let l = Layout::new(
        layout["stripe_size"].as_u64()? as u32,
        layout["width"].as_u64()? as u32,
        layout["first_device"].as_u64()? as u32,
    );
    Some(l.object_len(layout["size"].as_u64()?, slot as u32))
}

pub fn find(path: &Path, device: &str, json: bool) -> Result<i32> {
    let root = resolve(path)?.root;
    let device = device_index(&root, device)?;
    let mut hits = Vec::new();
    let mut failed = 0;
    let mut dirs = vec![path.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) => {
                eprintln!("stripefs: find: {}: {e}", dir.display());
                failed += 1;
                continue;
            }
        };
        let mut names: Vec<_> = entries.filter_map(|e| e.ok()).collect();
        names.sort_by_key(|e| e.file_name());
        for e in names.iter().rev() {
            let p = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => dirs.push(p),
                Ok(t) if t.is_file() => {
                    let layout = xattr::control_get(&p, "layout.json")
                        .map_err(why)
                        .and_then(|b| {
                            serde_json::from_slice::<serde_json::Value>(&b)
                                .map_err(|e| e.to_string())
                        });
                    match layout {
                        Ok(l) => {
                            if let Some(n) = bytes_on(&l, device).filter(|&n| n > 0) {
                                hits.push(Hit {
                                    size: l["size"].as_u64().unwrap_or(0),
                                    path: p,
                                    bytes_on_device: n,
                                });
                            }
                        }
                        Err(why) => {
                            eprintln!("stripefs: find: {}: {why}", p.display());
                            failed += 1;
                        }
                    }
                }
                _ => {}
            }
        }
    }
    hits.sort_by(|a, b| a.path.cmp(&b.path));
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&hits).unwrap_or_default()
        );
    } else {
        for h in &hits {
            println!("{}", h.path.display());
        }
    }
    if failed > 0 {
        eprintln!("stripefs: find: {failed} path(s) could not be read; the list may be short");
        return Ok(1);
    }
    Ok(0)
}
