//! The control plane: `user.stripefs.*` extended attributes, as mergerfs, Ceph and Lustre do
//! it. The CLI is a thin wrapper over these, so `getfattr`/`setfattr` work the same.
//!
//! | key       | on          | get                   | set                          | remove          |
//! |-----------|-------------|-----------------------|------------------------------|-----------------|
//! | layout    | file, dir   | `stripe_size=64K width=4 first_device=1` | dir: default for new files; file: while empty | dir: inherit again |
//! | layout.json | file, dir | layout, devices and object shares as JSON | read-only | |
//! | migrate   | file        | -                     | restripe to the given layout | -               |
//! | shift     | file        | -                     | `collapse OFFSET LENGTH` or `insert OFFSET LENGTH`: fallocate's COLLAPSE_RANGE / INSERT_RANGE (which the kernel does not pass to FUSE), whole stripe rows | - |
//! | status    | mount root  | volume status as JSON | read-only                    | -               |
//! | usage     | mount root  | per device: objects, bytes they hold, the reason a device failed; JSON | read-only | - |
//! | cache     | dir         | the folder's target   | make it a target (`mode=wb priority=0 allocation=1 pinned=0`) | remove the target |
//! | stats     | mount root  | cache statistics, JSON | `reset`: every counter to zero (root or the mounter) | - |
//! | targets   | mount root  | folder targets, JSON (config path and current path) | read-only | -   |
//! | classes   | mount root  | IO classes, JSON      | root or the mounter: `add name=N [directory=/vm] [extension=img,qcow2] [min_size=1G] [max_size=4G] [direction=read\|write] [mode=wb] [priority=0] [allocation=1] [min_allocation=0] [pinned=0]` (a class of that name is replaced), `rm NAME` | - |
//! | flush     | mount root, target dir, file | -    | write back every dirty line (root), a target's (its class's) or a file's | - |
//! | purge     | mount root, target dir, file | `clean_lines=N dirty_lines=M` in reach | drop the clean lines in reach; dirty ones stay | - |
//! | mode      | mount root  | default cache mode    | `MODE [no-flush]`: change it (dirty lines written back when leaving wb/wo, unless no-flush) | - |
//! | detach    | mount root  | -                     | root or the mounter: write everything back and run without the cache, online | - |
//! | attach    | mount root  | -                     | root or the mounter: bring the config's cache back (`path=P size=S`: another file store) | - |
//! | cleaner   | mount root  | cleaning policy and settings (`policy=alru wake_up=1s ...`) | root or the mounter: change the words given (`policy=acp`, `max_mbps=200`) | - |
//! | params    | mount root  | sequential cutoff, promotion and error threshold (`seq_cutoff=full seq_threshold=1M ... promotion=always nhit_hits=3 nhit_trigger=80 error_threshold=1000`) | root or the mounter: change the words given | - |
//! | devices   | mount root  | the device set as JSON: generation, rings, each device's id and path, removed ids | root or the mounter: `add /path/to/dir`: the directory joins the volume online; `remove ID [max_mbps=N]`: move every file off the device, then drop it (watched with `rebalance`); `replace ID /path [max_mbps=N]`: the directory takes the device's place, its share of every file copied over online (watched with `rebalance`) | - |
//! | rebalance | dir         | the running (or last) rebalance's progress, JSON | root or the mounter: `start [max_mbps=N]`: restripe the tree's files onto every device, in the daemon (running: set the limit); `stop` | - |
//! | failpoint | mount root  | -                     | root, builds with fault points: `NAME=ACTIONS` arms a fault point (`off` disarms) | - |
//! | control   | any         | `stripefs protocol=1 pid=PID`: the handshake that says a daemon answers here | read-only | - |
//! | error     | any         | the reason of the caller's last refused control request (`user.stripefs.KEY: reason`), then forgotten; ENODATA if none | read-only | - |
//!
//! Unknown key: ENODATA (ENOATTR); bad value: EINVAL; read-only key: EROFS.
//!
//! Every refusal has a reason in words. The errno alone reaches the caller through the kernel,
//! so the daemon keeps the reason, keyed by the requesting thread (the FUSE request's pid,
//! which is the caller's thread id: a single-threaded `setfattr` or `stripefs` has pid = tid),
//! and `user.stripefs.error` hands it back: the CLI reads it on the thread whose request
//! failed, and prints it. At most [`REASONS_KEPT`] reasons are kept, each for
//! [`REASON_LIFETIME`]; the oldest goes first. A new key is one line in [`KEYS`] and an arm in
//! [`get`], [`set`] or [`remove`], refusing with [`refuse`] and a reason.

use crate::engine::{Caller, Engine};
use crate::error::{Error, Result};
use crate::namespace::{Kind, ROOT};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use stripe::Layout;

pub const PREFIX: &str = "user.stripefs.";

/// The version of the control protocol, in the `control` handshake.
pub const PROTOCOL: u32 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Layout,
    LayoutJson,
    Migrate,
    Shift,
    Status,
    Usage,
    Cache,
    Stats,
    Targets,
    Classes,
    Flush,
    Purge,
    Mode,
    Cleaner,
    Params,
    Attach,
    Detach,
    Devices,
    Rebalance,
    Failpoint,
    Control,
    Error,
    Unknown,
}

