//! What each device holds for the volume (`user.stripefs.usage`, shown by `stripefs status`),
//! beside its filesystem's space, and why a device failed; and which devices share one
//! filesystem (a RAID-0 over one disk is no faster, and its space must be counted once).

use crate::engine::Engine;
use serde::Serialize;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

#[derive(Debug, Serialize)]
pub struct DeviceUsage {
    pub index: usize,
    pub path: std::path::PathBuf,
    /// Object files on the device.
    pub objects: u64,
    /// Bytes those object files take on the device (allocated blocks: holes take none).
    pub bytes: u64,
    /// The backing filesystem: its id (st_dev), size and space available.
    pub fs_id: u64,
    pub fs_total_bytes: u64,
    pub fs_avail_bytes: u64,
    /// Other devices on the same filesystem.
    pub shares_filesystem_with: Vec<usize>,
    /// "ok" or "failed".
    pub state: String,
    /// Why the device failed or reports errors, and what to do.
    pub reason: Option<String>,
    pub hint: Option<String>,
}

/// The filesystem a directory is on (its st_dev), if it can be stat'ed.
pub fn filesystem_of(dir: &Path) -> Option<u64> {
    std::fs::metadata(dir).ok().map(|m| m.dev())
}

/// Groups of device indexes that sit on one filesystem (only groups of two or more).
pub fn shared_filesystems(devices: &[&Path]) -> Vec<Vec<usize>> {
    let ids: Vec<Option<u64>> = devices.iter().map(|d| filesystem_of(d)).collect();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let Some(id) = id else { continue };
        if groups.iter().any(|g| g.contains(&i)) {
            continue;
        }
        let group: Vec<usize> = (i..ids.len()).filter(|&j| ids[j] == Some(*id)).collect();
        if group.len() > 1 {
            groups.push(group);
        }
    }
    groups
}

/// Object files and the bytes they take under one device's object directory.
fn objects_on(device: &Path) -> (u64, u64) {
    let root = device.join(".stripefs").join("objects");
    let (mut objects, mut bytes) = (0, 0);
    let Ok(fans) = std::fs::read_dir(&root) else {
        return (0, 0);
    };
    for fan in fans.flatten() {
        let Ok(entries) = std::fs::read_dir(fan.path()) else {
            continue;
        };
        for e in entries.flatten() {
            // symlink_metadata: a planted symlink is not followed (fsck reports it).
            if let Ok(md) = std::fs::symlink_metadata(e.path()) {
                if md.is_file() {
                    objects += 1;
                    bytes += md.blocks() * 512;
                }
            }
        }
    }
    (objects, bytes)
}

/// Why a device the daemon marked failed is failed, from what its directory holds now.
fn failure(path: &Path, mountpoint: &Path) -> (String, String) {
    let remount = format!(
        "bring it back at {p}, then `stripefs umount {m}` and mount again; until then reads \
         and writes of the files with pieces on it fail with EIO (gone for good: `stripefs \
         device replace {m} DEV NEWDIR` puts a new directory in its place, its data lost)",
        p = path.display(),
        m = mountpoint.display()
    );
    if !path.exists() {
        return (format!("the directory {} is gone", path.display()), remount);
    }
    if !path.join(".stripefs").join("superblock").exists() {
        return (
            "its .stripefs/superblock is gone: the disk was unmounted, or the directory \
             emptied"
                .into(),
            remount,
        );
    }
    (
        "another .stripefs is there now (a different disk mounted on the directory?)".into(),
        remount,
    )
}

pub fn devices(engine: &Engine) -> Vec<DeviceUsage> {
    let space = engine.volume.space();
    let health = engine.volume.health();
    let paths: Vec<&Path> = space.iter().map(|s| s.path.as_path()).collect();
    let shared = shared_filesystems(&paths);
    space
        .iter()
        .enumerate()
        .map(|(index, s)| {
            let h = &health[index];
            let (objects, bytes) = objects_on(&s.path);
            let (state, reason, hint) = if h.removed {
                ("removed", None, None)
            } else if h.failed {
                let (r, hint) = failure(&s.path, &engine.mountpoint);
                ("failed", Some(r), Some(hint))
            } else if h.read_errors + h.write_errors > 0 {
                (
                    "ok",
                    Some(format!(
                        "{} read errors and {} write errors so far",
                        h.read_errors, h.write_errors
                    )),
                    Some(format!(
                        "check the disk holding {} (dmesg, smartctl); the calls that met the \
                         errors failed, the rest goes on",
                        s.path.display()
                    )),
                )
            } else {
                ("ok", None, None)
            };
            DeviceUsage {
                index,
                path: s.path.clone(),
                objects,
                bytes,
                fs_id: filesystem_of(&s.path).unwrap_or(0),
                fs_total_bytes: s.total_bytes,
                fs_avail_bytes: s.avail_bytes,
                shares_filesystem_with: shared
                    .iter()
                    .find(|g| g.contains(&index))
                    .map(|g| g.iter().copied().filter(|&j| j != index).collect())
                    .unwrap_or_default(),
                state: state.into(),
                reason,
                hint,
            }
        })
        .collect()
}

/// (total, available) bytes a volume of these devices can hold, each backing filesystem
/// counted once: full-width files put 1/N of their bytes on each device, so a filesystem
/// holding k of the N devices takes k/N of every byte, and the tightest one bounds the volume.
pub fn capacity(space: &[stripe::SpaceInfo]) -> (u64, u64) {
    let n = space.len() as u128;
    let ids: Vec<Option<u64>> = space.iter().map(|s| filesystem_of(&s.path)).collect();
    let mut total = u128::MAX;
    let mut avail = u128::MAX;
    for (i, s) in space.iter().enumerate() {
        // Devices that cannot be stat'ed (gone) count alone.
        let k = match ids[i] {
            Some(id) => ids.iter().filter(|&&x| x == Some(id)).count(),
            None => 1,
        } as u128;
        total = total.min(s.total_bytes as u128 * n / k);
        avail = avail.min(s.avail_bytes as u128 * n / k);
    }
    if space.is_empty() {
        return (0, 0);
    }
    (total as u64, avail as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(path: &Path, total: u64, avail: u64) -> stripe::SpaceInfo {
        stripe::SpaceInfo {
            path: path.to_path_buf(),
            total_bytes: total,
            free_bytes: avail,
            avail_bytes: avail,
        }
    }

    #[test]
    fn devices_on_one_filesystem_count_its_space_once() {
        let t = tempfile::tempdir().unwrap();
        let (a, b) = (t.path().join("a"), t.path().join("b"));
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        // Two devices on one filesystem of 100 bytes, 40 free: the volume holds 100 and 40,
        // not 200 and 80.
        assert_eq!(capacity(&[info(&a, 100, 40), info(&b, 100, 40)]), (100, 40));
        assert_eq!(shared_filesystems(&[&a, &b]), vec![vec![0, 1]]);
        // A device that is gone counts alone.
        let gone = t.path().join("gone");
        assert_eq!(capacity(&[info(&a, 100, 40), info(&gone, 0, 0)]), (0, 0));
        assert!(shared_filesystems(&[&a, &gone]).is_empty());
    }
}
