//! What the engine reports: the volume's status (devices, options, cache) for `status`, and a
//! file's or directory's layout for `layout get`.

use super::{namespace_path, Engine, Options};
use crate::error::{errno, Result};
use crate::namespace::Kind;
use serde::Serialize;
use std::path::PathBuf;

#[derive(Serialize)]
pub struct DeviceStatus {
    /// The device's place in the volume (its superblock's): what layouts, `first_device`,
    /// `[[volume.emulate]] device` and fault injection mean by "device N".
    pub index: usize,
    /// Its place in the config's `devices` list (which may be in any order); none for a
    /// device added since the config was read, or found where it was added.
    pub config_entry: Option<usize>,
    pub path: PathBuf,
    pub total_bytes: u64,
    pub used_bytes: u64,
    pub free_bytes: u64,
    /// The drive this device is made to behave like, if emulated.
    pub emulated: Option<String>,
    /// "ok", or "failed" once its directory vanished or holds another disk.
    pub state: String,
    pub read_errors: u64,
    pub write_errors: u64,
    pub injected_faults: usize,
}

#[derive(Serialize)]
pub struct Status {
    pub uuid: String,
    pub mountpoint: PathBuf,
    pub pid: u32,
    pub config: PathBuf,
    pub namespace: PathBuf,
    pub namespace_store: crate::namespace::StoreHealth,
    pub devices: Vec<DeviceStatus>,
    /// Mounted with devices missing (read-only, `--degraded`).
    pub degraded: bool,
    pub layout: String,
    pub stripe_size: u32,
    pub width: u32,
    pub files: u64,
    pub directories: u64,
    pub inodes: u64,
    pub bytes: u64,
    pub capacity_bytes: u64,
    pub available_bytes: u64,
    pub options: Options,
    /// The cache in front of the devices, if any.
    pub cache: Option<CacheSummary>,
    /// The emulated RAID card the devices are behind, if any.
    pub controller: Option<String>,
    pub uptime_secs: u64,
    pub rebalance: crate::volume_life::Progress,
}

#[derive(Serialize)]
pub struct CacheSummary {
    /// "ok", "failed" once the cache device failed (then everything is pass-through), or
    /// "detached" (`stripefs cache detach`: no cache until `stripefs cache attach`).
    pub state: String,
    pub store: String,
    pub path: Option<String>,
    pub size_bytes: u64,
    pub line_size: u64,
    pub default_mode: String,
    pub occupancy_lines: u64,
    pub dirty_lines: u64,
    pub targets: usize,
}

#[derive(Serialize)]
pub struct ObjectShare {
    pub device: usize,
    pub path: PathBuf,
    pub bytes: u64,
    pub allocated: u64,
}

/// What `layout get` shows.
#[derive(Serialize)]
pub struct LayoutInfo {
    pub stripe_size: u32,
    pub width: u32,
    pub first_device: u32,
    pub devices: Vec<PathBuf>,
    /// The devices of the layout's slots by their index in the volume, slot 0 first.
    pub device_indices: Vec<usize>,
    /// Files: their size.
    pub size: u64,
    /// Directories: whether the layout is set here or inherited.
    pub inherited: bool,
    /// Directories: the width is the volume's default of all devices, so it follows devices
    /// added (the config sets no `width`, and no directory above sets a layout).
    pub width_follows_devices: bool,
    pub objects: Vec<ObjectShare>,
}

impl Engine {
    pub fn layout_info(&self, ino: u64) -> Result<LayoutInfo> {
        let inode = self.ns.get(ino)?;
        let (layout, inherited) = match (inode.kind, inode.layout) {
            (Kind::File, Some(l)) => (l, false),
            (Kind::Dir, Some(l)) => (l, false),
            (Kind::Dir, None) => (self.ns.inherited_layout(ino, self.volume_layout()), true),
            _ => return errno(libc::ENODATA),
        };
        let device_indices = self.volume.rings().devices_of(&layout);
        let devices = device_indices
            .iter()
            .map(|&d| self.volume.device_path(d).to_path_buf())
            .collect();
        let objects = if inode.kind == Kind::File {
            self.volume
                .object_info(inode.object)
                .into_iter()
                .map(|o| ObjectShare {
                    device: o.device,
                    path: self.volume.object_path(o.device, inode.object),
                    bytes: o.len,
                    allocated: o.allocated,
                })
                .collect()
        } else {
            Vec::new()
        };
        Ok(LayoutInfo {
            stripe_size: layout.stripe_size,
            width: layout.width,
            first_device: device_indices[0] as u32,
            devices,
            device_indices,
            size: inode.size,
            inherited,
            width_follows_devices: inherited
                && self.config.volume.width.is_none()
                && layout == self.volume_layout(),
            objects,
        })
    }

