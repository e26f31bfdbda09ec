//! The devices of a mounted volume: each one's directory, health and injected faults, in a
//! set that devices join (and leave) while I/O is in flight.

use super::*;

/// An injected fault: I/O of a device fails with `errno` (for tests and drills).
#[derive(Clone, Debug, PartialEq)]
pub struct Fault {
    /// `Some(true)` reads only, `Some(false)` writes only, `None` both.
    pub reads: Option<bool>,
    pub errno: i32,
    /// Share of matching I/Os that fail, 0.0..=1.0.
    pub rate: f64,
    /// Only I/O touching this range of object offsets.
    pub range: Option<(u64, u64)>,
}

/// A device's health: failed when its directory vanished or was replaced; error counts.
pub(super) struct Health {
    pub(super) failed: AtomicBool,
    pub(super) read_errors: AtomicU64,
    pub(super) write_errors: AtomicU64,
    /// (st_dev of the superblock, st_ino of `.stripefs`) at mount: others mean another disk.
    pub(super) identity: Option<(u64, u64)>,
    pub(super) faults: parking_lot::RwLock<Vec<Fault>>,
    /// Some fault was injected: without one, I/O never takes `faults`' lock (a shared
    /// lock is still a write to it, which bounces between the CPUs on every request).
    pub(super) faulty: AtomicBool,
    pub(super) dice: AtomicU64,
}

/// What status shows of a device.
#[derive(Clone, Debug)]
pub struct DeviceHealth {
    pub failed: bool,
    /// Removed from the volume: its id stays taken, nothing is on it.
    pub removed: bool,
    pub read_errors: u64,
    pub write_errors: u64,
    pub faults: usize,
}

pub(super) fn identity(device: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let sb = std::fs::metadata(device.join(META_DIR).join("superblock")).ok()?;
    let dir = std::fs::metadata(device.join(META_DIR)).ok()?;
    Some((sb.dev(), dir.ino()))
}

/// The most devices a volume holds (as md caps its members).
pub const MAX_DEVICES: usize = 256;

/// One device of the set.
pub(super) struct Device {
    pub(super) info: DeviceInfo,
    pub(super) health: Health,
    /// The device's object directory, held open: objects are opened beneath it (none for a
    /// device missing at a degraded mount).
    pub(super) objects: Option<OwnedFd>,
    /// Its files live in memory, so its buffered I/O runs on the submitting thread.
    pub(super) ram_backed: bool,
    /// Removed from the set (at mount, or since): its id's place holds nothing.
    pub(super) removed: AtomicBool,
}

impl Device {
    pub(super) fn removed(&self) -> bool {
        self.removed.load(Relaxed)
    }

    pub(super) fn new(info: DeviceInfo) -> Result<Device> {
        let objects = match info.missing {
            true => None,
            false => Some(objects_dir(&info.path).map_err(|e| StripeError::Io {
                index: info.index,
                path: info.path.clone(),
                source: e,
            })?),
        };
        Ok(Device {
            health: Health {
                failed: AtomicBool::new(info.missing),
                read_errors: AtomicU64::new(0),
                write_errors: AtomicU64::new(0),
                identity: identity(&info.path),
                faults: Default::default(),
                faulty: AtomicBool::new(false),
                dice: AtomicU64::new(0x9E37_79B9_7F4A_7C15 ^ info.index as u64),
            },
            ram_backed: ram_backed(&info.path),
            removed: AtomicBool::new(info.retired),
            objects,
            info,
        })
    }
}

/// The devices and their health: what a completing I/O needs to account for itself. Devices
/// join while the volume is mounted: each place is filled once, and the count published
/// after it, so I/O in flight never takes a lock to find its device.
pub(super) struct DeviceSet {
    pub(super) places: Box<[OnceLock<Device>]>,
    pub(super) count: AtomicUsize,
}

impl DeviceSet {
    pub(super) fn new(devices: Vec<DeviceInfo>) -> Result<DeviceSet> {
        let set = DeviceSet {
            places: (0..MAX_DEVICES).map(|_| OnceLock::new()).collect(),
            count: AtomicUsize::new(0),
        };
        for d in devices {
            set.push(Device::new(d)?);
        }
        Ok(set)
    }

