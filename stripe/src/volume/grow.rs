//! Devices joining and leaving a mounted volume. The device set is versioned: each change
//! writes the next generation to every device's superblock (a joining device's first), and
//! only then does I/O follow it. A crash in between leaves superblocks of two generations,
//! which the next mount settles (see `device::open_devices`): forward when every device of
//! the new set is there, else back; no file depends on the new set before every superblock
//! has it.
//!
//! A device leaves in two steps: `drain` adds a ring without it (new files avoid it, and the
//! caller moves every file off it), then `retire` drops it from the set once nothing is on it.

use super::*;
use crate::device::{join, retire_superblock, write_superblock, Superblock};
use std::os::unix::fs::MetadataExt;

impl Volume {
    /// Adds the empty directory `path` to the volume as its next device, online; returns its
    /// id. Files keep their layouts; new files go on a ring that holds the new device.
    pub fn add_device(&self, path: &Path) -> Result<usize> {
        self.join_device(path, None, |rings, id| rings.with_device(id))
    }

    /// Adds the empty directory `path` as the device that takes device `old`'s place: every
    /// ring holding `old` gains a twin with the new device in its place (new files use the
    /// current ring's twin at once). Each file then moves to its ring's twin once its object
    /// on `old` is copied over (`copy_object`), and `old` retires when no file is left on it.
    /// `old` may have failed: what it cannot give is lost, the rest of the volume is whole
    /// again.
    pub fn add_replacement(&self, old: usize, path: &Path) -> Result<usize> {
        self.member(old)?;
        self.join_device(path, Some(old), |rings, id| {
            rings
                .replacing(old as u32, id)
                .unwrap_or_else(|| rings.clone())
        })
    }

    /// Gives every ring holding `old` its twin with `new` (which joined to replace it) where
    /// one is missing: rings made while a replacement was stopped (another device replaced or
    /// added meanwhile).
    pub fn twin_rings(&self, old: usize, new: usize) -> Result<()> {
        let mut set_sb = self.descriptor.lock();
        let Some(rings) = set_sb.rings().replacing(old as u32, new as u32) else {
            return Ok(());
        };
        self.all_healthy(Some(old))?;
        let next = Superblock {
            pending: true,
            generation: set_sb.generation + 1,
            rings: rings.0,
            ..set_sb.clone()
        };
        if let Err(e) = self.write_set(&next, None, "device.add-superblock") {
            self.write_back(&set_sb);
            return Err(e);
        }
        *self.rings.write() = Arc::new(next.rings());
        *set_sb = self.commit(next);
        Ok(())
    }

