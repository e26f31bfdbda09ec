//! Backing devices: the superblock each one carries, formatting, and the checks that make a
//! mount refuse a missing, foreign, misordered or busy device.

use crate::error::{Result, StripeError};
use crate::layout::Rings;
use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use uuid::Uuid;

pub const FORMAT_VERSION: u32 = 1;
const MAGIC: &str = "stripefs";
pub(crate) const META_DIR: &str = ".stripefs";
const SUPERBLOCK: &str = "superblock";
/// A removed device's superblock, kept under this name: it names the volume it left.
const REMOVED: &str = "superblock.removed";
const LOCK: &str = "lock";
pub(crate) const OBJECTS: &str = "objects";
/// Object files are spread over this many subdirectories per device.
pub(crate) const FANOUT: u64 = 256;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Superblock {
    pub magic: String,
    pub format_version: u32,
    pub volume_uuid: Uuid,
    pub device_index: u32,
    pub device_count: u32,
    /// The volume's default layout when it was made.
    pub stripe_size: u32,
    pub width: u32,
    pub created_unix: u64,
    /// Bumped by every change of the device set: the devices of a volume agree on it, except
    /// while a change is under way (then mount finishes or undoes it).
    #[serde(default)]
    pub generation: u64,
    /// The rings layouts are laid on (see `Rings`); none in superblocks made before devices
    /// could be added: ring 0 is then the devices at mkfs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rings: Vec<Vec<u32>>,
    /// Where each device (by id) was when the set last changed: how mount finds a device
    /// added after the config it was given was written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<PathBuf>,
    /// Ids of devices removed from the set (their data moved off first): never used again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retired: Vec<u32>,
    /// Written while the set changes to this generation, cleared once every device has it:
    /// a device a generation behind others that are no longer pending is an old copy, not
    /// a change cut short.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pending: bool,
}

impl Superblock {
    /// The device set's rings.
    pub fn rings(&self) -> Rings {
        if self.rings.is_empty() {
            Rings::initial(self.device_count)
        } else {
            Rings(self.rings.clone())
        }
    }

    /// This device's superblock in the set another device's superblock describes.
    pub(crate) fn as_device(&self, index: u32) -> Superblock {
        Superblock {
            device_index: index,
            ..self.clone()
        }
    }
}

/// What `format` is asked to make.
pub struct FormatOptions<'a> {
    pub devices: &'a [PathBuf],
    pub stripe_size: u32,
    pub width: u32,
    /// Overwrite devices that already hold a stripefs volume.
    pub force: bool,
}

/// A device as found at mount.
#[derive(Debug)]
pub struct DeviceInfo {
    /// The device's place in the volume (its superblock's): what layouts refer to.
    pub index: usize,
    /// Its place in the list it was given in (the config's `devices`).
    pub listed_as: usize,
    pub path: PathBuf,
    pub superblock: Superblock,
    /// Listed but gone (no directory or no superblock): a degraded mount's lost device.
    pub missing: bool,
    /// Removed from the volume (`device remove`): a place kept for its id, holding nothing.
    pub retired: bool,
    /// Held for the life of the mount: a second mount of the device is refused.
    pub(crate) _lock: Option<File>,
}

fn io_err(index: usize, path: &Path, source: std::io::Error) -> StripeError {
    StripeError::Io {
        index,
        path: path.to_path_buf(),
        source,
    }
}

fn read_superblock(path: &Path) -> std::result::Result<Option<Superblock>, String> {
    let file = path.join(META_DIR).join(SUPERBLOCK);
    let bytes = match fs::read(&file) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", file.display())),
    };
    let sb: Superblock = serde_json::from_slice(&bytes)
        .map_err(|e| format!("{}: damaged superblock ({e})", file.display()))?;
    if sb.magic != MAGIC {
        return Err(format!("{}: not a stripefs superblock", file.display()));
    }
    if sb.format_version != FORMAT_VERSION {
        return Err(format!(
            "{}: format version {} is not supported (this stripefs reads version {FORMAT_VERSION})",
            file.display(),
            sb.format_version
        ));
    }
    Ok(Some(sb))
}

/// The file whose flock a mounted volume holds on each of its devices.
pub fn lock_path(device: &Path) -> PathBuf {
    device.join(META_DIR).join(LOCK)
}

