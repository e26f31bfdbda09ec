//! Room kept for the namespace on its own filesystem, which it usually shares with device 0's
//! objects: a file of zeros beside the store, given up when a write of the store finds the
//! filesystem full, so the store can be reopened and deletes still commit (and so free the
//! space of what they delete), as ext4 keeps blocks back for root.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// The reserve holds an eighth of the store, within these bounds.
const MIN: u64 = 4 << 20;
const MAX: u64 = 64 << 20;

pub(super) struct Reserve {
    path: PathBuf,
    store: PathBuf,
    /// Given up and not yet made again: what the namespace grows by now eats the last room.
    spent: AtomicBool,
}

impl Reserve {
    /// The reserve of the store at `store` (`namespace.reserve` beside `namespace.redb`).
    pub(super) fn of(store: &Path) -> Reserve {
        Reserve {
            path: store.with_extension("reserve"),
            store: store.to_path_buf(),
            spent: AtomicBool::new(false),
        }
    }

    pub(super) fn store(&self) -> &Path {
        &self.store
    }

    fn size(&self) -> u64 {
        let store = std::fs::metadata(&self.store).map_or(0, |m| m.len());
        (store / 8).clamp(MIN, MAX)
    }

    pub(super) fn held(&self) -> u64 {
        std::fs::metadata(&self.path).map_or(0, |m| m.len())
    }

    /// The filesystem has room for the `lack` bytes the reserve is short of, and as much
    /// again: so that making it never takes the last free space.
    fn room_to_make(&self, lack: u64) -> bool {
        free_bytes(&self.path) >= 2 * lack
    }

    /// Makes (or tops up) the reserve if the filesystem has room for it and as much again;
    /// false if it stays short.
    pub(super) fn make(&self) -> bool {
        let want = self.size();
        let held = self.held();
        if held >= want {
            self.spent.store(false, Ordering::Release);
            return true;
        }
        if !self.room_to_make(want - held) {
            self.spent.store(true, Ordering::Release);
            return false;
        }
        let made = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(&self.path)
            .and_then(|f| allocate(&f, want));
        match made {
            Ok(()) => {
                self.spent.store(false, Ordering::Release);
                true
            }
            Err(e) => {
                let _ = std::fs::remove_file(&self.path);
                let full = e.raw_os_error() == Some(libc::ENOSPC);
                if !full {
                    // Not a matter of room: the namespace goes on without a reserve.
                    log::warn!(
                        "no reserve for the namespace at {}: {e}",
                        self.path.display()
                    );
                }
                self.spent.store(full, Ordering::Release);
                !full
            }
        }
    }

    /// Gives the reserve's room back to the filesystem, for the store to take.
    pub(super) fn give_up(&self) {
        if self.held() > 0 {
            log::warn!(
                "{} is full: the namespace takes the room it kept in {}",
                self.path.parent().unwrap_or(Path::new("/")).display(),
                self.path.display()
            );
        }
        match std::fs::remove_file(&self.path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => log::warn!("could not remove {}: {e}", self.path.display()),
        }
        self.spent.store(true, Ordering::Release);
    }

    /// Whether the namespace may grow (new names, xattrs): yes while the reserve is whole, or
    /// once the filesystem has room for it again (then it is made again). A full filesystem
    /// keeps what is left for deletes, which are what give room back.
    pub(super) fn allows_growth(&self) -> bool {
        !self.spent.load(Ordering::Acquire) || self.make()
    }

    /// Before the store is opened for writing: on a full filesystem, the reserve is what lets
    /// a mount, fsck or repair write the store at all.
    pub(super) fn give_up_if_full(&self) {
        if self.held() > 0 && free_bytes(&self.path) < MIN {
            self.give_up();
        }
    }
}

/// Why the store at `store` has no reserve and cannot make one now (its filesystem has less
/// than twice the reserve free, as a tiny device 0 has from the start), for mkfs and mount to
/// warn: until there is room, the namespace refuses to grow.
pub(super) fn shortfall(store: &Path) -> Option<String> {
    let r = Reserve::of(store);
    let (want, held) = (r.size(), r.held());
    if held >= want || r.room_to_make(want - held) {
        return None;
    }
    let free = free_bytes(&r.path);
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1 << 20) as f64);
    let dir = r.path.parent().unwrap_or(Path::new("/"));
    Some(format!(
        "{} has {} free: the namespace keeps {} there in reserve (so that deletes still commit \
         on a full disk) and needs twice that free to make it; until there is room, new files, \
         directories and extended attributes are refused (ENOSPC). Give device 0 (or \
         [volume] meta) a larger filesystem",
        dir.display(),
        mib(free),
        mib(want)
    ))
}

/// Free bytes for an unprivileged writer on the filesystem holding `path` (or its directory).
pub(super) fn free_bytes(path: &Path) -> u64 {
    let dir = path.parent().filter(|_| !path.exists()).unwrap_or(path);
    stripe::statvfs(dir).map_or(0, |s| s.avail_bytes)
}

/// Allocates `len` bytes to `f` for real (not a sparse promise): fallocate, else zeros.
fn allocate(f: &File, len: u64) -> std::io::Result<()> {
    // SAFETY: plain syscall on an open file.
    if unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, len as libc::off_t) } == 0 {
        return f.sync_all();
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::EOPNOTSUPP) {
        return Err(err);
    }
    use std::io::Write;
    let zeros = vec![0u8; 1 << 20];
    let mut w = f;
    let mut left = len;
    while left > 0 {
        let n = left.min(zeros.len() as u64) as usize;
        w.write_all(&zeros[..n])?;
        left -= n as u64;
    }
    f.sync_all()
}
