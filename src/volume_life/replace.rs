//! `stripefs device replace MNT OLD NEW`: the new device joins in the old one's place (each
//! ring holding OLD gains a twin with NEW there, and new files use it at once), then each
//! file's object on OLD is copied to NEW and the file moves to its ring's twin, one file at a
//! time, each move one durable commit: a crash shows every file on OLD or on NEW, whole.
//! When no file is left on OLD, it leaves the set, as a removed device does.
//!
//! The copy runs while the file stays in use: its writes go on and are noted (by range), then
//! copied again; the last pass holds the file's writers off for the little that changed.
//! A failing OLD is retried range by range; what it cannot give is left as holes on NEW and
//! reported by file and file range, and the copy goes on.
//!
//! It runs as the rebalancer's job (progress, `--max-mbps`, stop, resume after a remount).

use super::rebalance::Job;
use crate::control::refuse;
use crate::engine::io_error;
use crate::engine::Engine;
use crate::error::{Error, Result};
use parking_lot::{RwLockUpgradableReadGuard, RwLockWriteGuard};
use std::path::Path;
use std::sync::Arc;
use stripe::Layout;

/// Passes over what changed during the copy before the file's writers are held off.
const CATCH_UP_PASSES: usize = 3;

impl Engine {
    /// Starts replacing device `old` by the empty directory `path` (or goes on with a
    /// replacement by it that was cut short).
    pub fn replace_device(
        self: &Arc<Self>,
        old: usize,
        path: &Path,
        max_mbps: Option<u64>,
    ) -> Result<()> {
        self.may_take_device(path)?;
        let health = self.volume.health();
        if health.get(old).is_none_or(|h| h.removed) {
            return refuse(libc::ENOENT, format!("the volume has no device {old}"));
        }
        let meta = crate::engine::meta_dir(&self.config);
        if meta.starts_with(self.volume.device_path(old)) {
            return refuse(
                libc::EBUSY,
                format!(
                    "device {old} holds the namespace store ({}); it cannot be replaced while \
                     it does (volume.meta puts the store elsewhere, at mkfs)",
                    meta.display()
                ),
            );
        }
        if let Some(new) = self.replacement_joined(old, path) {
            // Rings made since it stopped get their twins too.
            self.volume.twin_rings(old, new)?;
            self.note_generation();
            return self.start_job(crate::namespace::ROOT, max_mbps, Job::Replace { old, new });
        }
        if self.rebalancer.progress().state == "running" {
            return refuse(
                libc::EBUSY,
                "a rebalance or a device change runs: wait for it, or stop it",
            );
        }
        let (on_it, _) = self.room_for_removal(old);
        let room = stripe::statvfs(path).map(|s| s.avail_bytes).unwrap_or(0);
        if on_it > room {
            return refuse(
                libc::ENOSPC,
                format!(
                    "device {old} holds {on_it} bytes of files, but {} has room for {room}",
                    path.display()
                ),
            );
        }
        let new = self.volume.add_replacement(old, path)?;
        self.note_generation();
        let new_path = self.volume.device_path(new).to_path_buf();
        if let Err(e) = mountcfg::edit::add_device(&self.config.source, &new_path) {
            log::error!(
                "device {new} ({}) joined the volume, but the config was not updated: {e}; add \
                 it to `devices` by hand",
                new_path.display()
            );
        }
        log::info!(
            "device {new} ({}) replaces device {old}",
            new_path.display()
        );
        self.start_job(crate::namespace::ROOT, max_mbps, Job::Replace { old, new })
    }

    /// The device at `path`, when it already joined to take `old`'s place (a replacement
    /// asked for again after a crash before its job was recorded).
    fn replacement_joined(&self, old: usize, path: &Path) -> Option<usize> {
        let path = path.canonicalize().ok()?;
        let set = self.device_set();
        let new = set.devices.iter().find(|d| Path::new(&d.path) == path)?.id;
        let rings = self.volume.rings();
        (0..rings.0.len() as u16)
            .any(|r| rings.twin(r, old as u32, new as u32).is_some())
            .then_some(new)
    }