/// Takes the device's lock, or says who holds it.
fn lock_device(index: usize, path: &Path) -> Result<File> {
    let lock_path = lock_path(path);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&lock_path)
        .map_err(|e| io_err(index, path, e))?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let mut holder = String::new();
        let _ = file.read_to_string(&mut holder);
        return Err(StripeError::Devices(format!(
            "device {} is in use by another stripefs mount{}; unmount it first",
            path.display(),
            match holder.trim() {
                "" => String::new(),
                pid => format!(" (pid {pid})"),
            }
        )));
    }
    file.set_len(0).map_err(|e| io_err(index, path, e))?;
    write!(file, "{}", std::process::id()).map_err(|e| io_err(index, path, e))?;
    // Held through a read-only descriptor: a mounted volume keeps no device open for writing
    // while idle, so the device's filesystem can still go read-only (and reads go on).
    let held = File::open(&lock_path).map_err(|e| io_err(index, path, e))?;
    drop(file);
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(StripeError::Devices(format!(
            "device {} is in use by another stripefs mount; unmount it first",
            path.display()
        )));
    }
    Ok(held)
}

/// Formats devices into a new volume and returns its uuid.
pub fn format(opts: &FormatOptions) -> Result<Uuid> {
    let count = opts.devices.len();
    if count == 0 {
        return Err(StripeError::Devices("no devices to format".into()));
    }
    for (index, path) in opts.devices.iter().enumerate() {
        match read_superblock(path) {
            Ok(Some(sb)) if !opts.force => {
                return Err(StripeError::Devices(format!(
                    "device {} already holds stripefs volume {} (device {} of {}); \
                     use --force to overwrite it and lose its data",
                    path.display(),
                    sb.volume_uuid,
                    sb.device_index,
                    sb.device_count
                )))
            }
            Err(e) if !opts.force => return Err(StripeError::Devices(e)),
            _ => {}
        }
        if path.join(META_DIR).exists() {
            // Refuse to wipe a device that a live mount holds, even with --force.
            let lock = lock_device(index, path)?;
            drop(lock);
        }
    }
    let uuid = Uuid::new_v4();
    let created_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    for (index, path) in opts.devices.iter().enumerate() {
        let meta = path.join(META_DIR);
        if meta.exists() {
            fs::remove_dir_all(&meta).map_err(|e| io_err(index, path, e))?;
        }
        make_object_dirs(index, path)?;
        let sb = Superblock {
            magic: MAGIC.into(),
            format_version: FORMAT_VERSION,
            volume_uuid: uuid,
            device_index: index as u32,
            device_count: count as u32,
            stripe_size: opts.stripe_size,
            width: opts.width,
            created_unix,
            generation: 0,
            rings: Vec::new(),
            paths: opts.devices.to_vec(),
            retired: Vec::new(),
            pending: false,
        };
        write_superblock(path, &sb).map_err(|e| io_err(index, path, e))?;
    }
    Ok(uuid)
}

/// The metadata directory of device `index` at `path`, with its object fan-out.
fn make_object_dirs(index: usize, path: &Path) -> Result<()> {
    let objects = path.join(META_DIR).join(OBJECTS);
    let mut builder = fs::DirBuilder::new();
    builder.mode(0o700).recursive(true);
    for fan in 0..FANOUT {
        builder
            .create(objects.join(format!("{fan:02x}")))
            .map_err(|e| io_err(index, path, e))?;
    }
    Ok(())
}

fn write_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    fs::rename(&tmp, path)?;
    File::open(path.parent().unwrap_or(Path::new(".")))?.sync_all()
}