/// Every control key by its name after [`PREFIX`].
pub const KEYS: &[(&str, Key)] = &[
    ("layout", Key::Layout),
    ("layout.json", Key::LayoutJson),
    ("migrate", Key::Migrate),
    ("shift", Key::Shift),
    ("status", Key::Status),
    ("usage", Key::Usage),
    ("cache", Key::Cache),
    ("stats", Key::Stats),
    ("targets", Key::Targets),
    ("classes", Key::Classes),
    ("flush", Key::Flush),
    ("purge", Key::Purge),
    ("mode", Key::Mode),
    ("cleaner", Key::Cleaner),
    ("params", Key::Params),
    ("attach", Key::Attach),
    ("detach", Key::Detach),
    ("devices", Key::Devices),
    ("rebalance", Key::Rebalance),
    ("failpoint", Key::Failpoint),
    ("control", Key::Control),
    ("error", Key::Error),
];

/// The control key an xattr name addresses, if it is in our namespace.
pub fn key(name: &[u8]) -> Option<Key> {
    let rest = name.strip_prefix(PREFIX.as_bytes())?;
    Some(
        KEYS.iter()
            .find(|(n, _)| n.as_bytes() == rest)
            .map_or(Key::Unknown, |&(_, k)| k),
    )
}

/// The full xattr name of a key.
fn name_of(key: Key) -> String {
    match KEYS.iter().find(|&&(_, k)| k == key) {
        Some((n, _)) => format!("{PREFIX}{n}"),
        None => format!("{PREFIX}(unknown)"),
    }
}

/// Refuses a control request with `errno`, for `reason` (kept for `user.stripefs.error`).
pub fn refuse<T>(errno: i32, reason: impl Into<String>) -> Result<T> {
    Err(Error::Refused(errno, reason.into()))
}

/// How many refusal reasons are kept (one per requesting thread).
pub const REASONS_KEPT: usize = 1024;
/// How long a refusal reason is kept.
pub const REASON_LIFETIME: Duration = Duration::from_secs(60);

/// Who asked: (uid, thread id). The uid too, so a thread id reused by another user's process
/// (or 0, for every caller from another pid namespace) never hands it someone else's reason.
type Asker = (u32, u32);

/// The last refusal reason of each requesting thread.
static REASONS: Mutex<BTreeMap<Asker, (Instant, String)>> = Mutex::new(BTreeMap::new());

fn note_reason(pid: Asker, reason: String) {
    let mut map = REASONS.lock();
    let now = Instant::now();
    map.retain(|_, (at, _)| now.duration_since(*at) < REASON_LIFETIME);
    if map.len() >= REASONS_KEPT && !map.contains_key(&pid) {
        if let Some(oldest) = map.iter().min_by_key(|(_, (at, _))| *at).map(|(&p, _)| p) {
            map.remove(&oldest);
        }
    }
    map.insert(pid, (now, reason));
}

/// The caller's last reason; forgotten once it is handed over whole (`room` bytes fit it), so
/// a size query (`room` 0) leaves it for the read that follows.
fn reason_for(pid: Asker, room: usize) -> Result<Vec<u8>> {
    let mut map = REASONS.lock();
    let fresh = map
        .get(&pid)
        .filter(|(at, _)| at.elapsed() < REASON_LIFETIME)
        .map(|(_, r)| r.clone().into_bytes());
    match fresh {
        Some(r) => {
            if room >= r.len() {
                map.remove(&pid);
            }
            Ok(r)
        }
        None => {
            map.remove(&pid);
            Err(Error::Errno(libc::ENODATA))
        }
    }
}

/// Keeps the reason of a failed control request for its caller.
fn noted<T>(caller: &Caller, key: Key, r: Result<T>) -> Result<T> {
    if let Err(e) = &r {
        if key != Key::Error {
            let reason = match e {
                Error::Errno(n) => crate::error::Errno(*n).to_string(),
                other => other.to_string(),
            };
            note_reason(
                (caller.uid, caller.pid),
                format!("{}: {reason}", name_of(key)),
            );
        }
    }
    r
}

/// getxattr of a control key; `room` is the caller's buffer size (0 asks for the size).
pub fn get_for(engine: &Engine, caller: &Caller, ino: u64, key: Key, room: u32) -> Result<Vec<u8>> {
    match key {
        Key::Error => reason_for((caller.uid, caller.pid), room as usize),
        _ => noted(caller, key, get(engine, ino, key)),
    }
}

/// setxattr of a control key.
pub fn set_for(
    engine: &Arc<Engine>,
    caller: &Caller,
    ino: u64,
    key: Key,
    value: &[u8],
) -> Result<()> {
    noted(caller, key, set(engine, *caller, ino, key, value))
}

