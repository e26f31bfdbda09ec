//! Our own mount(2) of a FUSE connection, as libfuse does it: `/dev/fuse` opened here, the
//! kernel type `fuse.stripefs` (so findmnt, `df -T`, `mount -t fuse.stripefs`, fstab and
//! umount(8)'s `umount.fuse.stripefs` helper see what it is) and the volume's name as the
//! source. fusewire then serves the descriptor (`Session::new`); it never mounts nor
//! unmounts: the unmount is ours too, and done only while the mount is still the one we made.

use super::mountinfo;
use crate::error::{Error, Result};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The kernel type of a stripefs mount.
pub const FSTYPE: &str = "fuse.stripefs";

/// What goes to mount(2).
#[derive(Debug, Clone, Default)]
pub struct MountSpec {
    /// The source column (`findmnt -o SOURCE`): the volume's name.
    pub source: String,
    pub read_only: bool,
    pub nosuid: bool,
    pub nodev: bool,
    pub noexec: bool,
    pub noatime: bool,
    pub sync: bool,
    pub dirsync: bool,
    pub allow_other: bool,
    pub default_permissions: bool,
    pub max_read: u32,
}

impl MountSpec {
    /// mount(2)'s flags.
    pub fn flags(&self) -> libc::c_ulong {
        let mut flags = 0;
        for (on, bit) in [
            (self.read_only, libc::MS_RDONLY),
            (self.nosuid, libc::MS_NOSUID),
            (self.nodev, libc::MS_NODEV),
            (self.noexec, libc::MS_NOEXEC),
            (self.noatime, libc::MS_NOATIME),
            (self.sync, libc::MS_SYNCHRONOUS),
            (self.dirsync, libc::MS_DIRSYNC),
        ] {
            if on {
                flags |= bit;
            }
        }
        flags
    }

    /// The FUSE options of mount(2)'s data argument, for the connection `fd`.
    pub fn data(&self, fd: i32, root_mode: u32, uid: u32, gid: u32) -> String {
        let mut data = format!("fd={fd},rootmode={root_mode:o},user_id={uid},group_id={gid}");
        if self.default_permissions {
            data.push_str(",default_permissions");
        }
        if self.allow_other {
            data.push_str(",allow_other");
        }
        if self.max_read > 0 {
            data.push_str(&format!(",max_read={}", self.max_read));
        }
        data
    }
}

/// A mount we made: where, and which (its device number, so that we never unmount a mount
/// someone else made there after ours went away).
#[derive(Debug)]
pub struct FuseMount {
    mountpoint: PathBuf,
    dev: String,
}

/// Mounts a new FUSE connection on `mountpoint` (a canonical directory) and returns the
/// connection's descriptor for the session to serve. The kernel sends INIT at once; nothing
/// may touch the mount (a stat of it included) until the session has answered it.
pub fn mount(spec: &MountSpec, mountpoint: &Path) -> Result<(OwnedFd, FuseMount)> {
    let c_mp = CString::new(mountpoint.as_os_str().as_bytes())
        .map_err(|_| Error::Usage("mountpoint has a NUL byte".into()))?;
    let c_source = CString::new(spec.source.as_bytes())
        .map_err(|_| Error::Usage("the volume name has a NUL byte".into()))?;
    // SAFETY: stat fills the zeroed struct; the path is a valid C string.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::stat(c_mp.as_ptr(), &mut st) } != 0 {
        return Err(Error::Usage(format!(
            "mountpoint {}: {}",
            mountpoint.display(),
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: open(2) with a valid C string; the descriptor is owned at once.
    let raw = unsafe { libc::open(c"/dev/fuse".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if raw < 0 {
        let e = std::io::Error::last_os_error();
        return Err(Error::Usage(match e.raw_os_error() {
            Some(libc::ENOENT) => "/dev/fuse is missing: load the module (modprobe fuse)".into(),
            _ => format!("/dev/fuse: {e}"),
        }));
    }
    // SAFETY: `raw` was just opened and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: plain getters.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let data = spec.data(fd.as_raw_fd(), st.st_mode & libc::S_IFMT, uid, gid);
    let try_mount = |fstype: &str, data: &str| -> std::io::Result<()> {
        let c_type = CString::new(fstype).expect("no NUL");
        let c_data = CString::new(data).expect("no NUL");
        // SAFETY: mount(2) with valid C strings.
        let r = unsafe {
            libc::mount(
                c_source.as_ptr(),
                c_mp.as_ptr(),
                c_type.as_ptr(),
                spec.flags(),
                c_data.as_ptr().cast(),
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    let mut mounted = try_mount(FSTYPE, &data);
    if mounted.as_ref().err().and_then(|e| e.raw_os_error()) == Some(libc::ENODEV) {
        // A kernel without `fuse.SUBTYPE` types (before 2.6.21) takes the subtype as an option.
        mounted = try_mount("fuse", &format!("{data},subtype=stripefs"));
    }
    if let Err(e) = mounted {
        return Err(Error::Usage(match e.raw_os_error() {
            Some(libc::EPERM) => format!(
                "mount on {}: {e}: mounting a stripefs volume needs root",
                mountpoint.display()
            ),
            _ => format!("mount on {}: {e}", mountpoint.display()),
        }));
    }
    // The new mount is the topmost one on the mountpoint: remember which it is.
    let dev = mountinfo::mount_at(mountpoint)
        .filter(|m| mountinfo::is_fuse(&m.fstype))
        .map(|m| m.dev)
        .unwrap_or_default();
    Ok((
        fd,
        FuseMount {
            mountpoint: mountpoint.to_path_buf(),
            dev,
        },
    ))
}

impl FuseMount {
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// mountinfo's `major:minor` of the mount (empty if it could not be read).
    pub fn dev(&self) -> &str {
        &self.dev
    }

    /// Is our mount still there (on top of the mountpoint)? False once the kernel has
    /// unmounted it (umount(8), `stripefs umount`), also when a new mount sits there now.
    pub fn is_mounted(&self) -> bool {
        mountinfo::is_on_top(&self.mountpoint, &self.dev)
    }

    /// Unmounts our mount (lazily with `detach`, which cannot fail for being busy). Nothing
    /// is done when it is no longer there: that is the clean path after an external umount.
    pub fn unmount(&self, detach: bool) -> std::io::Result<()> {
        if !self.is_mounted() {
            return Ok(());
        }
        let c =
            CString::new(self.mountpoint.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
        let flags = if detach { libc::MNT_DETACH } else { 0 };
        // SAFETY: plain syscall with a valid C string.
        if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        // Gone in the meantime: nothing left to do.
        if e.raw_os_error() == Some(libc::EINVAL) && !self.is_mounted() {
            return Ok(());
        }
        Err(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_and_flags_follow_the_spec() {
        let spec = MountSpec {
            source: "tank".into(),
            nosuid: true,
            nodev: true,
            read_only: true,
            allow_other: true,
            default_permissions: true,
            max_read: 1 << 20,
            ..MountSpec::default()
        };
        assert_eq!(
            spec.data(5, 0o40000, 0, 0),
            "fd=5,rootmode=40000,user_id=0,group_id=0,default_permissions,allow_other,\
             max_read=1048576"
        );
        assert_eq!(
            spec.flags(),
            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV
        );
    }
}