/// Every device must carry the same volume uuid. When most do, the others are named as not
/// belonging; when no uuid has a majority, nothing says which is right, so all are listed.
fn check_same_volume(paths: &[PathBuf], found: &[Superblock]) -> Result<()> {
    let count = |u: &Uuid| found.iter().filter(|s| &s.volume_uuid == u).count();
    if count(&found[0].volume_uuid) == found.len() {
        return Ok(());
    }
    let claim = |path: &PathBuf, sb: &Superblock| {
        format!(
            "device {} belongs to volume {} (its superblock {})",
            path.display(),
            sb.volume_uuid,
            path.join(META_DIR).join(SUPERBLOCK).display()
        )
    };
    let majority = found
        .iter()
        .map(|s| s.volume_uuid)
        .find(|u| count(u) * 2 > found.len());
    Err(StripeError::Devices(match majority {
        Some(volume) => {
            let odd: Vec<String> = paths
                .iter()
                .zip(found)
                .filter(|(_, sb)| sb.volume_uuid != volume)
                .map(|(p, sb)| claim(p, sb))
                .collect();
            format!(
                "{}, but the other devices belong to volume {volume}: the devices are from \
                 different volumes (a device of another volume, or an edited superblock)",
                odd.join("; ")
            )
        }
        None => {
            let all: Vec<String> = paths
                .iter()
                .zip(found)
                .map(|(p, sb)| claim(p, sb))
                .collect();
            format!(
                "the devices are from different volumes, and no volume has most of them: {}",
                all.join("; ")
            )
        }
    }))
}

/// The listed device whose superblock says it is the volume's first (index 0): where the
/// namespace lives unless `volume.meta` says otherwise. The first listed when none says so
/// (before mkfs, whose order the list gives).
pub fn first_device(paths: &[PathBuf]) -> Option<&PathBuf> {
    paths
        .iter()
        .find(|p| matches!(read_superblock(p), Ok(Some(sb)) if sb.device_index == 0))
        .or_else(|| paths.first())
}