/// `collapse OFFSET LENGTH` / `insert OFFSET LENGTH` on a file: fallocate(2)'s
/// COLLAPSE_RANGE and INSERT_RANGE, which the kernel refuses to pass to a FUSE filesystem.
/// Whole stripe rows only, as ext4 wants whole blocks. The kernel let the caller set a user
/// xattr on the file: it may write it.
fn shift(engine: &Engine, caller: Caller, ino: u64, value: &[u8]) -> Result<()> {
    let text = text(value)?;
    let usage = "the value is `collapse OFFSET LENGTH` or `insert OFFSET LENGTH` (sizes as 192K)";
    let words: Vec<&str> = text.split_whitespace().collect();
    let [how, offset, length] = words[..] else {
        return refuse(libc::EINVAL, usage);
    };
    let insert = match how {
        "collapse" => false,
        "insert" => true,
        _ => return refuse(libc::EINVAL, usage),
    };
    let size = |s: &str| {
        mountcfg::parse_size(s).map_err(|e| Error::Refused(libc::EINVAL, format!("{s}: {e}")))
    };
    let (offset, length) = (size(offset)?, size(length)?);
    let inode = engine.ns.get(ino)?;
    let Some(layout) = inode.layout.filter(|_| inode.kind == Kind::File) else {
        return refuse(
            libc::EINVAL,
            format!(
                "only a regular file is shifted; this is {}",
                kind_name(inode.kind)
            ),
        );
    };
    let row = layout.stripe_size as u64 * layout.width as u64;
    if length == 0 || offset % row != 0 || length % row != 0 {
        return refuse(
            libc::EINVAL,
            format!(
                "offset and length must be whole stripe rows of this file: multiples of {} \
                 (stripe size {} x width {})",
                mountcfg::format_size(row),
                mountcfg::format_size(layout.stripe_size as u64),
                layout.width
            ),
        );
    }
    if !insert && offset.saturating_add(length) >= inode.size {
        return refuse(
            libc::EINVAL,
            format!(
                "a collapse must end before the end of the file ({} bytes), as fallocate's does",
                inode.size
            ),
        );
    }
    if insert && offset >= inode.size {
        return refuse(
            libc::EINVAL,
            format!(
                "an insert must start before the end of the file ({} bytes); past it, \
                 truncate makes the file longer",
                inode.size
            ),
        );
    }
    engine.shift_range(caller, ino, offset, length, insert)
}

/// removexattr of a control key.
pub fn remove_for(engine: &Engine, caller: &Caller, ino: u64, key: Key) -> Result<()> {
    noted(caller, key, remove(engine, caller.uid, ino, key))
}

/// What a key on the wrong inode, or an unknown one, answers.
fn no_such_key<T>(key: Key) -> Result<T> {
    match key {
        Key::Unknown => refuse(
            libc::ENODATA,
            format!(
                "no such control key; the keys are {}",
                KEYS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
            ),
        ),
        Key::Status
        | Key::Usage
        | Key::Stats
        | Key::Targets
        | Key::Classes
        | Key::Mode
        | Key::Cleaner
        | Key::Params
        | Key::Attach
        | Key::Detach
        | Key::Devices
        | Key::Failpoint => refuse(
            libc::ENODATA,
            format!("{} is on the mount's root directory only", name_of(key)),
        ),
        _ => refuse(libc::ENODATA, format!("{} cannot be used so", name_of(key))),
    }
}

fn read_only<T>(key: Key) -> Result<T> {
    refuse(libc::EROFS, format!("{} is read-only", name_of(key)))
}

pub fn get(engine: &Engine, ino: u64, key: Key) -> Result<Vec<u8>> {
    match key {
        Key::Layout => {
            let info = engine.layout_info(ino)?;
            let l = Layout::new(info.stripe_size, info.width, info.first_device);
            Ok(format_layout(&l).into_bytes())
        }
        Key::LayoutJson => json(&engine.layout_info(ino)?),
        Key::Status if ino == ROOT => json(&engine.status()?),
        Key::Devices if ino == ROOT => json(&engine.device_set()),
        Key::Rebalance => json(&engine.rebalancer.progress()),
        Key::Usage if ino == ROOT => json(&crate::usage::devices(engine)),
        Key::Cache => match caching(engine)?.target(ino) {
            Some(t) => Ok(t.format().into_bytes()),
            None => refuse(libc::ENODATA, "this directory is not a cache target"),
        },
        Key::Stats if ino == ROOT => json(&caching(engine)?.report(&engine.ns)),
        Key::Targets if ino == ROOT => json(&caching(engine)?.targets(&engine.ns)),
        Key::Classes if ino == ROOT => json(&caching(engine)?.classes(&engine.ns)),
        Key::Mode if ino == ROOT => Ok(caching(engine)?
            .default_class()
            .map_or("pt", |d| d.mode.name())
            .as_bytes()
            .to_vec()),
        Key::Cleaner if ino == ROOT => match caching(engine)?.cache() {
            Some(cache) => {
                Ok(crate::caching::cleaner::format(&cache.policy().cleaner).into_bytes())
            }
            None => refuse(
                libc::ENODATA,
                "the cache is detached (stripefs cache attach)",
            ),
        },
        Key::Params if ino == ROOT => match caching(engine)?.cache() {
            Some(cache) => Ok(crate::caching::params::format(&cache.policy()).into_bytes()),
            None => refuse(
                libc::ENODATA,
                "the cache is detached (stripefs cache attach)",
            ),
        },
        Key::Purge => {
            let c = caching(engine)?;
            let (clean, dirty) = match c.cache() {
                Some(cache) => {
                    let scope = scope(engine, c, ino)?;
                    cache.lines_where(&|object, class| scope.holds(object, class))
                }
                None => (0, 0),
            };
            Ok(format!("clean_lines={clean} dirty_lines={dirty}").into_bytes())
        }
        Key::Control => {
            Ok(format!("stripefs protocol={PROTOCOL} pid={}", std::process::id()).into_bytes())
        }
        Key::Flush | Key::Migrate | Key::Shift | Key::Failpoint | Key::Attach | Key::Detach => {
            refuse(
                libc::ENODATA,
                format!("{} can be set, not read", name_of(key)),
            )
        }
        Key::Status
        | Key::Usage
        | Key::Stats
        | Key::Targets
        | Key::Classes
        | Key::Mode
        | Key::Cleaner
        | Key::Params
        | Key::Devices
        | Key::Error
        | Key::Unknown => no_such_key(key),
    }
}

