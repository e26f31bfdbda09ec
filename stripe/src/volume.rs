//! A mounted set of devices and striped I/O over the per-device object files of each inode.
//! Data I/O goes through the I/O engine: each request's pieces (one vectored I/O per device)
//! are submitted together and the request completes when its last piece does.

use crate::device::{open_devices, DeviceInfo, FANOUT, META_DIR, OBJECTS};
use crate::emulate::{Controller, ControllerModel, DeviceModel, Emulated};
use crate::engine::{DevOp, EngineChoice, EngineKind, IoEngine};
use crate::error::{Result, StripeError};
use crate::io::{IoBuf, ReadTarget, WriteSource};
use crate::layout::{Layout, Rings, SlotIo};
use dashmap::DashMap;
use parking_lot::{Condvar, Mutex, RwLock};
use std::fs::File;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use uuid::Uuid;

mod devices;
pub use devices::ram_backed;
mod extents;
mod grow;
#[cfg(test)]
mod lent_tests;
mod objects;
#[cfg(test)]
mod own_ring_tests;
mod replace;
mod submit;
#[cfg(test)]
mod tests;
use devices::{Device, DeviceSet};
pub use devices::{DeviceHealth, Fault, MAX_DEVICES};
pub use extents::Seek;
use objects::{largest_file, object_rel, objects_dir, open_object, Objects};
pub use replace::{merged, Copied};

pub struct Volume {
    set: Arc<DeviceSet>,
    /// The rings layouts are laid on; a device joining adds one.
    rings: RwLock<Arc<Rings>>,
    /// The device set as the superblocks describe it; held while it changes.
    descriptor: Mutex<crate::device::Superblock>,
    uuid: Uuid,
    open: DashMap<u64, Arc<Objects>>,
    /// Per device: the model that makes it behave like a slower drive, if any (devices that
    /// joined while mounted have none).
    emulated: Vec<Option<Emulated>>,
    /// The emulated RAID card the devices it serves book their I/O through.
    controller: Option<Controller>,
    /// Layout of each object, for callers that address objects alone (the cache's core).
    layouts: DashMap<u64, Layout>,
    /// Whole-block object I/O bypasses the devices' page cache (`device_io = "direct"`).
    direct: AtomicBool,
    engine: OnceLock<IoEngine>,
    /// The largest object file every device's filesystem accepts.
    max_object_len: AtomicU64,
    /// Changes to the object being copied off a device being replaced.
    watch: Arc<replace::Watch>,
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
    /// A regular file, as every object must be (a symlink or anything else is planted).
    pub regular: bool,
}

/// I/O threads per device of the threads engine when none is configured.
pub const DEFAULT_IO_THREADS: usize = 8;

impl Volume {
    /// Opens the devices, in the volume's order whatever the order given; refuses a wrong set.
    pub fn open(paths: &[PathBuf]) -> Result<Volume> {
        Volume::open_with(paths, false, true)
    }

    /// As `open`; `degraded`: listed devices that are gone are taken as failed (their I/O
    /// fails with EIO) instead of refusing the volume (a read-only rescue mount). Without
    /// `may_write`, nothing is written to the devices (a change of the set cut short by a
    /// crash is settled in memory only).
    pub fn open_with(paths: &[PathBuf], degraded: bool, may_write: bool) -> Result<Volume> {
        let devices = open_devices(paths, degraded, may_write)?;
        let uuid = devices[0].superblock.volume_uuid;
        let rings = devices[0].superblock.rings();
        let descriptor = devices[0].superblock.clone();
        let emulated = devices.iter().map(|_| None).collect();
        let set = DeviceSet::new(devices)?;
        let max_object_len = set
            .iter()
            .filter_map(|d| d.objects.as_ref())
            .map(largest_file)
            .min()
            .unwrap_or(0);
        Ok(Volume {
            max_object_len: AtomicU64::new(max_object_len),
            emulated,
            controller: None,
            layouts: DashMap::new(),
            direct: AtomicBool::new(false),
            set: Arc::new(set),
            rings: RwLock::new(Arc::new(rings)),
            descriptor: Mutex::new(descriptor),
            uuid,
            open: DashMap::new(),
            engine: OnceLock::new(),
            watch: Default::default(),
        })
    }

    /// Starts the I/O engine a mount asks for (before any I/O; later calls change nothing).
    /// Returns the engine that runs.
    pub fn start_engine(
        &self,
        choice: EngineChoice,
        threads_per_device: usize,
    ) -> Result<EngineKind> {
        if let Some(e) = self.engine.get() {
            return Ok(e.kind());
        }
        let engine = IoEngine::start(choice, self.set.len(), threads_per_device).map_err(|e| {
            StripeError::Devices(format!("cannot start the {choice:?} I/O engine: {e}"))
        })?;
        Ok(self.engine.get_or_init(|| engine).kind())
    }

