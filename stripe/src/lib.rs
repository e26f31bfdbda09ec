//! Striping for stripefs: the layout math that maps a file's bytes onto devices, the devices
//! themselves with their superblocks, and striped data I/O over per-device object files.
//! Knows nothing of FUSE.

mod device;
mod emulate;
mod engine;
mod error;
mod io;
pub mod layout;
mod volume;

pub use device::{
    first_device, format, lock_path, DeviceInfo, FormatOptions, Superblock, FORMAT_VERSION,
};
pub use emulate::{
    predict_sequential, CacheModel, Controller, ControllerModel, ControllerState, DeviceModel,
    Emulated, ModelState, Spindle,
};
pub use engine::lent::{lend_ring, LentRing};
pub use engine::{other_requests_wait_for_this_thread, EngineChoice, EngineKind};
pub use error::{Result, StripeError};
pub use io::{IoBuf, ReadTarget, WriteSource};
pub use layout::{Layout, Rings, SlotIo};
pub use volume::{
    merged, ram_backed, statvfs, Copied, DeviceHealth, Fault, ObjectInfo, Seek, SpaceInfo, Volume,
    DEFAULT_IO_THREADS, MAX_DEVICES,
};