/// The volume's cache; a volume without one has none of the cache keys.
fn caching(engine: &Engine) -> Result<&crate::caching::Caching> {
    engine.caching.as_ref().ok_or_else(|| {
        Error::Refused(
            libc::ENODATA,
            "this volume has no cache (add a [cache] section to its config)".into(),
        )
    })
}

/// Root, or whoever mounted the volume (the daemon's user).
fn is_volume_admin(uid: u32) -> bool {
    // SAFETY: geteuid cannot fail.
    uid == 0 || uid == unsafe { libc::geteuid() }
}

/// Volume-wide controls are for root and for whoever mounted the volume.
fn volume_admin(uid: u32, what: &str) -> Result<()> {
    if is_volume_admin(uid) {
        Ok(())
    } else {
        refuse(
            libc::EPERM,
            format!("only root or the user who mounted the volume may {what} (you are uid {uid})"),
        )
    }
}

/// What a flush or a purge on an inode reaches.
enum Scope {
    /// The mount root: the whole cache.
    All,
    /// A target folder: the lines of its class.
    Class(cache::ClassId),
    /// A file: its lines.
    Object(u64),
}

impl Scope {
    /// Whether a line of `object` in `class` is in reach.
    fn holds(&self, object: u64, class: cache::ClassId) -> bool {
        match *self {
            Scope::All => true,
            Scope::Class(id) => class == id,
            Scope::Object(o) => object == o,
        }
    }
}

fn scope(engine: &Engine, c: &crate::caching::Caching, ino: u64) -> Result<Scope> {
    if ino == ROOT {
        return Ok(Scope::All);
    }
    let inode = engine.ns.get(ino)?;
    match inode.kind {
        Kind::File => Ok(Scope::Object(inode.object)),
        Kind::Dir => match c.target_class(ino) {
            Some(id) => Ok(Scope::Class(id)),
            None => refuse(
                libc::EINVAL,
                "this folder is not a cache target: name a target folder, a file, or the \
                 mount's root (the whole cache)",
            ),
        },
        other => refuse(
            libc::EINVAL,
            format!(
                "only the mount root, a target folder or a file has cache lines; this is {}",
                kind_name(other)
            ),
        ),
    }
}

/// The whole cache is root's and the mounter's; a target folder or a file is its owner's too.
fn may_reach(engine: &Engine, uid: u32, ino: u64, scope: &Scope, what: &str) -> Result<()> {
    if is_volume_admin(uid) {
        return Ok(());
    }
    let owner = engine.ns.get(ino)?.uid;
    match scope {
        Scope::All => volume_admin(uid, &format!("{what} the whole cache")),
        _ if owner == uid => Ok(()),
        _ => refuse(
            libc::EPERM,
            format!(
                "only its owner (uid {owner}), root or the user who mounted may {what} it (you \
                 are uid {uid})"
            ),
        ),
    }
}

fn text(value: &[u8]) -> Result<&str> {
    std::str::from_utf8(value)
        .map(|t| t.trim_end_matches('\0').trim())
        .map_err(|_| Error::Refused(libc::EINVAL, "the value is not UTF-8 text".into()))
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::File => "a regular file",
        Kind::Dir => "a directory",
        _ => "neither a file nor a directory",
    }
}