/// Reads and checks every device's superblock and locks them; returns them in the volume's
/// order (by the index in their superblocks), whatever the order given. A device added to
/// the volume after the list was written is found where its superblock says it was put, and
/// a change of the device set cut short by a crash is finished (or, when the new device is
/// gone, undone) here, so the volume mounts as before the change or as after it. With
/// `allow_missing` (a degraded mount), devices whose directory or superblock is gone are
/// returned as `missing` in the places no present device claims.
/// With `may_write` false (a read-only mount, fsck without --repair) a change cut short is
/// settled in memory only.
pub(crate) fn open_devices(
    paths: &[PathBuf],
    allow_missing: bool,
    may_write: bool,
) -> Result<Vec<DeviceInfo>> {
    if paths.is_empty() {
        return Err(StripeError::Devices("no devices given".into()));
    }
    let mut present: Vec<(usize, PathBuf)> = Vec::with_capacity(paths.len());
    let mut found = Vec::with_capacity(paths.len());
    let mut missing: Vec<(usize, &PathBuf, String)> = Vec::new();
    let mut removed: Vec<(&PathBuf, Superblock)> = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        let why = if !path.is_dir() {
            format!("device {} is missing (no such directory)", path.display())
        } else {
            match read_superblock(path).map_err(StripeError::Devices)? {
                Some(sb) => {
                    present.push((i, path.clone()));
                    found.push(sb);
                    continue;
                }
                None if read_removed(path).is_some() => {
                    removed.push((path, read_removed(path).unwrap()));
                    continue;
                }
                None => format!(
                    "device {} holds no stripefs volume (no {META_DIR}/{SUPERBLOCK}); is it \
                     the right directory (is its disk mounted?), and was `stripefs mkfs` run?",
                    path.display()
                ),
            }
        };
        missing.push((i, path, why));
    }
    if found.is_empty() {
        return Err(StripeError::Devices(match missing.first() {
            Some((_, _, why)) if !allow_missing => why.clone(),
            _ => "none of the listed devices holds a stripefs volume: nothing to mount".into(),
        }));
    }
    if let Some((_, _, why)) = missing.first().filter(|_| !allow_missing) {
        return Err(StripeError::Devices(format!(
            "{why}. A volume with a device lost can be mounted read-only with --degraded"
        )));
    }
    let present_paths: Vec<PathBuf> = present.iter().map(|(_, p)| p.clone()).collect();
    check_same_volume(&present_paths, &found)?;
    for (path, sb) in removed {
        if sb.volume_uuid != found[0].volume_uuid {
            return Err(StripeError::Devices(format!(
                "device {} was removed from volume {}, not this one ({})",
                path.display(),
                sb.volume_uuid,
                found[0].volume_uuid
            )));
        }
        log::warn!(
            "device {} was removed from the volume (it was device {}): drop it from the \
             config's devices",
            path.display(),
            sb.device_index
        );
    }
    // Only when every listed device is there: a recorded path may hold a stale copy of a
    // device the config now lists elsewhere.
    if missing.is_empty() {
        find_unlisted(&mut present, &mut found);
    }
    let newest = found.iter().map(|s| s.generation).max().unwrap_or(0);
    let set = found
        .iter()
        .find(|s| s.generation == newest)
        .unwrap()
        .clone();
    // While a change is under way the superblocks of two generations describe two sets;
    // which one mounts is settled once the devices are locked.
    let mixed = found.iter().any(|s| s.generation != newest);
    for (k, ((_, path), sb)) in present.iter().zip(&found).enumerate() {
        // The list may be in any order: each device is found by its superblock, as mdadm
        // assembles by UUID. Two entries claiming one place are two copies of a device.
        if let Some(j) = found[..k]
            .iter()
            .position(|o| o.device_index == sb.device_index)
        {
            return Err(StripeError::Devices(format!(
                "devices {} and {} both say they are device {} of volume {}: one is a copy \
                 of the other (or the same directory listed twice); list each device once",
                present[j].1.display(),
                path.display(),
                sb.device_index,
                sb.volume_uuid
            )));
        }
        if sb.device_index >= sb.device_count {
            return Err(StripeError::Devices(format!(
                "device {} says it is device {} of {}: its superblock is damaged",
                path.display(),
                sb.device_index,
                sb.device_count
            )));
        }
    }
    let claimed = |id: u32| found.iter().any(|s| s.device_index == id);
    let lost: Vec<u32> = (0..set.device_count)
        .filter(|&i| !claimed(i) && !set.retired.contains(&i))
        .collect();
    if !mixed && !lost.is_empty() && !allow_missing {
        let why = missing.first().map_or_else(
            || {
                format!(
                    "volume {} has {} devices, but {} are listed (device {} is not among them)",
                    set.volume_uuid,
                    set.device_count,
                    paths.len(),
                    lost[0]
                )
            },
            |m| m.2.clone(),
        );
        return Err(StripeError::Devices(format!(
            "{why}. A volume with a device lost can be mounted read-only with --degraded"
        )));
    }
    if !mixed && present.len() > set.device_count as usize {
        return Err(StripeError::Devices(format!(
            "volume {} has {} devices, but {} are listed",
            set.volume_uuid,
            set.device_count,
            paths.len()
        )));
    }
    let mut devices = Vec::with_capacity(paths.len());
    for ((listed_as, path), superblock) in present.into_iter().zip(found) {
        let index = superblock.device_index as usize;
        let lock = lock_device(index, &path)?;
        devices.push(DeviceInfo {
            index,
            listed_as,
            path,
            superblock,
            missing: false,
            retired: false,
            _lock: Some(lock),
        });
    }
    if mixed || devices.iter().any(|d| d.superblock.pending) {
        settle_interrupted_change(&mut devices, &set, may_write)?;
    }
    // Removed devices keep their ids' places, holding nothing.
    let set = devices[0].superblock.clone();
    for &id in &set.retired {
        devices.push(DeviceInfo {
            index: id as usize,
            listed_as: usize::MAX,
            path: set.paths.get(id as usize).cloned().unwrap_or_default(),
            superblock: set.as_device(id),
            missing: true,
            retired: true,
            _lock: None,
        });
    }
    // Missing devices take the places no present device claims, in the order listed.
    let count = set.device_count;
    let claimed: Vec<usize> = devices.iter().map(|d| d.index).collect();
    let free = (0..count as usize).filter(|i| !claimed.contains(i));
    let mut free = free.collect::<Vec<_>>().into_iter();
    for (listed_as, path, why) in missing {
        let Some(index) = free.next() else {
            return Err(StripeError::Devices(format!(
                "{why}; and the volume has no device it could stand for: drop it from the \
                 config's devices"
            )));
        };
        log::error!("DEVICE MISSING: {why}; mounted degraded as device {index}");
        let superblock = devices[0].superblock.as_device(index as u32);
        devices.push(DeviceInfo {
            index,
            listed_as,
            path: path.clone(),
            superblock,
            missing: true,
            retired: false,
            _lock: None,
        });
    }
    // Lost devices the config does not list (added since it was written): found by id.
    if allow_missing {
        for index in free {
            let path = set.paths.get(index).cloned().unwrap_or_default();
            log::error!(
                "DEVICE MISSING: device {index} (last at {}) is not in the config nor where it \
                 was added; mounted degraded without it",
                path.display()
            );
            devices.push(DeviceInfo {
                index,
                listed_as: usize::MAX,
                superblock: set.as_device(index as u32),
                path,
                missing: true,
                retired: false,
                _lock: None,
            });
        }
    }
    devices.sort_by_key(|d| d.index);
    if devices.len() != count as usize || devices.iter().enumerate().any(|(i, d)| d.index != i) {
        let have: Vec<usize> = devices.iter().map(|d| d.index).collect();
        return Err(StripeError::Devices(format!(
            "volume {} has {count} devices, but the listed ones are devices {have:?}: list \
             every device of the volume (or mount read-only with --degraded)",
            devices[0].superblock.volume_uuid
        )));
    }
    Ok(devices)
}

