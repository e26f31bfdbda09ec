//! The helpers mount(8) and umount(8) run for the type `fuse.stripefs`
//! (`/sbin/mount.fuse.stripefs`, `/sbin/umount.fuse.stripefs`: links to the stripefs binary,
//! which looks at the name it was called by), and `stripefs install-helper` that makes them.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The names mount(8) and umount(8) look for in /sbin.
pub const HELPERS: [&str; 2] = ["mount.fuse.stripefs", "umount.fuse.stripefs"];

/// `umount.fuse.stripefs MOUNTPOINT [-flnrv] [-t TYPE] [-N NS]`, as umount(8) runs it: unmounts
/// and returns once the daemon has written everything back and exited (what `stripefs
/// umount` does), so the devices are free when umount(8) returns. `-l` detaches and returns
/// at once, as `umount -l` does: the daemon finishes when the last user leaves.
pub fn umount_helper_main(args: Vec<String>) -> i32 {
    let mut target = None;
    let mut lazy = false;
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "-t" | "-N" => {
                it.next();
            }
            s if s.starts_with('-') && s.len() > 1 => {
                // Bundled flags (-lf); -f (force) and -r (remount ro on failure) are umount(8)'s
                // own for block devices: a FUSE unmount is the same without them.
                lazy |= s[1..].contains('l');
            }
            _ if target.is_none() => target = Some(PathBuf::from(a)),
            _ => {
                eprintln!("usage: umount.fuse.stripefs MOUNTPOINT [-l]");
                return 2;
            }
        }
    }
    let Some(target) = target else {
        eprintln!("usage: umount.fuse.stripefs MOUNTPOINT [-l]");
        return 2;
    };
    let done = if lazy {
        detach(&target)
    } else {
        crate::daemon::umount(&target, false, Duration::from_secs(600))
    };
    match done {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("umount.fuse.stripefs: {e}");
            // umount(8)'s "unmount failed".
            32
        }
    }
}

fn detach(target: &Path) -> Result<()> {
    let c = std::ffi::CString::new(target.as_os_str().as_encoded_bytes())
        .map_err(|_| Error::Usage("mountpoint has a NUL byte".into()))?;
    // SAFETY: plain syscall with a valid C string.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
        return Err(Error::Usage(format!(
            "unmount {}: {}",
            target.display(),
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

/// `stripefs install-helper [--prefix DIR] [--uninstall]`: links PREFIX/sbin/mount.fuse.stripefs
/// and PREFIX/sbin/umount.fuse.stripefs to this executable (PREFIX is `/` by default), or
/// removes those links. Run again, it replaces links to another stripefs and leaves right ones
/// alone; a file there that is not a link is never touched.
pub fn install_helper(prefix: &Path, uninstall: bool) -> Result<Vec<String>> {
    let exe = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map_err(|e| Error::Usage(format!("cannot find my own binary: {e}")))?;
    let sbin = prefix.join("sbin");
    let mut said = Vec::new();
    if !uninstall {
        std::fs::create_dir_all(&sbin)
            .map_err(|e| Error::Usage(format!("{}: {e}", sbin.display())))?;
    }
    for name in HELPERS {
        let link = sbin.join(name);
        let current = std::fs::symlink_metadata(&link);
        let is_link = current.as_ref().is_ok_and(|m| m.file_type().is_symlink());
        if current.is_ok() && !is_link {
            return Err(Error::Usage(format!(
                "{} exists and is not a link; remove it yourself if it is an old helper",
                link.display()
            )));
        }
        if uninstall {
            if is_link {
                std::fs::remove_file(&link)
                    .map_err(|e| Error::Usage(format!("remove {}: {e}", link.display())))?;
                said.push(format!("removed {}", link.display()));
            }
            continue;
        }
        if is_link && std::fs::read_link(&link).is_ok_and(|t| t == exe) {
            said.push(format!("{} -> {} (already)", link.display(), exe.display()));
            continue;
        }
        // A new link under a temporary name, renamed over the old one: never a moment without.
        let tmp = sbin.join(format!(".{name}.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&exe, &tmp)
            .and_then(|()| std::fs::rename(&tmp, &link))
            .map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                Error::Usage(format!("link {}: {e}", link.display()))
            })?;
        said.push(format!("{} -> {}", link.display(), exe.display()));
    }
    Ok(said)
}
