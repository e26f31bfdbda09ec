//! Assembling an engine from a config: the devices (with their emulated models and injected
//! faults), the namespace beside them, the sweep after a crash, and the cache in front.

use super::Engine;
use crate::caching::{mount_without_cache_file, CacheReset, Caching};
use crate::error::{Error, Result};
use crate::janitor::Janitor;
use crate::namespace::{Inode, Kind, Namespace};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use stripe::Volume;

/// After a crash the devices may hold what the lost transactions wrote: objects of files whose
/// creation was lost, and data past a size that was never committed. Both go now, before new
/// files could reuse what the lost ones had, and ids resume above every object found.
fn sweep_after_crash(volume: &Volume, ns: &Namespace, inodes: &[Inode]) -> Result<()> {
    let owners: std::collections::HashMap<u64, &Inode> = inodes
        .iter()
        .filter(|i| i.kind == Kind::File)
        .map(|i| (i.object, i))
        .collect();
    let (mut removed, mut trimmed, mut highest) = (0, 0, 0);
    for o in volume.list_objects()? {
        highest = highest.max(o.ino);
        if !o.regular {
            log::error!(
                "object {} on device {} is not a regular file; it is never opened (fsck --repair \
                 removes it)",
                o.ino,
                o.device
            );
            continue;
        }
        match owners.get(&o.ino) {
            None => {
                volume.remove_from(o.device, o.ino)?;
                removed += 1;
            }
            Some(owner) => {
                let Some(layout) = owner.layout else { continue };
                let slot = volume.slot_of_device(&layout, o.device);
                let want = slot.map_or(0, |s| layout.object_len(owner.size, s));
                if o.len > want {
                    volume.truncate(o.ino, &layout, owner.size)?;
                    if slot.is_none() {
                        volume.remove_from(o.device, o.ino)?;
                    }
                    trimmed += 1;
                }
            }
        }
    }
    ns.skip_ids_to(highest + 1);
    log::warn!(
        "the last stop was not clean: removed {removed} object files of lost files, \
         trimmed {trimmed} past their file's size"
    );
    Ok(())
}

/// The I/O engine a mount uses: the config's `[mount] io_engine`, unless the environment
/// variable `STRIPEFS_IO_ENGINE` says otherwise (the CI runs the I/O tests once per engine).
fn io_engine_choice(config: &mountcfg::Config) -> Result<stripe::EngineChoice> {
    use stripe::EngineChoice;
    if let Ok(v) = std::env::var("STRIPEFS_IO_ENGINE") {
        return match v.as_str() {
            "auto" => Ok(EngineChoice::Auto),
            "uring" | "io_uring" => Ok(EngineChoice::Uring),
            "threads" => Ok(EngineChoice::Threads),
            _ => Err(Error::Usage(format!(
                "STRIPEFS_IO_ENGINE={v}: must be auto, uring or threads"
            ))),
        };
    }
    Ok(match config.mount.io_engine {
        mountcfg::IoEngine::Auto => EngineChoice::Auto,
        mountcfg::IoEngine::Uring => EngineChoice::Uring,
        mountcfg::IoEngine::Threads => EngineChoice::Threads,
    })
}

