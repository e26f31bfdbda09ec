//! The full-volume suite: what ext4 does when its disk fills, stripefs does. Deleted space is
//! reusable at once, a failed fallocate keeps nothing, the namespace (which shares device 0's
//! filesystem) keeps a reserve so deletes always commit, comes back from a failed write once
//! space returns, and mount, fsck and mkfs work on full devices. Nothing acknowledged is lost
//! and no call fails with EIO for want of space.

mod common;

use common::*;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A volume over `n` tmpfs devices of `size`, its namespace on device 0's filesystem.
struct SmallVolume {
    v: TestVolume,
    // After `v`: the volume is unmounted before its devices go.
    _devices: Vec<Tmpfs>,
}

impl SmallVolume {
    fn new(n: usize, size: &str) -> SmallVolume {
        let root = tempfile::tempdir().unwrap();
        let devices: Vec<PathBuf> = (0..n).map(|i| root.path().join(format!("d{i}"))).collect();
        let mut tmpfs = Vec::new();
        for d in &devices {
            fs::create_dir(d).unwrap();
            tmpfs.push(Tmpfs::over(d, size));
        }
        SmallVolume {
            v: TestVolume::on(root, devices, "64K", ""),
            _devices: tmpfs,
        }
    }
}

/// Writes `path` until its filesystem says ENOSPC; anything else is a failure.
fn fill(path: &Path) {
    let mut f = File::create(path).unwrap();
    let chunk = vec![7u8; 1 << 20];
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(_) => continue,
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling {path:?}: {e}"),
        }
    }
    // The last partial page, so not even a small write fits.
    let small = [7u8; 512];
    while f.write(&small).is_ok_and(|n| n > 0) {}
}

/// ENOSPC is what a full volume may answer; EIO (the store given up) never.
fn no_room(e: &std::io::Error, doing: &str) {
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{doing}: {e}");
}

#[test]
fn deleted_space_is_reusable_at_once_by_the_next_write() {
    let s = SmallVolume::new(2, "64m");
    let mut v = s.v;
    v.mount();
    let data = vec![3u8; 100 << 20];
    fs::write(v.path("a"), &data).unwrap();
    fs::remove_file(v.path("a")).unwrap();
    // No commit in between: ext4 hands a deleted file's blocks to the next writer.
    fs::write(v.path("b"), &data).unwrap();
    assert_eq!(fs::metadata(v.path("b")).unwrap().len(), data.len() as u64);
    v.umount();
    v.assert_fsck_clean("after reusing deleted space");
    drop(s._devices);
}

