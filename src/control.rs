//! The control plane: `user.stripefs.*` extended attributes, as mergerfs, Ceph and Lustre do
//! it. The CLI is a thin wrapper over these, so `getfattr`/`setfattr` work the same.
//!
//! | key       | on          | get                   | set                          | remove          |
//! |-----------|-------------|-----------------------|------------------------------|-----------------|
//! | layout    | file, dir   | `stripe_size=64K width=4 first_device=1` | dir: default for new files; file: while empty | dir: inherit again |
//! | layout.json | file, dir | layout, devices and object shares as JSON | read-only | |
//! | migrate   | file        | -                     | restripe to the given layout | -               |
//! | status    | mount root  | volume status as JSON | read-only                    | -               |
//! | cache     | dir         | the folder's target   | make it a target (`mode=wb priority=0 allocation=1 pinned=0`) | remove the target |
//! | stats     | mount root  | cache statistics, JSON | read-only                   | -               |
//! | targets   | mount root  | folder targets, JSON  | read-only                    | -               |
//! | flush     | mount root  | -                     | write every dirty line back  | -               |
//! | mode      | mount root  | default cache mode    | change it (dirty lines written back when leaving wb/wo) | - |
//! | failpoint | mount root  | -                     | root, builds with fault points: `NAME=ACTIONS` arms a fault point (`off` disarms) | - |
//!
//! Unknown key: ENODATA (ENOATTR); bad value: EINVAL; read-only key: EROFS.

use crate::engine::Engine;
use crate::error::{errno, Error, Result};
use crate::namespace::{Kind, ROOT};
use stripe::Layout;

pub const PREFIX: &str = "user.stripefs.";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Layout,
    LayoutJson,
    Migrate,
    Status,
    Cache,
    Stats,
    Targets,
    Flush,
    Mode,
    Failpoint,
    Unknown,
}

/// The control key an xattr name addresses, if it is in our namespace.
pub fn key(name: &[u8]) -> Option<Key> {
    let rest = name.strip_prefix(PREFIX.as_bytes())?;
    Some(match rest {
        b"layout" => Key::Layout,
        b"layout.json" => Key::LayoutJson,
        b"migrate" => Key::Migrate,
        b"status" => Key::Status,
        b"cache" => Key::Cache,
        b"stats" => Key::Stats,
        b"targets" => Key::Targets,
        b"flush" => Key::Flush,
        b"mode" => Key::Mode,
        b"failpoint" => Key::Failpoint,
        _ => Key::Unknown,
    })
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
        Key::Cache => match caching(engine)?.target(ino) {
            Some(t) => Ok(t.format().into_bytes()),
            None => errno(libc::ENODATA),
        },
        Key::Stats if ino == ROOT => json(&caching(engine)?.cache.stats()),
        Key::Targets if ino == ROOT => json(&caching(engine)?.targets(&engine.ns)),
        Key::Mode if ino == ROOT => Ok(caching(engine)?
            .cache
            .default_mode()
            .name()
            .as_bytes()
            .to_vec()),
        Key::Status
        | Key::Stats
        | Key::Targets
        | Key::Mode
        | Key::Flush
        | Key::Migrate
        | Key::Failpoint
        | Key::Unknown => errno(libc::ENODATA),
    }
}

/// The volume's cache; a volume without one has none of the cache keys.
fn caching(engine: &Engine) -> Result<&crate::caching::Caching> {
    engine.caching.as_ref().ok_or(Error::Errno(libc::ENODATA))
}

/// Root, or whoever mounted the volume (the daemon's user).
fn is_volume_admin(uid: u32) -> bool {
    // SAFETY: geteuid cannot fail.
    uid == 0 || uid == unsafe { libc::geteuid() }
}

/// Volume-wide controls are for root and for whoever mounted the volume.
fn volume_admin(uid: u32) -> Result<()> {
    if is_volume_admin(uid) {
        Ok(())
    } else {
        errno(libc::EPERM)
    }
}

fn text(value: &[u8]) -> Result<&str> {
    std::str::from_utf8(value)
        .map(|t| t.trim_end_matches('\0').trim())
        .map_err(|_| Error::Errno(libc::EINVAL))
}