/// Devices added since mkfs that the list lacks but that sit where the set recorded them
/// (the daemon stopped between adding one and updating the config): taken in, with a
/// warning. A device of mkfs missing from the list stays the user's mistake to fix.
fn find_unlisted(present: &mut Vec<(usize, PathBuf)>, found: &mut Vec<Superblock>) {
    let Some(set) = found.iter().max_by_key(|s| s.generation).cloned() else {
        return;
    };
    let at_mkfs = set.rings().0[0].len() as u32;
    for id in (at_mkfs..set.device_count).filter(|i| !set.retired.contains(i)) {
        if found.iter().any(|s| s.device_index == id) {
            continue;
        }
        let Some(path) = set.paths.get(id as usize) else {
            continue;
        };
        if present.iter().any(|(_, p)| p == path) {
            continue;
        }
        if let Ok(Some(sb)) = read_superblock(path) {
            if sb.volume_uuid == set.volume_uuid && sb.device_index == id {
                log::warn!(
                    "device {id} of volume {} is not in the config; found at {}, where it was \
                     added: add it to the config's devices",
                    set.volume_uuid,
                    path.display()
                );
                present.push((usize::MAX, path.clone()));
                found.push(sb);
            }
        }
    }
}

/// Finishes a change of the device set that a crash cut short (some superblocks of the next
/// generation written, some not): forward when every device of the new set is here, else
/// back to the old set, which is safe because no file is laid on the new ring before every
/// superblock has it. A device two generations behind is not a change cut short: refused.
fn settle_interrupted_change(
    devices: &mut Vec<DeviceInfo>,
    next: &Superblock,
    may_write: bool,
) -> Result<()> {
    let write = |d: &DeviceInfo, sb: &Superblock| match may_write {
        true => write_superblock(&d.path, sb).map_err(|e| io_err(d.index, &d.path, e)),
        false => Ok(()),
    };
    let Some(old) = devices
        .iter()
        .map(|d| d.superblock.clone())
        .find(|s| s.generation < next.generation)
    else {
        // Every device has the generation: only its commit was cut short.
        let done = Superblock {
            pending: false,
            ..next.clone()
        };
        for d in devices.iter_mut() {
            let sb = done.as_device(d.index as u32);
            write(d, &sb)?;
            d.superblock = sb;
        }
        return Ok(());
    };
    // Some device has the new generation committed: the change was finished, and a device
    // behind it is an old copy.
    let committed = devices
        .iter()
        .any(|d| d.superblock.generation == next.generation && !d.superblock.pending);
    if let Some(stale) = devices.iter().find(|d| {
        d.superblock.generation + 1 < next.generation
            || (committed && d.superblock.generation < next.generation)
    }) {
        return Err(StripeError::Devices(format!(
            "device {} is at generation {} of volume {}, the others at {}: it is an old copy \
             (restored from a backup?), not the device the volume now holds",
            stale.path.display(),
            stale.superblock.generation,
            next.volume_uuid,
            next.generation
        )));
    }
    let all_here = (0..next.device_count)
        .filter(|i| !next.retired.contains(i))
        .all(|i| devices.iter().any(|d| d.index == i as usize));
    let target = Superblock {
        pending: false,
        ..if all_here { next.clone() } else { old }
    };
    log::warn!(
        "the device set of volume {} was being changed when the daemon stopped: {} it \
         (generation {})",
        next.volume_uuid,
        if all_here { "finishing" } else { "undoing" },
        target.generation
    );
    devices.retain(|d| (d.index as u32) < target.device_count);
    // A removal cut short after the others' superblocks: the removed device lets go.
    for d in devices
        .iter()
        .filter(|d| target.retired.contains(&(d.index as u32)) && may_write)
    {
        retire_superblock(&d.path).map_err(|e| io_err(d.index, &d.path, e))?;
    }
    devices.retain(|d| !target.retired.contains(&(d.index as u32)));
    for d in devices.iter_mut() {
        if d.superblock != target.as_device(d.index as u32) {
            let sb = target.as_device(d.index as u32);
            write(d, &sb)?;
            d.superblock = sb;
        }
    }
    Ok(())
}