/// The namespace's own filesystem fills up: names keep being created while the store has
/// room, the store comes back from the write that found none (the reserve), growth is then
/// refused with ENOSPC while deletes, renames and chmod go on, and once space is back
/// everything works again: nothing acknowledged lost, no EIO, umount and fsck clean.
#[test]
fn the_namespace_on_a_full_filesystem_keeps_working_and_recovers() {
    let s = SmallVolume::new(2, "32m");
    let mut v = s.v;
    v.mount();
    fs::create_dir(v.path("keep")).unwrap();
    for i in 0..20 {
        let mut f = File::create(v.path(&format!("keep/{i}"))).unwrap();
        f.write_all(format!("kept {i}").as_bytes()).unwrap();
        f.sync_all().unwrap();
    }
    fill(&v.path("big"));
    fill(&v.devices[0].join("ballast"));

    // Every create either succeeds or says ENOSPC; the store grows past its file, fails
    // that write, and must come back rather than fail everything after with EIO.
    fs::create_dir(v.path("many")).unwrap_or_else(|e| no_room(&e, "mkdir many"));
    let mut created = Vec::new();
    'fill: for batch in 0..100 {
        for i in 0..100 {
            let name = format!("many/n{batch:02}{i:02}-with-a-long-name-to-grow-the-store-faster");
            match fs::create_dir(v.path(&name)) {
                Ok(()) => created.push(name),
                Err(e) => {
                    no_room(&e, "mkdir on a full volume");
                    break 'fill;
                }
            }
        }
        // Changes reach the store's file when they are made durable.
        File::open(v.path("many")).unwrap().sync_all().unwrap();
    }
    assert!(!created.is_empty(), "no name fitted at all");
    let status: serde_json::Value =
        serde_json::from_str(&stripefs_ok(&["status", v.mnt_str(), "--json"])).unwrap();
    let store = &status["namespace_store"];
    assert!(
        store["recoveries"].as_u64().unwrap() >= 1,
        "the store never failed a write on the full filesystem ({} names made): the test \
         missed its point ({store})",
        created.len()
    );
    assert_eq!(store["state"], "ok", "{store}");
    // What does not grow the namespace goes on.
    for name in created.drain(..created.len().min(10)) {
        fs::remove_dir(v.path(&name)).unwrap();
    }
    if let Some(last) = created.pop() {
        fs::rename(v.path(&last), v.path("many/renamed")).unwrap();
        created.push("many/renamed".into());
    }
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(v.path("keep/0"), fs::Permissions::from_mode(0o600)).unwrap();
    File::open(v.path("many")).unwrap().sync_all().unwrap();

    // Space comes back: everything works, at once.
    fs::remove_file(v.devices[0].join("ballast")).unwrap();
    fs::remove_file(v.path("big")).unwrap();
    for i in 0..200 {
        let name = format!("after/{i}");
        if i == 0 {
            fs::create_dir(v.path("after")).unwrap();
        }
        let mut f = File::create(v.path(&name)).unwrap();
        f.write_all(name.as_bytes()).unwrap();
        f.sync_all().unwrap();
    }
    v.umount();

    v.mount();
    for i in 0..20 {
        assert_eq!(
            fs::read_to_string(v.path(&format!("keep/{i}"))).unwrap(),
            format!("kept {i}")
        );
    }
    let mode = fs::metadata(v.path("keep/0")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    for name in &created {
        assert!(v.path(name).is_dir(), "{name} lost");
    }
    assert_eq!(
        fs::read_dir(v.path("many")).unwrap().count(),
        created.len(),
        "deleted names came back"
    );
    for i in 0..200 {
        let name = format!("after/{i}");
        assert_eq!(fs::read_to_string(v.path(&name)).unwrap(), name);
    }
    v.umount();
    v.assert_fsck_clean("after the namespace's filesystem filled");
    drop(s._devices);
}

/// Devices full to the last byte: mount, reads, deletes, unmount, fsck, fsck --repair and
/// mkfs --force all work, as they do on a full ext4.
#[test]
fn mount_fsck_and_mkfs_work_on_full_devices() {
    let s = SmallVolume::new(2, "32m");
    let mut v = s.v;
    v.mount();
    for i in 0..10 {
        fs::write(v.path(&format!("f{i}")), vec![i as u8; 200 << 10]).unwrap();
    }
    v.umount();
    fill_devices(&v);
    v.mount();
    for i in 0..10 {
        assert_eq!(
            fs::read(v.path(&format!("f{i}"))).unwrap(),
            vec![i as u8; 200 << 10]
        );
    }
    fs::remove_file(v.path("f0")).unwrap();
    if let Err(e) = fs::write(v.path("new"), b"x") {
        no_room(&e, "a write on full devices");
    }
    v.umount();
    let fsck = stripefs(&["fsck", v.cfg()]);
    assert_eq!(
        fsck.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&fsck.stdout)
    );
    let repair = stripefs(&["fsck", "--repair", v.cfg()]);
    assert_eq!(
        repair.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&repair.stdout)
    );
    stripefs_ok(&["mkfs", "--force", v.cfg()]);
    v.mount();
    assert_eq!(fs::read_dir(&v.mnt).unwrap().count(), 0);
    v.umount();
    drop(s._devices);
}

/// Fills every device's filesystem to the last byte, beside the volume's files.
fn fill_devices(v: &TestVolume) {
    for (i, d) in v.devices.iter().enumerate() {
        fill(&d.join(format!("ballast{i}")));
        assert!(free_bytes(d) < 4096, "{d:?} not full");
    }
}