    /// Adds `path` as the next device; `rings` makes the next rings from the current ones
    /// and its id. Every member but `failing` must be healthy.
    fn join_device(
        &self,
        path: &Path,
        failing: Option<usize>,
        rings: impl FnOnce(&Rings, u32) -> Rings,
    ) -> Result<usize> {
        let mut set_sb = self.descriptor.lock();
        self.all_healthy(failing)?;
        let id = self.set.len();
        if id >= MAX_DEVICES {
            return Err(StripeError::Devices(format!(
                "the volume has {MAX_DEVICES} devices, the most it can hold"
            )));
        }
        let path = path.canonicalize().map_err(|e| StripeError::Io {
            index: id,
            path: path.to_path_buf(),
            source: e,
        })?;
        let same = |a: &Path, b: &Path| match (std::fs::metadata(a), std::fs::metadata(b)) {
            (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
            _ => false,
        };
        if let Some((_, d)) = self.set.members().find(|(_, d)| same(&d.info.path, &path)) {
            return Err(StripeError::Devices(format!(
                "{} is already device {} of this volume",
                path.display(),
                d.info.index
            )));
        }
        // Devices are separate directories (as the config demands): one inside another
        // would hold the other's objects.
        if let Some((_, d)) = self.set.members().find(|(_, d)| {
            let other = d.info.path.canonicalize().unwrap_or(d.info.path.clone());
            path.starts_with(&other) || other.starts_with(&path)
        }) {
            return Err(StripeError::Devices(format!(
                "{} and device {} ({}) are nested; devices must be separate directories",
                path.display(),
                d.info.index,
                d.info.path.display()
            )));
        }
        let next = Superblock {
            pending: true,
            generation: set_sb.generation + 1,
            device_count: id as u32 + 1,
            rings: rings(&set_sb.rings(), id as u32).0,
            paths: self
                .set
                .iter()
                .map(|d| d.info.path.clone())
                .chain([path.clone()])
                .collect(),
            ..set_sb.clone()
        };
        // What can fail in memory, before any member's superblock changes.
        self.engine()
            .ensure_devices(id + 1)
            .map_err(|e| self.io_err(id, e))?;
        let info = join(&path, &next.as_device(id as u32), id)?;
        let undo_join = |e: StripeError| {
            let _ = retire_superblock(&path);
            e
        };
        let device = Device::new(info).map_err(undo_join)?;
        faultpoint::fail::fail_point!("device.add-joined", |arg| Err(
            self.io_err(id, faultpoint::injected("device.add-joined", arg))
        ));
        if let Err(e) = self.write_set(&next, None, "device.add-superblock") {
            self.write_back(&set_sb);
            return Err(undo_join(e));
        }
        if let Some(dir) = &device.objects {
            self.max_object_len
                .fetch_min(largest_file(dir), std::sync::atomic::Ordering::Relaxed);
        }
        self.set.push(device);
        *self.rings.write() = Arc::new(next.rings());
        let next = self.commit(next);
        log::info!(
            "device {id} ({}) joined volume {} (generation {})",
            path.display(),
            self.uuid,
            next.generation
        );
        *set_sb = next;
        Ok(id)
    }

    /// Refuses a change of the set while a member (other than `but`) has failed or is
    /// missing.
    fn all_healthy(&self, but: Option<usize>) -> Result<()> {
        match self.set.iter().find(|d| {
            !d.removed()
                && Some(d.info.index) != but
                && (d.info.missing || d.health.failed.load(Relaxed))
        }) {
            Some(d) => Err(StripeError::Devices(format!(
                "device {} ({}) has failed or is missing: the device set does not change \
                 until it is replaced (`stripefs device replace`)",
                d.info.index,
                d.info.path.display()
            ))),
            None => Ok(()),
        }
    }

    /// A change that could not be written everywhere goes back: the members that took it are
    /// given the current set again (as well as they can be: what is left, mount settles).
    fn write_back(&self, current: &Superblock) {
        for (i, d) in self.set.members() {
            if let Err(e) = write_superblock(&d.info.path, &current.as_device(i as u32)) {
                log::error!("device {i}: its superblock could not be put back: {e}");
            }
        }
    }

    /// Marks the change every member now has as done (no longer pending): from then on a
    /// member a generation behind is an old copy. A failure is only logged: the next mount
    /// finishes the mark.
    fn commit(&self, next: Superblock) -> Superblock {
        let done = Superblock {
            pending: false,
            ..next
        };
        for (i, d) in self.set.members() {
            if let Err(e) = write_superblock(&d.info.path, &done.as_device(i as u32)) {
                log::error!("device {i}: the change of the device set is not marked done: {e}");
            }
        }
        done
    }

    /// Writes the set's next generation to every member's superblock.
    /// (Every member but `except`, when one is leaving.)
    fn write_set(
        &self,
        next: &Superblock,
        except: Option<usize>,
        #[allow(unused_variables)] point: &'static str, // a fault point's name
    ) -> Result<()> {
        // A failed device (one being replaced) cannot be written: it is left behind.
        for d in self.set.iter().filter(|d| {
            !d.removed() && Some(d.info.index) != except && !self.set.failed(d.info.index)
        }) {
            let i = d.info.index;
            write_superblock(&d.info.path, &next.as_device(i as u32))
                .map_err(|e| self.io_err(i, e))?;
            faultpoint::fail::fail_point!(point, |arg| Err(
                self.io_err(i, faultpoint::injected(point, arg))
            ));
        }
        Ok(())
    }

    /// A member of the set, by id (not removed).
    fn member(&self, id: usize) -> Result<&Device> {
        match self.set.places.get(id).and_then(|p| p.get()) {
            Some(d) if id < self.set.len() && !d.removed() => Ok(d),
            _ => Err(StripeError::Devices(format!(
                "the volume has no device {id} (its devices: {})",
                self.set
                    .iter()
                    .filter(|d| !d.removed())
                    .map(|d| d.info.index.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    /// First step of a removal: new files go on a ring without device `id` (when the
    /// current ring has it). The caller then moves every file off it, and `retire`s it.
    pub fn drain(&self, id: usize) -> Result<()> {
        let mut set_sb = self.descriptor.lock();
        self.member(id)?;
        self.all_healthy(None)?;
        let rings = set_sb.rings();
        let current = rings.ring(rings.current()).unwrap_or(&[]);
        if !current.contains(&(id as u32)) {
            return Ok(());
        }
        if current.len() == 1 {
            return Err(StripeError::Devices(
                "the volume's last device cannot be removed".into(),
            ));
        }
        let mut next_rings = rings.0.clone();
        next_rings.push(
            current
                .iter()
                .copied()
                .filter(|&d| d != id as u32)
                .collect(),
        );
        let next = Superblock {
            pending: true,
            generation: set_sb.generation + 1,
            rings: next_rings,
            ..set_sb.clone()
        };
        if let Err(e) = self.write_set(&next, None, "device.remove-superblock") {
            self.write_back(&set_sb);
            return Err(e);
        }
        *self.rings.write() = Arc::new(next.rings());
        let next = self.commit(next);
        log::info!(
            "device {id}: new files avoid it (generation {})",
            next.generation
        );
        *set_sb = next;
        Ok(())
    }

    /// Last step of a removal: device `id`, which no file uses any more (the caller checked,
    /// holding whatever keeps new files off it), leaves the set for good.
    pub fn retire(&self, id: usize) -> Result<()> {
        let mut set_sb = self.descriptor.lock();
        let dev = self.member(id)?;
        let rings = set_sb.rings();
        if rings
            .ring(rings.current())
            .unwrap_or(&[])
            .contains(&(id as u32))
        {
            return Err(StripeError::Devices(format!(
                "device {id} is still in the ring new files use: drain it first"
            )));
        }
        let mut retired = set_sb.retired.clone();
        retired.push(id as u32);
        let next = Superblock {
            pending: true,
            generation: set_sb.generation + 1,
            retired,
            ..set_sb.clone()
        };
        // The others first: a crash before the device lets go is finished at mount.
        let written = self
            .write_set(&next, Some(id), "device.remove-superblock")
            .and_then(|()| match self.set.failed(id) {
                // A failed device (replaced) cannot be told: the others' superblocks say it
                // left, and a copy of it that comes back is an old one.
                true => Ok(()),
                false => retire_superblock(&dev.info.path).map_err(|e| self.io_err(id, e)),
            });
        if let Err(e) = written {
            self.write_back(&set_sb);
            return Err(e);
        }
        dev.health.failed.store(true, Relaxed);
        dev.removed.store(true, Relaxed);
        let next = self.commit(next);
        self.open.clear();
        log::info!(
            "device {id} ({}) left volume {} (generation {})",
            dev.info.path.display(),
            self.uuid,
            next.generation
        );
        *set_sb = next;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{format, FormatOptions};

    fn formatted(n: usize) -> (tempfile::TempDir, Vec<PathBuf>) {
        let root = tempfile::tempdir().unwrap();
        let paths: Vec<PathBuf> = (0..=n)
            .map(|i| {
                let p = root.path().join(format!("d{i}"));
                std::fs::create_dir(&p).unwrap();
                p.canonicalize().unwrap()
            })
            .collect();
        format(&FormatOptions {
            devices: &paths[..n],
            stripe_size: 65536,
            width: n as u32,
            force: false,
        })
        .unwrap();
        (root, paths)
    }

    fn data(len: usize, seed: u32) -> Vec<u8> {
        (0..len as u32).map(|i| (i * 7 + seed) as u8).collect()
    }

    #[test]
    fn a_device_joins_online_and_old_files_keep_their_devices() {
        let (_root, paths) = formatted(3);
        let v = Volume::open(&paths[..3]).unwrap();
        let old = Layout::new(65536, 3, 2);
        let before = data(700_000, 1);
        v.write(10, &old, 0, &before).unwrap();
        assert_eq!(v.add_device(&paths[3]).unwrap(), 3);
        assert_eq!(v.device_count(), 4);
        assert_eq!(v.current_ring(), (1, 4));
        assert_eq!(v.rings().devices_of(&old), [2, 0, 1]);
        let mut back = vec![0; before.len()];
        v.read(10, &old, 0, &mut back).unwrap();
        assert!(back == before, "an old file reads the same after the add");
        let new = Layout {
            ring: 1,
            ..Layout::new(65536, 4, 3)
        };
        let after = data(600_000, 2);
        v.write(11, &new, 0, &after).unwrap();
        assert!(
            v.object_path(3, 11).exists(),
            "the new device takes its share"
        );
        let e = v.add_device(&paths[3]).unwrap_err().to_string();
        assert!(e.contains("already device 3"), "{e}");
        let inner = paths[0].join("inner");
        std::fs::create_dir(&inner).unwrap();
        let e = v.add_device(&inner).unwrap_err().to_string();
        assert!(e.contains("nested"), "{e}");
        let e = v
            .add_device(paths[0].parent().unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("nested"), "{e}");
        drop(v);

        // The config still lists three: the fourth is found where it was added.
        let v = Volume::open(&paths[..3]).unwrap();
        assert_eq!(v.device_count(), 4);
        let mut back = vec![0; after.len()];
        v.read(11, &new, 0, &mut back).unwrap();
        assert!(back == after);
        drop(v);
        let shuffled = [3, 1, 0, 2].map(|i| paths[i].clone());
        let v = Volume::open(&shuffled).unwrap();
        assert_eq!(v.listed_as(), [2, 1, 3, 0].map(Some));
    }

    /// The superblocks as a crash after `written` of the old devices' superblocks left them.
    fn interrupted_add(paths: &[PathBuf], written: usize) {
        let v = Volume::open(&paths[..3]).unwrap();
        let sb = v.descriptor.lock().clone();
        drop(v);
        let next = Superblock {
            pending: true,
            generation: 1,
            device_count: 4,
            rings: sb.rings().with_device(3).0,
            paths: paths.to_vec(),
            ..sb
        };
        drop(join(&paths[3], &next.as_device(3), 3).unwrap());
        for (i, p) in paths[..written].iter().enumerate() {
            write_superblock(p, &next.as_device(i as u32)).unwrap();
        }
    }

    #[test]
    fn an_add_cut_short_is_finished_when_the_new_device_is_there() {
        for written in [0, 1, 3] {
            let (_root, paths) = formatted(3);
            interrupted_add(&paths, written);
            let v = Volume::open(&paths[..3]).unwrap();
            // With no old superblock written, nothing says a device was being added.
            let want = if written == 0 { 3 } else { 4 };
            assert_eq!(v.device_count(), want, "{written} written");
            drop(v);
            let v = Volume::open(&paths[..3]).unwrap();
            assert_eq!(v.device_count(), want, "settled for good");
        }
    }

    #[test]
    fn an_add_cut_short_is_undone_when_the_new_device_is_gone() {
        let (root, paths) = formatted(3);
        interrupted_add(&paths, 2);
        std::fs::rename(&paths[3], root.path().join("gone")).unwrap();
        let v = Volume::open(&paths[..3]).unwrap();
        assert_eq!(v.device_count(), 3);
        assert_eq!(v.current_ring(), (0, 3));
        let sb = v.descriptor.lock().clone();
        assert_eq!((sb.generation, sb.device_count), (0, 3));
    }

    #[test]
    fn a_copy_from_before_an_add_is_refused_not_taken_for_an_add_cut_short() {
        let (root, paths) = formatted(3);
        let backup = root.path().join("d1.backup");
        std::fs::create_dir(&backup).unwrap();
        std::fs::create_dir(backup.join(".stripefs")).unwrap();
        let sb = |d: &Path| d.join(".stripefs/superblock");
        std::fs::copy(sb(&paths[1]), sb(&backup)).unwrap();
        let v = Volume::open(&paths[..3]).unwrap();
        v.add_device(&paths[3]).unwrap();
        drop(v);
        std::fs::copy(sb(&backup), sb(&paths[1])).unwrap();
        let e = Volume::open(&paths[..3]).err().unwrap().to_string();
        assert!(e.contains("old copy"), "{e}");
    }

    #[test]
    fn a_device_of_another_volume_is_not_added() {
        let (_root, paths) = formatted(2);
        let other = _root.path().join("other");
        std::fs::create_dir(&other).unwrap();
        format(&FormatOptions {
            devices: std::slice::from_ref(&other),
            stripe_size: 65536,
            width: 1,
            force: false,
        })
        .unwrap();
        let v = Volume::open(&paths[..2]).unwrap();
        let e = v.add_device(&other).unwrap_err().to_string();
        assert!(e.contains("already holds stripefs volume"), "{e}");
        assert_eq!(v.device_count(), 2);
    }
}
