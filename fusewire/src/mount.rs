//! A minimal mount(2) of a new /dev/fuse connection, as root, and its unmount on drop.
//! stripefs has its own (with mountinfo checks and fstab names); this one serves fusewire's
//! tests, examples and benchmarks.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A mount we made; unmounted (lazily) when dropped, also when a test fails.
#[derive(Debug)]
pub struct Mount {
    path: PathBuf,
    mounted: bool,
}

/// Mounts a new FUSE connection of type `fuse.SUBTYPE` on `mountpoint` (a directory), with
/// extra mount options `options` (e.g. "allow_other,default_permissions"). Returns the
/// connection's descriptor: the kernel's INIT is waiting on it, and nothing may touch the
/// mount before a session answers it.
pub fn mount(
    mountpoint: &Path,
    subtype: &str,
    source: &str,
    options: &str,
) -> io::Result<(OwnedFd, Mount)> {
    let c = |s: &[u8]| CString::new(s).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL));
    let c_mp = c(mountpoint.as_os_str().as_bytes())?;
    // SAFETY: open(2) with a valid C string; the descriptor is owned at once.
    let raw = unsafe { libc::open(c"/dev/fuse".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just opened, owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: plain getters.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut data = format!(
        "fd={},rootmode=40000,user_id={uid},group_id={gid}",
        fd.as_raw_fd()
    );
    if !options.is_empty() {
        data.push(',');
        data.push_str(options);
    }
    let (c_src, c_type, c_data) = (
        c(source.as_bytes())?,
        c(format!("fuse.{subtype}").as_bytes())?,
        c(data.as_bytes())?,
    );
    // SAFETY: mount(2) with valid C strings.
    let r = unsafe {
        libc::mount(
            c_src.as_ptr(),
            c_mp.as_ptr(),
            c_type.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            c_data.as_ptr().cast(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((
        fd,
        Mount {
            path: mountpoint.to_path_buf(),
            mounted: true,
        },
    ))
}

impl Mount {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Unmounts (lazily with `detach`: cannot fail for being busy).
    pub fn unmount(&mut self, detach: bool) -> io::Result<()> {
        if !self.mounted {
            return Ok(());
        }
        let c = CString::new(self.path.as_os_str().as_bytes()).map_err(io::Error::other)?;
        let flags = if detach { libc::MNT_DETACH } else { 0 };
        // SAFETY: umount2(2) with a valid C string.
        if unsafe { libc::umount2(c.as_ptr(), flags) } != 0 {
            return Err(io::Error::last_os_error());
        }
        self.mounted = false;
        Ok(())
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Err(e) = self.unmount(true) {
            log::warn!("unmount {}: {e}", self.path.display());
        }
    }
}
