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
//! [`get`], [`set`] or [`remove`], refusing with [`refuse`] and a reason; what a volume key or a
//! cache key does is in `volume_keys` or `cache_keys`.

use crate::engine::{Caller, Engine};
use crate::error::{Error, Result};
use crate::namespace::{Kind, ROOT};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use stripe::Layout;

mod cache_keys;
mod volume_keys;

use cache_keys::caching;

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
        Key::Purge => cache_keys::lines_in_reach(engine, ino),
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
        Key::Layout | Key::Migrate => volume_keys::set_layout(engine, uid, ino, key, value),
        Key::Cache => cache_keys::set_target(engine, uid, ino, value),
        Key::Flush => cache_keys::flush(engine, uid, ino),
        Key::Purge => cache_keys::purge(engine, uid, ino),
        Key::Stats if ino == ROOT => cache_keys::reset_stats(engine, uid, value),
        Key::Mode if ino == ROOT => cache_keys::set_mode(engine, uid, value),
        Key::Rebalance => volume_keys::rebalance(engine, uid, ino, value),
        Key::Devices if ino == ROOT => volume_keys::devices(engine, uid, value),
        Key::Detach if ino == ROOT => cache_keys::detach(engine, uid),
        Key::Attach if ino == ROOT => cache_keys::attach(engine, uid, value),
        Key::Cleaner if ino == ROOT => cache_keys::set_cleaner(engine, uid, value),
        Key::Params if ino == ROOT => cache_keys::set_params(engine, uid, value),
        Key::Failpoint if ino == ROOT && uid == 0 => volume_keys::arm_failpoint(value),
        Key::Failpoint if ino == ROOT => refuse(libc::EPERM, "only root may arm fault points"),
        Key::Classes if ino == ROOT => cache_keys::set_classes(engine, uid, value),
        Key::Shift => volume_keys::shift(engine, caller, ino, value),
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
        Key::Layout => volume_keys::clear_layout(engine, uid, ino),
        Key::Cache => cache_keys::remove_target(engine, uid, ino),
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
