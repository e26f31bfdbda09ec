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
/// (A thread left waiting ends with the process: FUSE requests wait killably.)
pub fn statfs_answered(
    path: &std::path::Path,
    within: std::time::Duration,
) -> crate::error::Result<std::io::Result<libc::statfs>> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| {
        crate::error::Error::Usage(format!("{}: the path has a NUL byte", path.display()))
    })?;
    let (tx, rx) = std::sync::mpsc::channel();
    let asked = std::thread::Builder::new()
        .name("statfs".into())
        .spawn(move || {
            // SAFETY: statfs fills the zeroed struct; the path is a valid C string.
            let mut st: libc::statfs = unsafe { std::mem::zeroed() };
            let r = unsafe { libc::statfs(c.as_ptr(), &mut st) };
            let _ = tx.send(if r == 0 {
                Ok(st)
            } else {
                Err(std::io::Error::last_os_error())
            });
        });
    if let Err(e) = asked {
        return Err(crate::error::Error::Usage(format!("statfs: {e}")));
    }
    rx.recv_timeout(within)
        .map_err(|_| not_answering(path, within))
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

/// Is this how a FUSE mount whose daemon is gone answers? ENOTCONN once the kernel has torn
/// the connection down; a request that was queued while it did ends with ECONNABORTED (over
/// /dev/fuse) or ECANCELED (over io_uring) instead.
pub fn daemon_gone(errno: Option<i32>) -> bool {
    matches!(
        errno,
        Some(libc::ENOTCONN | libc::ECONNABORTED | libc::ECANCELED)
    )
}