/// Makes the directory `path` device `sb.device_index` of a volume whose next device set
/// `sb` describes: its object directories and superblock, and the lock a mount holds. A
/// directory of another volume is refused; one this volume's interrupted add left is taken.
pub(crate) fn join(path: &Path, sb: &Superblock, listed_as: usize) -> Result<DeviceInfo> {
    let index = sb.device_index as usize;
    if !path.is_dir() {
        return Err(StripeError::Devices(format!(
            "{} is not a directory: a device is a directory on the disk it stands for",
            path.display()
        )));
    }
    match read_superblock(path).map_err(StripeError::Devices)? {
        Some(old)
            if old.volume_uuid == sb.volume_uuid
                && old.device_index == sb.device_index
                && old.generation >= sb.generation => {}
        Some(old) => {
            return Err(StripeError::Devices(format!(
                "{} already holds stripefs volume {} (device {} of {}): not added; a device \
                 joins empty (wipe its {META_DIR} if that volume is gone for good)",
                path.display(),
                old.volume_uuid,
                old.device_index,
                old.device_count
            )))
        }
        None => {}
    }
    make_object_dirs(index, path)?;
    let lock = lock_device(index, path)?;
    write_superblock(path, sb).map_err(|e| io_err(index, path, e))?;
    Ok(DeviceInfo {
        index,
        listed_as,
        path: path.to_path_buf(),
        superblock: sb.clone(),
        missing: false,
        retired: false,
        _lock: Some(lock),
    })
}