    fn engine(&self) -> &IoEngine {
        self.engine.get_or_init(|| {
            IoEngine::start(EngineChoice::Auto, self.set.len(), DEFAULT_IO_THREADS)
                .expect("an I/O engine (threads) starts")
        })
    }

    /// Whether I/O of a file laid out so completes on the calling thread: every device it
    /// spans keeps its files in memory and is not emulated.
    pub fn completes_inline(&self, layout: &Layout) -> bool {
        // Asked on every request: with every device in memory, no need to take the rings'
        // lock to find those the layout spans.
        if self.all_in_memory() {
            return true;
        }
        let rings = self.rings.read();
        (0..layout.width).all(|s| self.in_memory(rings.device_of_slot(layout, s)))
    }

    /// Every device keeps its files in memory and none is emulated: device I/O is a copy on
    /// the calling thread, never a wait.
    pub fn all_in_memory(&self) -> bool {
        (0..self.set.len()).all(|d| self.in_memory(d))
    }

    fn in_memory(&self, d: usize) -> bool {
        self.set.dev(d).ram_backed
            && self.emulated(d).is_none()
            && !self.controller.as_ref().is_some_and(|c| c.serves(d))
    }

    /// Runs `job` at `at`: an answer held back until an emulated device would have given it,
    /// with no thread waiting meanwhile (on the ring this thread lent, else on the engine's
    /// timer thread). Nothing on this thread may wait for the job.
    pub fn run_at(&self, at: std::time::Instant, job: impl FnOnce() + Send + 'static) {
        self.engine().at(at, job);
    }

    /// Nothing is in flight: I/O submitted now runs on the submitting thread (unless other
    /// requests wait for that thread: `other_requests_wait_for_this_thread`).
    pub fn idle(&self) -> bool {
        self.engine().idle()
    }

    /// The engine that runs device I/O.
    pub fn engine_kind(&self) -> EngineKind {
        self.engine().kind()
    }

    /// With `true`, object I/O in whole 4 KiB blocks uses O_DIRECT, so the devices' own speed
    /// is what callers see (and benchmarks measure); the rest stays buffered. The kernel keeps
    /// the two coherent.
    pub fn set_direct_io(&self, direct: bool) {
        self.direct.store(direct, Relaxed);
    }

    /// Makes I/O of device `index` fail as `fault` says.
    pub fn inject(&self, index: usize, fault: Fault) {
        let health = &self.set.dev(index).health;
        health.faults.write().push(fault);
        health.faulty.store(true, Relaxed);
    }

    /// Looks at every device: one whose directory vanished or holds another disk now is marked
    /// failed (its I/O fails with EIO from then on). Returns the devices newly failed.
    pub fn check_devices(&self) -> Vec<usize> {
        self.set.check_devices()
    }

    pub fn health(&self) -> Vec<DeviceHealth> {
        self.set
            .iter()
            .map(|d| (d.removed(), &d.health))
            .map(|(removed, h)| DeviceHealth {
                removed,
                failed: h.failed.load(Relaxed),
                read_errors: h.read_errors.load(Relaxed),
                write_errors: h.write_errors.load(Relaxed),
                faults: h.faults.read().len(),
            })
            .collect()
    }

    /// Makes device `index` behave like `model` for data I/O.
    pub fn emulate(&mut self, index: usize, model: DeviceModel) {
        self.emulated[index] = Some(Emulated::new(model));
    }

    /// Puts `devices` behind an emulated controller; each keeps the model `emulate` gave it,
    /// which the controller then books (so call this after `emulate`).
    pub fn attach_controller(&mut self, model: ControllerModel, devices: &[usize]) {
        let behind = (0..self.emulated.len())
            .map(|d| {
                devices
                    .contains(&d)
                    .then(|| self.emulated[d].as_ref().map(|e| e.model.clone()))
            })
            .collect();
        self.controller = Some(Controller::new(model, behind));
    }

    /// The emulated controller's model, if there is one.
    pub fn controller(&self) -> Option<&ControllerModel> {
        self.controller.as_ref().map(|c| &c.model)
    }

    /// The model of each device, if emulated.
    /// The devices missing at a degraded mount.
    pub fn missing(&self) -> Vec<usize> {
        self.set
            .iter()
            .filter(|d| d.info.missing && !d.removed())
            .map(|d| d.info.index)
            .collect()
    }

