//! The cache's control keys: folder targets, flush, purge, statistics, the default mode,
//! attach and detach, the cleaner, the parameters and the IO classes. Who may use each: the
//! whole cache is root's and the mounter's; a target folder or a file is its owner's too.

use super::{is_volume_admin, kind_name, refuse, text, volume_admin};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::namespace::{Kind, ROOT};

/// The volume's cache; a volume without one has none of the cache keys.
pub(super) fn caching(engine: &Engine) -> Result<&crate::caching::Caching> {
    engine.caching.as_ref().ok_or_else(|| {
        Error::Refused(
            libc::ENODATA,
            "this volume has no cache (add a [cache] section to its config)".into(),
        )
    })
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

/// `cache` on a directory: makes it a cache target, or changes the target's setting.
pub(super) fn set_target(engine: &Engine, uid: u32, ino: u64, value: &[u8]) -> Result<()> {
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
    let setting =
        crate::caching::TargetSetting::parse_over(text(value)?, base.clone()).map_err(|e| {
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

/// `flush`: writes back the dirty lines in reach of `ino`.
pub(super) fn flush(engine: &Engine, uid: u32, ino: u64) -> Result<()> {
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

/// `purge`: drops the clean lines in reach of `ino`; dirty ones stay.
pub(super) fn purge(engine: &Engine, uid: u32, ino: u64) -> Result<()> {
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

/// `stats reset`: every counter to zero.
pub(super) fn reset_stats(engine: &Engine, uid: u32, value: &[u8]) -> Result<()> {
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

/// `mode MODE [no-flush]`: the volume's default cache mode.
pub(super) fn set_mode(engine: &Engine, uid: u32, value: &[u8]) -> Result<()> {
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

/// `detach`: everything written back, then the volume runs without its cache.
pub(super) fn detach(engine: &Engine, uid: u32) -> Result<()> {
    volume_admin(uid, "detach the cache")?;
    caching(engine)?.detach(&engine.ns).map(|_| ())
}

/// `attach [path=P size=S]`: the config's cache back, or another file store.
pub(super) fn attach(engine: &Engine, uid: u32, value: &[u8]) -> Result<()> {
    volume_admin(uid, "attach the cache")?;
    let c = caching(engine)?;
    let mut with = crate::caching::AttachWith::default();
    for part in text(value)?.split_whitespace() {
        match part.split_once('=') {
            Some(("path", p)) if p.starts_with('/') => with.path = Some(p.into()),
            Some(("size", v)) => {
                with.size = Some(
                    mountcfg::parse_size(v)
                        .map_err(|e| Error::Refused(libc::EINVAL, format!("size={v}: {e}")))?,
                )
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

/// `cleaner WORDS`: the cleaning policy and its settings, the words given changed.
pub(super) fn set_cleaner(engine: &Engine, uid: u32, value: &[u8]) -> Result<()> {
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

/// `params WORDS`: sequential cutoff, promotion and error threshold, the words given changed.
pub(super) fn set_params(engine: &Engine, uid: u32, value: &[u8]) -> Result<()> {
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

/// `classes add name=N ...` or `rm NAME`.
pub(super) fn set_classes(engine: &Engine, uid: u32, value: &[u8]) -> Result<()> {
    volume_admin(uid, "change the IO classes")?;
    let c = caching(engine)?;
    let t = text(value)?;
    let usage = "the value is `add name=NAME CONDITIONS SETTING` or `rm NAME` \
                 (stripefs class add|rm)";
    match t.split_once(char::is_whitespace) {
        Some(("add", spec)) => c
            .add_class(&engine.ns, spec)
            .map(|_| ())
            .or_else(|(errno, why)| {
                log::info!("refused IO class \"{spec}\": {why}");
                refuse(errno, why)
            }),
        Some(("rm", name)) => c
            .remove_class(&engine.ns, name.trim())
            .map(|_| ())
            .or_else(|(errno, why)| refuse(errno, why)),
        _ => refuse(libc::EINVAL, usage),
    }
}

/// Removing `cache` from a directory: it is a cache target no more.
pub(super) fn remove_target(engine: &Engine, uid: u32, ino: u64) -> Result<()> {
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

/// Reading `purge`: `clean_lines=N dirty_lines=M` in reach of `ino`.
pub(super) fn lines_in_reach(engine: &Engine, ino: u64) -> Result<Vec<u8>> {
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
