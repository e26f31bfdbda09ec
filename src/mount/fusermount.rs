//! A mount by a user other than root: fusermount3 (set-uid root) mounts and hands the
//! /dev/fuse descriptor back over a socket named by `_FUSE_COMMFD`, as libfuse does it.

use crate::error::{Error, Result};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A mount fusermount3 made; unmounted through it too (the kernel refuses us).
pub struct UserMount {
    mountpoint: PathBuf,
    /// mountinfo's `major:minor` of the mount (empty if it could not be read).
    dev: String,
}

impl UserMount {
    /// Unmounts our mount; nothing is done when it is no longer the one on the mountpoint
    /// (detached lazily, and another mounted there since), as [`super::FuseMount`] does.
    pub fn unmount(&self, detach: bool) -> std::io::Result<()> {
        if !super::mountinfo::is_on_top(&self.mountpoint, &self.dev) {
            return Ok(());
        }
        let ok = Command::new("fusermount3")
            .arg("-u")
            .args(detach.then_some("-z"))
            .arg("--")
            .arg(&self.mountpoint)
            .status()?
            .success();
        if ok {
            Ok(())
        } else {
            Err(std::io::Error::other("fusermount3 -u failed"))
        }
    }
}

/// Mounts with `options` (comma-separated, as `-o` takes them) and returns the connection.
pub fn mount(options: &str, mountpoint: &Path) -> Result<(OwnedFd, UserMount)> {
    let mut pair = [0; 2];
    // SAFETY: socketpair fills the two descriptors we then own.
    if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, pair.as_mut_ptr()) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(Error::Usage(format!("socketpair for fusermount3: {e}")));
    }
    // SAFETY: fresh descriptors from socketpair, owned by nobody else.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };
    // Ours must not leak into the child (fusermount3 waits for EOF on its end otherwise).
    // SAFETY: fcntl on a descriptor we own.
    unsafe { libc::fcntl(ours.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
    let status = Command::new("fusermount3")
        .env("_FUSE_COMMFD", theirs.as_raw_fd().to_string())
        .arg("-o")
        .arg(options)
        .arg("--")
        .arg(mountpoint)
        .status()
        .map_err(|e| Error::Usage(format!("cannot run fusermount3: {e}")))?;
    drop(theirs);
    if !status.success() {
        return Err(Error::Usage(format!(
            "fusermount3 could not mount {}",
            mountpoint.display()
        )));
    }
    let fd = receive_fd(&ours).map_err(|e| {
        Error::Usage(format!(
            "fusermount3 sent no descriptor for {}: {e}",
            mountpoint.display()
        ))
    })?;
    Ok((
        fd,
        UserMount {
            mountpoint: mountpoint.to_path_buf(),
            dev: super::mountinfo::mount_at(mountpoint)
                .map(|m| m.dev)
                .unwrap_or_default(),
        },
    ))
}

/// One SCM_RIGHTS descriptor from `sock`.
fn receive_fd(sock: &OwnedFd) -> std::io::Result<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // Room for one descriptor's control message, aligned as cmsghdr needs.
    let mut control = [0u64; 8];
    // SAFETY: a zeroed msghdr pointing at buffers that outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: recvmsg into the buffers above.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: walks the control buffer the kernel filled, within msg_controllen.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
        {
            return Err(std::io::Error::other("no SCM_RIGHTS message"));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<i32>());
        Ok(OwnedFd::from_raw_fd(fd))
    }
}
