//! A mounted set of devices and striped I/O over the per-device object files of each inode.
//! Data I/O goes through the I/O engine: each request's pieces (one vectored I/O per device)
//! are submitted together and the request completes when its last piece does.

use crate::device::{open_devices, DeviceInfo, FANOUT, META_DIR, OBJECTS};
use crate::emulate::{Controller, ControllerModel, DeviceModel, Emulated};
use crate::engine::{DevOp, EngineChoice, EngineKind, IoEngine};
use crate::error::{Result, StripeError};
use crate::io::IoBuf;
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
mod extents;
mod grow;
mod replace;
use devices::{Device, DeviceSet};
pub use devices::{DeviceHealth, Fault, MAX_DEVICES};
pub use extents::Seek;
pub use replace::{merged, Copied};

/// How many objects may keep open files before idle ones are closed.
const OPEN_OBJECTS: usize = 1024;

/// Open object files of one inode, one per device, opened on first use.
struct Objects {
    files: Vec<OnceLock<Arc<File>>>,
    /// The same files opened O_DIRECT (None where the device's filesystem refuses it).
    direct: Vec<OnceLock<Option<Arc<File>>>>,
}

/// A request's pieces in flight: the request completes when the last one does, with the
/// first error any piece met.
struct Join {
    left: AtomicUsize,
    error: Mutex<Option<StripeError>>,
    done: Mutex<Option<JoinDone>>,
}

type JoinDone = Box<dyn FnOnce(Result<()>) + Send>;

/// A request as the devices see it: which object, laid out how, over which buffer.
#[derive(Clone, Copy)]
struct Request<'a> {
    ino: u64,
    layout: &'a Layout,
    /// The caller's buffer: it stays alive and untouched until the request completes.
    base: *mut u8,
    write: bool,
}

impl Join {
    /// One token is the submitter's: nothing completes before every piece is out.
    fn new(done: impl FnOnce(Result<()>) + Send + 'static) -> Arc<Join> {
        Arc::new(Join {
            left: AtomicUsize::new(1),
            error: Mutex::new(None),
            done: Mutex::new(Some(Box::new(done))),
        })
    }

    fn add(&self) {
        self.left.fetch_add(1, Relaxed);
    }

    fn piece_done(&self, r: Result<()>) {
        if let Err(e) = r {
            self.error.lock().get_or_insert(e);
        }
        if self.left.fetch_sub(1, std::sync::atomic::Ordering::AcqRel) == 1 {
            let result = self.error.lock().take().map_or(Ok(()), Err);
            if let Some(done) = self.done.lock().take() {
                done(result);
            }
        }
    }
}

/// Waits on the calling thread for a request submitted with `Join`.
#[derive(Default)]
struct Waiter {
    result: Mutex<Option<Result<()>>>,
    ready: Condvar,
}

impl Waiter {
    fn join(self: &Arc<Self>) -> Arc<Join> {
        let w = self.clone();
        Join::new(move |r| {
            *w.result.lock() = Some(r);
            w.ready.notify_one();
        })
    }