    /// Each device's place in the list the volume was opened with (the config's `devices`),
    /// in the volume's order; `None` for a device found where it was added, not listed.
    pub fn listed_as(&self) -> Vec<Option<usize>> {
        self.set
            .iter()
            .map(|d| Some(d.info.listed_as).filter(|&i| i != usize::MAX))
            .collect()
    }

    pub fn models(&self) -> Vec<Option<&DeviceModel>> {
        (0..self.set.len())
            .map(|d| self.emulated(d).map(|e| &e.model))
            .collect()
    }

    /// The largest file `layout` can hold on these devices: writes and truncates past it get
    /// EFBIG before anything (the cache included) takes them.
    pub fn max_file_size(&self, layout: &Layout) -> u64 {
        layout.max_file_size(self.max_object_len.load(Relaxed))
    }

    pub fn uuid(&self) -> Uuid {
        self.uuid
    }

    pub fn device_count(&self) -> u32 {
        self.set.len() as u32
    }

    /// The device set's generation: bumped by every change of the set.
    pub fn generation(&self) -> u64 {
        self.descriptor.lock().generation
    }

    /// The rings of the device set (see `Rings`).
    pub fn rings(&self) -> Arc<Rings> {
        self.rings.read().clone()
    }

    /// The ring new files are laid on, and how many devices it holds.
    pub fn current_ring(&self) -> (u16, u32) {
        let rings = self.rings.read();
        let ring = rings.current();
        (ring, rings.ring(ring).map_or(0, |r| r.len() as u32))
    }

    /// The device id of slot `slot` of `layout`.
    pub fn device_of_slot(&self, layout: &Layout, slot: u32) -> usize {
        self.rings.read().device_of_slot(layout, slot)
    }

    /// The slot of `layout` on device `device`, if the file spans it.
    pub fn slot_of_device(&self, layout: &Layout, device: usize) -> Option<u32> {
        self.rings.read().slot_of_device(layout, device)
    }

    /// Checks a layout against the volume's rings.
    pub fn validate(&self, layout: &Layout) -> std::result::Result<(), String> {
        self.rings.read().validate(layout)
    }

    fn emulated(&self, device: usize) -> Option<&Emulated> {
        self.emulated.get(device).and_then(|e| e.as_ref())
    }

    pub fn device_path(&self, index: usize) -> &Path {
        &self.set.dev(index).info.path
    }

    fn io_err(&self, device: usize, source: io::Error) -> StripeError {
        self.set.io_err(device, source)
    }

    /// Makes the object file of `ino` on its layout's first device, empty, if it has none: a
    /// file whose data never reaches the devices (a cache held it until a truncate dropped it,
    /// or it is all zeros) still has an object, so an absent one means lost data.
    pub fn touch(&self, ino: u64, layout: &Layout) -> Result<()> {
        let objs = self.objects(ino);
        let dev = self.device_of_slot(layout, 0);
        self.object(&objs, dev, ino, true).map(|_| ())
    }

    /// Cuts the objects down to what a file of `size` bytes holds, so a later extension reads
    /// zeros. Growing needs nothing: objects are sparse.
    pub fn truncate(&self, ino: u64, layout: &Layout, size: u64) -> Result<()> {
        let objs = self.objects(ino);
        for slot in 0..layout.width {
            let dev = self.device_of_slot(layout, slot);
            if let Some(f) = self.object(&objs, dev, ino, false)? {
                let want = layout.object_len(size, slot);
                let have = f.metadata().map_err(|e| self.io_err(dev, e))?.len();
                if have > want {
                    self.watch.note(dev, ino, want, have);
                    f.set_len(want).map_err(|e| self.io_err(dev, e))?;
                }
            }
        }
        Ok(())
    }

    /// fallocate(2) over a file range, mapped onto each object; `mode` as for fallocate
    /// (0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, FALLOC_FL_ZERO_RANGE).
    /// An allocation that fails (ENOSPC) gives back what it took past each object's old end,
    /// as ext4 does: a failed fallocate leaves no space taken and no object grown.
    pub fn fallocate(
        &self,
        ino: u64,
        layout: &Layout,
        offset: u64,
        len: u64,
        mode: i32,
    ) -> Result<()> {
        let objs = self.objects(ino);
        let allocating = mode & libc::FALLOC_FL_PUNCH_HOLE == 0;
        // Each object's length before, to give back what a failure took.
        let mut before: Vec<(usize, u64)> = Vec::new();
        // Plan in chunks: `plan` works on in-memory lengths.
        let mut done = 0u64;
        while done < len {
            let chunk = (len - done).min(1 << 30);
            for io in layout.plan(offset + done, chunk as usize) {
                let dev = self.device_of_slot(layout, io.slot);
                if allocating && !before.iter().any(|b| b.0 == dev) {
                    let had = match self.object(&objs, dev, ino, false)? {
                        Some(f) => f.metadata().map_err(|e| self.io_err(dev, e))?.len(),
                        None => 0,
                    };
                    before.push((dev, had));
                }
                let f = self.object(&objs, dev, ino, true)?.expect("created");
                self.watch
                    .note(dev, ino, io.obj_offset, io.obj_offset + io.len());
                // SAFETY: plain syscall on an owned descriptor.
                let r = unsafe {
                    libc::fallocate(f.as_raw_fd(), mode, io.obj_offset as i64, io.len() as i64)
                };
                if r != 0 {
                    let e = self.io_err(dev, io::Error::last_os_error());
                    self.give_back(&objs, ino, &before);
                    return Err(e);
                }
            }
            done += chunk;
        }
        Ok(())
    }

