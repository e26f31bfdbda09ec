//! A mounted set of devices and striped I/O over the per-device object files of each inode.

use crate::device::{open_devices, DeviceInfo, FANOUT, META_DIR, OBJECTS};
use crate::emulate::{DeviceModel, Emulated};
use crate::error::{Result, StripeError};
use crate::io::{preadv_full, pwritev_full};
use crate::layout::{Layout, SlotIo};
use dashmap::DashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use uuid::Uuid;

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
struct Health {
    failed: AtomicBool,
    read_errors: AtomicU64,
    write_errors: AtomicU64,
    /// (st_dev of the superblock, st_ino of `.stripefs`) at mount: others mean another disk.
    identity: Option<(u64, u64)>,
    faults: parking_lot::RwLock<Vec<Fault>>,
    dice: AtomicU64,
}

/// What status shows of a device.
#[derive(Clone, Debug)]
pub struct DeviceHealth {
    pub failed: bool,
    pub read_errors: u64,
    pub write_errors: u64,
    pub faults: usize,
}

fn identity(device: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let sb = std::fs::metadata(device.join(META_DIR).join("superblock")).ok()?;
    let dir = std::fs::metadata(device.join(META_DIR)).ok()?;
    Some((sb.dev(), dir.ino()))
}

/// How many objects may keep open files before idle ones are closed.
const OPEN_OBJECTS: usize = 1024;

/// Open object files of one inode, one per device, opened on first use.
struct Objects {
    files: Vec<OnceLock<File>>,
    /// The same files opened O_DIRECT (None where the device's filesystem refuses it).
    direct: Vec<OnceLock<Option<File>>>,
}

pub struct Volume {
    devices: Vec<DeviceInfo>,
    uuid: Uuid,
    open: DashMap<u64, Arc<Objects>>,
    /// Per device: the model that makes it behave like a slower drive, if any.
    emulated: Vec<Option<Emulated>>,
    /// Layout of each object, for callers that address objects alone (the cache's core).
    layouts: DashMap<u64, Layout>,
    health: Vec<Health>,
    /// Whole-block object I/O bypasses the devices' page cache (`device_io = "direct"`).
    direct: AtomicBool,
}

/// What one device can hold, from statvfs.
#[derive(Clone, Debug)]
pub struct SpaceInfo {
    pub path: PathBuf,
    pub total_bytes: u64,
    pub free_bytes: u64,
    pub avail_bytes: u64,
}

/// An object file found on a device.
#[derive(Clone, Debug)]
pub struct ObjectInfo {
    pub device: usize,
    pub ino: u64,
    pub len: u64,
    pub allocated: u64,
}

impl Volume {
    /// Opens the devices in the order the config lists them; refuses a wrong set.
    pub fn open(paths: &[PathBuf]) -> Result<Volume> {
        let devices = open_devices(paths)?;
        let uuid = devices[0].superblock.volume_uuid;
        Ok(Volume {
            emulated: devices.iter().map(|_| None).collect(),
            layouts: DashMap::new(),
            direct: AtomicBool::new(false),
            health: devices
                .iter()
                .map(|d| Health {
                    failed: AtomicBool::new(false),
                    read_errors: AtomicU64::new(0),
                    write_errors: AtomicU64::new(0),
                    identity: identity(&d.path),
                    faults: Default::default(),
                    dice: AtomicU64::new(0x9E37_79B9_7F4A_7C15 ^ d.index as u64),
                })
                .collect(),
            devices,
            uuid,
            open: DashMap::new(),
        })
    }

    /// With `true`, object I/O in whole 4 KiB blocks uses O_DIRECT, so the devices' own speed
    /// is what callers see (and benchmarks measure); the rest stays buffered. The kernel keeps
    /// the two coherent.
    pub fn set_direct_io(&self, direct: bool) {
        self.direct.store(direct, Relaxed);
    }

