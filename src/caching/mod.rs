//! The cache as the volume uses it: the cache engine over the striped devices, folder targets
//! held by directory inode (persisted, and following a folder across renames), IO classes
//! (`classifier`), and the class of each request: see `classifier` for the rule.
//!
//! Config folders (of `[[cache.target]]` and of `[[cache.class]]`'s `directory`) are bound to
//! their directory's inode the first time a mount applies them (kept on the directory in the
//! namespace), so a folder renamed between mounts stays the target: `bind_config_folders`.

mod attachment;
mod classes;
pub mod classifier;
pub mod cleaner;
mod folders;
pub mod params;
pub mod report;
mod words;

use crate::error::{errno, Error, Result};
use crate::namespace::{CacheBinding, Kind, Namespace, ROOT};
pub use attachment::{AttachWith, Detached};
use cache::{
    Cache, CacheConfig, ClassConfig, ClassId, Cleaner, CleaningPolicy, Mode, Policy, Promotion,
    SeqCutoff, StoreKind,
};
use classifier::{ClassSetting, IoClass, NameView, Resolved};
use dashmap::DashMap;
use mountcfg::Direction;
use parking_lot::{MappedRwLockReadGuard, Mutex, RwLock, RwLockReadGuard};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use stripe::Volume;

/// Key of the internal xattr that persists a live target on its directory.
const TARGET_KEY: &str = "cache";
/// Key of the internal xattr that binds a directory to the config path that named it.
const BINDING_KEY: &str = "config-folder";
/// Key of the internal xattr on the root that persists the live IO classes, one a line:
/// `DIRECTORY-INODE|- SPEC`.
const LIVE_CLASSES: &str = "classes";

/// What a folder target asks: `mode=wb priority=0 allocation=0.5 pinned=1`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TargetSetting {
    pub mode: Mode,
    pub priority: u8,
    pub allocation: f64,
    pub pinned: bool,
}

impl TargetSetting {
    /// What a new target gets for the keys its setting leaves out: kept longest, the whole
    /// cache, not pinned.
    pub fn new(mode: Mode) -> TargetSetting {
        TargetSetting {
            mode,
            priority: 0,
            allocation: 1.0,
            pinned: false,
        }
    }

    pub fn parse(text: &str, default_mode: Mode) -> std::result::Result<TargetSetting, String> {
        TargetSetting::parse_over(text, TargetSetting::new(default_mode))
    }

    /// Parses a setting; keys left out keep `base`'s value.
    pub fn parse_over(
        text: &str,
        base: TargetSetting,
    ) -> std::result::Result<TargetSetting, String> {
        let mut t = base;
        let mut any = false;
        for part in text
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|p| !p.is_empty())
        {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            match k {
                "mode" => {
                    t.mode = Mode::parse(v)
                        .ok_or_else(|| format!("mode={v}: must be wt, wb, wa, wi, wo or pt"))?
                }
                "priority" => {
                    t.priority = v
                        .parse()
                        .map_err(|_| format!("priority={v}: must be 0..255"))?
                }
                "allocation" => {
                    t.allocation = v
                        .parse::<f64>()
                        .ok()
                        .filter(|a| *a > 0.0 && *a <= 1.0)
                        .ok_or_else(|| format!("allocation={v}: must be above 0 and at most 1"))?
                }
                "pinned" | "pin" => {
                    t.pinned = match v {
                        "" | "1" | "true" | "yes" => true,
                        "0" | "false" | "no" => false,
                        _ => return Err(format!("pinned={v}: must be 0 or 1")),
                    }
                }
                other => {
                    return Err(format!(
                        "unknown key \"{other}\" (mode, priority, allocation, pinned)"
                    ))
                }
            }
            any = true;
        }
        if !any {
            return Err("empty setting; expected e.g. \"mode=wb\"".into());
        }
        Ok(t)
    }

    /// Whether `other` asks the same share of the cache (priority, allocation, pinning).
    pub fn same_share(&self, other: &TargetSetting) -> bool {
        self.priority == other.priority
            && self.allocation == other.allocation
            && self.pinned == other.pinned
    }

    pub fn format(&self) -> String {
        format!(
            "mode={} priority={} allocation={} pinned={}",
            self.mode,
            self.priority,
            self.allocation,
            u8::from(self.pinned)
        )
    }

    fn class(&self, name: String) -> ClassConfig {
        ClassConfig {
            name,
            mode: self.mode,
            priority: self.priority,
            allocation: self.allocation,
            min_allocation: 0.0,
            pinned: self.pinned,
        }
    }
}

