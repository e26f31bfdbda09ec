//! Fault points: named places on the durable path (namespace commits, truncates, cache record
//! writes, write-back, rescue) where the crash-and-fault suite kills the daemon or makes the
//! call fail, to check that every acknowledged byte survives whatever happens there.
//!
//! Built on the `fail` crate: without the `failpoints` feature (release builds, benchmarks)
//! `fault_point!` compiles to nothing. With it, a point is armed at run time
//! (`user.stripefs.failpoint` on the mount root, or the FAILPOINTS environment variable at
//! mount) with `return(crash)`, `return(eio)` or `return(enospc)`, and the usual `fail`
//! counts and probabilities (`1*off->return(crash)`).

pub use fail;

/// Every fault point, so the suite can go through them all (a point not listed here is
/// never armed by it).
pub const POINTS: &[&str] = &[
    "namespace.commit",
    "namespace.mark-clean",
    "engine.fsync-data-synced",
    "engine.truncate-size-durable",
    "engine.commit-before-deletes",
    "engine.migrate-copied",
    "engine.shift-copied",
    "fs.create",
    "volume.sync",
    "cache.declare-dirty",
    "cache.records-before-write",
    "cache.records-before-sync",
    "cache.clean-core-written",
    "cache.record-wipe",
    "cache.header-clean",
    "rescue.save",
    "namespace.store-write",
    "namespace.reopen",
    "cache.detach-flushed",
    "cache.detach-recorded",
    "device.add-joined",
    "device.add-superblock",
    "device.remove-superblock",
    "replace.copied",
    "replace.moved",
    "volume.write-noted",
    "cache.core-read",
];

/// Points the generic suite (tests/faultpoints.rs) leaves to their own tests: those whose
/// error the daemon takes back without the caller seeing one (a failed store write: the store
/// is reopened and written again; tests/full_volume.rs), and those only a command its workload
/// does not run reaches (`stripefs cache detach`; tests/cache_controls.rs; `stripefs device
/// add`, `remove`, `replace`: tests/volume_life.rs), and those off the durable path (a cache
/// read from the core: tests/faultpoints.rs holds reads there).
pub const OWN_TESTS: &[&str] = &[
    "namespace.store-write",
    "namespace.reopen",
    "cache.detach-flushed",
    "cache.detach-recorded",
    "device.add-joined",
    "device.add-superblock",
    "device.remove-superblock",
    "replace.copied",
    "replace.moved",
    "volume.write-noted",
    "cache.core-read",
];

/// What an armed point does: kills the process at once, as SIGKILL or a power cut would
/// (nothing flushed, no destructor run), or gives the error its argument names.
pub fn injected(name: &str, arg: Option<String>) -> std::io::Error {
    let errno = match arg.as_deref() {
        Some("eio") => libc::EIO,
        Some("enospc") => libc::ENOSPC,
        _ => {
            log::error!("fault point {name}: crash");
            // SAFETY: plain syscalls; the process ends here.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
            unreachable!("SIGKILL returned");
        }
    };
    log::warn!(
        "fault point {name}: {}",
        std::io::Error::from_raw_os_error(errno)
    );
    std::io::Error::from_raw_os_error(errno)
}

/// Arms (`"return(crash)"`), changes or disarms (`"off"`) a point; `Err` names what is wrong.
pub fn arm(name: &str, actions: &str) -> Result<(), String> {
    if !cfg!(feature = "failpoints") {
        return Err("this stripefs was built without fault points (feature failpoints)".into());
    }
    if !POINTS.contains(&name) {
        return Err(format!(
            "no fault point \"{name}\" (known: {})",
            POINTS.join(", ")
        ));
    }
    fail::cfg(name, actions)
}

/// A fault point where the caller cannot return at once: the error an armed point gives
/// (a crash does not come back), else `None`.
pub fn check(name: &str) -> Option<std::io::Error> {
    #[cfg(feature = "failpoints")]
    {
        fail::eval(name, |arg| injected(name, arg))
    }
    #[cfg(not(feature = "failpoints"))]
    {
        let _ = name;
        None
    }
}

/// A fault point in a function that returns `Result<_, E>` with `E: From<std::io::Error>`.
#[macro_export]
macro_rules! fault_point {
    ($name:expr) => {
        $crate::fail::fail_point!($name, |arg: Option<String>| Err(
            ::std::convert::From::from($crate::injected($name, arg))
        ))
    };
}
