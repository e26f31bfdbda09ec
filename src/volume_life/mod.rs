//! The volume's device set over its life: devices joining a mounted volume, and the
//! rebalance that spreads the files over them. The device set
//! itself (superblocks, generations, rings) is the stripe crate's; this is the daemon's side:
//! who may change it, and the config file the next mount reads.

mod rebalance;

pub use rebalance::{Progress, Rebalancer};

use crate::control::refuse;
use crate::engine::Engine;
use crate::error::Result;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;

impl Engine {
    /// Adds the directory `path` to the mounted volume as its next device; new files are
    /// striped over it from now on (their width follows it unless the config fixes one), and
    /// the config file gains it, so the next mount finds it. Returns the device's id.
    pub fn add_device(&self, path: &Path) -> Result<usize> {
        if self.read_only.load(Relaxed) {
            return refuse(
                libc::EROFS,
                "the volume is mounted read-only: its device set does not change",
            );
        }
        let id = self.volume.add_device(path)?;
        let path = self.volume.device_path(id).to_path_buf();
        // Not fatal: the device set records where the device is, and mount finds it there.
        if let Err(e) = mountcfg::edit::add_device(&self.config.source, &path) {
            log::error!(
                "device {id} ({}) joined the volume, but the config was not updated: {e}; add \
                 it to `devices` by hand (until then mount finds it where it was added)",
                path.display()
            );
        }
        Ok(id)
    }
}

/// The device set as `user.stripefs.devices` shows it.
#[derive(serde::Serialize)]
pub struct DeviceSet {
    /// Bumped by every change of the set.
    pub generation: u64,
    /// The rings layouts are laid on, by number; new files go on the last.
    pub rings: Vec<Vec<u32>>,
    pub devices: Vec<DeviceEntry>,
}

#[derive(serde::Serialize)]
pub struct DeviceEntry {
    pub id: usize,
    pub path: std::path::PathBuf,
}

impl Engine {
    pub fn device_set(&self) -> DeviceSet {
        DeviceSet {
            generation: self.volume.generation(),
            rings: self.volume.rings().0.clone(),
            devices: (0..self.volume.device_count() as usize)
                .map(|id| DeviceEntry {
                    id,
                    path: self.volume.device_path(id).to_path_buf(),
                })
                .collect(),
        }
    }
}