fn set(engine: &Arc<Engine>, caller: Caller, ino: u64, key: Key, value: &[u8]) -> Result<()> {
    let uid = caller.uid;
    match key {
        Key::Layout | Key::Migrate => {
            let inode = engine.ns.get(ino)?;
            if uid != 0 && uid != inode.uid {
                return refuse(
                    libc::EPERM,
                    format!(
                        "only its owner (uid {}) or root may change a layout (you are uid {uid})",
                        inode.uid
                    ),
                );
            }
            let text = text(value)?;
            let mut base = match inode.layout {
                Some(l) => l,
                None => engine.ns.inherited_layout(ino, engine.volume_layout()),
            };
            // Users name the first device by its id.
            base.first_device = match inode.kind {
                Kind::File => engine.volume.device_of_slot(&base, 0) as u32,
                _ => 0,
            };
            let layout = parse_layout(text, base).map_err(|e| {
                log::info!("refused layout \"{text}\": {e}");
                Error::Refused(libc::EINVAL, e)
            })?;
            let mut layout = engine.on_current_ring(layout).map_err(|e| {
                log::info!("refused layout \"{text}\": {e}");
                Error::Refused(libc::EINVAL, e)
            })?;
            match (key, inode.kind) {
                (Key::Migrate, Kind::File) => engine.migrate(ino, layout).map(|_| ()),
                (Key::Migrate, Kind::Dir) => refuse(
                    libc::EISDIR,
                    "a directory is not migrated: `stripefs layout set` gives it a layout for \
                     the files made in it from now on; migrate its files one by one",
                ),
                (Key::Migrate, kind) => refuse(
                    libc::EINVAL,
                    format!(
                        "only a regular file can be migrated; this is {}",
                        kind_name(kind)
                    ),
                ),
                (_, Kind::Dir) => {
                    layout.first_device = 0;
                    engine.ns.set_layout(ino, Some(layout)).map(|_| ())
                }
                _ => engine
                    .ns
                    .set_layout(ino, Some(layout))
                    .map(|_| ())
                    .map_err(|e| match e.errno() {
                        libc::EBUSY => Error::Refused(
                            libc::EBUSY,
                            "the file already holds data, so its layout is fixed; \
                             `stripefs migrate` restripes it"
                                .into(),
                        ),
                        _ => e,
                    }),
            }
        }
        Key::Cache => {
            let c = caching(engine)?;
            let inode = engine.ns.get(ino)?;
            if inode.kind != Kind::Dir {
                return refuse(
                    libc::ENOTDIR,
                    format!(
                        "a cache target is a directory; this is {}",
                        kind_name(inode.kind)
                    ),
                );
            }
            let admin = is_volume_admin(uid);
            if !admin && uid != inode.uid {
                return refuse(
                    libc::EPERM,
                    format!(
                        "only the folder's owner (uid {}), root or the user who mounted may make \
                         it a cache target (you are uid {uid})",
                        inode.uid
                    ),
                );
            }
            // Keys left out keep the target's current value. The cache is shared: a target's
            // owner chooses its mode only, and a new one gets the volume default's share;
            // priority, allocation and pinning are for root and the mounter.
            let base = match c.target(ino) {
                Some(t) => t,
                None if admin => crate::caching::TargetSetting::new(c.target_mode),
                None => c.default_share(c.target_mode),
            };
            let setting = crate::caching::TargetSetting::parse_over(text(value)?, base.clone())
                .map_err(|e| {
                    log::info!("refused cache target setting: {e}");
                    Error::Refused(libc::EINVAL, e.to_string())
                })?;
            if !admin && !setting.same_share(&base) {
                let why = format!(
                    "priority, allocation and pinning are for root or the user who mounted; a \
                     folder's owner may choose its mode only (its share stays priority={} \
                     allocation={} pinned={})",
                    base.priority,
                    base.allocation,
                    u8::from(base.pinned)
                );
                log::warn!(
                    "refused uid {uid} the cache target \"{}\" on {}: {why}",
                    setting.format(),
                    crate::caching::path_of(&engine.ns, ino),
                );
                return refuse(libc::EPERM, why);
            }
            c.set_target(&engine.ns, ino, setting, false)
        }
        Key::Flush => {
            let c = caching(engine)?;
            let scope = scope(engine, c, ino)?;
            may_reach(engine, uid, ino, &scope, "flush")?;
            // Detached: nothing is dirty.
            let Some(cache) = c.cache() else {
                return Ok(());
            };
            let r = match scope {
                Scope::All => cache.flush_all(&mut |_, _| {}),
                Scope::Class(id) => cache.flush_class(id),
                Scope::Object(o) => cache.flush_object(o),
            };
            r.map_err(|e| {
                Error::Refused(
                    e.raw_os_error().unwrap_or(libc::EIO),
                    format!(
                        "the flush stopped: {e}; {} dirty lines are left (stripefs status shows \
                         the devices' errors)",
                        cache.stats().dirty_lines
                    ),
                )
            })
        }
        Key::Purge => {
            let c = caching(engine)?;
            let scope = scope(engine, c, ino)?;
            may_reach(engine, uid, ino, &scope, "purge")?;
            let Some(cache) = c.cache() else {
                return Ok(());
            };
            let purged = cache
                .purge_where(&|object, class| scope.holds(object, class))
                .map_err(|e| {
                    Error::Refused(
                        e.raw_os_error().unwrap_or(libc::EIO),
                        format!("the purge stopped: {e}"),
                    )
                })?;
            log::info!(
                "purged {} clean lines of {}; {} dirty lines kept, {} in use left",
                purged.lines,
                crate::caching::path_of(&engine.ns, ino),
                purged.dirty_kept,
                purged.busy
            );
            Ok(())
        }
        Key::Stats if ino == ROOT => {
            volume_admin(uid, "reset the cache statistics")?;
            let c = caching(engine)?;
            match text(value)? {
                "reset" => {
                    c.attached()?.reset_counters();
                    Ok(())
                }
                other => refuse(
                    libc::EINVAL,
                    format!("\"{other}\": the only value is `reset` (every counter to zero)"),
                ),
            }
        }
        Key::Mode if ino == ROOT => {
            volume_admin(uid, "change the default cache mode")?;
            let c = caching(engine)?;
            let t = text(value)?;
            let mut words = t.split_whitespace();
            let name = words.next().unwrap_or("");
            let mode = cache::Mode::parse(name).ok_or_else(|| {
                Error::Refused(
                    libc::EINVAL,
                    format!("mode \"{name}\": must be wt, wb, wa, wi, wo or pt"),
                )
            })?;
            let keep_dirty = match (words.next(), words.next()) {
                (None, _) => false,
                (Some("no-flush"), None) => true,
                _ => {
                    return refuse(
                        libc::EINVAL,
                        format!("\"{t}\": the value is `MODE` or `MODE no-flush`"),
                    )
                }
            };
            c.set_default_mode(mode, keep_dirty)
        }
        Key::Rebalance => {
            volume_admin(uid, "rebalance the volume")?;
            if engine.ns.get(ino)?.kind != Kind::Dir {
                return refuse(libc::ENOTDIR, "a rebalance is of a directory's tree");
            }
            let t = text(value)?;
            let mut words = t.split_whitespace();
            match (words.next(), words.next(), words.next()) {
                (Some("stop"), None, _) => engine.stop_rebalance(),
                (Some("start"), limit, None) => {
                    let max_mbps = match limit.map(|w| w.split_once('=')) {
                        None => None,
                        Some(Some(("max_mbps", v))) => Some(v.parse::<u64>().map_err(|_| {
                            Error::Refused(
                                libc::EINVAL,
                                format!("max_mbps=\"{v}\" is not a number"),
                            )
                        })?),
                        Some(_) => {
                            return refuse(
                                libc::EINVAL,
                                format!("\"{t}\": the words after start are max_mbps=N"),
                            )
                        }
                    };
                    engine.rebalance(ino, max_mbps)
                }
                _ => refuse(
                    libc::EINVAL,
                    format!("\"{t}\": the value is `start [max_mbps=N]` or `stop`"),
                ),
            }
        }
        Key::Devices if ino == ROOT => {
            volume_admin(uid, "change the volume's devices")?;
            let t = text(value)?;
            match t.split_once(' ') {
                Some(("add", dir)) if dir.starts_with('/') => {
                    engine.add_device(std::path::Path::new(dir)).map(|_| ())
                }
                Some(("remove", rest)) => {
                    let mut words = rest.split_whitespace();
                    let id = words.next().and_then(|w| w.parse::<usize>().ok());
                    let limit = words.next().map(|w| match w.split_once('=') {
                        Some(("max_mbps", v)) => v.parse::<u64>().ok(),
                        _ => None,
                    });
                    match (id, limit, words.next()) {
                        (Some(id), None, None) => engine.remove_device(id, None),
                        (Some(id), Some(Some(m)), None) => engine.remove_device(id, Some(m)),
                        _ => refuse(
                            libc::EINVAL,
                            format!("\"{t}\": the value is `remove ID [max_mbps=N]`"),
                        ),
                    }
                }
                Some(("replace", rest)) => {
                    // `ID /path [max_mbps=N]`: the path is the rest (it may hold spaces).
                    let (rest, limit) = match rest.rsplit_once(' ') {
                        Some((head, w)) if w.starts_with("max_mbps=") => (head, Some(w)),
                        _ => (rest, None),
                    };
                    let limit = limit.map(|w| w["max_mbps=".len()..].parse::<u64>().ok());
                    match (rest.split_once(' '), limit) {
                        (Some((id, dir)), None | Some(Some(_)))
                            if dir.starts_with('/') && id.parse::<usize>().is_ok() =>
                        {
                            let id = id.parse::<usize>().unwrap_or_default();
                            engine.replace_device(id, std::path::Path::new(dir), limit.flatten())
                        }
                        _ => refuse(
                            libc::EINVAL,
                            format!(
                                "\"{t}\": the value is `replace ID /absolute/path [max_mbps=N]`"
                            ),
                        ),
                    }
                }
                _ => refuse(
                    libc::EINVAL,
                    format!(
                        "\"{t}\": the value is `add /absolute/path/of/the/directory`, \
                         `remove ID [max_mbps=N]` or `replace ID /absolute/path [max_mbps=N]`"
                    ),
                ),
            }
        }
        Key::Detach if ino == ROOT => {
            volume_admin(uid, "detach the cache")?;
            caching(engine)?.detach(&engine.ns).map(|_| ())
        }
        Key::Attach if ino == ROOT => {
            volume_admin(uid, "attach the cache")?;
            let c = caching(engine)?;
            let mut with = crate::caching::AttachWith::default();
            for part in text(value)?.split_whitespace() {
                match part.split_once('=') {
                    Some(("path", p)) if p.starts_with('/') => with.path = Some(p.into()),
                    Some(("size", v)) => {
                        with.size =
                            Some(mountcfg::parse_size(v).map_err(|e| {
                                Error::Refused(libc::EINVAL, format!("size={v}: {e}"))
                            })?)
                    }
                    _ if part == "1" => {}
                    _ => {
                        return refuse(
                            libc::EINVAL,
                            format!(
                                "\"{part}\": the value is empty, or `path=/ABSOLUTE/PATH` and \
                                 `size=SIZE` for a file store other than the config's"
                            ),
                        )
                    }
                }
            }
            c.attach(with)
        }
        Key::Cleaner if ino == ROOT => {
            volume_admin(uid, "change the cleaner")?;
            let c = caching(engine)?;
            let spec = text(value)?;
            let Some(cache) = c.cache() else {
                return refuse(
                    libc::ENODATA,
                    "the cache is detached: the cleaner is set once it is attached",
                );
            };
            let now = cache.policy().cleaner;
            let new = crate::caching::cleaner::parse(spec, &now)
                .or_else(|why| refuse(libc::EINVAL, format!("cleaner: {why}")))?;
            log::info!(
                "uid {uid} set the cleaner: {}",
                crate::caching::cleaner::format(&new)
            );
            cache.set_cleaner(new);
            Ok(())
        }
        Key::Params if ino == ROOT => {
            volume_admin(uid, "change the cache's parameters")?;
            let spec = text(value)?;
            let Some(cache) = caching(engine)?.cache() else {
                return refuse(
                    libc::ENODATA,
                    "the cache is detached: its parameters are set once it is attached",
                );
            };
            let new = match cache.update_params(|now| crate::caching::params::parse(spec, now)) {
                Ok(new) => new,
                Err(why) => return refuse(libc::EINVAL, format!("params: {why}")),
            };
            log::info!(
                "uid {uid} set the cache's parameters: {}",
                crate::caching::params::format(&new)
            );
            Ok(())
        }
        Key::Failpoint if ino == ROOT && uid == 0 => {
            let spec = text(value)?;
            let (name, actions) = spec.split_once('=').ok_or_else(|| {
                Error::Refused(libc::EINVAL, format!("\"{spec}\" is not NAME=ACTIONS"))
            })?;
            faultpoint::arm(name.trim(), actions.trim()).map_err(|e| {
                log::warn!("refused fault point \"{spec}\": {e}");
                Error::Refused(libc::EINVAL, e.to_string())
            })
        }
        Key::Failpoint if ino == ROOT => refuse(libc::EPERM, "only root may arm fault points"),
        Key::Classes if ino == ROOT => {
            volume_admin(uid, "change the IO classes")?;
            let c = caching(engine)?;
            let t = text(value)?;
            let usage = "the value is `add name=NAME CONDITIONS SETTING` or `rm NAME` \
                         (stripefs class add|rm)";
            match t.split_once(char::is_whitespace) {
                Some(("add", spec)) => {
                    c.add_class(&engine.ns, spec)
                        .map(|_| ())
                        .or_else(|(errno, why)| {
                            log::info!("refused IO class \"{spec}\": {why}");
                            refuse(errno, why)
                        })
                }
                Some(("rm", name)) => c
                    .remove_class(&engine.ns, name.trim())
                    .map(|_| ())
                    .or_else(|(errno, why)| refuse(errno, why)),
                _ => refuse(libc::EINVAL, usage),
            }
        }
        Key::Shift => shift(engine, caller, ino, value),
        Key::LayoutJson | Key::Status | Key::Usage | Key::Targets | Key::Control | Key::Error => {
            read_only(key)
        }
        Key::Stats
        | Key::Mode
        | Key::Attach
        | Key::Detach
        | Key::Devices
        | Key::Cleaner
        | Key::Params
        | Key::Failpoint
        | Key::Classes
        | Key::Unknown => no_such_key(key),
    }
}