struct Target {
    class: ClassId,
    setting: TargetSetting,
    /// From the config file (applied at each mount) rather than set live (persisted).
    from_config: bool,
    /// The config's path for it, when it is (or was, at this mount) a config target.
    config_path: Option<String>,
}

pub struct Caching {
    /// The cache; `None` while detached (`stripefs cache detach`): requests go to the
    /// devices. A request holds it (shared) while it runs, so a detach waits for those.
    cache: RwLock<Option<Arc<Cache>>>,
    /// The default class's setting while detached (kept for the attach).
    detached_default: Mutex<Option<ClassConfig>>,
    /// What the cache was opened with (the config's, or the last attach's).
    opened: Mutex<Opened>,
    cleaner: Mutex<Option<std::thread::JoinHandle<()>>>,
    targets: RwLock<HashMap<u64, Target>>,
    classes: RwLock<Vec<IoClass>>,
    /// Bumped by every change that can move many files to another class (targets, classes,
    /// folder renames): every memo is stale.
    generation: AtomicU64,
    /// Bumped when one file's names change (its memo is dropped): a memo worked out meanwhile
    /// is not kept.
    names_epoch: AtomicU64,
    /// Per file, what its names decide, for the generation it was worked out in.
    class_of: DashMap<u64, (u64, Resolved)>,
    /// The mode new targets get when they name none.
    pub target_mode: Mode,
}

#[derive(Serialize)]
pub struct TargetInfo {
    /// Where the folder is now.
    pub path: String,
    /// A config target's path in the config (where it was when first bound).
    pub config_path: Option<String>,
    pub inode: u64,
    pub class: ClassId,
    #[serde(flatten)]
    pub setting: TargetSetting,
    pub from_config: bool,
    pub occupancy_lines: u64,
    pub dirty_lines: u64,
}

/// An IO class as `class ls` shows it.
#[derive(Serialize)]
pub struct ClassInfo {
    pub name: String,
    pub class: ClassId,
    /// The folder as the config or the command named it, and where it is now.
    pub directory: Option<String>,
    pub directory_now: Option<String>,
    pub extensions: Vec<String>,
    pub min_size: Option<u64>,
    pub max_size: Option<u64>,
    pub direction: Option<&'static str>,
    #[serde(flatten)]
    pub setting: ClassSetting,
    pub from_config: bool,
    /// The rule in the words `stripefs class add` takes.
    pub spec: String,
    pub occupancy_lines: u64,
    pub dirty_lines: u64,
}

type CacheGuard<'a> = MappedRwLockReadGuard<'a, Arc<Cache>>;
type AttachLock<'a> = parking_lot::MutexGuard<'a, Opened>;

/// What the cache was last opened with, for an attach.
struct Opened {
    section: mountcfg::CacheSection,
    volume: Arc<Volume>,
    ns: Arc<Namespace>,
}

/// What a mount may do with a cache file that cannot be used as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheReset {
    /// Refuse (the default).
    Keep,
    /// Replace it, unless it holds data not yet on the devices (`--cache-reset`).
    Reset,
    /// Replace it even then: that data is lost (`--cache-reset --discard-dirty`).
    DiscardDirty,
}