    pub(super) fn push(&self, device: Device) {
        let at = self.len();
        debug_assert_eq!(device.info.index, at, "devices join in id order");
        if self.places[at].set(device).is_ok() {
            self.count
                .store(at + 1, std::sync::atomic::Ordering::Release);
        }
    }

    pub(super) fn len(&self) -> usize {
        self.count.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Device `id`, which the volume has (ids come from layouts the volume checked).
    pub(super) fn dev(&self, id: usize) -> &Device {
        self.places[id].get().expect("a device of the volume")
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Device> {
        self.places[..self.len()].iter().filter_map(|p| p.get())
    }

    /// The devices in the set (not removed), by id.
    pub(super) fn members(&self) -> impl Iterator<Item = (usize, &Device)> {
        self.iter().enumerate().filter(|(_, d)| !d.removed())
    }

    pub(super) fn io_err(&self, device: usize, source: io::Error) -> StripeError {
        StripeError::Io {
            index: device,
            path: self.dev(device).info.path.clone(),
            source,
        }
    }

    pub(super) fn failed(&self, dev: usize) -> bool {
        self.dev(dev).health.failed.load(Relaxed)
    }

    /// Looks at every device: one whose directory vanished or holds another disk now is marked
    /// failed (its I/O fails with EIO from then on). Returns the devices newly failed.
    pub(super) fn check_devices(&self) -> Vec<usize> {
        let mut newly = Vec::new();
        for (i, dev) in self.members() {
            let (d, h) = (&dev.info, &dev.health);
            if h.failed.load(Relaxed) {
                continue;
            }
            if identity(&d.path) != h.identity {
                h.failed.store(true, Relaxed);
                log::error!(
                    "DEVICE FAILED: {} (device {i}) is gone or holds another disk; \
                     its I/O fails with EIO until the volume is remounted",
                    d.path.display()
                );
                newly.push(i);
            }
        }
        newly
    }

    /// Refuses I/O of a failed device, and fails I/O that an injected fault selects.
    pub(super) fn admit(&self, dev: usize, write: bool, io: &SlotIo) -> Result<()> {
        let h = &self.dev(dev).health;
        if h.failed.load(Relaxed) {
            return Err(self.io_err(dev, io::Error::from_raw_os_error(libc::EIO)));
        }
        if !h.faulty.load(Relaxed) {
            return Ok(());
        }
        for f in h.faults.read().iter() {
            let kind = f.reads.is_none_or(|r| r != write);
            let place = f
                .range
                .is_none_or(|(a, b)| io.obj_offset < b && io.obj_offset + io.len() > a);
            if kind && place {
                let mut x = h.dice.load(Relaxed);
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                h.dice.store(x, Relaxed);
                if (x % 1_000_000) as f64 / 1_000_000.0 < f.rate {
                    return Err(self.io_err(dev, io::Error::from_raw_os_error(f.errno)));
                }
            }
        }
        Ok(())
    }

    /// Counts a failed I/O against its device, and looks whether the device is still there.
    pub(super) fn note_error<T>(&self, dev: usize, write: bool, r: Result<T>) -> Result<T> {
        if r.is_err() {
            let h = &self.dev(dev).health;
            if write {
                &h.write_errors
            } else {
                &h.read_errors
            }
            .fetch_add(1, Relaxed);
            self.check_devices();
            if self.failed(dev) {
                return Err(self.io_err(dev, io::Error::from_raw_os_error(libc::EIO)));
            }
        }
        r
    }
}

/// A device whose files live in memory (tmpfs, ramfs): its buffered I/O never waits.
pub fn ram_backed(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statfs fills the zeroed struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return false;
    }
    // ramfs's magic, which libc does not name.
    const RAMFS_MAGIC: libc::c_long = 0x8584_58f6;
    matches!(st.f_type, libc::TMPFS_MAGIC | RAMFS_MAGIC)
}
