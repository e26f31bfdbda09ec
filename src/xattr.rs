//! The CLI's side of the control plane: extended attributes on paths.

use crate::control::PREFIX;
use crate::error::Error;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn cpath(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

pub fn get(path: &Path, name: &str) -> io::Result<Vec<u8>> {
    let p = cpath(path)?;
    let n = CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut buf = vec![0u8; 64 * 1024];
    // SAFETY: buffer and strings are valid for the call.
    let len = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if len < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(len as usize);
    Ok(buf)
}

pub fn set(path: &Path, name: &str, value: &[u8]) -> io::Result<()> {
    let p = cpath(path)?;
    let n = CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: buffer and strings are valid for the call.
    let r = unsafe {
        libc::setxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub fn remove(path: &Path, name: &str) -> io::Result<()> {
    let p = cpath(path)?;
    let n = CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: strings are valid for the call.
    if unsafe { libc::removexattr(p.as_ptr(), n.as_ptr()) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Turns an errno from a control xattr into words about `path`.
pub fn explain(path: &Path, key: &str, e: io::Error) -> Error {
    let p = path.display();
    Error::Usage(match e.raw_os_error() {
        Some(libc::ENODATA) | Some(libc::EOPNOTSUPP) => {
            format!("{p} is not on a stripefs volume (no {PREFIX}{key})")
        }
        Some(libc::ENOENT) => format!("{p}: no such file or directory"),
        Some(libc::EINVAL) => format!("{p}: the value was refused as invalid for {PREFIX}{key}"),
        Some(libc::EBUSY) => {
            format!("{p}: the file has data; use `stripefs migrate` to restripe it")
        }
        Some(libc::EPERM) | Some(libc::EACCES) if key == "cache" => format!(
            "{p}: permission denied (a folder's owner may choose its mode; priority, \
             allocation and pinning are for root or the user who mounted)"
        ),
        Some(libc::EPERM) | Some(libc::EACCES) if key == "flush" || key == "mode" => format!(
            "{p}: permission denied (only root or the user who mounted the volume may change \
             volume-wide settings)"
        ),
        Some(libc::EPERM) | Some(libc::EACCES) => {
            format!("{p}: permission denied (only the owner or root may change this)")
        }
        _ => format!("{p}: {e}"),
    })
}

/// The status JSON of the volume mounted at `mountpoint`.
pub fn volume_status(mountpoint: &Path) -> crate::error::Result<serde_json::Value> {
    let raw = get(mountpoint, &format!("{PREFIX}status")).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT) => Error::Usage(format!("{}: no such directory", mountpoint.display())),
        errno if crate::mount::daemon_gone(errno) => Error::Usage(format!(
            "{m} is a dead mount: its daemon has stopped (killed or crashed); `stripefs umount {m}` \
             detaches it, and mounting again recovers what a file cache held",
            m = mountpoint.display()
        )),
        _ => Error::Usage(format!(
            "{} is not a stripefs mount (give the mountpoint itself)",
            mountpoint.display()
        )),
    })?;
    serde_json::from_slice(&raw)
        .map_err(|e| Error::Usage(format!("bad status from the daemon: {e}")))
}

/// A control request that failed: the errno, and the daemon's reason when it gave one.
#[derive(Debug)]
pub struct Refused {
    pub error: io::Error,
    pub reason: Option<String>,
}

/// Why the daemon refused this thread's last request on control key `key`, if it said: read
/// from `user.stripefs.error` on the same thread, since the daemon keeps reasons by the
/// requesting thread.
fn reason(path: &Path, key: &str) -> Option<String> {
    let v = get(path, &format!("{PREFIX}error")).ok()?;
    let text = String::from_utf8_lossy(&v);
    text.strip_prefix(&format!("{PREFIX}{key}: "))
        .map(str::to_string)
}

fn with_reason<T>(path: &Path, key: &str, r: io::Result<T>) -> Result<T, Refused> {
    r.map_err(|error| Refused {
        reason: reason(path, key),
        error,
    })
}

/// getxattr of control key `key` (after the prefix), with the daemon's reason on failure.
pub fn control_get(path: &Path, key: &str) -> Result<Vec<u8>, Refused> {
    with_reason(path, key, get(path, &format!("{PREFIX}{key}")))
}

/// setxattr of control key `key`, with the daemon's reason on failure.
pub fn control_set(path: &Path, key: &str, value: &[u8]) -> Result<(), Refused> {
    with_reason(path, key, set(path, &format!("{PREFIX}{key}"), value))
}

/// removexattr of control key `key`, with the daemon's reason on failure.
pub fn control_remove(path: &Path, key: &str) -> Result<(), Refused> {
    with_reason(path, key, remove(path, &format!("{PREFIX}{key}")))
}