    /// Frees what a failed allocation took past each object's old end (`before`).
    fn give_back(&self, objs: &Objects, ino: u64, before: &[(usize, u64)]) {
        for &(dev, had) in before {
            if let Ok(Some(f)) = self.object(objs, dev, ino, false) {
                self.watch.note(dev, ino, had, u64::MAX);
                let _ = f.set_len(had);
                // Blocks kept past the end (FALLOC_FL_KEEP_SIZE) go too.
                // SAFETY: plain syscall on an owned descriptor.
                unsafe {
                    libc::fallocate(
                        f.as_raw_fd(),
                        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                        had as i64,
                        i64::MAX - had as i64,
                    )
                };
            }
        }
    }

    /// fdatasync of every object file of the inode, open or not: data written through a
    /// descriptor that was closed since (idle objects are dropped past a bound, and at the last
    /// close) is still the file's, and fsync must cover it.
    pub fn sync(&self, ino: u64) -> Result<()> {
        let objs = self.objects(ino);
        for dev in 0..self.set.len() {
            faultpoint::fail::fail_point!("volume.sync", |arg| Err(
                self.io_err(dev, faultpoint::injected("volume.sync", arg))
            ));
            if let Some(f) = self.object(&objs, dev, ino, false)? {
                f.sync_data().map_err(|e| self.io_err(dev, e))?;
            }
        }
        Ok(())
    }

    /// syncfs(2) on every device: everything written so far is durable.
    pub fn sync_all(&self) -> Result<()> {
        for (dev, d) in self.set.members() {
            let f = File::open(&d.info.path).map_err(|e| self.io_err(dev, e))?;
            // SAFETY: plain syscall on an owned descriptor.
            if unsafe { libc::syncfs(f.as_raw_fd()) } != 0 {
                return Err(self.io_err(dev, io::Error::last_os_error()));
            }
        }
        Ok(())
    }

    /// Records the layout of an object, for I/O addressed by object alone.
    pub fn set_layout(&self, object: u64, layout: Layout) {
        // Called on every cached I/O: a look under the shared lock is enough most times.
        if self.layouts.get(&object).map(|l| *l) != Some(layout) {
            self.layouts.insert(object, layout);
        }
    }

    fn layout_of(&self, object: u64) -> io::Result<Layout> {
        self.layouts
            .get(&object)
            .map(|l| *l)
            .ok_or_else(|| io::Error::other(format!("no layout known for object {object}")))
    }

    /// statvfs of every device (zeros for one that cannot say: it is gone).
    pub fn space(&self) -> Vec<SpaceInfo> {
        self.set
            .iter()
            .map(|d| &d.info)
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
    /// all-zero chunks are left as holes. `pace` is told each chunk's bytes before it is
    /// copied, and may wait (a bandwidth limit); when it says no, the copy stops (EINTR).
    pub fn copy_to(
        &self,
        ino: u64,
        from: &Layout,
        size: u64,
        to_ino: u64,
        to: &Layout,
        pace: &mut dyn FnMut(u64) -> bool,
    ) -> Result<()> {
        const CHUNK: u64 = 4 << 20;
        let mut buf = vec![0u8; CHUNK as usize];
        let mut pos = 0;
        while pos < size {
            let n = (size - pos).min(CHUNK) as usize;
            if !pace(n as u64) {
                return Err(self.io_err(0, io::Error::from_raw_os_error(libc::EINTR)));
            }
            self.read(ino, from, pos, &mut buf[..n])?;
            if buf[..n].iter().any(|&b| b != 0) {
                self.write(to_ino, to, pos, &buf[..n])?;
            }
            pos += n as u64;
        }
        self.touch(to_ino, to)?;
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

/// statvfs of the filesystem holding `path`.
pub fn statvfs(path: &Path) -> io::Result<SpaceInfo> {
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