/// The device model a config entry asks for: its profile, with the entry's overrides.
pub fn device_model(e: &mountcfg::Emulation) -> Result<stripe::DeviceModel> {
    let mut m = match e.profile.as_str() {
        "custom" => stripe::DeviceModel {
            name: "custom".into(),
            read_bps: 0.0,
            write_bps: 0.0,
            access: std::time::Duration::ZERO,
            queue: 1,
            read_iops: None,
            write_iops: None,
            spindle: None,
        },
        name => stripe::DeviceModel::profile(name)
            .ok_or_else(|| Error::Usage(format!("no device profile \"{name}\"")))?,
    };
    if let Some(r) = e.read_mbps {
        m.read_bps = r * 1e6;
    }
    if let Some(w) = e.write_mbps {
        m.write_bps = w * 1e6;
    }
    if let Some(a) = e.access {
        m.access = a;
    }
    if let Some(q) = e.queue {
        m.queue = q;
    }
    if e.read_iops.is_some() {
        m.read_iops = e.read_iops;
    }
    if e.write_iops.is_some() {
        m.write_iops = e.write_iops;
    }
    if e.access.is_some() {
        m.spindle = None;
    }
    let keys = &e.spindle;
    if keys.any() {
        let s = m.spindle.get_or_insert_with(stripe::Spindle::laptop_5400);
        s.rpm = keys.rpm.unwrap_or(s.rpm);
        s.track_seek = keys.track_seek.unwrap_or(s.track_seek);
        s.full_seek = keys.full_seek.unwrap_or(s.full_seek);
        s.capacity = keys.capacity.unwrap_or(s.capacity);
        s.ncq = keys.ncq.unwrap_or(s.ncq);
        if s.full_seek < s.track_seek {
            return Err(Error::Usage(format!(
                "[[volume.emulate]] device {:?}: full_seek ({:?}) is shorter than track_seek ({:?})",
                e.devices, s.full_seek, s.track_seek
            )));
        }
    }
    Ok(m)
}

/// The RAID card a `[volume.controller]` asks for: its profile, with the section's overrides.
pub fn controller_model(c: &mountcfg::ControllerSection) -> Result<stripe::ControllerModel> {
    let mut m = match c.profile.as_str() {
        "custom" => stripe::ControllerModel {
            name: "custom".into(),
            link_bps: 0.0,
            command_cost: std::time::Duration::ZERO,
            processor_bps: 0.0,
            max_commands: 128,
            cache: None,
        },
        name => stripe::ControllerModel::profile(name)
            .ok_or_else(|| Error::Usage(format!("no controller profile \"{name}\"")))?,
    };
    let mbps = |v: f64| v * 1e6;
    if let Some(v) = c.link_mbps {
        m.link_bps = mbps(v);
    }
    if let Some(v) = c.command_cost {
        m.command_cost = v;
    }
    if let Some(v) = c.processor_mbps {
        m.processor_bps = mbps(v);
    }
    if let Some(v) = c.max_commands {
        m.max_commands = v;
    }
    match c.cache {
        Some(false) => m.cache = None,
        Some(true) if m.cache.is_none() => {
            m.cache = Some(stripe::CacheModel {
                size: 0,
                bps: 0.0,
                command_cost: std::time::Duration::ZERO,
                read_ahead: true,
            })
        }
        _ => {}
    }
    if let Some(cache) = m.cache.as_mut() {
        if let Some(v) = c.cache_size {
            cache.size = v;
        }
        if let Some(v) = c.cache_mbps {
            cache.bps = mbps(v);
        }
        if let Some(v) = c.cache_command_cost {
            cache.command_cost = v;
        }
        if let Some(v) = c.read_ahead {
            cache.read_ahead = v;
        }
    }
    Ok(m)
}

/// What a `volume.meta` directory may hold besides nothing: the namespace store, the daemon's
/// log, and a cache file placed beside them.
const META_FILES: [&str; 7] = [
    "namespace.redb",
    "stripefs.log",
    "stripefs.cache",
    "stripefs.cache.new",
    crate::rescue::FILE,
    "stripefs.rescue.new",
    crate::daemon::STOP_REPORT,
];

/// A `volume.meta` directory must be stripefs's own: empty, or holding only what stripefs puts
/// there. Anything else (`meta = "/etc"`) is refused before a byte is written.
pub fn check_meta_dir(config: &mountcfg::Config) -> Result<()> {
    let Some(dir) = &config.volume.meta else {
        return Ok(());
    };
    let entries = std::fs::read_dir(dir)
        .map_err(|e| Error::Usage(format!("volume.meta {}: {e}", dir.display())))?;
    let mut foreign: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !META_FILES.contains(&n.as_str()))
        .collect();
    if foreign.is_empty() {
        return Ok(());
    }
    foreign.sort();
    let shown = foreign
        .iter()
        .take(3)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    Err(Error::Usage(format!(
        "volume.meta {} holds files that are not stripefs's ({shown}{}): the namespace needs a \
         directory of its own, empty at mkfs",
        dir.display(),
        if foreign.len() > 3 { ", ..." } else { "" }
    )))
}

