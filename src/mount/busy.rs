//! Before a mount: who holds the volume's devices? A daemon of the same volume that is still
//! finishing its unmount (after a plain `umount`, the kernel lets go at once and the daemon
//! then writes back and exits) is waited for, boundedly and saying so; a live mount elsewhere
//! is named, and the mount refused.
//!
//! The holders are read from `/proc/locks` (no lock is taken to find out), and each daemon
//! leaves a run record beside its namespace (`stripefs.run`: its pid and mountpoint) so that
//! the mountpoint can be named and its mount recognised in mountinfo: a daemon whose mount
//! is gone but that still holds the devices is finishing an unmount.

use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Beside the namespace: which daemon serves the volume, and where.
pub const RUN_RECORD: &str = "stripefs.run";

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone)]
pub struct RunRecord {
    pub pid: u32,
    pub mountpoint: PathBuf,
    /// mountinfo's `major:minor` of the mount, when known (our own mount(2)).
    #[serde(default)]
    pub dev: Option<String>,
}

fn run_record_path(config: &mountcfg::Config) -> PathBuf {
    crate::engine::namespace_path(config).with_file_name(RUN_RECORD)
}

/// Written by the daemon once it is mounted.
pub fn write_run_record(config: &mountcfg::Config, mountpoint: &Path, dev: Option<String>) {
    let record = RunRecord {
        pid: std::process::id(),
        mountpoint: mountpoint.to_path_buf(),
        dev,
    };
    let path = run_record_path(config);
    let written = serde_json::to_vec(&record)
        .map_err(std::io::Error::other)
        .and_then(|b| std::fs::write(&path, b));
    if let Err(e) = written {
        log::warn!("cannot write {}: {e}", path.display());
    }
}

fn read_run_record(config: &mountcfg::Config) -> Option<RunRecord> {
    let bytes = std::fs::read(run_record_path(config)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The flock holders of `/proc/locks`, by (device, inode) of the locked file.
fn flock_holders() -> BTreeMap<(u64, u64), u32> {
    let mut out = BTreeMap::new();
    let Ok(locks) = std::fs::read_to_string("/proc/locks") else {
        return out;
    };
    // "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; a blocked waiter has "->".
    for line in locks.lines().filter(|l| !l.contains("->")) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 6 || f[1] != "FLOCK" {
            continue;
        }
        let (Ok(pid), Some(id)) = (f[4].parse::<u32>(), parse_lock_id(f[5])) else {
            continue;
        };
        out.insert(id, pid);
    }
    out
}

/// `MAJ:MIN:INODE` (major and minor in hex) into (st_dev, st_ino).
fn parse_lock_id(s: &str) -> Option<(u64, u64)> {
    let mut parts = s.split(':');
    let major = u32::from_str_radix(parts.next()?, 16).ok()?;
    let minor = u32::from_str_radix(parts.next()?, 16).ok()?;
    let ino = parts.next()?.parse().ok()?;
    Some((libc::makedev(major, minor), ino))
}

/// Is the daemon's mount still there? The kernel takes it away at once on umount (also a
/// lazy one), while the daemon may need a moment longer to write back and let go.
fn still_mounted(record: &RunRecord) -> bool {
    match &record.dev {
        // Device numbers of FUSE mounts are reused at once: the mountpoint must match too.
        Some(dev) => super::mountinfo::all()
            .iter()
            .any(|m| &m.dev == dev && m.mountpoint == record.mountpoint),
        None => super::mountinfo::mount_at(&record.mountpoint)
            .is_some_and(|m| super::mountinfo::is_fuse(&m.fstype)),
    }
}

/// Another process holding one of the volume's lock files: (file, pid).
fn holder(config: &mountcfg::Config) -> Option<(PathBuf, u32)> {
    let holders = flock_holders();
    let me = std::process::id();
    let mut files: Vec<PathBuf> = config
        .volume
        .devices
        .iter()
        .map(|d| stripe::lock_path(d))
        .collect();
    files.push(crate::engine::namespace_path(config));
    files.into_iter().find_map(|f| {
        let md = std::fs::metadata(&f).ok()?;
        let pid = *holders.get(&(md.dev(), md.ino()))?;
        (pid != me && crate::daemon::process_alive(pid as i32)).then_some((f, pid))
    })
}

/// Waits (up to `timeout`) for a daemon of this volume that is finishing its unmount, saying
/// so on stderr; refuses, naming the mountpoint, when the volume is mounted and served
/// elsewhere. Anything else holding the devices is left for the mount itself to report.
pub fn wait_for_unmounting_daemon(config: &mountcfg::Config, timeout: Duration) -> Result<()> {
    let start = Instant::now();
    let mut said = false;
    while let Some((file, pid)) = holder(config) {
        let record = read_run_record(config).filter(|r| r.pid == pid);
        let Some(record) = record else {
            // Not a daemon we know of (fsck, a daemon still starting): the mount says who.
            return Ok(());
        };
        let mp = record.mountpoint.display();
        if still_mounted(&record) {
            return Err(Error::Usage(format!(
                "{} is in use by another stripefs mount: the volume is mounted on {mp} \
                 (daemon pid {pid}); unmount it first (stripefs umount {mp})",
                file.parent()
                    .and_then(Path::parent)
                    .filter(|_| file.ends_with(".stripefs/lock"))
                    .map(|d| format!("device {}", d.display()))
                    .unwrap_or_else(|| format!("namespace store {}", file.display()))
            )));
        }
        if start.elapsed() >= timeout {
            return Err(Error::Usage(format!(
                "the daemon of {mp} (pid {pid}) is still finishing its unmount after {}s \
                 (writing its cache back, or a lazy unmount waiting for its last open file); \
                 try again once it has exited",
                timeout.as_secs()
            )));
        }
        if !said {
            eprintln!("stripefs: waiting for the daemon of {mp} (pid {pid}) to finish unmounting");
            said = true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_ids_parse() {
        assert_eq!(
            parse_lock_id("08:01:5678"),
            Some((libc::makedev(8, 1), 5678))
        );
        assert_eq!(
            parse_lock_id("00:2a:12"),
            Some((libc::makedev(0, 0x2a), 12))
        );
        assert_eq!(parse_lock_id("x"), None);
    }

    #[test]
    fn our_own_flock_is_listed() {
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let f = std::fs::File::create(dir.path().join("l")).unwrap();
        // SAFETY: flock on a descriptor we own.
        assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
        let md = f.metadata().unwrap();
        assert_eq!(
            flock_holders().get(&(md.dev(), md.ino())),
            Some(&std::process::id())
        );
    }
}