    /// The replacement's run: every file on `old` moves to `new`. Files it could not move
    /// are counted as failed (and `old` stays).
    pub(super) fn run_replace(&self, old: usize, new: usize) {
        let r = &self.rebalancer;
        let rings = self.volume.rings();
        let (inodes, _) = self.ns.snapshot();
        let mut files: Vec<(u64, u64)> = super::files_laid_out(&inodes)
            .filter_map(|(i, l)| {
                let slot = rings.slot_of_device(&l, old)?;
                Some((i.ino, l.object_len(i.size, slot)))
            })
            .collect();
        files.sort_unstable();
        r.set_totals(files.len() as u64, files.iter().map(|f| f.1).sum());
        for (ino, bytes) in files {
            if r.stopping() {
                break;
            }
            let stop = self.move_one(ino, bytes, |pace| self.replace_file(ino, old, new, pace));
            if stop {
                break;
            }
        }
    }

    /// Copies file `ino`'s object on `old` to `new`, and moves the file there in one commit.
    /// The file ranges `old` could not give (holes now) are reported before the move.
    fn replace_file(
        &self,
        ino: u64,
        old: usize,
        new: usize,
        pace: &mut dyn FnMut(u64) -> bool,
    ) -> Result<()> {
        let lock = self.io_lock(ino);
        // Alone a moment: the watch starts with nothing of this file in flight, nothing held
        // dirty by the cache.
        let alone = lock.write();
        let (inode, layout) = self.file(ino)?;
        let rings = self.volume.rings();
        let Some(slot) = rings.slot_of_device(&layout, old) else {
            return Ok(());
        };
        let twin = rings
            .twin(layout.ring, old as u32, new as u32)
            .ok_or_else(|| {
                Error::Store(format!(
                    "ring {} has no twin with device {new}",
                    layout.ring
                ))
            })?;
        let object = inode.object;
        let expected = layout.object_len(inode.size, slot);
        let _watching = Watching::start(&self.volume, old, object);
        self.flush_cached(object)?;
        // Reads and writes go on while it is copied; a truncate or a move of the file waits.
        let shared = RwLockWriteGuard::downgrade_to_upgradable(alone);
        let copy = |ranges: Option<&[(u64, u64)]>, pace: &mut dyn FnMut(u64) -> bool| {
            self.volume
                .copy_object(object, old, new, ranges, expected, pace)
        };
        let mut lost = copy(None, pace)?.lost;
        let mut changed_since = Vec::new();
        let again = |ranges: &[(u64, u64)],
                     lost: &mut Vec<(u64, u64)>,
                     pace: &mut dyn FnMut(u64) -> bool| {
            let copied = copy(Some(ranges), pace)?;
            // Written since: no longer lost, unless unreadable again.
            *lost = subtract(lost, ranges);
            lost.extend(copied.lost);
            Ok::<(), Error>(())
        };
        for _ in 0..CATCH_UP_PASSES {
            let changed = self.volume.take_changes();
            if changed.is_empty() {
                break;
            }
            again(&changed, &mut lost, pace)?;
            changed_since.extend(changed);
        }
        let _alone = RwLockUpgradableReadGuard::upgrade(shared);
        self.flush_cached(object)?;
        self.volume.wait_for_noted_writes();
        // Everything changed since the copy began, once more: a write noted before a pass
        // may have reached the device only after that pass read the range.
        changed_since.extend(self.volume.take_changes());
        let all = stripe::merged(changed_since);
        if !all.is_empty() {
            again(&all, &mut lost, &mut |_| true)?;
        }
        self.volume.settle_copy(object, old, new, expected)?;
        faultpoint::fault_point!("replace.copied");
        lost = stripe::merged(lost);
        let lost_in_file = file_ranges(&layout, slot, &lost, inode.size);
        if !lost_in_file.is_empty() {
            // Kept before the move: a crash right after it must not forget them.
            self.note_lost(ino, &lost_in_file)?;
        }
        let moved = Layout {
            ring: twin,
            ..layout
        };
        self.ns.relayout(ino, moved)?;
        self.volume.set_layout(object, moved);
        if let Err(e) = self.commit() {
            // Not durable: the file stays on `old`, in memory too.
            self.ns.relayout(ino, layout)?;
            self.volume.set_layout(object, layout);
            return Err(e);
        }
        faultpoint::fault_point!("replace.moved");
        drop(_alone);
        if lost.is_empty() {
            if let Err(e) = self.volume.remove_from(old, object) {
                // Left behind on a device that leaves the set anyway.
                log::warn!("device {old}: the old copy of object {object} stays: {e}");
            }
        }
        // With ranges lost, the old copy stays on the old device for recovery tools.
        Ok(())
    }