    /// The O_DIRECT twin of an open object file, if the request can use it.
    fn direct_twin<'o>(
        &self,
        objs: &'o Objects,
        device: usize,
        ino: u64,
        io: &SlotIo,
    ) -> Option<&'o File> {
        if !self.direct.load(Relaxed) || !crate::io::direct_aligned(io.obj_offset, io.len()) {
            return None;
        }
        objs.direct[device]
            .get_or_init(|| {
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .custom_flags(libc::O_DIRECT)
                    .open(self.object_path(device, ino))
                    .inspect_err(|e| {
                        log::debug!("no O_DIRECT for object {ino} on device {device}: {e}")
                    })
                    .ok()
            })
            .as_ref()
    }

    /// Makes I/O of device `index` fail as `fault` says.
    pub fn inject(&self, index: usize, fault: Fault) {
        self.health[index].faults.write().push(fault);
    }

    /// Looks at every device: one whose directory vanished or holds another disk now is marked
    /// failed (its I/O fails with EIO from then on). Returns the devices newly failed.
    pub fn check_devices(&self) -> Vec<usize> {
        let mut newly = Vec::new();
        for (i, d) in self.devices.iter().enumerate() {
            let h = &self.health[i];
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

    pub fn health(&self) -> Vec<DeviceHealth> {
        self.health
            .iter()
            .map(|h| DeviceHealth {
                failed: h.failed.load(Relaxed),
                read_errors: h.read_errors.load(Relaxed),
                write_errors: h.write_errors.load(Relaxed),
                faults: h.faults.read().len(),
            })
            .collect()
    }

    fn failed(&self, dev: usize) -> bool {
        self.health[dev].failed.load(Relaxed)
    }

    /// Refuses I/O of a failed device, and fails I/O that an injected fault selects.
    fn admit(&self, dev: usize, write: bool, io: &SlotIo) -> Result<()> {
        let h = &self.health[dev];
        if h.failed.load(Relaxed) {
            return Err(self.io_err(dev, io::Error::from_raw_os_error(libc::EIO)));
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
    fn note_error<T>(&self, dev: usize, write: bool, r: Result<T>) -> Result<T> {
        if r.is_err() {
            let h = &self.health[dev];
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

    /// Makes device `index` behave like `model` for data I/O.
    pub fn emulate(&mut self, index: usize, model: DeviceModel) {
        self.emulated[index] = Some(Emulated::new(model));
    }

    /// The model of each device, if emulated.
    pub fn models(&self) -> Vec<Option<&DeviceModel>> {
        self.emulated
            .iter()
            .map(|e| e.as_ref().map(|e| &e.model))
            .collect()
    }

    /// Books an I/O on an emulated device; the returned guard waits out its service time.
    fn emulation(
        &self,
        dev: usize,
        write: bool,
        object: u64,
        io: &SlotIo,
    ) -> Option<std::time::Instant> {
        self.emulated[dev]
            .as_ref()
            .map(|e| e.book(write, object, io.obj_offset, io.len()))
    }

    pub fn uuid(&self) -> Uuid {
        self.uuid
    }

    pub fn device_count(&self) -> u32 {
        self.devices.len() as u32
    }

    pub fn device_path(&self, index: usize) -> &Path {
        &self.devices[index].path
    }

    /// Path of an inode's object file on a device.
    pub fn object_path(&self, device: usize, ino: u64) -> PathBuf {
        object_path(&self.devices[device].path, ino)
    }

    fn io_err(&self, device: usize, source: io::Error) -> StripeError {
        StripeError::Io {
            index: device,
            path: self.devices[device].path.clone(),
            source,
        }
    }

    fn objects(&self, ino: u64) -> Arc<Objects> {
        let objs = self
            .open
            .entry(ino)
            .or_insert_with(|| {
                Arc::new(Objects {
                    files: (0..self.devices.len()).map(|_| OnceLock::new()).collect(),
                    direct: (0..self.devices.len()).map(|_| OnceLock::new()).collect(),
                })
            })
            .clone();
        // Objects opened behind a file's back (a cache writing back after the last close) are
        // not closed by `close`: keep the descriptors bounded by dropping idle ones.
        if self.open.len() > OPEN_OBJECTS {
            self.open.retain(|_, o| Arc::strong_count(o) > 1);
        }
        objs
    }

    /// The object file of `ino` on `device`; `None` if it does not exist and `create` is false.
    fn object<'o>(
        &self,
        objs: &'o Objects,
        device: usize,
        ino: u64,
        create: bool,
    ) -> Result<Option<&'o File>> {
        let slot = &objs.files[device];
        if let Some(f) = slot.get() {
            return Ok(Some(f));
        }
        let path = self.object_path(device, ino);
        let opened = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .mode(0o600)
            .open(&path);
        match opened {
            Ok(f) => {
                let _ = slot.set(f);
                Ok(slot.get())
            }
            // No object file is a hole, unless the whole device is gone.
            Err(e) if e.kind() == io::ErrorKind::NotFound && !create => {
                self.check_devices();
                if self.failed(device) {
                    return Err(self.io_err(device, io::Error::from_raw_os_error(libc::EIO)));
                }
                Ok(None)
            }
            Err(e) => Err(self.io_err(device, e)),
        }
    }

    /// Runs `op` for every slot's share of a request, the devices in parallel.
    fn for_each_slot<T, F>(&self, plan: Vec<SlotIo>, parts: Vec<T>, op: F) -> Result<()>
    where
        T: Send,
        F: Fn(&SlotIo, T) -> Result<()> + Sync,
    {
        if plan.len() <= 1 {
            return plan.iter().zip(parts).try_for_each(|(io, p)| op(io, p));
        }
        std::thread::scope(|scope| {
            let mut work = plan.iter().zip(parts);
            let first = work.next();
            let handles: Vec<_> = work.map(|(io, p)| scope.spawn(|| op(io, p))).collect();
            let mut result = first.map_or(Ok(()), |(io, p)| op(io, p));
            for h in handles {
                let r = h.join().unwrap_or_else(|_| {
                    Err(StripeError::Devices("device I/O thread panicked".into()))
                });
                if result.is_ok() {
                    result = r;
                }
            }
            result
        })
    }

    /// Reads `buf.len()` bytes at `offset`; holes and unwritten ranges read as zeros.
    pub fn read(&self, ino: u64, layout: &Layout, offset: u64, buf: &mut [u8]) -> Result<()> {
        buf.fill(0);
        let objs = self.objects(ino);
        let n = self.device_count();
        let plan = layout.plan(offset, buf.len());
        let parts = split_mut(buf, &plan);
        self.for_each_slot(plan, parts, |io, mut bufs| {
            let dev = layout.device_of_slot(io.slot, n);
            self.note_error(dev, false, self.admit(dev, false, io))?;
            let until = self.emulation(dev, false, ino, io);
            let result = self.object(&objs, dev, ino, false).and_then(|f| match f {
                Some(f) => match self.direct_twin(&objs, dev, ino, io) {
                    Some(d) => {
                        let mut bounce = crate::io::AlignedBuf::new(io.len() as usize);
                        let b = bounce.as_mut_slice(io.len() as usize);
                        preadv_full(d.as_raw_fd(), &mut [&mut *b], io.obj_offset)
                            .map_err(|e| self.io_err(dev, e))?;
                        let mut at = 0;
                        for part in bufs.iter_mut() {
                            part.copy_from_slice(&b[at..at + part.len()]);
                            at += part.len();
                        }
                        Ok(())
                    }
                    None => preadv_full(f.as_raw_fd(), &mut bufs, io.obj_offset)
                        .map_err(|e| self.io_err(dev, e)),
                },
                None => Ok(()),
            });
            wait_until(until);
            self.note_error(dev, false, result)
        })
    }

    /// Writes `data` at `offset`.
    pub fn write(&self, ino: u64, layout: &Layout, offset: u64, data: &[u8]) -> Result<()> {
        let objs = self.objects(ino);
        let n = self.device_count();
        let plan = layout.plan(offset, data.len());
        let parts: Vec<Vec<&[u8]>> = plan
            .iter()
            .map(|io| io.segments.iter().map(|&(o, l)| &data[o..o + l]).collect())
            .collect();
        self.for_each_slot(plan, parts, |io, bufs| {
            let dev = layout.device_of_slot(io.slot, n);
            self.note_error(dev, true, self.admit(dev, true, io))?;
            let until = self.emulation(dev, true, ino, io);
            let result = self.object(&objs, dev, ino, true).and_then(|f| {
                let f = f.expect("created");
                match self.direct_twin(&objs, dev, ino, io) {
                    Some(d) => {
                        let mut bounce = crate::io::AlignedBuf::new(io.len() as usize);
                        let b = bounce.as_mut_slice(io.len() as usize);
                        let mut at = 0;
                        for part in &bufs {
                            b[at..at + part.len()].copy_from_slice(part);
                            at += part.len();
                        }
                        pwritev_full(d.as_raw_fd(), &[&*b], io.obj_offset)
                    }
                    None => pwritev_full(f.as_raw_fd(), &bufs, io.obj_offset),
                }
                .map_err(|e| self.io_err(dev, e))
            });
            wait_until(until);
            self.note_error(dev, true, result)
        })
    }

    /// Cuts the objects down to what a file of `size` bytes holds, so a later extension reads
    /// zeros. Growing needs nothing: objects are sparse.
    pub fn truncate(&self, ino: u64, layout: &Layout, size: u64) -> Result<()> {
        let objs = self.objects(ino);
        let n = self.device_count();
        for slot in 0..layout.width {
            let dev = layout.device_of_slot(slot, n);
            if let Some(f) = self.object(&objs, dev, ino, false)? {
                let want = layout.object_len(size, slot);
                let have = f.metadata().map_err(|e| self.io_err(dev, e))?.len();
                if have > want {
                    f.set_len(want).map_err(|e| self.io_err(dev, e))?;
                }
            }
        }
        Ok(())
    }

    /// fallocate(2) over a file range, mapped onto each object; `mode` as for fallocate
    /// (0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, FALLOC_FL_ZERO_RANGE).
    pub fn fallocate(
        &self,
        ino: u64,
        layout: &Layout,
        offset: u64,
        len: u64,
        mode: i32,
    ) -> Result<()> {
        let objs = self.objects(ino);
        let n = self.device_count();
        // Plan in chunks: `plan` works on in-memory lengths.
        let mut done = 0u64;
        while done < len {
            let chunk = (len - done).min(1 << 30);
            for io in layout.plan(offset + done, chunk as usize) {
                let dev = layout.device_of_slot(io.slot, n);
                let f = self.object(&objs, dev, ino, true)?.expect("created");
                // SAFETY: plain syscall on an owned descriptor.
                let r = unsafe {
                    libc::fallocate(f.as_raw_fd(), mode, io.obj_offset as i64, io.len() as i64)
                };
                if r != 0 {
                    return Err(self.io_err(dev, io::Error::last_os_error()));
                }
            }
            done += chunk;
        }
        Ok(())
    }

    /// fdatasync of every object file of the inode that is open.
    pub fn sync(&self, ino: u64) -> Result<()> {
        if let Some(objs) = self.open.get(&ino).map(|o| o.clone()) {
            for (dev, slot) in objs.files.iter().enumerate() {
                if let Some(f) = slot.get() {
                    f.sync_data().map_err(|e| self.io_err(dev, e))?;
                }
            }
        }
        Ok(())
    }

    /// syncfs(2) on every device: everything written so far is durable.
    pub fn sync_all(&self) -> Result<()> {
        for (dev, d) in self.devices.iter().enumerate() {
            let f = File::open(&d.path).map_err(|e| self.io_err(dev, e))?;
            // SAFETY: plain syscall on an owned descriptor.
            if unsafe { libc::syncfs(f.as_raw_fd()) } != 0 {
                return Err(self.io_err(dev, io::Error::last_os_error()));
            }
        }
        Ok(())
    }

    /// Records the layout of an object, for I/O addressed by object alone.
    pub fn set_layout(&self, object: u64, layout: Layout) {
        self.layouts.insert(object, layout);
    }

    fn layout_of(&self, object: u64) -> io::Result<Layout> {
        self.layouts
            .get(&object)
            .map(|l| *l)
            .ok_or_else(|| io::Error::other(format!("no layout known for object {object}")))
    }

    /// Drops the inode's open object files (after its last close).
    pub fn close(&self, ino: u64) {
        self.open.remove(&ino);
    }

    /// Deletes the inode's object files on every device.
    pub fn remove(&self, ino: u64) -> Result<()> {
        self.open.remove(&ino);
        self.layouts.remove(&ino);
        for dev in 0..self.devices.len() {
            match std::fs::remove_file(self.object_path(dev, ino)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(self.io_err(dev, e)),
            }
        }
        Ok(())
    }

    /// Deletes the object file of `object` on one device only (fsck's stray copies).
    pub fn remove_from(&self, device: usize, object: u64) -> Result<()> {
        self.open.remove(&object);
        std::fs::remove_file(self.object_path(device, object)).map_err(|e| self.io_err(device, e))
    }

    /// Length and allocation of each of the inode's object files that exists.
    pub fn object_info(&self, ino: u64) -> Vec<ObjectInfo> {
        (0..self.devices.len())
            .filter_map(|dev| {
                let md = std::fs::metadata(self.object_path(dev, ino)).ok()?;
                Some(object_info(dev, ino, &md))
            })
            .collect()
    }

    /// Every object file on every device (for fsck).
    pub fn list_objects(&self) -> Result<Vec<ObjectInfo>> {
        let mut out = Vec::new();
        for (dev, d) in self.devices.iter().enumerate() {
            let root = d.path.join(META_DIR).join(OBJECTS);
            for fan in 0..FANOUT {
                let dir = root.join(format!("{fan:02x}"));
                let entries = match std::fs::read_dir(&dir) {
                    Ok(e) => e,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(self.io_err(dev, e)),
                };
                for entry in entries {
                    let entry = entry.map_err(|e| self.io_err(dev, e))?;
                    let Some(ino) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
                        continue;
                    };
                    let md = entry.metadata().map_err(|e| self.io_err(dev, e))?;
                    out.push(object_info(dev, ino, &md));
                }
            }
        }
        Ok(out)
    }

    /// statvfs of every device (zeros for one that cannot say: it is gone).
    pub fn space(&self) -> Vec<SpaceInfo> {
        self.devices
            .iter()
            .map(|d| {
                statvfs(&d.path).unwrap_or_else(|_| SpaceInfo {
                    path: d.path.clone(),
                    total_bytes: 0,
                    free_bytes: 0,
                    avail_bytes: 0,
                })
            })
            .collect()
    }

    /// Copies an object's data into another object id under a new layout (for migration);
    /// all-zero chunks are left as holes.
    pub fn copy_to(
        &self,
        ino: u64,
        from: &Layout,
        size: u64,
        to_ino: u64,
        to: &Layout,
    ) -> Result<()> {
        const CHUNK: u64 = 4 << 20;
        let mut buf = vec![0u8; CHUNK as usize];
        let mut pos = 0;
        while pos < size {
            let n = (size - pos).min(CHUNK) as usize;
            self.read(ino, from, pos, &mut buf[..n])?;
            if buf[..n].iter().any(|&b| b != 0) {
                self.write(to_ino, to, pos, &buf[..n])?;
            }
            pos += n as u64;
        }
        self.sync(to_ino)
    }
}

/// The cache's core: objects addressed without their layout, which the volume remembers.
impl cache::Backend for Volume {
    fn read(&self, object: u64, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let layout = self.layout_of(object)?;
        Volume::read(self, object, &layout, offset, buf).map_err(into_io)
    }

    fn write(&self, object: u64, offset: u64, data: &[u8]) -> io::Result<()> {
        let layout = self.layout_of(object)?;
        Volume::write(self, object, &layout, offset, data).map_err(into_io)
    }

    fn sync(&self, object: u64) -> io::Result<()> {
        Volume::sync(self, object).map_err(into_io)
    }
}

fn into_io(e: StripeError) -> io::Error {
    match e {
        StripeError::Io { source, .. } => source,
        other => io::Error::other(other.to_string()),
    }
}

fn wait_until(until: Option<std::time::Instant>) {
    if let Some(t) = until {
        let left = t.saturating_duration_since(std::time::Instant::now());
        if !left.is_zero() {
            std::thread::sleep(left);
        }
    }
}

fn object_path(device: &Path, ino: u64) -> PathBuf {
    device
        .join(META_DIR)
        .join(OBJECTS)
        .join(format!("{:02x}", ino % FANOUT))
        .join(ino.to_string())
}

fn object_info(device: usize, ino: u64, md: &std::fs::Metadata) -> ObjectInfo {
    use std::os::unix::fs::MetadataExt;
    ObjectInfo {
        device,
        ino,
        len: md.len(),
        allocated: md.blocks() * 512,
    }
}

fn statvfs(path: &Path) -> io::Result<SpaceInfo> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: statvfs fills the zeroed struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let frsize = st.f_frsize as u64;
    Ok(SpaceInfo {
        path: path.to_path_buf(),
        total_bytes: st.f_blocks as u64 * frsize,
        free_bytes: st.f_bfree as u64 * frsize,
        avail_bytes: st.f_bavail as u64 * frsize,
    })
}

/// Splits `buf` into per-slot lists of mutable segments, in plan order.
fn split_mut<'a>(buf: &'a mut [u8], plan: &[SlotIo]) -> Vec<Vec<&'a mut [u8]>> {
    // Segments of different slots interleave in the buffer; hand each one out in buffer order.
    let mut owner: Vec<(usize, usize, usize)> = plan
        .iter()
        .enumerate()
        .flat_map(|(p, io)| io.segments.iter().map(move |&(o, l)| (o, l, p)))
        .collect();
    owner.sort_unstable();
    let mut out: Vec<Vec<&mut [u8]>> = plan
        .iter()
        .map(|io| Vec::with_capacity(io.segments.len()))
        .collect();
    let mut rest = buf;
    let mut at = 0;
    for (o, l, p) in owner {
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(o - at);
        let (seg, tail) = tail.split_at_mut(l);
        out[p].push(seg);
        rest = tail;
        at = o + l;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{format, FormatOptions};

    fn volume(n: usize, stripe: u32) -> (tempfile::TempDir, Volume) {
        let root = tempfile::tempdir().unwrap();
        let paths: Vec<PathBuf> = (0..n)
            .map(|i| {
                let p = root.path().join(format!("d{i}"));
                std::fs::create_dir(&p).unwrap();
                p
            })
            .collect();
        format(&FormatOptions {
            devices: &paths,
            stripe_size: stripe,
            width: n as u32,
            force: false,
        })
        .unwrap();
        let v = Volume::open(&paths).unwrap();
        (root, v)
    }

    #[test]
    fn striped_bytes_land_where_the_layout_says() {
        let (_root, v) = volume(4, 65536);
        let layout = Layout::new(65536, 4, 1);
        let data: Vec<u8> = (0..1 << 20).map(|i| (i / 65536) as u8).collect();
        v.write(7, &layout, 0, &data).unwrap();
        for slot in 0..4u32 {
            let dev = layout.device_of_slot(slot, 4);
            let obj = std::fs::read(v.object_path(dev, 7)).unwrap();
            assert_eq!(obj.len(), 256 * 1024);
            // Object row r of slot s holds stripe r*4+s.
            for row in 0..4usize {
                assert!(obj[row * 65536..(row + 1) * 65536]
                    .iter()
                    .all(|&b| b as usize == row * 4 + slot as usize));
            }
        }
        let mut back = vec![0u8; data.len()];
        v.read(7, &layout, 0, &mut back).unwrap();
        assert_eq!(back, data);
        let mut mid = vec![0u8; 100_000];
        v.read(7, &layout, 12345, &mut mid).unwrap();
        assert_eq!(&mid[..], &data[12345..112345]);
    }

    #[test]
    fn holes_truncate_and_remove() {
        let (_root, v) = volume(3, 8192);
        let layout = Layout::new(8192, 3, 2);
        v.write(9, &layout, 100_000, b"tail").unwrap();
        let mut buf = vec![1u8; 100_004];
        v.read(9, &layout, 0, &mut buf).unwrap();
        assert!(buf[..100_000].iter().all(|&b| b == 0));
        assert_eq!(&buf[100_000..], b"tail");
        v.truncate(9, &layout, 100_001).unwrap();
        let mut buf = vec![0u8; 4];
        v.read(9, &layout, 100_000, &mut buf).unwrap();
        assert_eq!(&buf, b"t\0\0\0");
        v.remove(9).unwrap();
        assert!(v.object_info(9).is_empty());
    }

    #[test]
    fn fallocate_and_punch() {
        let (_root, v) = volume(2, 8192);
        let layout = Layout::new(8192, 2, 0);
        v.write(3, &layout, 0, &[7u8; 40000]).unwrap();
        v.fallocate(
            3,
            &layout,
            10000,
            10000,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        )
        .unwrap();
        let mut buf = vec![0u8; 40000];
        v.read(3, &layout, 0, &mut buf).unwrap();
        assert!(buf[..10000].iter().all(|&b| b == 7));
        assert!(buf[10000..20000].iter().all(|&b| b == 0));
        assert!(buf[20000..].iter().all(|&b| b == 7));
        v.fallocate(3, &layout, 0, 1 << 20, 0).unwrap();
        let total: u64 = v.object_info(3).iter().map(|o| o.allocated).sum();
        assert!(total >= 1 << 20);
    }

    #[test]
    fn emulated_device_keeps_data_and_reports_its_model() {
        let (_root, mut v) = volume(2, 65536);
        v.emulate(1, DeviceModel::profile("nvme").unwrap());
        let layout = Layout::new(65536, 2, 0);
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
        v.write(4, &layout, 0, &data).unwrap();
        let mut back = vec![0u8; data.len()];
        v.read(4, &layout, 0, &mut back).unwrap();
        assert_eq!(back, data);
        let models = v.models();
        assert!(models[0].is_none());
        assert_eq!(models[1].unwrap().name, "nvme");
    }

    #[test]
    fn direct_device_io_keeps_data_and_mixes_with_buffered() {
        let (_root, v) = volume(2, 8192);
        v.set_direct_io(true);
        let layout = Layout::new(8192, 2, 0);
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 241) as u8).collect();
        // Aligned pieces go direct, the unaligned tail buffered.
        v.write(6, &layout, 0, &data).unwrap();
        v.write(6, &layout, 100, b"unaligned").unwrap();
        let mut back = vec![0u8; data.len()];
        v.read(6, &layout, 0, &mut back).unwrap();
        let mut want = data.clone();
        want[100..109].copy_from_slice(b"unaligned");
        assert_eq!(back, want);
    }

    #[test]
    fn idle_object_files_are_closed_past_the_bound() {
        let (_root, v) = volume(2, 8192);
        let layout = Layout::new(8192, 2, 0);
        for ino in 0..(OPEN_OBJECTS as u64 + 100) {
            v.write(ino, &layout, 0, b"x").unwrap();
        }
        assert!(v.open.len() <= OPEN_OBJECTS + 1, "{}", v.open.len());
        let mut b = [0u8; 1];
        v.read(5, &layout, 0, &mut b).unwrap();
        assert_eq!(&b, b"x");
    }

    #[test]
    fn migrate_copies_into_a_new_layout() {
        let (_root, v) = volume(3, 8192);
        let from = Layout::new(8192, 3, 0);
        let to = Layout::new(131072, 2, 1);
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        v.write(5, &from, 0, &data).unwrap();
        v.copy_to(5, &from, data.len() as u64, 1000, &to).unwrap();
        let mut back = vec![0u8; data.len()];
        v.read(1000, &to, 0, &mut back).unwrap();
        assert_eq!(back, data);
        assert_eq!(v.object_info(1000).len(), 2);
    }
}