/// On two small devices, as the trust issue measured: `fallocate -l 40M a; rm a;
/// fallocate -l 40M b` works (a deleted file's space is taken back at once), and a fallocate
/// that does not fit fails with ENOSPC keeping nothing it took.
#[test]
fn a_full_volume_takes_back_deleted_space_and_a_failed_fallocate_keeps_nothing() {
    let root = tempfile::tempdir().unwrap();
    let devices: Vec<_> = (0..2).map(|i| root.path().join(format!("d{i}"))).collect();
    let meta = root.path().join("meta");
    fs::create_dir(&meta).unwrap();
    let mut small = Vec::new();
    for d in &devices {
        fs::create_dir(d).unwrap();
        small.push(Tmpfs::over(d, "64m"));
    }
    let mut v = TestVolume::on(
        root,
        devices.clone(),
        "64K",
        &format!("meta = \"{}\"\n", meta.display()),
    );
    v.mount();
    let free = |d: &Path| free_bytes(d);
    fallocate(&v.path("a"), 80 << 20).unwrap();
    fs::remove_file(v.path("a")).unwrap();
    fallocate(&v.path("b"), 80 << 20).unwrap();
    assert_eq!(fs::metadata(v.path("b")).unwrap().len(), 80 << 20);
    fs::remove_file(v.path("b")).unwrap();
    // Device 1 nearly full (ballast beside the volume's files): a 60 MiB fallocate fits on
    // device 0 (30 MiB there) but not on device 1; device 0 must not keep its share.
    File::open(&v.mnt).unwrap().sync_all().unwrap();
    fs::write(devices[1].join("ballast"), vec![1u8; 40 << 20]).unwrap();
    let empty = vec![free(&devices[0]), free(&devices[1])];
    for name in ["c", "d"] {
        // Two files: their stripes start on different devices.
        let e = fallocate(&v.path(name), 60 << 20).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
        assert_eq!(fs::metadata(v.path(name)).unwrap().len(), 0, "{name} grew");
    }
    for (d, before) in devices.iter().zip(&empty) {
        let now = free(d);
        assert!(
            now + (1 << 20) >= *before,
            "{d:?}: {} MiB taken after a failed fallocate",
            (before - now) >> 20
        );
    }
    fs::remove_file(devices[1].join("ballast")).unwrap();
    fs::write(v.path("after"), b"the volume goes on").unwrap();
    v.umount();
    v.assert_fsck_clean("after filling the volume");
    drop(small);
}

/// With fault points: a store write that fails, and a store that cannot be reopened.
#[cfg(feature = "failpoints")]
mod store_faults {
    use super::*;

    fn arm(v: &TestVolume, point: &str) {
        setxattr(&v.mnt, "user.stripefs.failpoint", point.as_bytes()).unwrap();
    }

    fn store_state(v: &TestVolume) -> serde_json::Value {
        let status: serde_json::Value =
            serde_json::from_str(&stripefs_ok(&["status", v.mnt_str(), "--json"])).unwrap();
        status["namespace_store"].clone()
    }

    fn write_synced(path: &Path, data: &[u8]) -> std::io::Result<()> {
        let mut f = File::create(path)?;
        f.write_all(data)?;
        f.sync_all()
    }