/// The superblock a removed device keeps, naming the volume it left.
fn read_removed(path: &Path) -> Option<Superblock> {
    let bytes = fs::read(path.join(META_DIR).join(REMOVED)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Takes a removed device out of the volume for good: its superblock is kept under another
/// name, so no mount takes it for a member again (and a later `device add` may reuse it).
pub(crate) fn retire_superblock(device: &Path) -> std::io::Result<()> {
    let meta = device.join(META_DIR);
    fs::rename(meta.join(SUPERBLOCK), meta.join(REMOVED))?;
    File::open(&meta)?.sync_all()
}

/// Writes a device's superblock durably (a whole new file renamed over the old).
pub(crate) fn write_superblock(device: &Path, sb: &Superblock) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(sb).expect("superblock serialises");
    write_durably(&device.join(META_DIR).join(SUPERBLOCK), text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs(n: usize) -> (tempfile::TempDir, Vec<PathBuf>) {
        let root = tempfile::tempdir().unwrap();
        let paths: Vec<PathBuf> = (0..n)
            .map(|i| {
                let p = root.path().join(format!("d{i}"));
                fs::create_dir(&p).unwrap();
                p
            })
            .collect();
        (root, paths)
    }

    fn open_devices_test(paths: &[PathBuf]) -> Result<Vec<DeviceInfo>> {
        open_devices(paths, false, true)
    }

    #[test]
    fn a_lost_device_is_refused_unless_degraded() {
        let (root, paths) = dirs(3);
        fmt(&paths, false).unwrap();
        let gone = root.path().join("d1.gone");
        fs::rename(&paths[1], &gone).unwrap();
        let e = open_devices(&paths, false, true).unwrap_err().to_string();
        assert!(e.contains("is missing") && e.contains("--degraded"), "{e}");
        let devs = open_devices(
            &[paths[2].clone(), paths[1].clone(), paths[0].clone()],
            true,
            true,
        )
        .unwrap();
        let seen: Vec<(usize, bool, &PathBuf)> =
            devs.iter().map(|d| (d.index, d.missing, &d.path)).collect();
        assert_eq!(
            seen,
            [
                (0, false, &paths[0]),
                (1, true, &paths[1]),
                (2, false, &paths[2])
            ]
        );
        drop(devs);
        // Not one device left: nothing to mount.
        fs::rename(&paths[0], root.path().join("d0.gone")).unwrap();
        fs::rename(&paths[2], root.path().join("d2.gone")).unwrap();
        let e = open_devices(&paths, true, true).unwrap_err().to_string();
        assert!(e.contains("nothing to mount"), "{e}");
    }

    fn fmt(paths: &[PathBuf], force: bool) -> Result<Uuid> {
        format(&FormatOptions {
            devices: paths,
            stripe_size: 65536,
            width: paths.len() as u32,
            force,
        })
    }

    #[test]
    fn format_then_open() {
        let (_root, paths) = dirs(3);
        let uuid = fmt(&paths, false).unwrap();
        let devs = open_devices_test(&paths).unwrap();
        assert_eq!(devs.len(), 3);
        assert!(devs.iter().all(|d| d.superblock.volume_uuid == uuid));
        assert_eq!(devs[2].superblock.device_index, 2);
    }

    #[test]
    fn mkfs_refuses_a_formatted_device_without_force() {
        let (_root, paths) = dirs(2);
        fmt(&paths, false).unwrap();
        let e = fmt(&paths, false).unwrap_err().to_string();
        assert!(e.contains("already holds stripefs volume"), "{e}");
        assert!(e.contains(&paths[0].display().to_string()), "{e}");
        fmt(&paths, true).unwrap();
    }

    #[test]
    fn wrong_device_sets_are_named() {
        let (_root, paths) = dirs(4);
        fmt(&paths[..3], false).unwrap();
        fmt(&paths[3..], false).unwrap();

        // Any order: each is found by its superblock.
        let swapped = vec![paths[2].clone(), paths[0].clone(), paths[1].clone()];
        let devs = open_devices_test(&swapped).unwrap();
        let order: Vec<(usize, usize, &PathBuf)> = devs
            .iter()
            .map(|d| (d.index, d.listed_as, &d.path))
            .collect();
        assert_eq!(
            order,
            [(0, 1, &paths[0]), (1, 2, &paths[1]), (2, 0, &paths[2])]
        );
        drop(devs);

        // A copy of a device (same superblock) in place of another.
        let copy = _root.path().join("copy");
        fs::create_dir(&copy).unwrap();
        fs::create_dir(copy.join(META_DIR)).unwrap();
        fs::copy(
            paths[1].join(META_DIR).join(SUPERBLOCK),
            copy.join(META_DIR).join(SUPERBLOCK),
        )
        .unwrap();
        let e = open_devices_test(&[paths[0].clone(), paths[1].clone(), copy.clone()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("both say they are device 1"), "{e}");
        assert!(e.contains(&copy.display().to_string()), "{e}");

        let short = vec![paths[0].clone(), paths[1].clone()];
        let e = open_devices_test(&short).unwrap_err().to_string();
        assert!(e.contains("has 3 devices, but 2 are listed"), "{e}");

        let foreign = vec![paths[0].clone(), paths[1].clone(), paths[3].clone()];
        let e = open_devices_test(&foreign).unwrap_err().to_string();
        assert!(
            e.contains(&format!("device {} belongs to volume", paths[3].display())),
            "{e}"
        );

        let blank = _root.path().join("blank");
        fs::create_dir(&blank).unwrap();
        let e = open_devices_test(&[paths[0].clone(), paths[1].clone(), blank.clone()])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!(
                "device {} holds no stripefs volume",
                blank.display()
            )),
            "{e}"
        );

        let gone = _root.path().join("gone");
        let e = open_devices_test(std::slice::from_ref(&gone))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("device {} is missing", gone.display())),
            "{e}"
        );
    }

    #[test]
    fn a_second_open_is_refused_while_the_first_holds_the_lock() {
        let (_root, paths) = dirs(2);
        fmt(&paths, false).unwrap();
        let held = open_devices_test(&paths).unwrap();
        let e = open_devices_test(&paths).unwrap_err().to_string();
        assert!(e.contains("in use by another stripefs mount"), "{e}");
        let e = fmt(&paths, true).unwrap_err().to_string();
        assert!(e.contains("in use"), "{e}");
        drop(held);
        open_devices_test(&paths).unwrap();
    }
}
