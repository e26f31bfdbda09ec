//! `stripefs device`: the volume's device set, and devices joining it online.

use super::refusal;
use super::resolve::resolve;
use crate::error::{Error, Result};
use crate::xattr;
use std::path::Path;

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