    pub fn status(&self) -> Result<Status> {
        let counts = self.ns.counts();
        let space = self.volume.space();
        let models = self.volume.models();
        let health = self.volume.health();
        let listed_as = self.volume.listed_as();
        let missing = self.volume.missing();
        let devices: Vec<DeviceStatus> = space
            .iter()
            .enumerate()
            .map(|(index, s)| DeviceStatus {
                state: if health[index].removed {
                    "removed"
                } else if missing.contains(&index) {
                    "missing"
                } else if health[index].failed {
                    "failed"
                } else {
                    "ok"
                }
                .into(),
                read_errors: health[index].read_errors,
                write_errors: health[index].write_errors,
                injected_faults: health[index].faults,
                emulated: models[index].map(|m| m.describe()),
                index,
                config_entry: listed_as[index],
                path: s.path.clone(),
                total_bytes: s.total_bytes,
                used_bytes: s.total_bytes.saturating_sub(s.free_bytes),
                free_bytes: s.avail_bytes,
            })
            .collect();
        let (capacity, available) = self.capacity();
        let m = &self.config.mount;
        let layout = self.volume_layout();
        Ok(Status {
            uuid: self.volume.uuid().to_string(),
            mountpoint: self.mountpoint.clone(),
            pid: std::process::id(),
            config: self.config.source.clone(),
            namespace: namespace_path(&self.config),
            namespace_store: self.ns.store_health(),
            devices,
            degraded: !missing.is_empty(),
            layout: format!(
                "stripe_size={} width={}",
                mountcfg::format_size(layout.stripe_size as u64),
                layout.width
            ),
            stripe_size: layout.stripe_size,
            width: layout.width,
            files: counts.files,
            directories: counts.directories,
            inodes: counts.inodes,
            bytes: counts.bytes,
            capacity_bytes: capacity,
            available_bytes: available,
            options: Options {
                allow_other: m.allow_other,
                default_permissions: m.default_permissions,
                read_only: self.read_only.load(std::sync::atomic::Ordering::Relaxed),
                threads: m.fuse_threads(self.caching.is_some()),
                transport: self
                    .transport
                    .get()
                    .map(|t| t.name.clone())
                    .unwrap_or_default(),
                transport_note: self.transport.get().and_then(|t| t.why_not_uring.clone()),
                dev_ring_workers: self
                    .transport
                    .get()
                    .and_then(|t| t.dev_ring_workers.as_ref())
                    .map(|n| n.load(std::sync::atomic::Ordering::Relaxed)),
                ring_threads: self.transport.get().and_then(|t| t.ring_threads),
                io_engine: self.volume.engine_kind().name().into(),
                device_io: if self.config.volume.direct_device_io {
                    "direct"
                } else {
                    "buffered"
                }
                .into(),
                io_threads: m.io_threads,
                max_background: m.max_background,
                direct_io: format!("{:?}", m.direct_io).to_lowercase(),
                writeback_cache: m.writeback_cache,
                attr_timeout_ms: m.attr_timeout.as_millis() as u64,
                commit_interval_ms: m.commit_interval.as_millis() as u64,
            },
            cache: self
                .caching
                .as_ref()
                .map(|c| match c.cache().map(|k| k.stats()) {
                    Some(st) => CacheSummary {
                        state: if st.failed { "failed" } else { "ok" }.into(),
                        store: st.store,
                        path: st.path,
                        size_bytes: st.size_bytes,
                        line_size: st.line_size,
                        default_mode: st.default_mode,
                        occupancy_lines: st.occupancy_lines,
                        dirty_lines: st.dirty_lines,
                        targets: c.targets(&self.ns).len(),
                    },
                    // `stripefs cache detach`: requests go to the devices.
                    None => CacheSummary {
                        state: "detached".into(),
                        store: "none".into(),
                        path: None,
                        size_bytes: 0,
                        line_size: 0,
                        default_mode: c.default_class().map_or("pt", |d| d.mode.name()).into(),
                        occupancy_lines: 0,
                        dirty_lines: 0,
                        targets: c.targets(&self.ns).len(),
                    },
                }),
            controller: self.volume.controller().map(|c| c.describe()),
            uptime_secs: self.started.elapsed().as_secs(),
            rebalance: self.rebalancer.progress(),
        })
    }

    /// (total, available) bytes the volume can hold: full-width files fill devices evenly, so
    /// the fullest device bounds it; devices on one filesystem count its space once.
    pub fn capacity(&self) -> (u64, u64) {
        crate::usage::capacity(&self.volume.space())
    }
}