/// A mount without a cache file (none, or in RAM): the volume generation advances, so the
/// lines of the cache file it used before are stale when it comes back. Refused while that
/// cache file holds data the devices lack.
pub fn mount_without_cache_file(ns: &Namespace, reset: CacheReset) -> Result<()> {
    let binding = ns.cache_binding()?;
    if binding.dirty {
        if reset != CacheReset::DiscardDirty {
            return Err(Error::Usage(format!(
                "the volume's cache file {} holds data not yet written to the devices \
                 (acknowledged writes): mount with the [cache] section that uses it, so it is \
                 written back; --cache-reset --discard-dirty mounts without it and LOSES that data",
                binding.path
            )));
        }
        log::warn!(
            "--discard-dirty: the unwritten data of cache file {} is given up",
            binding.path
        );
    }
    ns.set_cache_binding(&CacheBinding {
        generation: binding.generation + 1,
        ..CacheBinding::default()
    })
}

fn mode_of(name: &str) -> Result<Mode> {
    Mode::parse(name).ok_or_else(|| Error::Usage(format!("unknown cache mode \"{name}\"")))
}

/// The cleaner `[cache.cleaner]` asks for.
fn cleaner_of(section: &mountcfg::CacheSection) -> Cleaner {
    let base = match section.cleaner_policy.as_str() {
        "acp" => Cleaner::acp(),
        "nop" => Cleaner {
            policy: CleaningPolicy::Nop,
            ..Cleaner::alru()
        },
        _ => Cleaner::alru(),
    };
    Cleaner {
        wake_up: section.wake_up.unwrap_or(base.wake_up),
        staleness: section.staleness,
        flush_max_buffers: section.flush_max_buffers,
        activity_threshold: section.activity_threshold,
        dirty_ratio_threshold: section.dirty_ratio_threshold,
        dirty_ratio_inertia: section.dirty_ratio_inertia,
        max_mbps: section.max_mbps,
        ..base
    }
}

impl Caching {
    /// Opens the cache a config describes in front of `volume`; after a crash its dirty lines
    /// are written back before anything else happens.
    pub fn open(
        config: &mountcfg::Config,
        section: &mountcfg::CacheSection,
        volume: Arc<Volume>,
        ns: &Arc<Namespace>,
        reset: CacheReset,
    ) -> Result<Caching> {
        let target_mode = mode_of(&section.mode)?;
        let cache = open_cache(section, target_mode, volume.clone(), ns, reset)?;
        let caching = Caching {
            cache: RwLock::new(Some(cache.clone())),
            detached_default: Mutex::new(None),
            opened: Mutex::new(Opened {
                section: section.clone(),
                volume: volume.clone(),
                ns: ns.clone(),
            }),
            cleaner: Mutex::new(None),
            targets: RwLock::new(HashMap::new()),
            classes: RwLock::new(Vec::new()),
            generation: AtomicU64::new(0),
            names_epoch: AtomicU64::new(0),
            class_of: DashMap::new(),
            target_mode,
        };
        for (dir, value) in ns.internal(TARGET_KEY) {
            match TargetSetting::parse(&String::from_utf8_lossy(&value), target_mode) {
                Ok(setting) => caching.set_target(ns, dir, setting, false)?,
                Err(e) => log::warn!("ignoring the damaged cache target of directory {dir}: {e}"),
            }
        }
        let folders = folders::bind_config_folders(config, section, ns)?;
        for t in &section.targets {
            let Some(&dir) = folders.get(&t.path) else {
                continue;
            };
            let setting = TargetSetting {
                mode: mode_of(&t.mode)?,
                priority: t.priority,
                allocation: t.allocation,
                pinned: t.pinned,
            };
            caching.set_target(ns, dir, setting, true)?;
            if let Some(t2) = caching.targets.write().get_mut(&dir) {
                t2.config_path = Some(t.path.clone());
            }
        }
        for c in &section.classes {
            let directory = match &c.directory {
                Some(p) => match folders.get(p) {
                    Some(&dir) => Some(dir),
                    // Its folder could not be had (logged): the class would reach files
                    // it was never meant for.
                    None => continue,
                },
                None => None,
            };
            let class = IoClass {
                name: c.name.clone(),
                rule: classifier::Rule {
                    directory,
                    extensions: c.extensions.clone(),
                    min_size: c.min_size,
                    max_size: c.max_size,
                    direction: c.direction,
                },
                directory_path: c.directory.clone(),
                setting: ClassSetting {
                    mode: mode_of(&c.mode)?,
                    priority: c.priority,
                    allocation: c.allocation,
                    min_allocation: c.min_allocation,
                    pinned: c.pinned,
                },
                class: 0,
                from_config: true,
            };
            caching.put_class(class);
        }
        caching.load_live_classes(ns);
        *caching.cleaner.lock() = Some(cache.start_cleaner());
        Ok(caching)
    }

