//! An entry in libmount's `/run/mount/utab` for each mount we make, so that umount(8) runs
//! `/sbin/umount.fuse.stripefs` for it.
//!
//! Why: given an absolute mountpoint, umount(8) (util-linux 2.38 and later) skips mountinfo
//! and learns the type from statfs(2), which says only `fuse` (FUSE_SUPER_MAGIC): it would
//! look for `umount.fuse` and unmount by itself, leaving the daemon to finish after it
//! returned. Unless utab lists userspace options for the mountpoint: then it reads mountinfo,
//! sees `fuse.stripefs` and runs our helper (`uhelper=` lets it do so for other users as
//! well). The file is written as libmount writes it: under an flock of `utab.lock`, through
//! a new file renamed into place, one line per mount (`SRC=… TARGET=… ROOT=/ OPTS=…`, with
//! mountinfo's octal escapes).

use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The userspace option we record.
pub const OPTS: &str = "uhelper=fuse.stripefs";

fn utab_path() -> PathBuf {
    std::env::var_os("LIBMOUNT_UTAB")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/run/mount/utab"))
}

/// mountinfo's and utab's escapes: space, tab, newline and backslash as `\ooo`.
fn mangled_bytes(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    for &b in s {
        match b {
            b' ' | b'\t' | b'\n' | b'\\' => out.extend_from_slice(format!("\\{b:03o}").as_bytes()),
            _ => out.push(b),
        }
    }
    out
}

/// Is this utab line about `target`?
fn is_for(line: &[u8], target: &[u8]) -> bool {
    line.split(|&b| b == b' ')
        .any(|field| field.strip_prefix(b"TARGET=") == Some(target))
}

/// Rewrites utab under libmount's lock: drops the lines about `target`, adds `line` if any.
/// With `line`, records it as the entry of `target`; without, drops the entry, unless
/// `unless_mounted` and a FUSE mount is on `target` (looked at under the lock, where a mount
/// adds its line only after it is mounted: another mount there now owns the entry).
fn update(target: &Path, line: Option<Vec<u8>>, unless_mounted: bool) -> std::io::Result<()> {
    let path = utab_path();
    let dir = path.parent().unwrap_or(Path::new("/"));
    if line.is_none() && !path.exists() {
        return Ok(());
    }
    std::fs::create_dir_all(dir)?;
    let mut lock_name = path.clone().into_os_string();
    lock_name.push(".lock");
    let lock = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock_name)?;
    // SAFETY: flock on a descriptor we own; released when it is closed.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let old = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    let target = mangled_bytes(target.as_os_str().as_bytes());
    // Entries of ours whose mount is gone (a daemon killed before it could remove its own).
    let all = super::mountinfo::all();
    let mounted: Vec<Vec<u8>> = all
        .iter()
        .map(|m| mangled_bytes(m.mountpoint.as_os_str().as_bytes()))
        .collect();
    let keep_target = unless_mounted
        && all
            .iter()
            .zip(&mounted)
            .any(|(m, mp)| mp == &target && super::mountinfo::is_fuse(&m.fstype));
    let stale = |l: &[u8]| {
        l.ends_with(format!("OPTS={OPTS}").as_bytes()) && !mounted.iter().any(|mp| is_for(l, mp))
    };
    let mut new = Vec::with_capacity(old.len() + 128);
    let mut changed = false;
    for l in old.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        if (is_for(l, &target) && !keep_target) || stale(l) {
            changed = true;
        } else {
            new.extend_from_slice(l);
            new.push(b'\n');
        }
    }
    if let Some(line) = line {
        new.extend_from_slice(&line);
        new.push(b'\n');
        changed = true;
    }
    if !changed {
        return Ok(());
    }
    let tmp = dir.join(format!(
        ".{}.stripefs.{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("utab"),
        std::process::id()
    ));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&new)?;
    f.sync_all()?;
    drop(f);
    std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
    std::fs::rename(&tmp, &path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Records our mount of `source` on `target` (a canonical path).
pub fn add(source: &str, target: &Path) -> std::io::Result<()> {
    let mut line = b"SRC=".to_vec();
    line.extend(mangled_bytes(source.as_bytes()));
    line.extend_from_slice(b" TARGET=");
    line.extend(mangled_bytes(target.as_os_str().as_bytes()));
    line.extend_from_slice(b" ROOT=/ OPTS=");
    line.extend_from_slice(OPTS.as_bytes());
    update(target, Some(line), false)
}

/// Forgets the entry of `target`.
pub fn remove(target: &Path) -> std::io::Result<()> {
    update(target, None, false)
}

/// Drops the entry of a mount that has just gone from `target`, unless another FUSE mount is
/// there now (mounted after ours was detached lazily): the entry is that one's.
pub fn remove_if_unmounted(target: &Path) -> std::io::Result<()> {
    update(target, None, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_match_mountinfo() {
        assert_eq!(mangled_bytes(b"/mnt/my vol\\x"), b"/mnt/my\\040vol\\134x");
        let m = String::from_utf8(mangled_bytes(b"/a b\tc")).unwrap();
        assert_eq!(super::super::mountinfo::unescape(&m), b"/a b\tc");
    }

    #[test]
    fn lines_are_added_replaced_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let utab = dir.path().join("utab");
        // Another tool's entry stays; one of ours whose mount is gone is dropped.
        std::fs::write(
            &utab,
            "SRC=/dev/sdb1 TARGET=/media/usb ROOT=/ OPTS=uhelper=udisks2\n\
             SRC=/v.toml TARGET=/gone ROOT=/ OPTS=uhelper=fuse.stripefs\n",
        )
        .unwrap();
        // SAFETY: only this test reads the variable, and it runs in one thread here.
        std::env::set_var("LIBMOUNT_UTAB", &utab);
        add("/etc/vol.toml", Path::new("/mnt/my vol")).unwrap();
        add("/etc/vol.toml", Path::new("/mnt/my vol")).unwrap();
        let text = std::fs::read_to_string(&utab).unwrap();
        assert_eq!(
            text,
            "SRC=/dev/sdb1 TARGET=/media/usb ROOT=/ OPTS=uhelper=udisks2\n\
             SRC=/etc/vol.toml TARGET=/mnt/my\\040vol ROOT=/ OPTS=uhelper=fuse.stripefs\n"
        );
        remove(Path::new("/mnt/my vol")).unwrap();
        assert_eq!(
            std::fs::read_to_string(&utab).unwrap(),
            "SRC=/dev/sdb1 TARGET=/media/usb ROOT=/ OPTS=uhelper=udisks2\n"
        );
        std::env::remove_var("LIBMOUNT_UTAB");
    }
}