/// Where the namespace store of a volume lives: `volume.meta`, or the volume's first device
/// (by its superblock: the config may list the devices in any order).
pub fn namespace_path(config: &mountcfg::Config) -> PathBuf {
    meta_dir(config).join("namespace.redb")
}

/// The directory of the namespace and the files beside it.
pub fn meta_dir(config: &mountcfg::Config) -> PathBuf {
    match &config.volume.meta {
        Some(dir) => dir.clone(),
        None => stripe::first_device(&config.volume.devices)
            .map_or_else(PathBuf::new, |d| d.join(".stripefs")),
    }
}

#[derive(Serialize)]
pub struct Options {
    pub allow_other: bool,
    pub default_permissions: bool,
    pub read_only: bool,
    pub threads: usize,
    /// How FUSE requests travel: "io_uring" or "/dev/fuse" ("" before INIT).
    pub transport: String,
    /// Why not io_uring, where the config wanted it and the kernel did not allow it.
    pub transport_note: Option<String>,
    /// Over /dev/fuse: its workers with rings of their own (`[mount] dev_wait`); the rest
    /// always wait in read(2).
    pub dev_ring_workers: Option<usize>,
    /// Over io_uring: its ring threads.
    pub ring_threads: Option<usize>,
    /// The engine that runs device I/O: "uring" or "threads".
    pub io_engine: String,
    /// How objects are read and written on the devices: "direct" (O_DIRECT) or "buffered".
    pub device_io: String,
    pub io_threads: usize,
    pub max_background: u16,
    pub direct_io: String,
    pub writeback_cache: bool,
    pub attr_timeout_ms: u64,
    pub commit_interval_ms: u64,
}