    /// The class of a request to the file `ino`, whose size with the request is `size`.
    pub fn class_of(&self, ns: &Namespace, ino: u64, size: u64, direction: Direction) -> ClassId {
        let generation = self.generation.load(Ordering::Acquire);
        if let Some(c) = self.class_of.get(&ino) {
            if c.0 == generation {
                return c.1.pick(size, direction);
            }
        }
        let epoch = self.names_epoch.load(Ordering::Acquire);
        let resolved = self.resolve(ns, ino);
        let class = resolved.pick(size, direction);
        // Kept only if nothing moved meanwhile; a change after this is seen by the entry's
        // lock (the change bumps first, then drops the entry).
        let entry = self.class_of.entry(ino);
        if self.names_epoch.load(Ordering::Acquire) == epoch
            && self.generation.load(Ordering::Acquire) == generation
        {
            entry.insert((generation, resolved));
        }
        class
    }

    /// What a file's current names decide (see `classifier`).
    fn resolve(&self, ns: &Namespace, ino: u64) -> Resolved {
        let names: Vec<NameView> = ns
            .names_of(ino)
            .into_iter()
            .map(|(dir, name)| NameView {
                folders: ns.folders_above(dir),
                extension: classifier::extension(&name),
            })
            .collect();
        let targets = self.targets.read();
        // Each name's nearest target; the lowest priority number, then the lowest inode.
        let by_targets = names
            .iter()
            .filter_map(|n| {
                n.folders
                    .iter()
                    .find_map(|d| targets.get(d).map(|t| (t.setting.priority, *d, t.class)))
            })
            .min()
            .map_or(cache::DEFAULT_CLASS, |(_, _, class)| class);
        drop(targets);
        classifier::resolve(&names, &self.classes.read(), by_targets)
    }

    /// The names of file `ino` changed (link, unlink, rename): its class is worked out again
    /// at its next request.
    pub fn names_changed(&self, ino: u64) {
        self.names_epoch.fetch_add(1, Ordering::AcqRel);
        self.class_of.remove(&ino);
    }

