//! `-o` mount options: those mount(8) and `stripefs mount -o` pass, applied over the config's
//! `[mount]` section, and `-o remount,...` of a mounted volume.

use crate::error::{Error, Result};
use crate::xattr;
use std::path::Path;

/// Applies `-o` mount options over the config's `[mount]` section.
pub fn apply_mount_options(config: &mut mountcfg::Config, opts: &str) -> Result<()> {
    let m = &mut config.mount;
    for opt in opts.split(',').map(str::trim).filter(|o| !o.is_empty()) {
        let (key, value) = match opt.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (opt, None),
        };
        match (key, value) {
            ("allow_other", None) => m.allow_other = true,
            ("default_permissions", None) => m.default_permissions = true,
            ("no_default_permissions", None) => m.default_permissions = false,
            ("ro", None) => m.read_only = true,
            ("degraded", None) => {
                m.degraded = true;
                m.read_only = true;
            }
            ("rw", None) => m.read_only = false,
            ("writeback_cache", None) => m.writeback_cache = true,
            ("no_writeback_cache", None) => m.writeback_cache = false,
            ("threads", Some(v)) => {
                m.threads = Some(
                    v.parse()
                        .ok()
                        .filter(|n| (1..=64).contains(n))
                        .ok_or_else(|| Error::Usage(format!("-o threads={v}: must be 1 to 64")))?,
                )
            }
            ("direct_io", Some(v)) => {
                m.direct_io = match v {
                    "auto" => mountcfg::DirectIo::Auto,
                    "always" => mountcfg::DirectIo::Always,
                    "never" => mountcfg::DirectIo::Never,
                    _ => {
                        return Err(Error::Usage(format!(
                            "-o direct_io={v}: must be auto, always or never"
                        )))
                    }
                }
            }
            ("fsname", Some(v)) => m.fsname = Some(v.to_string()),
            ("suid", None) => m.nosuid = false,
            ("nosuid", None) => m.nosuid = true,
            ("dev", None) => m.nodev = false,
            ("nodev", None) => m.nodev = true,
            ("exec", None) => m.noexec = false,
            ("noexec", None) => m.noexec = true,
            ("relatime", None) | ("atime", None) => m.atime = mountcfg::Atime::Relatime,
            ("strictatime", None) => m.atime = mountcfg::Atime::Strict,
            ("noatime", None) => m.atime = mountcfg::Atime::Never,
            ("nodiratime", None) => m.nodiratime = true,
            ("diratime", None) => m.nodiratime = false,
            ("sync", None) => m.sync = true,
            ("async", None) => m.sync = false,
            ("dirsync", None) => m.dirsync = true,
            // Timestamps are kept in memory and committed with everything else (every
            // commit_interval, fsync, syncfs, unmount): lazytime is what stripefs always does.
            ("lazytime" | "nolazytime", None) => {}
            // What mount(8) and fstab pass along for themselves.
            (
                "defaults" | "auto" | "noauto" | "nofail" | "_netdev" | "user" | "users" | "nouser",
                _,
            ) => {}
            ("remount", None) => return Err(Error::Usage(
                "-o remount changes a mounted volume: `stripefs mount -o remount,ro MOUNTPOINT` \
                     (or mount(8) -o remount)"
                    .into(),
            )),
            _ => {
                return Err(Error::Usage(format!(
                    "unknown mount option \"{opt}\" (known: allow_other, default_permissions, \
                     no_default_permissions, ro, rw, suid, nosuid, dev, nodev, exec, noexec, \
                     atime, relatime, strictatime, noatime, diratime, nodiratime, lazytime, sync, \
                     async, dirsync, writeback_cache, threads=N, direct_io=auto|always|never, \
                     fsname=NAME)"
                )))
            }
        }
    }
    match m.permissions_refusal() {
        Some(why) => Err(Error::Usage(format!("-o {opts}: {why}"))),
        None => Ok(()),
    }
}

/// `-o remount,...` of a mounted volume: read-only or read-write, and the security options,
/// which the kernel enforces (the other flags stay as they are, as mount(8) keeps them).
/// Options that stripefs applies at mount (atime, sync, threads...) need a new mount.
pub fn remount(mountpoint: &Path, opts: &str) -> Result<()> {
    xattr::volume_status(mountpoint)?;
    let c = std::ffi::CString::new(mountpoint.as_os_str().as_encoded_bytes())
        .map_err(|_| Error::Usage("mountpoint has a NUL byte".into()))?;
    // SAFETY: statvfs fills the struct we pass.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(Error::Usage(format!(
            "{}: {}",
            mountpoint.display(),
            std::io::Error::last_os_error()
        )));
    }
    // statvfs's ST_* bits are mount(2)'s MS_* bits.
    let kept = libc::MS_RDONLY
        | libc::MS_NOSUID
        | libc::MS_NODEV
        | libc::MS_NOEXEC
        | libc::MS_SYNCHRONOUS
        | libc::MS_NOATIME
        | libc::MS_NODIRATIME
        | libc::MS_RELATIME;
    let mut flags = st.f_flag & kept;
    for opt in opts.split(',').map(str::trim).filter(|o| !o.is_empty()) {
        let (set, bit) = match opt {
            "remount" | "defaults" => continue,
            "ro" => (true, libc::MS_RDONLY),
            "rw" => (false, libc::MS_RDONLY),
            "nosuid" => (true, libc::MS_NOSUID),
            "suid" => (false, libc::MS_NOSUID),
            "nodev" => (true, libc::MS_NODEV),
            "dev" => (false, libc::MS_NODEV),
            "noexec" => (true, libc::MS_NOEXEC),
            "exec" => (false, libc::MS_NOEXEC),
            other => {
                return Err(Error::Usage(format!(
                    "-o remount cannot change \"{other}\" on a mounted volume (stripefs applies \
                     it at mount): unmount and mount again; remount changes ro, rw, nosuid, \
                     nodev and noexec"
                )))
            }
        };
        if set {
            flags |= bit;
        } else {
            flags &= !bit;
        }
    }
    // SAFETY: mount(2) with valid C strings; a remount takes no source, type or data.
    let r = unsafe {
        libc::mount(
            std::ptr::null(),
            c.as_ptr(),
            std::ptr::null(),
            libc::MS_REMOUNT | flags,
            std::ptr::null(),
        )
    };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        return Err(Error::Usage(match e.raw_os_error() {
            Some(libc::EBUSY) => format!(
                "remount {} read-only: files are open for writing; close them first",
                mountpoint.display()
            ),
            _ => format!("remount {}: {e}", mountpoint.display()),
        }));
    }
    Ok(())
}