    fn wait(&self) -> Result<()> {
        let mut g = self.result.lock();
        loop {
            if let Some(r) = g.take() {
                return r;
            }
            self.ready.wait(&mut g);
        }
    }
}

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
        let rings = self.rings.read();
        (0..layout.width).all(|s| {
            let d = rings.device_of_slot(layout, s);
            self.set.dev(d).ram_backed
                && self.emulated(d).is_none()
                && !self.controller.as_ref().is_some_and(|c| c.serves(d))
        })
    }

    /// Nothing is in flight: I/O submitted now runs on the submitting thread.
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

    /// The O_DIRECT twin of an open object file, if the piece can use it: whole blocks on the
    /// device and in memory.
    fn direct_twin(
        &self,
        objs: &Objects,
        device: usize,
        ino: u64,
        io: &SlotIo,
        base: *const u8,
    ) -> Option<Arc<File>> {
        let aligned = crate::io::direct_aligned(io.obj_offset, io.len())
            && io
                .segments
                .iter()
                .all(|&(o, l)| (base as usize + o).is_multiple_of(4096) && l.is_multiple_of(4096));
        if !self.direct.load(Relaxed) || !aligned {
            return None;
        }
        let dir = self.set.dev(device).objects.as_ref()?;
        objs.direct
            .get(device)?
            .get_or_init(|| {
                open_beneath(dir, &object_rel(ino), libc::O_RDWR | libc::O_DIRECT)
                    .inspect_err(|e| {
                        log::debug!("no O_DIRECT for object {ino} on device {device}: {e}")
                    })
                    .ok()
                    .map(Arc::new)
            })
            .clone()
    }

    /// Makes I/O of device `index` fail as `fault` says.
    pub fn inject(&self, index: usize, fault: Fault) {
        self.set.dev(index).health.faults.write().push(fault);
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

    /// Path of an inode's object file on a device.
    pub fn object_path(&self, device: usize, ino: u64) -> PathBuf {
        object_path(&self.set.dev(device).info.path, ino)
    }

    fn io_err(&self, device: usize, source: io::Error) -> StripeError {
        self.set.io_err(device, source)
    }

    fn objects(&self, ino: u64) -> Arc<Objects> {
        let count = self.set.len();
        if let Some(o) = self.open.get(&ino).filter(|o| o.files.len() == count) {
            return o.clone();
        }
        let fresh = || {
            Arc::new(Objects {
                files: (0..count).map(|_| OnceLock::new()).collect(),
                direct: (0..count).map(|_| OnceLock::new()).collect(),
            })
        };
        let objs = {
            let mut entry = self.open.entry(ino).or_insert_with(fresh);
            // Made before a device joined: made again with a place for it.
            if entry.files.len() < count {
                *entry = fresh();
            }
            entry.clone()
        };
        // Objects opened behind a file's back (a cache writing back after the last close) are
        // not closed by `close`: keep the descriptors bounded by dropping idle ones.
        if self.open.len() > OPEN_OBJECTS {
            self.open.retain(|_, o| Arc::strong_count(o) > 1);
        }
        objs
    }

    /// The object file of `ino` on `device`; `None` if it does not exist and `create` is false.
    fn object(
        &self,
        objs: &Objects,
        device: usize,
        ino: u64,
        create: bool,
    ) -> Result<Option<Arc<File>>> {
        let unkept = OnceLock::new();
        // A device that joined after `objs` was made: opened, not kept.
        let slot = objs.files.get(device).unwrap_or(&unkept);
        if let Some(f) = slot.get() {
            return Ok(Some(f.clone()));
        }
        // A removed device holds nothing (the files moved off it before it left).
        if self.set.dev(device).removed() && !create {
            return Ok(None);
        }
        let create = if create { libc::O_CREAT } else { 0 };
        let Some(dir) = self.set.dev(device).objects.as_ref() else {
            return Err(self.io_err(device, io::Error::from_raw_os_error(libc::EIO)));
        };
        let opened = open_beneath(dir, &object_rel(ino), libc::O_RDWR | create);
        match opened {
            Ok(f) => {
                let _ = slot.set(Arc::new(f));
                Ok(slot.get().cloned())
            }
            // A device gone read-only still serves reads; not kept, so a write later meets
            // EROFS, not a read-only descriptor.
            Err(e) if e.raw_os_error() == Some(libc::EROFS) && create == 0 => {
                open_beneath(dir, &object_rel(ino), libc::O_RDONLY)
                    .map(|f| Some(Arc::new(f)))
                    .map_err(|e| self.io_err(device, e))
            }
            // No object file is a hole, unless the whole device is gone.
            Err(e) if e.kind() == io::ErrorKind::NotFound && create == 0 => {
                self.check_devices();
                if self.set.failed(device) {
                    return Err(self.io_err(device, io::Error::from_raw_os_error(libc::EIO)));
                }
                Ok(None)
            }
            Err(e) => Err(self.io_err(device, e)),
        }
    }

    /// The device op for one slot's share of a request over the buffer at `base`; `None` for
    /// a read of an object that does not exist (its segments are zeroed here).
    fn op_for(
        &self,
        objs: &Objects,
        req: Request,
        io: &SlotIo,
        dev: usize,
        join: &Arc<Join>,
    ) -> Result<Option<Box<DevOp>>> {
        let Request {
            ino,
            layout: _,
            base,
            write,
        } = req;
        self.set
            .note_error(dev, write, self.set.admit(dev, write, io))?;
        let opened = self.object(objs, dev, ino, write);
        let Some(file) = self.set.note_error(dev, write, opened)? else {
            for &(o, l) in &io.segments {
                // SAFETY: the segment lies inside the request's buffer, which is ours.
                unsafe { std::ptr::write_bytes(base.add(o), 0, l) };
            }
            return Ok(None);
        };
        let fd = self
            .direct_twin(objs, dev, ino, io, base)
            .unwrap_or_else(|| file.clone());
        let iov = io
            .segments
            .iter()
            .map(|&(o, l)| libc::iovec {
                // SAFETY: the segment lies inside the request's buffer.
                iov_base: unsafe { base.add(o) }.cast(),
                iov_len: l,
            })
            .collect();
        let not_before = match &self.controller {
            // One command per stripe unit: what makes small stripes cost a card more.
            Some(c) if c.serves(dev) => {
                let lens: Vec<u64> = io.segments.iter().map(|s| s.1 as u64).collect();
                Some(c.book(dev, write, ino, io.obj_offset, &lens))
            }
            _ => self
                .emulated(dev)
                .map(|e| e.book(write, ino, io.obj_offset, io.len())),
        };
        let (set, join) = (self.set.clone(), join.clone());
        // Noted last, when nothing can fail before the op runs: its end is always told.
        let noted = write
            && self
                .watch
                .note_write(dev, ino, io.obj_offset, io.obj_offset + io.len());
        if noted {
            // Tests widen the window between a write's note and its landing.
            let _ = faultpoint::check("volume.write-noted");
        }
        let watch = noted.then(|| self.watch.clone());
        join.add();
        Ok(Some(Box::new(DevOp {
            device: dev,
            write,
            fd,
            retry_fd: file,
            offset: io.obj_offset,
            iov,
            inline: self.set.dev(dev).ram_backed,
            not_before,
            counted: None,
            on_done: Some(Box::new(move |r: io::Result<()>| {
                let r = r.map_err(|e| set.io_err(dev, e));
                if let Some(w) = watch {
                    w.write_done();
                }
                join.piece_done(set.note_error(dev, write, r));
            })),
        })))
    }

    /// Submits the request `[offset, offset + len)` of the file over the buffer at `base`, one
    /// op per device, and releases the submitter's token of `join`. The buffer must stay
    /// alive and untouched until `join` completes.
    fn submit(&self, req: Request, offset: u64, len: usize, join: Arc<Join>) {
        let objs = self.objects(req.ino);
        let plan = req.layout.plan(offset, len);
        // The rings looked at once per request, not once per piece.
        let devices: Vec<usize> = {
            let rings = self.rings.read();
            plan.iter()
                .map(|io| rings.device_of_slot(req.layout, io.slot))
                .collect()
        };
        let mut ops = Vec::new();
        for (io, dev) in plan.iter().zip(devices) {
            match self.op_for(&objs, req, io, dev, &join) {
                Ok(Some(op)) => ops.push(op),
                Ok(None) => {}
                Err(e) => {
                    join.error.lock().get_or_insert(e);
                }
            }
        }
        self.engine().submit(ops);
        join.piece_done(Ok(()));
    }

    /// Reads `len` bytes at `offset` and hands them to `done`; holes and unwritten ranges read
    /// as zeros. Returns at once: `done` runs when the devices have answered.
    pub fn read_async(
        &self,
        ino: u64,
        layout: &Layout,
        offset: u64,
        len: usize,
        done: impl FnOnce(Result<IoBuf>) + Send + 'static,
    ) {
        let mut buf = IoBuf::stale(len);
        let base = buf.as_mut_ptr();
        let join = Join::new(move |r| done(r.map(|()| buf)));
        self.submit(
            Request {
                ino,
                layout,
                base,
                write: false,
            },
            offset,
            len,
            join,
        );
    }

    /// Writes `data` at `offset`; `done` runs when every device has it.
    pub fn write_async(
        &self,
        ino: u64,
        layout: &Layout,
        offset: u64,
        mut data: IoBuf,
        done: impl FnOnce(Result<()>) + Send + 'static,
    ) {
        let (base, len) = (data.as_mut_ptr(), data.len());
        let join = Join::new(move |r| {
            drop(data);
            done(r)
        });
        self.submit(
            Request {
                ino,
                layout,
                base,
                write: true,
            },
            offset,
            len,
            join,
        );
    }

    /// Reads `buf.len()` bytes at `offset`, waiting for them; holes read as zeros.
    pub fn read(&self, ino: u64, layout: &Layout, offset: u64, buf: &mut [u8]) -> Result<()> {
        let base = buf.as_mut_ptr();
        self.submit_and_wait(
            Request {
                ino,
                layout,
                base,
                write: false,
            },
            offset,
            buf.len(),
        )
    }

    /// Writes `data` at `offset`, waiting until every device has it.
    pub fn write(&self, ino: u64, layout: &Layout, offset: u64, data: &[u8]) -> Result<()> {
        // Writes only read the buffer.
        let base = data.as_ptr() as *mut u8;
        self.submit_and_wait(
            Request {
                ino,
                layout,
                base,
                write: true,
            },
            offset,
            data.len(),
        )
    }

    /// Submits and waits on this thread: the caller's buffer outlives the request.
    fn submit_and_wait(&self, req: Request, offset: u64, len: usize) -> Result<()> {
        let waiter = Arc::new(Waiter::default());
        self.submit(req, offset, len, waiter.join());
        waiter.wait()
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

    /// Drops the inode's open object files (after its last close).
    pub fn close(&self, ino: u64) {
        self.open.remove(&ino);
    }

    /// Deletes the inode's object files on every device.
    pub fn remove(&self, ino: u64) -> Result<()> {
        self.open.remove(&ino);
        self.layouts.remove(&ino);
        for dev in 0..self.set.len() {
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
        (0..self.set.len())
            .filter_map(|dev| {
                let md = std::fs::symlink_metadata(self.object_path(dev, ino)).ok()?;
                Some(object_info(dev, ino, &md))
            })
            .collect()
    }

    /// Every object file on every device (for fsck).
    pub fn list_objects(&self) -> Result<Vec<ObjectInfo>> {
        let mut out = Vec::new();
        for (dev, d) in self.set.members() {
            let root = d.info.path.join(META_DIR).join(OBJECTS);
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
        regular: md.file_type().is_file(),
    }
}

/// Opens `rel` under the directory `dir` without following a symlink anywhere on the way, nor
/// leaving `dir`: an object file is never anything but the regular file it names.
fn open_beneath(dir: &OwnedFd, rel: &str, flags: i32) -> io::Result<File> {
    let c = std::ffi::CString::new(rel).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: open_how is plain data; zero is its neutral value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC | libc::O_NOFOLLOW) as u64;
    how.mode = if flags & libc::O_CREAT != 0 { 0o600 } else { 0 };
    how.resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_BENEATH;
    // SAFETY: openat2 with a live directory descriptor, a C string and a filled open_how.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor that we own.
    Ok(unsafe { File::from_raw_fd(fd as i32) })
}

/// The largest file the filesystem of `dir` accepts, found by growing an unnamed, empty
/// O_TMPFILE (sparse: nothing is allocated, nothing is left behind) until EFBIG.
fn largest_file(dir: &OwnedFd) -> u64 {
    let most = i64::MAX as u64;
    // SAFETY: openat on a live directory descriptor with a static C string.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c".".as_ptr(),
            libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
            0o600,
        )
    };
    if fd < 0 {
        // No O_TMPFILE here (or a read-only device): the kernel's own checks still apply.
        return most;
    }
    // SAFETY: a fresh descriptor that we own.
    let probe = unsafe { OwnedFd::from_raw_fd(fd) };
    // Past the limit ftruncate fails with EFBIG (SIGXFSZ, which would kill us under a file
    // size rlimit, is ignored by the daemon); any other error says nothing of the limit.
    // SAFETY: ftruncate on a descriptor we own.
    let fits = |len: u64| match unsafe { libc::ftruncate(probe.as_raw_fd(), len as i64) } {
        0 => Some(true),
        _ => match io::Error::last_os_error().raw_os_error() {
            Some(libc::EFBIG) | Some(libc::EINVAL) => Some(false),
            _ => None,
        },
    };
    match fits(most) {
        Some(true) | None => return most,
        Some(false) => {}
    }
    let (mut lo, mut hi) = (0, most);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match fits(mid) {
            Some(true) => lo = mid,
            Some(false) => hi = mid,
            None => return most,
        }
    }
    lo
}