    /// Something moved in the tree: classes are worked out afresh.
    pub fn tree_changed(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Makes `dir` a target (or changes it). Live targets are persisted on the directory.
    pub fn set_target(
        &self,
        ns: &Namespace,
        dir: u64,
        setting: TargetSetting,
        from_config: bool,
    ) -> Result<()> {
        if ns.get(dir)?.kind != Kind::Dir {
            return errno(libc::ENOTDIR);
        }
        let existing = self.targets.read().get(&dir).map(|t| t.class);
        let name = format!("dir {dir}");
        // Detached: kept here, and given a cache class at the attach.
        let (cache, _attach) = self.cache_for_change();
        match existing {
            Some(class) => {
                if let Some(cache) = &cache {
                    cache
                        .set_class(class, setting.class(name))
                        .map_err(|e| Error::Usage(format!("changing target {dir}: {e}")))?
                }
            }
            None => {
                let class = cache
                    .as_ref()
                    .map_or(cache::DEFAULT_CLASS, |c| c.add_class(setting.class(name)));
                self.targets.write().insert(
                    dir,
                    Target {
                        class,
                        setting: setting.clone(),
                        from_config,
                        config_path: None,
                    },
                );
            }
        }
        if let Some(t) = self.targets.write().get_mut(&dir) {
            t.setting = setting.clone();
            t.from_config = from_config;
        }
        if !from_config {
            ns.set_internal(dir, TARGET_KEY, Some(setting.format().as_bytes()))?;
        }
        self.tree_changed();
        Ok(())
    }

    /// Removes the target on `dir`: its dirty lines are written back first.
    pub fn remove_target(&self, ns: &Namespace, dir: u64) -> Result<()> {
        let Some(class) = self.targets.read().get(&dir).map(|t| t.class) else {
            return errno(libc::ENODATA);
        };
        let (cache, _attach) = self.cache_for_change();
        if let Some(cache) = &cache {
            cache
                .remove_class(class)
                .map_err(|e| Error::Usage(format!("removing target {dir}: {e}")))?;
        }
        self.targets.write().remove(&dir);
        if ns.get(dir).is_ok() {
            ns.set_internal(dir, TARGET_KEY, None)?;
        }
        self.tree_changed();
        Ok(())
    }

    pub fn target(&self, dir: u64) -> Option<TargetSetting> {
        self.targets.read().get(&dir).map(|t| t.setting.clone())
    }

    /// The share of the cache the files outside every target have: what a target gets that
    /// its owner, not root or the mounter, makes.
    pub fn default_share(&self, mode: Mode) -> TargetSetting {
        let d = self.default_class();
        TargetSetting {
            mode,
            priority: d.as_ref().map_or(1, |c| c.priority),
            allocation: d.as_ref().map_or(1.0, |c| c.allocation),
            pinned: d.is_some_and(|c| c.pinned),
        }
    }

    /// The cache class of the target on `dir`.
    pub fn target_class(&self, dir: u64) -> Option<ClassId> {
        self.targets.read().get(&dir).map(|t| t.class)
    }

    pub fn is_target(&self, dir: u64) -> bool {
        self.targets.read().contains_key(&dir)
    }

    /// The volume default's mode (files outside every target).
    /// Leaving wb or wo writes the dirty lines back first, unless `keep_dirty` (casadm -Q
    /// -f no): they stay and the cleaner writes them back later.
    pub fn set_default_mode(&self, mode: Mode, keep_dirty: bool) -> Result<()> {
        let Some(cache) = self.cache() else {
            // Detached: nothing is cached; the attach applies it.
            if let Some(cfg) = self.detached_default.lock().as_mut() {
                cfg.mode = mode;
            }
            return Ok(());
        };
        let mut cfg = cache
            .class(cache::DEFAULT_CLASS)
            .ok_or_else(|| Error::Usage("no default class".into()))?;
        cfg.mode = mode;
        if keep_dirty {
            cache.set_class_keeping_dirty(cache::DEFAULT_CLASS, cfg)
        } else {
            cache.set_class(cache::DEFAULT_CLASS, cfg)
        }
        .map_err(|e| Error::Usage(format!("changing the mode: {e}")))
    }

    /// The default class's setting, attached or not.
    pub fn default_class(&self) -> Option<cache::ClassConfig> {
        match self.cache() {
            Some(c) => c.class(cache::DEFAULT_CLASS),
            None => self.detached_default.lock().clone(),
        }
    }

    /// The attached cache, held (shared) by the caller: a detach waits until it lets go.
    /// Hold it for one request only, and take it once: a second take while a detach waits
    /// would wait for the detach.
    pub fn cache(&self) -> Option<MappedRwLockReadGuard<'_, Arc<Cache>>> {
        RwLockReadGuard::try_map(self.cache.read(), Option::as_ref).ok()
    }

