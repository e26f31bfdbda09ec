//! The control plane: `user.stripefs.*` extended attributes, as mergerfs, Ceph and Lustre do
//! it. The CLI is a thin wrapper over these, so `getfattr`/`setfattr` work the same.
//!
//! | key       | on          | get                   | set                          | remove          |
//! |-----------|-------------|-----------------------|------------------------------|-----------------|
//! | layout    | file, dir   | `stripe_size=64K width=4 first_device=1` | dir: default for new files; file: while empty | dir: inherit again |
//! | layout.json | file, dir | layout, devices and object shares as JSON | read-only | |
//! | migrate   | file        | -                     | restripe to the given layout | -               |
//! | status    | mount root  | volume status as JSON | read-only                    | -               |
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
        _ => Key::Unknown,
    })
}

pub fn get(engine: &Engine, ino: u64, key: Key) -> Result<Vec<u8>> {
    match key {
        Key::Layout => {
            let info = engine.layout_info(ino)?;
            let l = Layout::new(info.stripe_size, info.width, info.first_device);
            Ok(l.to_string().into_bytes())
        }
        Key::LayoutJson => json(&engine.layout_info(ino)?),
        Key::Status if ino == ROOT => json(&engine.status()?),
        Key::Status | Key::Migrate | Key::Unknown => errno(libc::ENODATA),
    }
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
            let mut layout = Layout::parse_spec(text, base).map_err(|e| {
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
        Key::LayoutJson | Key::Status => errno(libc::EROFS),
        Key::Unknown => errno(libc::ENODATA),
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
        Key::LayoutJson | Key::Status => errno(libc::EROFS),
        Key::Migrate | Key::Unknown => errno(libc::ENODATA),
    }
}

fn json<T: serde::Serialize>(value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec_pretty(value).map_err(|e| Error::Store(e.to_string()))
}
