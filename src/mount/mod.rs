//! Mount life outside the FUSE protocol: our own mount(2) of type `fuse.stripefs`
//! ([`kernel`]), mountinfo ([`mountinfo`]), waiting at mount for a daemon that is still
//! unmounting the same volume ([`busy`]), and the helpers that mount(8) and umount(8) run,
//! with `stripefs install-helper` that links them ([`helper`]), and the utab entry that
//! makes umount(8) run its helper ([`utab`]); the `-o` options and remount ([`options`]).

pub mod busy;
pub mod fusermount;
pub mod helper;
pub mod kernel;
pub mod mountinfo;
pub mod options;
pub mod utab;

pub use kernel::{FuseMount, MountSpec, FSTYPE};

/// How long a command waits for a mount's daemon to answer before saying it does not.
pub const ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(20);

/// statfs(2) of `path`, which on a FUSE mount asks its daemon, waited for at most `within`: a
/// daemon that is stopped (SIGSTOP, a debugger) or stuck never answers, and a command must
/// not hang on it without a word. The outer error says so; the inner one is statfs's own.
/// A request the kernel queued while a dead daemon's connection was torn down ends with
/// ECONNABORTED or ECANCELED: asked again, such a mount answers ENOTCONN, which a live
/// filesystem giving those errors of its own does not.
pub fn statfs_answered(
    path: &std::path::Path,
    within: std::time::Duration,
) -> crate::error::Result<std::io::Result<libc::statfs>> {
    let first = statfs_in_child(path, within)?;
    match &first {
        Err(e) if matches!(e.raw_os_error(), Some(libc::ECONNABORTED | libc::ECANCELED)) => {
            statfs_in_child(path, within)
        }
        _ => Ok(first),
    }
}

/// The statfs is made by a child process: a thread of ours waiting on a request the daemon
/// has taken (over io_uring it takes it at once, even stopped) cannot be killed, and would
/// keep this process from exiting; a child left waiting is not waited for.
fn statfs_in_child(
    path: &std::path::Path,
    within: std::time::Duration,
) -> crate::error::Result<std::io::Result<libc::statfs>> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let usage = |what: &str, e: std::io::Error| crate::error::Error::Usage(format!("{what}: {e}"));
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| {
        crate::error::Error::Usage(format!("{}: the path has a NUL byte", path.display()))
    })?;
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors, owned below.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(usage("pipe", std::io::Error::last_os_error()));
    }
    // SAFETY: fresh descriptors that nothing else owns.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    const ST: usize = std::mem::size_of::<libc::statfs>();
    // SAFETY: fork; the child makes only async-signal-safe calls (statfs, write, _exit).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(usage("fork", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: as above; the buffers live on this stack.
        unsafe {
            // Nothing of ours but the answer's pipe: a child left waiting must not hold our
            // standard output open for whoever reads it to its end (a pipeline, a test).
            close_all_but(0, write.as_raw_fd() as libc::c_uint, 0);
            let mut st: libc::statfs = std::mem::zeroed();
            let errno = if libc::statfs(c.as_ptr(), &mut st) == 0 {
                0
            } else {
                *libc::__errno_location()
            };
            let mut msg = [0u8; 4 + ST];
            msg[..4].copy_from_slice(&errno.to_ne_bytes());
            std::ptr::copy_nonoverlapping(
                (&st as *const libc::statfs).cast(),
                msg[4..].as_mut_ptr(),
                ST,
            );
            libc::write(write.as_raw_fd(), msg.as_ptr().cast(), msg.len());
            libc::_exit(0);
        }
    }
    drop(write);
    let mut poll = libc::pollfd {
        fd: read.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let end = std::time::Instant::now() + within;
    loop {
        let left = end.saturating_duration_since(std::time::Instant::now());
        // SAFETY: poll on one live descriptor.
        match unsafe { libc::poll(&mut poll, 1, left.as_millis() as i32) } {
            0 => return Err(not_answering(path, within)),
            n if n > 0 => break,
            _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            _ => return Err(usage("poll", std::io::Error::last_os_error())),
        }
    }
    let mut msg = [0u8; 4 + ST];
    let mut got = 0;
    while got < msg.len() {
        // SAFETY: reads into the rest of a live buffer.
        let n = unsafe {
            libc::read(
                read.as_raw_fd(),
                msg[got..].as_mut_ptr().cast(),
                msg.len() - got,
            )
        };
        match n {
            n if n > 0 => got += n as usize,
            0 => break,
            _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            _ => return Err(usage("statfs", std::io::Error::last_os_error())),
        }
    }
    // SAFETY: reaps our own child, which has answered.
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
    if got < msg.len() {
        return Err(usage("statfs", std::io::Error::other("the probe died")));
    }
    let errno = i32::from_ne_bytes([msg[0], msg[1], msg[2], msg[3]]);
    if errno != 0 {
        return Ok(Err(std::io::Error::from_raw_os_error(errno)));
    }
    // SAFETY: statfs is plain data; the bytes are one the child filled.
    Ok(Ok(unsafe {
        std::ptr::read_unaligned(msg[4..].as_ptr().cast())
    }))
}

/// What to do about a mount whose daemon does not answer.
fn not_answering(path: &std::path::Path, within: std::time::Duration) -> crate::error::Error {
    let p = path.display();
    let abort = mountinfo::mount_at(path)
        .and_then(|m| {
            let (major, minor) = m.dev.split_once(':')?;
            // The kernel's numbering of the connection (major << 20 | minor).
            Some(major.parse::<u64>().ok()? << 20 | minor.parse::<u64>().ok()?)
        })
        .map(|conn| {
            format!(
                "; `echo 1 > /sys/fs/fuse/connections/{conn}/abort` ends its connection (what \
                 is in flight fails)"
            )
        })
        .unwrap_or_default();
    crate::error::Error::Usage(format!(
        "{p}: the daemon of this mount did not answer within {}s: it is stopped (SIGSTOP, a \
         debugger) or stuck. `umount -l {p}` detaches the mount{abort}",
        within.as_secs()
    ))
}

/// Closes (or, with `libc::CLOSE_RANGE_CLOEXEC` in `flags`, marks close-on-exec) every
/// descriptor from `from` up but `keep`. Async-signal-safe: for a child between fork and exec.
pub fn close_all_but(from: libc::c_uint, keep: libc::c_uint, flags: libc::c_uint) {
    for (first, last) in [
        (from, keep.saturating_sub(1)),
        (keep + 1, libc::c_uint::MAX),
    ] {
        if first <= last && first != keep {
            // SAFETY: plain syscall on descriptor numbers; a kernel without it leaves them.
            unsafe { libc::syscall(libc::SYS_close_range, first, last, flags) };
        }
    }
}

/// Is this how a FUSE mount whose daemon is gone answers? ENOTCONN once the kernel has torn
/// the connection down (a request queued while it did ends otherwise: `statfs_answered`
/// asks again).
pub fn daemon_gone(errno: Option<i32>) -> bool {
    errno == Some(libc::ENOTCONN)
}
