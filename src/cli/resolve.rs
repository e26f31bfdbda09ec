//! The one answer to "is this path on a stripefs mount, and where is its root?". Every command
//! that takes a path on a mounted volume asks it first, and touches nothing when the answer is
//! no: a FUSE filesystem (statfs magic) whose daemon answers the control handshake
//! (`user.stripefs.control` on the mount's root, found in mountinfo by the path's device).

use crate::control::PREFIX;
use crate::error::{Error, Result};
use crate::xattr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// statfs f_type of every FUSE filesystem ("FUse" in ASCII, linux/magic.h).
pub const FUSE_SUPER_MAGIC: i64 = 0x65735546;

/// A path on a mounted stripefs volume.
#[derive(Debug)]
pub struct Mounted {
    /// The mount's root directory (where the volume is mounted).
    pub root: PathBuf,
    /// The mount's type as mountinfo lists it (`fuse` or `fuse.stripefs`).
    pub fstype: String,
    /// The daemon serving it.
    pub pid: u32,
}

/// What a path turned out to be.
#[derive(Debug)]
pub enum Found {
    Stripefs(Mounted),
    /// A FUSE mount whose daemon is gone (every access: "Transport endpoint is not connected").
    Dead,
}

/// `path` on a live stripefs mount, or an error that says what it is on instead.
pub fn resolve(path: &Path) -> Result<Mounted> {
    match find(path)? {
        Found::Stripefs(m) => Ok(m),
        Found::Dead => Err(Error::Usage(format!(
            "{p} is a dead mount or inside one: its daemon has stopped (killed or crashed); `stripefs \
             umount` of its mountpoint detaches it, and mounting again recovers what a file \
             cache held",
            p = path.display()
        ))),
    }
}

/// Like [`resolve`], but a dead FUSE mount is an answer, not an error (umount clears it).
pub fn find(path: &Path) -> Result<Found> {
    let st = match crate::mount::statfs_answered(path, crate::mount::ANSWER_WITHIN)? {
        Ok(st) => st,
        Err(e) => {
            return match e.raw_os_error() {
                errno if crate::mount::daemon_gone(errno) => Ok(Found::Dead),
                Some(libc::ENOENT) => Err(Error::Usage(format!(
                    "{}: no such file or directory",
                    path.display()
                ))),
                _ => Err(Error::Usage(format!("{}: {e}", path.display()))),
            }
        }
    };
    let (root, fstype) = mount_of(path).unwrap_or_else(|| (PathBuf::from("?"), "?".into()));
    let not_ours = |fstype: &str| {
        Error::Usage(format!(
            "{} is not on a stripefs mount (it is on {fstype} mounted at {})",
            path.display(),
            root.display()
        ))
    };
    #[allow(clippy::unnecessary_cast)] // f_type is i64 on some targets, not on others
    if st.f_type as i64 != FUSE_SUPER_MAGIC {
        return Err(not_ours(&fstype));
    }
    // The kernel says FUSE; the handshake says whether a stripefs daemon answers.
    let hello = xattr::get(&root, &format!("{PREFIX}control")).ok();
    let pid = hello
        .as_deref()
        .and_then(|h| std::str::from_utf8(h).ok())
        .filter(|h| h.starts_with("stripefs "))
        .and_then(|h| {
            h.split_whitespace()
                .find_map(|w| w.strip_prefix("pid="))
                .and_then(|p| p.parse().ok())
        });
    match pid {
        Some(pid) => Ok(Found::Stripefs(Mounted { root, fstype, pid })),
        None => Err(not_ours(&fstype)),
    }
}

/// The mountpoint and type of the mount `path` is on: the mountinfo entries of its device,
/// the deepest whose mountpoint holds the path.
fn mount_of(path: &Path) -> Option<(PathBuf, String)> {
    let dev = std::fs::metadata(path).ok()?.dev();
    let want = format!("{}:{}", libc::major(dev), libc::minor(dev));
    let real = std::fs::canonicalize(path).ok()?;
    let mounts: Vec<_> = crate::mount::mountinfo::all()
        .into_iter()
        .filter(|m| m.dev == want)
        .collect();
    // The deepest that holds the path; else (a path outside our view) the last listed.
    let deepest = mounts
        .iter()
        .filter(|m| real.starts_with(&m.mountpoint))
        .max_by_key(|m| m.mountpoint.as_os_str().len())
        .or(mounts.last());
    deepest.map(|m| (m.mountpoint.clone(), m.fstype.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_directory_is_refused_with_what_it_is_on() {
        let t = tempfile::tempdir().unwrap();
        let e = resolve(t.path()).unwrap_err().to_string();
        assert!(e.contains("is not on a stripefs mount (it is on "), "{e}");
        assert!(e.contains(" mounted at /"), "{e}");
        let e = resolve(&t.path().join("nothing")).unwrap_err().to_string();
        assert!(e.contains("no such file or directory"), "{e}");
    }
}