pub fn remove(engine: &Engine, uid: u32, ino: u64, key: Key) -> Result<()> {
    match key {
        Key::Layout => {
            let inode = engine.ns.get(ino)?;
            if uid != 0 && uid != inode.uid {
                return refuse(
                    libc::EPERM,
                    format!(
                        "only its owner (uid {}) or root may change a layout (you are uid {uid})",
                        inode.uid
                    ),
                );
            }
            if inode.kind != Kind::Dir {
                return refuse(
                    libc::EINVAL,
                    format!(
                        "only a directory's layout can be cleared (to inherit again); this is {}",
                        kind_name(inode.kind)
                    ),
                );
            }
            engine.ns.set_layout(ino, None).map(|_| ())
        }
        Key::Cache => {
            let c = caching(engine)?;
            let inode = engine.ns.get(ino)?;
            if uid != 0 && uid != inode.uid {
                return refuse(
                    libc::EPERM,
                    format!(
                        "only the folder's owner (uid {}) or root may remove its cache target \
                         (you are uid {uid})",
                        inode.uid
                    ),
                );
            }
            // A share root or the mounter gave (priority, allocation, pinning) is theirs to
            // take back, as it was theirs to give.
            if let Some(t) = c.target(ino) {
                let own_share = c.default_share(t.mode);
                if !is_volume_admin(uid) && !t.same_share(&own_share) {
                    return refuse(
                        libc::EPERM,
                        format!(
                            "this target has a share root or the mounter gave it (priority={} \
                             allocation={} pinned={}); only they may remove it",
                            t.priority,
                            t.allocation,
                            u8::from(t.pinned)
                        ),
                    );
                }
            }
            c.remove_target(&engine.ns, ino)
                .map_err(|e| match e.errno() {
                    libc::ENODATA => {
                        Error::Refused(libc::ENODATA, "this directory is not a cache target".into())
                    }
                    _ => e,
                })
        }
        Key::LayoutJson
        | Key::Status
        | Key::Usage
        | Key::Stats
        | Key::Targets
        | Key::Classes
        | Key::Mode
        | Key::Cleaner
        | Key::Params
        | Key::Control
        | Key::Error => read_only(key),
        Key::Migrate
        | Key::Shift
        | Key::Flush
        | Key::Purge
        | Key::Attach
        | Key::Detach
        | Key::Devices
        | Key::Rebalance
        | Key::Failpoint
        | Key::Unknown => no_such_key(key),
    }
}