    /// Writes back what the cache holds dirty of `object` (and waits for a write-back of it
    /// in flight), so the devices hold all of it.
    fn flush_cached(&self, object: u64) -> Result<()> {
        if let Some((_, cache)) = self.cached() {
            cache.flush_object(object).map_err(io_error)?;
        }
        Ok(())
    }

    /// One of the file's paths (`<inode N>` for a file with none left).
    pub(super) fn file_path(&self, ino: u64) -> String {
        match self.ns.names_of(ino).first() {
            Some((dir, name)) => {
                let dir = crate::caching::path_of(&self.ns, *dir);
                let name = String::from_utf8_lossy(name);
                format!("{}/{name}", dir.trim_end_matches('/'))
            }
            None => format!("<inode {ino}>"),
        }
    }
}

/// The volume's watch on one object, stopped however the copy ends.
struct Watching<'a>(&'a stripe::Volume);

impl<'a> Watching<'a> {
    fn start(volume: &'a stripe::Volume, device: usize, object: u64) -> Watching<'a> {
        volume.watch_changes(Some((device, object)));
        Watching(volume)
    }
}

impl Drop for Watching<'_> {
    fn drop(&mut self) {
        self.0.watch_changes(None);
    }
}

/// The file ranges an object range of `slot` holds (each stripe unit its own range, merged
/// where they touch), within the file's size.
fn file_ranges(layout: &Layout, slot: u32, object: &[(u64, u64)], size: u64) -> Vec<(u64, u64)> {
    let unit = layout.stripe_size as u64;
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &(a, b) in object {
        let mut pos = a;
        while pos < b {
            let end = b.min((pos / unit + 1) * unit);
            let at = layout.unmap(slot, pos);
            let to = (at + end - pos).min(size);
            if at < to {
                match out.last_mut() {
                    Some(last) if last.1 == at => last.1 = to,
                    _ => out.push((at, to)),
                }
            }
            pos = end;
        }
    }
    out
}

/// `ranges` without what `minus` covers (both in order).
fn subtract(ranges: &[(u64, u64)], minus: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for &(a, b) in ranges {
        let mut pieces = vec![(a, b)];
        for &(c, d) in minus {
            pieces = pieces
                .into_iter()
                .flat_map(|(x, y)| {
                    if d <= x || c >= y {
                        vec![(x, y)]
                    } else {
                        [(x, c.max(x)), (d.min(y), y)]
                            .into_iter()
                            .filter(|(p, q)| p < q)
                            .collect()
                    }
                })
                .collect();
        }
        out.extend(pieces);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_ranges_map_to_the_file_ranges_they_hold() {
        // 64K stripes over 3 devices: slot 1's object offset 0 is the file's 64K..128K, its
        // offset 64K the file's 256K..320K.
        let l = Layout::new(65536, 3, 0);
        assert_eq!(
            file_ranges(&l, 1, &[(4096, 70_000)], 1 << 20),
            [(69_632, 131_072), (262_144, 266_608)]
        );
        assert_eq!(
            file_ranges(&l, 1, &[(0, 65536)], 100_000),
            [(65_536, 100_000)]
        );
        // Width 1: the object is the file.
        let one = Layout::new(65536, 1, 0);
        assert_eq!(
            file_ranges(&one, 0, &[(0, 200_000)], 150_000),
            [(0, 150_000)]
        );
    }

    #[test]
    fn subtracting_ranges() {
        assert_eq!(
            subtract(&[(0, 100)], &[(10, 20), (50, 60)]),
            [(0, 10), (20, 50), (60, 100)]
        );
        assert!(subtract(&[(10, 20)], &[(0, 100)]).is_empty());
        assert_eq!(subtract(&[(10, 20)], &[(30, 40)]), [(10, 20)]);
    }
}