    /// The same, for a caller that may already hold it (a request's guard is held while it
    /// runs, and a commit may come under one): taken even while a detach waits.
    pub fn cache_nested(&self) -> Option<MappedRwLockReadGuard<'_, Arc<Cache>>> {
        RwLockReadGuard::try_map(self.cache.read_recursive(), Option::as_ref).ok()
    }

    /// The cache for a change of targets or IO classes. While detached the attach lock comes
    /// with it (hold both for the whole change), so an attach sees the change whole or not at
    /// all and gives every target and class a class of the new cache.
    fn cache_for_change(&self) -> (Option<CacheGuard<'_>>, Option<AttachLock<'_>>) {
        if let Some(c) = self.cache() {
            return (Some(c), None);
        }
        let attach = self.opened.lock();
        (self.cache(), Some(attach))
    }

    /// The attached cache, or the refusal of a command that needs one.
    pub fn attached(&self) -> Result<MappedRwLockReadGuard<'_, Arc<Cache>>> {
        self.cache().ok_or_else(|| {
            Error::Refused(
                libc::EBUSY,
                "the cache is detached (`stripefs cache attach MNT` brings it back)".into(),
            )
        })
    }

    pub fn targets(&self, ns: &Namespace) -> Vec<TargetInfo> {
        let stats = self.cache().map(|c| c.stats());
        let stats = stats.as_ref();
        let mut out: Vec<TargetInfo> = self
            .targets
            .read()
            .iter()
            .map(|(&dir, t)| {
                let class = stats.and_then(|s| s.classes.iter().find(|c| c.id == t.class));
                TargetInfo {
                    path: path_of(ns, dir),
                    config_path: t.config_path.clone(),
                    inode: dir,
                    class: t.class,
                    setting: t.setting.clone(),
                    from_config: t.from_config,
                    occupancy_lines: class.map_or(0, |c| c.occupancy_lines),
                    dirty_lines: class.map_or(0, |c| c.dirty_lines),
                }
            })
            .collect();
        out.sort_by(|a, b| a.path.cmp(&b.path));
        out
    }

    /// Unmount: the cleaner stops and every dirty line is written back.
    /// Unmount: everything written back; a cache file then holds nothing the devices lack,
    /// and the volume records so. What a RAM store cannot write back goes to the `rescue`
    /// file, and the unmount fails saying so: the next mount writes it back.
    pub fn shutdown(&self, ns: &Namespace, rescue: &std::path::Path) -> Result<()> {
        // Detached: written back and recorded so already.
        let Some(cache) = self.cache.read().clone() else {
            return Ok(());
        };
        let r = cache.shutdown();
        let cleaner = self.cleaner.lock().take();
        if let Some(h) = cleaner {
            let _ = h.join();
        }
        if let Err(e) = r {
            if cache.persistent() {
                return Err(Error::Usage(format!(
                    "writing back the cache: {e}; its dirty lines stay in the cache file, and \
                     the next mount writes them back"
                )));
            }
            let kept = cache
                .dirty_runs()
                .and_then(|runs| crate::rescue::save(rescue, &runs));
            return Err(Error::Usage(match kept {
                Ok(bytes) => format!(
                    "writing back the cache: {e}. {bytes} bytes of unwritten data are kept in \
                     {}; the next mount writes them back",
                    rescue.display()
                ),
                Err(k) => format!(
                    "writing back the cache: {e}; keeping the unwritten data in {} failed too \
                     ({k}): it is LOST",
                    rescue.display()
                ),
            }));
        }
        if cache.persistent() {
            let mut b = ns.cache_binding()?;
            b.dirty = false;
            ns.set_cache_binding(&b)?;
        }
        Ok(())
    }
}