/// The object directory of a device, opened once: objects are opened beneath it.
fn objects_dir(device: &Path) -> io::Result<OwnedFd> {
    let dev = File::open(device)?;
    let dir = OwnedFd::from(dev);
    open_beneath(
        &dir,
        &format!("{META_DIR}/{OBJECTS}"),
        libc::O_DIRECTORY | libc::O_PATH,
    )
    .map(OwnedFd::from)
}

/// An object's path relative to its device's object directory.
fn object_rel(ino: u64) -> String {
    format!("{:02x}/{ino}", ino % FANOUT)
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
            let dev = v.device_of_slot(&layout, slot);
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
        v.copy_to(5, &from, data.len() as u64, 1000, &to, &mut |_| true)
            .unwrap();
        let mut back = vec![0u8; data.len()];
        v.read(1000, &to, 0, &mut back).unwrap();
        assert_eq!(back, data);
        assert_eq!(v.object_info(1000).len(), 2);
    }

    fn engines() -> [EngineChoice; 2] {
        [EngineChoice::Uring, EngineChoice::Threads]
    }

    #[test]
    fn both_engines_keep_many_requests_in_flight_and_their_data() {
        for choice in engines() {
            let (_root, v) = volume(4, 8192);
            assert_eq!(
                v.start_engine(choice, 2).unwrap().name(),
                format!("{choice:?}").to_lowercase()
            );
            let v = Arc::new(v);
            let layout = Layout::new(8192, 4, 1);
            let chunk = 24_576 + 100; // crosses stripes and devices, not block-aligned
            let (tx, rx) = std::sync::mpsc::channel();
            for k in 0..64u64 {
                let data: Vec<u8> = (0..chunk).map(|i| (i as u64 * 7 + k) as u8).collect();
                let tx = tx.clone();
                v.write_async(
                    7,
                    &layout,
                    k * chunk as u64,
                    IoBuf::copy_of(&data),
                    move |r| tx.send(r.is_ok()).unwrap(),
                );
            }
            assert!(
                (0..64).all(|_| rx.recv().unwrap()),
                "{choice:?}: every write"
            );
            for k in 0..64u64 {
                let tx = tx.clone();
                v.read_async(7, &layout, k * chunk as u64, chunk, move |r| {
                    let ok = r.is_ok_and(|b| {
                        b.iter()
                            .enumerate()
                            .all(|(i, &x)| x == (i as u64 * 7 + k) as u8)
                    });
                    tx.send(ok).unwrap()
                });
            }
            assert!(
                (0..64).all(|_| rx.recv().unwrap()),
                "{choice:?}: every read"
            );
        }
    }

    #[test]
    fn a_flood_of_requests_waits_for_room_and_every_one_completes() {
        for choice in engines() {
            let (_root, v) = volume(2, 8192);
            v.start_engine(choice, 1).unwrap();
            let layout = Layout::new(8192, 2, 0);
            let (tx, rx) = std::sync::mpsc::channel();
            // Far more than the engine keeps in flight: submitters wait, none is lost.
            for k in 0..1500u64 {
                let tx = tx.clone();
                v.write_async(
                    9,
                    &layout,
                    k * 4096,
                    IoBuf::copy_of(&[k as u8; 4096]),
                    move |r| tx.send(r.is_ok()).unwrap(),
                );
            }
            assert!((0..1500).all(|_| rx.recv().unwrap()), "{choice:?}");
            assert!(v.idle());
            let mut back = vec![0u8; 4096];
            v.read(9, &layout, 1499 * 4096, &mut back).unwrap();
            assert!(back.iter().all(|&b| b == (1499u64 as u8)));
        }
    }

    #[test]
    fn reads_past_an_object_end_are_zeros_with_direct_io_too() {
        for choice in engines() {
            let (_root, v) = volume(2, 65536);
            v.start_engine(choice, 1).unwrap();
            v.set_direct_io(true);
            let layout = Layout::new(65536, 2, 0);
            v.write(3, &layout, 0, &[5u8; 5000]).unwrap();
            // Stale pool buffers must not show through: dirty one first.
            drop(IoBuf::copy_of(&vec![0xEE; 1 << 20]));
            let (tx, rx) = std::sync::mpsc::channel();
            v.read_async(3, &layout, 0, 1 << 20, move |r| tx.send(r).unwrap());
            let b = rx.recv().unwrap().unwrap();
            assert!(b[..5000].iter().all(|&x| x == 5), "{choice:?}");
            assert!(
                b[5000..].iter().all(|&x| x == 0),
                "{choice:?}: holes read as zeros"
            );
        }
    }

    #[test]
    fn an_emulated_device_holds_the_completion_not_the_caller() {
        for choice in engines() {
            let (_root, mut v) = volume(1, 65536);
            let slow = DeviceModel {
                name: "custom".into(),
                read_bps: 1e9,
                write_bps: 1e9,
                access: std::time::Duration::from_millis(300),
                queue: 1,
                read_iops: None,
                write_iops: None,
            };
            v.emulate(0, slow);
            v.start_engine(choice, 1).unwrap();
            let layout = Layout::new(65536, 1, 0);
            v.write(1, &layout, 0, &[1u8; 4096]).unwrap();
            let done = Arc::new(AtomicBool::new(false));
            let (tx, rx) = std::sync::mpsc::channel();
            let d = done.clone();
            v.read_async(1, &layout, 0, 4096, move |r| {
                d.store(true, Relaxed);
                tx.send(r.is_ok()).unwrap()
            });
            // The call returned; the device's 300 ms access has not passed yet.
            assert!(!done.load(Relaxed), "{choice:?}");
            assert!(rx.recv().unwrap());
        }
    }
}
