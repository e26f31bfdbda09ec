//! The volume's control keys: a file's or a directory's layout, migrate, shift, the device
//! set, rebalance, and fault points.

use super::{kind_name, parse_layout, refuse, text, volume_admin, Key};
use crate::engine::{Caller, Engine};
use crate::error::{Error, Result};
use crate::namespace::{Inode, Kind};
use std::sync::Arc;

/// The inode whose layout `uid` changes: its owner's or root's to change.
fn layout_owned_by(engine: &Engine, uid: u32, ino: u64) -> Result<Inode> {
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
    Ok(inode)
}

/// `layout` (a file's, while empty, or a directory's default) or `migrate` (restripe a file).
pub(super) fn set_layout(
    engine: &Engine,
    uid: u32,
    ino: u64,
    key: Key,
    value: &[u8],
) -> Result<()> {
    let inode = layout_owned_by(engine, uid, ino)?;
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

/// `rebalance start [max_mbps=N]` or `stop`, of a directory's tree.
pub(super) fn rebalance(engine: &Arc<Engine>, uid: u32, ino: u64, value: &[u8]) -> Result<()> {
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
                    Error::Refused(libc::EINVAL, format!("max_mbps=\"{v}\" is not a number"))
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

/// `devices add DIR`, `remove ID [max_mbps=N]` or `replace ID DIR [max_mbps=N]`.
pub(super) fn devices(engine: &Arc<Engine>, uid: u32, value: &[u8]) -> Result<()> {
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
                    format!("\"{t}\": the value is `replace ID /absolute/path [max_mbps=N]`"),
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

/// `failpoint NAME=ACTIONS` (root only, builds with fault points).
pub(super) fn arm_failpoint(value: &[u8]) -> Result<()> {
    let spec = text(value)?;
    let (name, actions) = spec
        .split_once('=')
        .ok_or_else(|| Error::Refused(libc::EINVAL, format!("\"{spec}\" is not NAME=ACTIONS")))?;
    faultpoint::arm(name.trim(), actions.trim()).map_err(|e| {
        log::warn!("refused fault point \"{spec}\": {e}");
        Error::Refused(libc::EINVAL, e.to_string())
    })
}

/// Removing `layout` from a directory: its new files inherit again.
pub(super) fn clear_layout(engine: &Engine, uid: u32, ino: u64) -> Result<()> {
    let inode = layout_owned_by(engine, uid, ino)?;
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

/// `collapse OFFSET LENGTH` / `insert OFFSET LENGTH` on a file: fallocate(2)'s
/// COLLAPSE_RANGE and INSERT_RANGE, which the kernel refuses to pass to a FUSE filesystem.
/// Whole stripe rows only, as ext4 wants whole blocks. The kernel let the caller set a user
/// xattr on the file: it may write it.
pub(super) fn shift(engine: &Engine, caller: Caller, ino: u64, value: &[u8]) -> Result<()> {
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