/// The cache engine a `[cache]` section describes, bound to the volume (its namespace records
/// which cache file holds its lines) and with what an unclean stop left written back.
fn open_cache(
    section: &mountcfg::CacheSection,
    target_mode: Mode,
    volume: Arc<Volume>,
    ns: &Arc<Namespace>,
    reset: CacheReset,
) -> Result<Arc<Cache>> {
    let policy = Policy {
        seq_cutoff: match section.seq_cutoff.as_str() {
            "always" => SeqCutoff::Always,
            "never" => SeqCutoff::Never,
            _ => SeqCutoff::Full,
        },
        seq_threshold: section.seq_threshold,
        seq_promotion_count: section.seq_promotion_count,
        seq_promotion_threshold: section.seq_promotion_threshold,
        promotion: section
            .promotion_hits
            .map_or(Promotion::Always, |hits| Promotion::Nhit {
                insertion_threshold: hits,
                trigger_threshold: section.promotion_trigger,
            }),
        cleaner: cleaner_of(section),
        error_threshold: section.error_threshold,
    };
    let store = match &section.store {
        mountcfg::CacheStore::Ram => StoreKind::Ram,
        mountcfg::CacheStore::File(p) => StoreKind::File(p.clone()),
    };
    let file = cache::cache_file(&store);
    if file.is_none() {
        mount_without_cache_file(ns, reset)?;
    }
    let binding = ns.cache_binding()?;
    let on_first_dirty = {
        let ns = ns.clone();
        Arc::new(move || {
            let mut b = ns.cache_binding().map_err(std::io::Error::other)?;
            b.dirty = true;
            ns.set_cache_binding(&b).map_err(std::io::Error::other)
        })
    };
    let cfg = CacheConfig {
        store,
        size: section.size,
        line_size: section.line_size,
        default_mode: if section.default_all {
            target_mode
        } else {
            Mode::Pt
        },
        policy,
        default_priority: section.default_priority,
        volume: *volume.uuid().as_bytes(),
        reset: reset != CacheReset::Keep,
        discard_dirty: reset == CacheReset::DiscardDirty,
        generation: binding.generation,
        bound: binding.cache,
        holds_dirty: binding.dirty,
        on_first_dirty: Some(on_first_dirty),
        throttle: match &section.emulate {
            Some(name) => {
                let model = stripe::DeviceModel::profile(name)
                    .ok_or_else(|| Error::Usage(format!("no device profile \"{name}\"")))?;
                Some(Arc::new(stripe::Emulated::new(model)) as Arc<dyn cache::Throttle>)
            }
            None => None,
        },
        // Asked of the file's directory: the file may not be made yet.
        file_in_memory: file
            .as_deref()
            .and_then(std::path::Path::parent)
            .is_some_and(stripe::ram_backed),
        clock: None,
        shards: 0,
    };
    let cache = Cache::open(cfg, volume).map_err(|e| Error::Usage(e.to_string()))?;
    if let Some(file) = file {
        // Before any I/O: from now on the volume's lines are this cache's.
        ns.set_cache_binding(&CacheBinding {
            generation: binding.generation,
            cache: Some(cache.id()),
            path: file.display().to_string(),
            dirty: binding.dirty && binding.cache == Some(cache.id()),
        })?;
    }
    let (inodes, _) = ns.snapshot();
    let sizes: HashMap<u64, u64> = inodes
        .iter()
        .filter(|i| i.kind == Kind::File)
        .map(|i| (i.object, i.size))
        .collect();
    let recovered = cache
        .recover(&|object| sizes.get(&object).copied())
        .map_err(|e| Error::Usage(format!("writing back the cache's dirty lines: {e}")))?;
    if recovered > 0 {
        log::warn!("wrote back {recovered} dirty cache lines left by an unclean stop");
    }
    Ok(cache)
}

/// A directory's path from the volume root.
pub fn path_of(ns: &Namespace, mut ino: u64) -> String {
    let mut names = Vec::new();
    for _ in 0..4096 {
        if ino == ROOT {
            break;
        }
        let Ok(i) = ns.get(ino) else { break };
        match ns.name_in(i.parent, ino) {
            Some(n) => names.push(String::from_utf8_lossy(&n).into_owned()),
            None => {
                names.push(format!("<inode {ino}>"));
                break;
            }
        }
        ino = i.parent;
    }
    names.reverse();
    format!("/{}", names.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_settings_parse_and_print() {
        let t =
            TargetSetting::parse("mode=wb priority=2 allocation=0.5 pinned=1", Mode::Wt).unwrap();
        assert_eq!(t.mode, Mode::Wb);
        assert_eq!((t.priority, t.allocation, t.pinned), (2, 0.5, true));
        assert_eq!(TargetSetting::parse(&t.format(), Mode::Wt).unwrap(), t);
        assert_eq!(
            TargetSetting::parse("pinned", Mode::Wa).unwrap().mode,
            Mode::Wa
        );
        for bad in [
            "mode=fast",
            "priority=300",
            "allocation=0",
            "allocation=2",
            "colour=red",
            "",
            "pinned=maybe",
        ] {
            assert!(TargetSetting::parse(bad, Mode::Wt).is_err(), "{bad}");
        }
    }
}
