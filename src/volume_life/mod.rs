//! The volume's device set over its life: devices joining a mounted volume, leaving it, and
//! taking another's place (`replace`), and the rebalance that spreads the files over them. The device set
//! itself (superblocks, generations, rings) is the stripe crate's; this is the daemon's side:
//! who may change it, and the config file the next mount reads.

mod rebalance;
mod replace;

pub use rebalance::{LostRange, Progress, Rebalancer};

use crate::control::refuse;
use crate::engine::Engine;
use crate::error::Result;
use crate::namespace::{Inode, Kind};
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use stripe::Layout;

/// The regular files and their layouts. A directory's layout is only the default of the
/// files made in it (laid on the current ring when one is made): it holds nothing anywhere.
fn files_laid_out(inodes: &[Inode]) -> impl Iterator<Item = (&Inode, Layout)> {
    inodes
        .iter()
        .filter(|i| i.kind == Kind::File)
        .filter_map(|i| Some((i, i.layout?)))
}

impl Engine {
    /// Adds the directory `path` to the mounted volume as its next device; new files are
    /// striped over it from now on (their width follows it unless the config fixes one), and
    /// the config file gains it, so the next mount finds it. Returns the device's id.
    pub fn add_device(&self, path: &Path) -> Result<usize> {
        self.may_take_device(path)?;
        let id = self.volume.add_device(path)?;
        self.note_generation();
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

impl Engine {
    /// Refuses a new device for a read-only mount, or at a path inside the volume: named
    /// through the mount itself, the daemon would wait on its own requests (and store a
    /// device inside the volume), so it is refused before it is looked at.
    fn may_take_device(&self, path: &Path) -> Result<()> {
        if self.read_only.load(Relaxed) {
            return refuse(
                libc::EROFS,
                "the volume is mounted read-only: its device set does not change",
            );
        }
        if path.starts_with(&self.mountpoint) {
            return refuse(
                libc::EINVAL,
                format!(
                    "{} is inside the volume itself; a device is a directory on a disk",
                    path.display()
                ),
            );
        }
        Ok(())
    }

    /// The namespace keeps up with the device set's generation (a failure is only logged:
    /// the next mount records it).
    pub(crate) fn note_generation(&self) {
        if let Err(e) = self.ns.set_device_generation(self.volume.generation()) {
            log::error!("the namespace could not record the device set's generation: {e}");
        }
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
    /// Ids of devices removed from the set.
    pub removed: Vec<usize>,
}

#[derive(serde::Serialize)]
pub struct DeviceEntry {
    pub id: usize,
    pub path: std::path::PathBuf,
}

impl Engine {
    pub fn device_set(&self) -> DeviceSet {
        let health = self.volume.health();
        let (removed, members): (Vec<usize>, Vec<usize>) =
            (0..health.len()).partition(|&id| health[id].removed);
        DeviceSet {
            generation: self.volume.generation(),
            rings: self.volume.rings().0.clone(),
            devices: members
                .into_iter()
                .map(|id| DeviceEntry {
                    id,
                    path: self.volume.device_path(id).to_path_buf(),
                })
                .collect(),
            removed,
        }
    }
}

impl Engine {
    /// Starts removing device `id`: new files avoid it, every file on it moves to the other
    /// devices (in the daemon, as a rebalance runs), then it leaves the set and the config.
    /// Refused, with the numbers, when the others cannot hold what it has.
    pub fn remove_device(
        self: &std::sync::Arc<Self>,
        id: usize,
        max_mbps: Option<u64>,
    ) -> Result<()> {
        if self.read_only.load(Relaxed) {
            return refuse(
                libc::EROFS,
                "the volume is mounted read-only: its device set does not change",
            );
        }
        let health = self.volume.health();
        if health.get(id).is_none_or(|h| h.removed) {
            return refuse(libc::ENOENT, format!("the volume has no device {id}"));
        }
        let meta = crate::engine::meta_dir(&self.config);
        if meta.starts_with(self.volume.device_path(id)) {
            return refuse(
                libc::EBUSY,
                format!(
                    "device {id} holds the namespace store ({}); it cannot be removed while it \
                     does (volume.meta puts the store elsewhere, at mkfs)",
                    meta.display()
                ),
            );
        }
        let (on_it, room) = self.room_for_removal(id);
        if on_it > room {
            return refuse(
                libc::ENOSPC,
                format!(
                    "device {id} holds {on_it} bytes of files, but the other devices have room \
                     for {room}: free space there (or add a device) first"
                ),
            );
        }
        self.start_job(crate::namespace::ROOT, max_mbps, rebalance::Job::Remove(id))
    }

    /// Bytes the files keep on device `id`, and the room the others have for them (each
    /// filesystem counted once, as devices may share one).
    pub(super) fn room_for_removal(&self, id: usize) -> (u64, u64) {
        let rings = self.volume.rings();
        let (inodes, _) = self.ns.snapshot();
        let on_it = files_laid_out(&inodes)
            .filter_map(|(i, l)| Some(l.object_len(i.size, rings.slot_of_device(&l, id)?)))
            .sum();
        let health = self.volume.health();
        let mut seen = std::collections::HashSet::new();
        let room = self
            .volume
            .space()
            .iter()
            .enumerate()
            .filter(|(d, _)| *d != id && !health[*d].removed)
            .filter(|(_, s)| seen.insert((s.total_bytes, s.free_bytes)))
            .map(|(_, s)| s.avail_bytes)
            .sum();
        (on_it, room)
    }

    /// After the files moved off device `id`: checks that none is left on it, then drops it
    /// from the set and from the config.
    pub(super) fn finish_removal(&self, id: usize) -> Result<()> {
        let rings = self.volume.rings();
        let (inodes, _) = self.ns.snapshot();
        if let Some((i, _)) =
            files_laid_out(&inodes).find(|(_, l)| rings.devices_of(l).contains(&id))
        {
            return refuse(
                libc::EBUSY,
                format!(
                    "inode {} still has data on device {id} (it could not be moved): the \
                     device stays",
                    i.ino
                ),
            );
        }
        let path = self.volume.device_path(id).to_path_buf();
        self.volume.retire(id)?;
        self.note_generation();
        if let Err(e) = mountcfg::edit::remove_device(&self.config.source, &path) {
            log::error!(
                "device {id} ({}) left the volume, but the config was not updated: {e}; drop \
                 it from `devices` by hand (mount skips it meanwhile)",
                path.display()
            );
        }
        Ok(())
    }
}