impl Engine {
    /// Opens the volume a config describes; `cache_reset` says what may happen to a cache
    /// file that does not fit (another volume's, other settings, damaged).
    pub fn open(
        config: mountcfg::Config,
        mountpoint: &Path,
        cache_reset: CacheReset,
    ) -> Result<Engine> {
        let mut volume = Volume::open_with(
            &config.volume.devices,
            config.mount.degraded,
            !config.mount.read_only && !config.mount.degraded,
        )?;
        if config.mount.degraded && config.volume.meta.is_none() {
            let first = volume.missing().contains(&0);
            if first {
                return Err(Error::Usage(format!(
                    "device 0 ({}) is missing, and the namespace (names, sizes, layouts) lives \
                     on it: the volume cannot be mounted, even degraded",
                    volume.device_path(0).display()
                )));
            }
        }
        for e in &config.volume.emulate {
            let model = device_model(e)?;
            for &d in &e.devices {
                volume.emulate(d, model.clone());
            }
        }
        if let Some(c) = &config.volume.controller {
            volume.attach_controller(controller_model(c)?, &c.devices);
        }
        volume.set_direct_io(config.volume.direct_device_io);
        let engine = volume.start_engine(io_engine_choice(&config)?, config.mount.io_threads)?;
        log::info!("device I/O engine: {}", engine.name());
        for f in &config.volume.faults {
            for &d in &f.devices {
                log::warn!("fault injected on device {d}: {f:?}");
                volume.inject(
                    d,
                    stripe::Fault {
                        reads: f.reads,
                        errno: f.errno,
                        rate: f.rate,
                        range: f.range,
                    },
                );
            }
        }
        check_meta_dir(&config)?;
        let ns_path = namespace_path(&config);
        let ns = Arc::new(Namespace::open(&ns_path)?);
        // A read-only mount writes nothing: no access times, no clean flag, no sweep.
        let read_only = config.mount.read_only;
        if ns.uuid() != volume.uuid() {
            return Err(Error::Usage(format!(
                "namespace store {} belongs to volume {}, but the devices are volume {}",
                ns_path.display(),
                ns.uuid(),
                volume.uuid()
            )));
        }
        // The namespace and the devices must be of one time: devices older than the
        // namespace lost the changes of their set the namespace saw.
        let (ns_gen, dev_gen) = (ns.device_generation()?, volume.generation());
        if ns_gen > dev_gen {
            return Err(Error::Usage(format!(
                "the devices are at generation {dev_gen} of their device set, but the \
                 namespace store {} saw generation {ns_gen}: the devices are older copies \
                 (restored from a backup?) than the namespace",
                ns_path.display()
            )));
        }
        if !read_only {
            ns.reap_orphans()?;
            if ns_gen < dev_gen {
                ns.set_device_generation(dev_gen)?;
            }
        }
        let (inodes, _) = ns.snapshot();
        // A layout naming a ring the devices do not have would send I/O nowhere: the
        // namespace is damaged, or belongs with devices of a later generation.
        for i in &inodes {
            if let Some(e) = i.layout.and_then(|l| volume.validate(&l).err()) {
                return Err(Error::Store(format!(
                    "namespace store {}: inode {} has a layout the devices cannot hold ({e}); \
                    `stripefs fsck` lists every such file",
                    ns_path.display(),
                    i.ino
                )));
            }
        }
        for i in inodes.iter().filter(|i| i.kind == Kind::File) {
            if let Some(l) = i.layout {
                volume.set_layout(i.object, l);
            }
        }
        let volume = Arc::new(volume);
        let rescue = crate::rescue::path(&ns_path);
        if read_only {
            let engine = Engine::read_only(config, volume, ns, &rescue, mountpoint)?;
            engine.set_read_only(true);
            return Ok(engine);
        }
        if !ns.was_clean()? {
            sweep_after_crash(&volume, &ns, &inodes)?;
        }
        ns.set_clean(false)?;
        let sizes: std::collections::HashMap<u64, u64> =
            inodes.iter().map(|i| (i.object, i.size)).collect();
        if let Some(bytes) = crate::rescue::replay(&rescue, &*volume, &|o| sizes.get(&o).copied())?
        {
            log::warn!(
                "wrote back {bytes} bytes that the last unmount kept in {}",
                rescue.display()
            );
        }
        let caching = match &config.cache {
            Some(section) => Some(Caching::open(
                &config,
                section,
                volume.clone(),
                &ns,
                cache_reset,
            )?),
            None => {
                mount_without_cache_file(&ns, cache_reset)?;
                None
            }
        };
        let engine = Engine::assemble(config, volume, ns, caching, mountpoint)?;
        engine.set_read_only(false);
        Ok(engine)
    }

    /// The namespace's policy for a mount that is (or was remounted) read-only or not: a
    /// read-only mount writes no access times, so the daemon writes nothing.
    pub fn set_read_only(&self, read_only: bool) {
        let m = &self.config.mount;
        let read_only = read_only || m.read_only;
        let was = self
            .read_only
            .swap(read_only, std::sync::atomic::Ordering::Relaxed);
        if was != read_only {
            log::info!("read-only: {read_only}");
        }
        self.ns.set_policy(crate::namespace::Policy {
            atime: if read_only {
                mountcfg::Atime::Never
            } else {
                m.atime
            },
            nodiratime: m.nodiratime,
            durable_changes: m.sync || m.dirsync,
        });
    }

    /// A read-only mount: served from the devices as they are (the cache, if configured, is
    /// left alone and its lines stay current); refused while data waits to be written back.
    fn read_only(
        config: mountcfg::Config,
        volume: Arc<Volume>,
        ns: Arc<Namespace>,
        rescue: &Path,
        mountpoint: &Path,
    ) -> Result<Engine> {
        let binding = ns.cache_binding()?;
        if binding.dirty || rescue.exists() {
            return Err(Error::Usage(format!(
                "data not yet on the devices waits in {}: mount read-write once, so it is \
                 written back",
                if binding.dirty {
                    binding.path
                } else {
                    rescue.display().to_string()
                }
            )));
        }
        if config.cache.is_some() {
            log::info!("read-only: the cache is not used");
        }
        Engine::assemble(config, volume, ns, None, mountpoint)
    }