/// `stripe_size=64K width=4 first_device=1`, the value of `user.stripefs.layout`.
pub fn format_layout(l: &Layout) -> String {
    format!(
        "stripe_size={} width={} first_device={}",
        mountcfg::format_size(l.stripe_size as u64),
        l.width,
        l.first_device
    )
}

/// Parses a layout value; keys left out keep `base`'s value. Checked against the volume later.
pub fn parse_layout(spec: &str, base: Layout) -> std::result::Result<Layout, String> {
    let mut layout = base;
    let mut any = false;
    for part in spec.split(|c: char| c.is_whitespace() || c == ',') {
        if part.is_empty() {
            continue;
        }
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| format!("\"{part}\" is not key=value"))?;
        let number = |v: &str| {
            v.parse::<u32>()
                .map_err(|_| format!("{key}=\"{v}\" is not a number"))
        };
        match key {
            "stripe_size" => {
                layout.stripe_size = mountcfg::parse_size(value)
                    .ok()
                    .and_then(|v| u32::try_from(v).ok())
                    .ok_or_else(|| format!("stripe_size=\"{value}\" is not a size"))?
            }
            "width" => layout.width = number(value)?,
            "first_device" => layout.first_device = number(value)?,
            other => {
                return Err(format!(
                    "unknown layout key \"{other}\" (stripe_size, width)"
                ))
            }
        }
        any = true;
    }
    if !any {
        return Err("empty layout; expected e.g. \"stripe_size=64K width=4\"".into());
    }
    Ok(layout)
}

