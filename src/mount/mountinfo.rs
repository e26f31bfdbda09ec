//! Reading `/proc/self/mountinfo`: which mount sits on a path, with its type, source, device
//! number and options.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// One line of mountinfo.
#[derive(Debug, Clone)]
pub struct MountEntry {
    /// `major:minor` of the mount's superblock (a FUSE connection's id is its minor).
    pub dev: String,
    pub mountpoint: PathBuf,
    pub fstype: String,
    pub source: String,
    /// The mount's own options (`ro,nosuid,...`).
    pub options: String,
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
pub fn unescape(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

fn parse_line(line: &str) -> Option<MountEntry> {
    use std::os::unix::ffi::OsStringExt;
    let (mount, fs) = line.split_once(" - ")?;
    let mut fields = mount.split(' ').skip(2);
    let dev = fields.next()?;
    let mut fields = fields.skip(1);
    let (point, options) = (fields.next()?, fields.next()?);
    let mut fs = fs.split(' ');
    let (fstype, source) = (fs.next()?, fs.next()?);
    Some(MountEntry {
        dev: dev.to_string(),
        mountpoint: PathBuf::from(std::ffi::OsString::from_vec(unescape(point))),
        fstype: fstype.to_string(),
        source: String::from_utf8_lossy(&unescape(source)).into_owned(),
        options: options.to_string(),
    })
}

/// Every mount this process sees, in mountinfo's order (a later one is on top).
pub fn all() -> Vec<MountEntry> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|info| info.lines().filter_map(parse_line).collect())
        .unwrap_or_default()
}

/// `path` made absolute with its parent resolved: the path itself cannot be resolved on a
/// dead mount, and a mountpoint is listed by its resolved name.
pub fn resolve(path: &Path) -> Option<PathBuf> {
    let path = std::path::absolute(path).ok()?;
    Some(match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => std::fs::canonicalize(parent).ok()?.join(name),
        _ => path,
    })
}

/// Is the mount of `dev` (mountinfo's `major:minor`, as recorded when it was made) the one on
/// top of `mountpoint` now? False once it was unmounted, also when another sits there since.
/// Without a recorded `dev` (unreadable right after the mount): any FUSE mount there.
pub fn is_on_top(mountpoint: &Path, dev: &str) -> bool {
    mount_at(mountpoint).is_some_and(|m| {
        if dev.is_empty() {
            is_fuse(&m.fstype)
        } else {
            m.dev == dev
        }
    })
}

/// The topmost mount on `path`.
pub fn mount_at(path: &Path) -> Option<MountEntry> {
    let resolved = resolve(path)?;
    all()
        .into_iter()
        .rev()
        .find(|m| m.mountpoint.as_os_str().as_bytes() == resolved.as_os_str().as_bytes())
}

/// Is `fstype` a FUSE mount of any kind?
pub fn is_fuse(fstype: &str) -> bool {
    fstype == "fuse" || fstype == "fuseblk" || fstype.starts_with("fuse.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_are_undone() {
        assert_eq!(unescape(r"/mnt/my\040vol"), b"/mnt/my vol");
        assert_eq!(unescape(r"/a\134b\011c"), b"/a\\b\tc");
        assert_eq!(unescape(r"/end\04"), b"/end\\04");
    }

    #[test]
    fn a_line_is_parsed() {
        let m = parse_line(
            "36 35 0:52 / /mnt/my\\040vol rw,nosuid,nodev,relatime shared:1 - fuse.stripefs \
             /etc/stripefs/vol.toml rw,user_id=0,group_id=0",
        )
        .unwrap();
        assert_eq!(m.dev, "0:52");
        assert_eq!(m.mountpoint, Path::new("/mnt/my vol"));
        assert_eq!(m.fstype, "fuse.stripefs");
        assert_eq!(m.source, "/etc/stripefs/vol.toml");
        assert_eq!(m.options, "rw,nosuid,nodev,relatime");
    }
}