    /// A store write that fails (as on a full or failing disk) is taken back: the store is
    /// reopened and written again and the call succeeds. While it cannot be reopened, new
    /// changes are refused, fsync fails (nothing is acknowledged that is not durable), status
    /// says so, and it all works again once the store can be written; an unmount in that state
    /// fails and says why, and the next mount has what was made durable.
    #[test]
    fn a_failed_store_write_is_taken_back_or_refused_and_reported() {
        let mut v = TestVolume::new(2, "64K", "");
        v.mount();
        write_synced(&v.path("a"), b"before").unwrap();

        arm(&v, "namespace.store-write=1*return(eio)");
        write_synced(&v.path("b"), b"through a failed write").unwrap();
        let store = store_state(&v);
        assert_eq!(store["recoveries"], 1, "{store}");
        assert_eq!(store["state"], "ok", "{store}");

        // The store cannot be reopened: the change that met the failure stands in memory, the
        // next ones are refused, and fsync does not acknowledge.
        arm(&v, "namespace.reopen=return(eio)");
        arm(&v, "namespace.store-write=1*return(eio)");
        let c = File::create(v.path("c")).unwrap();
        let e = File::create(v.path("refused")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
        assert_eq!(c.sync_all().unwrap_err().raw_os_error(), Some(libc::EIO));
        let store = store_state(&v);
        assert_ne!(store["state"], "ok", "{store}");

        // It can be written again: the next try (a second on) brings it back with every change.
        arm(&v, "namespace.reopen=off");
        std::thread::sleep(std::time::Duration::from_millis(1100));
        c.sync_all().unwrap();
        drop(c);
        write_synced(&v.path("d"), b"after").unwrap();
        assert_eq!(store_state(&v)["state"], "ok");

        // Failing again at the unmount: it fails, and says what.
        arm(&v, "namespace.reopen=return(eio)");
        arm(&v, "namespace.store-write=return(eio)");
        fs::write(v.path("lost"), b"never made durable").unwrap();
        let pid = v.daemon_pid();
        let out = stripefs(&["umount", v.mnt_str()]);
        assert!(
            !out.status.success(),
            "umount exited 0 with changes it could not write"
        );
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            said.contains("namespace"),
            "umount did not say what failed: {said}"
        );
        v.forget_dead_daemon(pid);

        v.mount();
        assert_eq!(fs::read(v.path("a")).unwrap(), b"before");
        assert_eq!(fs::read(v.path("b")).unwrap(), b"through a failed write");
        assert!(v.path("c").exists());
        assert_eq!(fs::read(v.path("d")).unwrap(), b"after");
        assert!(!v.path("refused").exists());
        v.umount();
        v.assert_fsck_clean("after the store failed and came back");
    }
}

/// Device 0 on a filesystem too small for the namespace's reserve (which needs twice its 4 MiB
/// free to be made): mkfs and mount say so, naming the directory, and the volume then does
/// what they said (new names refused with ENOSPC) while it mounts, lists and unmounts as ever.
#[test]
fn a_device_0_too_small_for_the_namespace_reserve_is_named_at_mkfs_and_mount() {
    let root = tempfile::tempdir().unwrap();
    let devices: Vec<PathBuf> = (0..2).map(|i| root.path().join(format!("d{i}"))).collect();
    let mut tmpfs = Vec::new();
    for (d, size) in devices.iter().zip(["6m", "64m"]) {
        fs::create_dir(d).unwrap();
        tmpfs.push(Tmpfs::over(d, size));
    }
    let d0 = devices[0].display().to_string();
    let mut v = TestVolume::on(root, devices, "64K", "");
    let said = |out: &std::process::Output, what: &str| {
        assert!(out.status.success(), "{what}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("warning")
                && err.contains(&d0)
                && err.contains("in reserve")
                && !err.contains("  "),
            "{what} names the short filesystem: {err}"
        );
    };
    said(&stripefs(&["mkfs", "--force", v.cfg()]), "mkfs");
    let mount = stripefs(&["mount", v.cfg(), v.mnt_str()]);
    v.umount_on_drop();
    said(&mount, "mount");
    let e = File::create(v.path("a")).unwrap_err();
    no_room(&e, "a new name with the reserve short");
    assert_eq!(fs::read_dir(&v.mnt).unwrap().count(), 0);
    v.umount();
    drop(tmpfs);
}

/// A device 0 with room for the reserve: neither mkfs nor mount warns about it.
#[test]
fn a_device_0_with_room_for_the_reserve_gets_no_warning() {
    let s = SmallVolume::new(1, "16m");
    let mut v = s.v;
    let out = stripefs(&["mkfs", "--force", v.cfg()]);
    assert!(out.status.success(), "{out:?}");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("in reserve"));
    let mount = stripefs(&["mount", v.cfg(), v.mnt_str()]);
    v.umount_on_drop();
    assert!(mount.status.success(), "{mount:?}");
    assert!(!String::from_utf8_lossy(&mount.stderr).contains("in reserve"));
    fs::write(v.path("a"), b"x").unwrap();
    v.umount();
    drop(s._devices);
}