pub fn set(engine: &Engine, uid: u32, ino: u64, key: Key, value: &[u8]) -> Result<()> {
    match key {
        Key::Layout | Key::Migrate => {
            let inode = engine.ns.get(ino)?;
            if uid != 0 && uid != inode.uid {
                return errno(libc::EPERM);
            }
            let text = std::str::from_utf8(value).map_err(|_| Error::Errno(libc::EINVAL))?;
            let text = text.trim_end_matches('\0');
            let n = engine.volume.device_count();
            let base = match inode.layout {
                Some(l) => l,
                None => engine.ns.inherited_layout(ino, engine.volume_layout()),
            };
            let mut layout = parse_layout(text, base).map_err(|e| {
                log::info!("refused layout \"{text}\": {e}");
                Error::Errno(libc::EINVAL)
            })?;
            layout.validate(n).map_err(|e| {
                log::info!("refused layout \"{text}\": {e}");
                Error::Errno(libc::EINVAL)
            })?;
            match (key, inode.kind) {
                (Key::Migrate, Kind::File) => engine.migrate(ino, layout).map(|_| ()),
                (Key::Migrate, _) => errno(libc::EINVAL),
                (_, Kind::Dir) => {
                    layout.first_device = 0;
                    engine.ns.set_layout(ino, Some(layout)).map(|_| ())
                }
                _ => engine.ns.set_layout(ino, Some(layout)).map(|_| ()),
            }
        }
        Key::Cache => {
            let c = caching(engine)?;
            let inode = engine.ns.get(ino)?;
            if inode.kind != Kind::Dir {
                return errno(libc::ENOTDIR);
            }
            let admin = is_volume_admin(uid);
            if !admin && uid != inode.uid {
                return errno(libc::EPERM);
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
                    Error::Errno(libc::EINVAL)
                })?;
            if !admin && !setting.same_share(&base) {
                log::warn!(
                    "refused uid {uid} the cache target \"{}\" on {}: priority, allocation and \
                     pinning are for root or the user who mounted; a folder's owner may choose \
                     its mode only (its share stays priority={} allocation={} pinned={})",
                    setting.format(),
                    crate::caching::path_of(&engine.ns, ino),
                    base.priority,
                    base.allocation,
                    u8::from(base.pinned)
                );
                return errno(libc::EPERM);
            }
            c.set_target(&engine.ns, ino, setting, false)
        }
        Key::Flush if ino == ROOT => {
            volume_admin(uid)?;
            caching(engine)?
                .cache
                .flush_all(&mut |_, _| {})
                .map_err(|e| Error::Errno(e.raw_os_error().unwrap_or(libc::EIO)))
        }
        Key::Mode if ino == ROOT => {
            volume_admin(uid)?;
            let c = caching(engine)?;
            let mode = cache::Mode::parse(text(value)?).ok_or(Error::Errno(libc::EINVAL))?;
            c.set_default_mode(mode)
        }
        Key::Failpoint if ino == ROOT && uid == 0 => {
            let spec = text(value)?;
            let (name, actions) = spec.split_once('=').ok_or(Error::Errno(libc::EINVAL))?;
            faultpoint::arm(name.trim(), actions.trim()).map_err(|e| {
                log::warn!("refused fault point \"{spec}\": {e}");
                Error::Errno(libc::EINVAL)
            })
        }
        Key::Failpoint if ino == ROOT => errno(libc::EPERM),
        Key::LayoutJson | Key::Status | Key::Stats | Key::Targets => errno(libc::EROFS),
        Key::Flush | Key::Mode | Key::Failpoint | Key::Unknown => errno(libc::ENODATA),
    }
}

pub fn remove(engine: &Engine, uid: u32, ino: u64, key: Key) -> Result<()> {
    match key {
        Key::Layout => {
            let inode = engine.ns.get(ino)?;
            if uid != 0 && uid != inode.uid {
                return errno(libc::EPERM);
            }
            if inode.kind != Kind::Dir {
                return errno(libc::EINVAL);
            }
            engine.ns.set_layout(ino, None).map(|_| ())
        }
        Key::Cache => {
            let c = caching(engine)?;
            let inode = engine.ns.get(ino)?;
            if uid != 0 && uid != inode.uid {
                return errno(libc::EPERM);
            }
            c.remove_target(&engine.ns, ino)
        }
        Key::LayoutJson | Key::Status | Key::Stats | Key::Targets | Key::Mode => errno(libc::EROFS),
        Key::Migrate | Key::Flush | Key::Failpoint | Key::Unknown => errno(libc::ENODATA),
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
    fn keys_in_our_namespace() {
        assert_eq!(key(b"user.stripefs.layout"), Some(Key::Layout));
        assert_eq!(key(b"user.stripefs.bogus"), Some(Key::Unknown));
        assert_eq!(key(b"user.other"), None);
    }
}