    fn assemble(
        config: mountcfg::Config,
        volume: Arc<Volume>,
        ns: Arc<Namespace>,
        caching: Option<Caching>,
        mountpoint: &Path,
    ) -> Result<Engine> {
        let cache_threads = caching
            .as_ref()
            .map(|_| super::cache_threads::CacheThreads::start())
            .transpose()
            .map_err(|e| Error::Usage(format!("cannot start the cache's I/O threads: {e}")))?;
        Ok(Engine {
            caching,
            cache_threads,
            config,
            volume,
            ns,
            io_locks: Default::default(),
            janitor: Janitor::start("stripefs-janitor")
                .map_err(|e| Error::Usage(format!("cannot start the janitor thread: {e}")))?,
            admin: Janitor::start("stripefs-admin")
                .map_err(|e| Error::Usage(format!("cannot start the admin thread: {e}")))?,
            commit_lock: parking_lot::Mutex::new(()),
            pending_cuts: Default::default(),
            read_only: Default::default(),
            started: Instant::now(),
            mountpoint: mountpoint.to_path_buf(),
            transport: Default::default(),
            rebalancer: Default::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_config_profile_has_a_model() {
        for name in mountcfg::EMULATION_PROFILES {
            let e = mountcfg::Emulation {
                devices: vec![0],
                profile: name.to_string(),
                read_mbps: Some(1.0),
                write_mbps: Some(1.0),
                access: Some(std::time::Duration::from_millis(1)),
                queue: None,
                read_iops: None,
                write_iops: None,
                spindle: Default::default(),
            };
            assert!(super::device_model(&e).is_ok(), "{name}");
        }
    }

    #[test]
    fn spindle_keys_override_the_disk_and_access_replaces_it() {
        let entry = |profile: &str, access, rpm| mountcfg::Emulation {
            devices: vec![0],
            profile: profile.to_string(),
            read_mbps: Some(100.0),
            write_mbps: Some(100.0),
            access,
            queue: None,
            read_iops: None,
            write_iops: None,
            spindle: mountcfg::SpindleKeys {
                rpm,
                ncq: rpm.map(|_| 8),
                ..Default::default()
            },
        };
        let hdd = super::device_model(&entry("hdd-5400", None, Some(7200.0))).unwrap();
        let s = hdd.spindle.unwrap();
        assert_eq!((s.rpm, s.ncq), (7200.0, 8));
        assert_eq!(s.full_seek, stripe::Spindle::laptop_5400().full_seek);
        let custom = super::device_model(&entry("custom", None, Some(10_000.0))).unwrap();
        assert_eq!(custom.spindle.unwrap().rpm, 10_000.0);
        let fixed = std::time::Duration::from_millis(3);
        let flat = super::device_model(&entry("hdd-5400", Some(fixed), None)).unwrap();
        assert_eq!((flat.spindle, flat.access), (None, fixed));
    }

    #[test]
    fn every_controller_profile_has_a_model_and_overrides_apply() {
        for name in mountcfg::CONTROLLER_PROFILES {
            let c = mountcfg::ControllerSection {
                devices: vec![0],
                profile: name.to_string(),
                link_mbps: Some(500.0),
                command_cost: Some(std::time::Duration::from_micros(7)),
                processor_mbps: Some(800.0),
                max_commands: None,
                cache: Some(true),
                cache_size: Some(1 << 20),
                cache_mbps: Some(2000.0),
                cache_command_cost: None,
                read_ahead: Some(false),
            };
            let m = super::controller_model(&c).unwrap();
            assert_eq!(m.link_bps, 500e6, "{name}");
            let cache = m.cache.unwrap();
            assert_eq!((cache.size, cache.read_ahead), (1 << 20, false), "{name}");
            let off = mountcfg::ControllerSection {
                cache: Some(false),
                ..c
            };
            assert!(super::controller_model(&off).unwrap().cache.is_none());
        }
    }
}