fn json<T: serde::Serialize>(value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec_pretty(value).map_err(|e| Error::Store(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_values_parse_and_print() {
        let base = Layout::new(65536, 4, 2);
        let l = parse_layout("stripe_size=128K width=2", base).unwrap();
        assert_eq!(l, Layout::new(131072, 2, 2));
        assert_eq!(format_layout(&l), "stripe_size=128K width=2 first_device=2");
        assert_eq!(parse_layout(&format_layout(&l), base).unwrap(), l);
        assert_eq!(parse_layout("stripe_size=65536", base).unwrap(), base);
        assert!(parse_layout("stripe_size=12Q", base).is_err());
        assert!(parse_layout("colour=red", base).is_err());
        assert!(parse_layout("width=two", base).is_err());
        assert!(parse_layout("", base).is_err());
    }

    #[test]
    fn reasons_are_kept_per_caller_handed_over_once_and_bounded() {
        // Thread ids far from any real pid, so other tests do not meet them.
        let base = 3_000_000_000u32;
        note_reason((0, base), "first".into());
        note_reason((0, base + 1), "other".into());
        // A size query leaves the reason; a read that fits takes it.
        assert_eq!(reason_for((0, base), 0).unwrap(), b"first");
        assert_eq!(reason_for((0, base), 64).unwrap(), b"first");
        assert_eq!(
            reason_for((0, base), 64).unwrap_err().errno(),
            libc::ENODATA
        );
        assert_eq!(reason_for((0, base + 1), 64).unwrap(), b"other");
        for i in 0..(REASONS_KEPT as u32 + 10) {
            note_reason((0, base + 10 + i), format!("r{i}"));
        }
        assert!(REASONS.lock().len() <= REASONS_KEPT);
        // The oldest went first; the newest is there.
        assert!(reason_for((0, base + 10), 64).is_err());
        let last = REASONS_KEPT as u32 + 9;
        assert_eq!(
            reason_for((0, base + 10 + last), 64).unwrap(),
            format!("r{last}").as_bytes()
        );
    }

    #[test]
    fn keys_in_our_namespace() {
        assert_eq!(key(b"user.stripefs.layout"), Some(Key::Layout));
        assert_eq!(key(b"user.stripefs.error"), Some(Key::Error));
        for &(n, k) in KEYS {
            assert_eq!(key(format!("{PREFIX}{n}").as_bytes()), Some(k));
            assert_eq!(name_of(k), format!("{PREFIX}{n}"));
        }
        assert_eq!(key(b"user.stripefs.bogus"), Some(Key::Unknown));
        assert_eq!(key(b"user.other"), None);
    }
}
