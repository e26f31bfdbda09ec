//! mount(8)'s standard options: the security ones reach the kernel and hold, the atime and
//! sync ones are honoured by the daemon, remount changes ro/rw, and nothing is silently dropped.

mod common;

use common::*;
use std::fs::{self, File};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::process::Command;
use std::time::Duration;

/// The options findmnt shows for the mount.
fn findmnt_options(v: &TestVolume) -> String {
    let out = Command::new("findmnt")
        .args(["-n", "-o", "OPTIONS", v.mnt_str()])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn nosuid_nodev_noexec_reach_the_kernel_and_hold() {
    let mut v = TestVolume::new(1, "8K", "[mount]\nallow_other = true\n");
    v.mount_with(&["-o", "nosuid,nodev,noexec"]);
    let shown = findmnt_options(&v);
    for o in ["nosuid", "nodev", "noexec"] {
        assert!(shown.split(',').any(|x| x == o), "{o} missing from {shown}");
    }
    // A set-user-ID root copy of id(1) runs as the caller, not root (nosuid)... if it runs at
    // all: noexec refuses it first.
    let id = v.path("id");
    fs::copy("/usr/bin/id", &id).unwrap();
    fs::set_permissions(&id, fs::Permissions::from_mode(0o4755)).unwrap();
    let out = as_tests(&[id.to_str().unwrap(), "-u"]);
    assert!(!out.status.success(), "noexec let it run: {out:?}");
    // A device node cannot be opened (nodev).
    let null = v.path("null");
    let c = std::ffi::CString::new(null.to_str().unwrap()).unwrap();
    // SAFETY: plain syscall.
    assert_eq!(
        unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) },
        0
    );
    let e = File::open(&null).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EACCES), "nodev: {e}");
    v.umount();

    // By default (nosuid): the program runs, as its caller.
    v.mount_with(&[]);
    assert!(findmnt_options(&v).split(',').any(|o| o == "nosuid"));
    let out = as_tests(&[id.to_str().unwrap(), "-u"]);
    let nobody = String::from_utf8_lossy(&as_tests(&["id", "-u"]).stdout).to_string();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), nobody, "ran as root");
    v.umount();
    // Lifted on purpose, it runs as its owner.
    v.mount_with(&["-o", "suid"]);
    let out = as_tests(&[id.to_str().unwrap(), "-u"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0");
    v.umount();
}

#[test]
fn atime_follows_noatime_strictatime_and_relatime() {
    let atime = |p: &std::path::Path| {
        let m = fs::metadata(p).unwrap();
        (m.atime(), m.atime_nsec())
    };
    let mut v = TestVolume::new(1, "8K", "[mount]\nattr_timeout = \"0s\"\n");
    v.mount();
    let f = v.path("f");
    fs::write(&f, b"data").unwrap();
    // Reads a file through a fresh open (the kernel may serve cached pages otherwise).
    let read = || {
        let mut b = [0u8; 4];
        let file = fs::OpenOptions::new()
            .read(true)
            .custom_flags_direct()
            .open(&f)
            .unwrap();
        let _ = file.read_at(&mut b, 0);
    };
    read();
    let after_first = atime(&f);
    read();
    assert_eq!(
        atime(&f),
        after_first,
        "relatime: a second read changes nothing"
    );
    v.umount();
    v.mount_with(&["-o", "strictatime"]);
    std::thread::sleep(Duration::from_millis(20));
    read();
    assert_ne!(atime(&f), after_first, "strictatime: every read");
    let strict = atime(&f);
    v.umount();
    v.mount_with(&["-o", "noatime"]);
    assert!(findmnt_options(&v).contains("noatime"));
    fs::write(&f, b"newer").unwrap();
    read();
    assert_eq!(atime(&f), strict, "noatime: never, not even after a change");
    v.umount();
}

trait DirectExt {
    fn custom_flags_direct(&mut self) -> &mut Self;
}

impl DirectExt for fs::OpenOptions {
    fn custom_flags_direct(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(libc::O_DIRECT)
    }
}

#[test]
fn sync_and_dirsync_make_changes_durable_without_fsync() {
    let mut v = TestVolume::new(2, "8K", "[mount]\ncommit_interval = \"1h\"\n");
    v.mount_with(&["-o", "sync"]);
    fs::create_dir(v.path("d")).unwrap();
    let data = Rng::new(4).bytes(50_000);
    File::create(v.path("d/f"))
        .unwrap()
        .write_all_at(&data, 0)
        .unwrap();
    v.crash();
    v.mount();
    assert_eq!(
        fs::read(v.path("d/f")).unwrap(),
        data,
        "sync: data and names"
    );
    v.umount();
    v.mount_with(&["-o", "dirsync"]);
    fs::rename(v.path("d/f"), v.path("g")).unwrap();
    fs::create_dir(v.path("e")).unwrap();
    v.crash();
    v.mount();
    assert!(
        v.path("g").exists() && v.path("e").is_dir(),
        "dirsync: the tree"
    );
    v.umount();
}

#[test]
fn remount_switches_read_only_and_refuses_what_it_cannot_change() {
    let mut v = TestVolume::new(1, "8K", "");
    v.mount();
    fs::write(v.path("f"), b"before").unwrap();
    stripefs_ok(&["mount", "-o", "remount,ro", v.mnt_str()]);
    assert!(findmnt_options(&v).split(',').any(|o| o == "ro"));
    let e = fs::write(v.path("g"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));
    assert_eq!(fs::read(v.path("f")).unwrap(), b"before");
    // mount(8)'s way goes through the mount helper with source and target.
    stripefs_ok(&["mount", "-o", "remount,rw", v.cfg(), v.mnt_str()]);
    fs::write(v.path("g"), b"x").unwrap();
    let out = stripefs(&["mount", "-o", "remount,noatime", v.mnt_str()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unmount and mount again"));
    // Unknown options are refused, with the list of known ones.
    v.umount();
    let out = stripefs(&["mount", v.cfg(), v.mnt_str(), "-o", "colour=red"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("strictatime"));
}

#[test]
fn a_read_only_mount_writes_nothing_not_even_access_times() {
    let atime = |p: &std::path::Path| {
        let m = fs::metadata(p).unwrap();
        (m.atime(), m.atime_nsec())
    };
    let mut v = TestVolume::new(1, "8K", "");
    v.mount();
    fs::write(v.path("f"), b"data").unwrap();
    let before = atime(&v.path("f"));
    v.umount();
    // strictatime would update it on every read, if the mount could write.
    v.mount_with(&["-o", "ro,strictatime"]);
    assert_eq!(fs::read(v.path("f")).unwrap(), b"data");
    assert_eq!(
        fs::write(v.path("g"), b"x").unwrap_err().raw_os_error(),
        Some(libc::EROFS)
    );
    v.umount();
    v.mount();
    assert_eq!(atime(&v.path("f")), before, "an access time moved");
    v.umount();
}

/// After `-o remount,ro` the daemon learns it (from mountinfo, within its one-second tick)
/// and writes no access time; `remount,rw` brings them back.
#[test]
fn a_volume_remounted_read_only_writes_no_access_times() {
    let atime = |p: &std::path::Path| {
        let m = fs::metadata(p).unwrap();
        (m.atime(), m.atime_nsec())
    };
    let mut v = TestVolume::new(1, "8K", "[mount]\nattr_timeout = \"0s\"\n");
    v.mount_with(&["-o", "strictatime"]);
    fs::write(v.path("f"), b"data").unwrap();
    let before = atime(&v.path("f"));
    stripefs_ok(&["mount", "-o", "remount,ro", v.mnt_str()]);
    // The daemon's tick is a second: wait for the status to say so, bounded.
    let start = std::time::Instant::now();
    loop {
        let status: serde_json::Value =
            serde_json::from_str(&stripefs_ok(&["status", v.mnt_str(), "--json"])).unwrap();
        if status["options"]["read_only"] == true {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "never noticed: {status}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(fs::read(v.path("f")).unwrap(), b"data");
    stripefs_ok(&["mount", "-o", "remount,rw", v.mnt_str()]);
    v.umount();
    v.mount();
    assert_eq!(
        atime(&v.path("f")),
        before,
        "an access time moved while read-only"
    );
    v.umount();
}
