//! Failing devices: injected EIO, a full device, a device that vanishes, write-back that
//! fails. The call that touched the device fails; other files and the namespace are fine.

mod common;

use common::*;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn status(v: &TestVolume) -> serde_json::Value {
    serde_json::from_str(&stripefs_ok(&["status", v.mnt_str(), "--json"])).unwrap()
}

fn first_device(path: &Path) -> u64 {
    let info: serde_json::Value =
        serde_json::from_slice(&getxattr(path, "user.stripefs.layout.json").unwrap()).unwrap();
    info["first_device"].as_u64().unwrap()
}

/// Files of width 1 in `dir`, alternating over the devices: (path, device).
fn one_device_files(v: &TestVolume, dir: &str, n: usize) -> Vec<(std::path::PathBuf, u64)> {
    fs::create_dir(v.path(dir)).unwrap();
    setxattr(&v.path(dir), "user.stripefs.layout", b"width=1").unwrap();
    (0..n)
        .map(|i| {
            let p = v.path(&format!("{dir}/f{i}"));
            File::create(&p).unwrap();
            let d = first_device(&p);
            (p, d)
        })
        .collect()
}

fn direct_read(p: &Path, len: usize) -> std::io::Result<Vec<u8>> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(p)?;
    let mut buf = vec![0u8; len];
    f.read_exact_at(&mut buf, 0)?;
    Ok(buf)
}

const EIO_ON_1: &str = "[[volume.fault]]\ndevice = 1\nop = \"write\"\nerror = \"eio\"\n";

#[test]
fn injected_eio_fails_that_call_only_and_is_counted() {
    injected_eio_fails_that_call_only(TestVolume::new(2, "64K", EIO_ON_1));
}

/// Devices whose files live in memory are copied to and from on the request's own thread,
/// not through the I/O engine's completions: the same failures, told the same way.
#[test]
fn injected_eio_on_a_device_in_memory_fails_that_call_only() {
    let Ok(root) = tempfile::tempdir_in("/dev/shm") else {
        eprintln!("no /dev/shm here: skipped");
        return;
    };
    let devices: Vec<_> = (0..2).map(|i| root.path().join(format!("d{i}"))).collect();
    for d in &devices {
        fs::create_dir(d).unwrap();
        assert!(stripe::ram_backed(d), "{d:?} is not told as in memory");
    }
    injected_eio_fails_that_call_only(TestVolume::on(root, devices, "64K", EIO_ON_1));
}

fn injected_eio_fails_that_call_only(mut v: TestVolume) {
    v.mount();
    let files = one_device_files(&v, "d", 4);
    let data = vec![7u8; 100_000];
    for (p, dev) in &files {
        let f = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(p)
            .unwrap();
        let r = f.write_at(&data, 0);
        if *dev == 1 {
            assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EIO), "{p:?}");
            assert_eq!(
                fs::metadata(p).unwrap().len(),
                0,
                "a failed write leaves nothing visible"
            );
        } else {
            assert_eq!(r.unwrap(), data.len());
            assert_eq!(direct_read(p, data.len()).unwrap(), data);
        }
    }
    let s = status(&v);
    assert!(
        s["devices"][1]["write_errors"].as_u64().unwrap() >= 2,
        "{s}"
    );
    assert_eq!(s["devices"][0]["write_errors"], 0);
    assert_eq!(
        s["devices"][1]["state"], "ok",
        "an I/O error is not a lost device"
    );
    let out = stripefs_ok(&["stats", v.mnt_str()]);
    assert!(out.contains("write errors"), "{out}");
    // A write striped over both devices fails whole; reads of the healthy one go on.
    let wide = v.path("wide");
    let r = fs::write(&wide, vec![9u8; 256 * 1024]);
    assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EIO));
    let (good, _) = files.iter().find(|(_, d)| *d == 0).unwrap();
    assert_eq!(fs::read(good).unwrap(), data);
    // The namespace is whole.
    fs::create_dir(v.path("still-works")).unwrap();
    v.umount();
    v.assert_fsck_clean("after the test");
}

#[test]
fn a_full_device_gives_enospc_and_leaves_no_garbage() {
    full_devices_give_enospc(&[1], 1);
}

/// Every device in memory: requests are copies on the calling thread, and the device's
/// ENOSPC comes from that copy, not from the I/O engine's completions.
#[test]
fn full_devices_in_memory_give_enospc_on_the_calling_thread() {
    // Device 0 keeps the namespace, whose 4 MiB reserve is made with room for as much again.
    full_devices_give_enospc(&[0, 1], 16);
}

/// Devices `small` (of 2) become RAM disks of `mib` MiB; writing past the room fails with
/// ENOSPC, leaves the size at what was written, and freeing space makes room again.
fn full_devices_give_enospc(small: &[usize], mib: u64) {
    let mut v = TestVolume::new(2, "64K", "");
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let mut _guards = Vec::new();
    for &d in small {
        // Same superblock, moved onto the RAM disk.
        let dev = v.devices[d].clone();
        let keep = v.root.path().join(format!("d{d}.keep"));
        fs::rename(&dev, &keep).unwrap();
        fs::create_dir(&dev).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}M"), "tmpfs"])
            .arg(&dev)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount tmpfs");
        _guards.push(Unmount(dev.clone()));
        assert!(stripe::ram_backed(&dev), "{dev:?} is not told as in memory");
        assert!(Command::new("cp")
            .arg("-a")
            .arg(keep.join(".stripefs"))
            .arg(&dev)
            .status()
            .unwrap()
            .success());
    }
    v.mount();
    fs::write(v.path("small"), b"fits").unwrap();
    let big = v.path("big");
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&big)
        .unwrap();
    let chunk = vec![1u8; 1 << 20];
    let mut written = 0u64;
    let err = loop {
        match f.write_at(&chunk, written) {
            Ok(n) => written += n as u64,
            Err(e) => break e,
        }
        assert!(written < 64 << 20, "the full device never said ENOSPC");
    };
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
    drop(f);
    assert_eq!(
        fs::metadata(&big).unwrap().len(),
        written,
        "size is what was written"
    );
    assert_eq!(fs::read(v.path("small")).unwrap(), b"fits");
    // Freeing space makes room again.
    fs::remove_file(&big).unwrap();
    v.umount();
    v.assert_fsck_clean("after the test");
    v.mount();
    fs::write(v.path("again"), vec![2u8; 300_000]).unwrap();
    assert_eq!(fs::read(v.path("again")).unwrap(), vec![2u8; 300_000]);
}

#[test]
fn a_vanished_device_fails_its_files_and_shows_in_status() {
    let mut v = TestVolume::new(2, "64K", "");
    v.mount();
    let files = one_device_files(&v, "d", 4);
    let data = vec![3u8; 65536];
    for (p, _) in &files {
        fs::write(p, &data).unwrap();
    }
    let gone = v.root.path().join("d1.gone");
    fs::rename(&v.devices[1], &gone).unwrap();
    // The daemon looks at its devices every second.
    let start = Instant::now();
    while status(&v)["devices"][1]["state"] != "failed" {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "device 1 never marked failed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for (p, dev) in &files {
        let r = direct_read(p, data.len());
        if *dev == 1 {
            assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EIO), "{p:?}");
        } else {
            assert_eq!(r.unwrap(), data, "{p:?}");
        }
    }
    let human = stripefs_ok(&["status", v.mnt_str()]);
    assert!(human.contains("FAILED"), "{human}");
    // Why, and what to do.
    let why = format!("device 1: the directory {} is gone", v.devices[1].display());
    assert!(human.contains(&why), "{human}");
    assert!(human.contains("hint: bring it back at"), "{human}");
    // The daemon lives on; back in place and remounted, all is there.
    fs::create_dir(v.path("alive")).unwrap();
    fs::rename(&gone, &v.devices[1]).unwrap();
    v.remount();
    for (p, _) in &files {
        assert_eq!(fs::read(p).unwrap(), data);
    }
}

#[test]
fn failing_write_back_keeps_lines_dirty_and_a_later_mount_writes_them() {
    let mut v = TestVolume::new(1, "64K", "");
    let ssd = v.root.path().join("ssd");
    fs::create_dir(&ssd).unwrap();
    let base = fs::read_to_string(&v.config).unwrap();
    let cache = format!(
        "[cache]\nstore = \"file\"\npath = \"{}\"\nsize = \"4M\"\nline_size = \"16K\"\nmode = \"wb\"\n\
         [cache.cleaner]\nstaleness = \"0s\"\nwake_up = \"50ms\"\n",
        ssd.display()
    );
    let fault = "[[volume.fault]]\ndevice = 0\nop = \"write\"\n";
    fs::write(&v.config, format!("{base}{fault}{cache}")).unwrap();
    v.mount();
    let data = Rng::new(9).bytes(200_000);
    let f = File::create(v.path("kept")).unwrap();
    f.write_all_at(&data, 0).unwrap();
    f.sync_all().unwrap(); // durable in the cache file
    drop(f);
    let start = Instant::now();
    loop {
        let s: serde_json::Value =
            serde_json::from_str(&stripefs_ok(&["stats", v.mnt_str(), "--json"])).unwrap();
        let c = &s["cache"];
        if c["cleaner_errors"].as_u64().unwrap() > 0 {
            assert!(c["dirty_lines"].as_u64().unwrap() > 0, "never dropped: {c}");
            assert!(c["counters"]["core_errors"].as_u64().unwrap() > 0);
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the cleaner never tried"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Unmount cannot write back; the lines stay in the cache file.
    let _ = stripefs(&["umount", v.mnt_str()]);
    lazy_umount(&v.mnt);
    fs::write(&v.config, format!("{base}{cache}")).unwrap();
    v.mount();
    assert_eq!(fs::read(v.path("kept")).unwrap(), data);
    v.umount();
    v.assert_fsck_clean("after the test");
}

#[test]
fn a_device_gone_read_only_still_serves_reads() {
    let root = tempfile::tempdir().unwrap();
    let devices: Vec<_> = (0..2).map(|i| root.path().join(format!("d{i}"))).collect();
    for d in &devices {
        fs::create_dir(d).unwrap();
    }
    let ro = Tmpfs::over(&devices[1], "64m");
    let mut v = TestVolume::on(root, devices, "64K", "");
    v.mount();
    let files = one_device_files(&v, "d", 4);
    let data = vec![5u8; 65536];
    for (p, _) in &files {
        fs::write(p, &data).unwrap();
    }
    // As ext4 does with errors=remount-ro.
    ro.remount("ro");
    for (p, dev) in &files {
        assert_eq!(
            direct_read(p, data.len()).unwrap(),
            data,
            "{p:?} on device {dev}"
        );
        if *dev == 1 {
            let e = OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_DIRECT)
                .open(p)
                .and_then(|f| f.write_all_at(&vec![1u8; 4096], 0))
                .unwrap_err();
            assert!(
                matches!(e.raw_os_error(), Some(libc::EROFS) | Some(libc::EIO)),
                "{p:?}: {e}"
            );
        }
    }
    ro.remount("rw");
    v.umount();
}

/// `[mount] on_event`: a device that fails runs the administrator's program once, as mdadm's
/// `--program` does (`PROGRAM EVENT MOUNTPOINT DEVICE`, details in the environment); a
/// program that is missing or not executable is refused at mount, naming file, line and key.
#[test]
fn a_failed_device_runs_the_on_event_program() {
    let root = tempfile::tempdir().unwrap();
    let heard = root.path().join("heard");
    let program = root.path().join("on-event.sh");
    fs::write(
        &program,
        format!(
            "#!/bin/sh\necho \"$1|$2|$3|$STRIPEFS_EVENT|$STRIPEFS_DEVICE_INDEX|$STRIPEFS_DETAIL\" >> {}\n",
            heard.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    let mode = |m| fs::set_permissions(&program, fs::Permissions::from_mode(m)).unwrap();
    mode(0o755);
    let mut v = TestVolume::new(
        2,
        "64K",
        &format!("[mount]\non_event = \"{}\"\n", program.display()),
    );
    // Not executable: refused.
    mode(0o644);
    let out = stripefs(&["mount", v.cfg(), v.mnt_str()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("mount.on_event") && err.contains("executable"),
        "{err}"
    );
    mode(0o755);
    v.mount();
    fs::write(v.path("f"), vec![1u8; 1 << 20]).unwrap();
    let gone = v.root.path().join("d1.gone");
    fs::rename(&v.devices[1], &gone).unwrap();
    let start = Instant::now();
    while !heard.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the program never ran"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Told once, however long it stays failed.
    std::thread::sleep(Duration::from_millis(2500));
    let text = fs::read_to_string(&heard).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    let f: Vec<&str> = lines[0].split('|').collect();
    assert_eq!(f[0], "device-failed");
    assert_eq!(f[1], v.mnt_str());
    assert_eq!(f[2], v.devices[1].display().to_string());
    assert_eq!((f[3], f[4]), ("device-failed", "1"));
    assert!(f[5].contains("is gone"), "{text}");
    fs::rename(&gone, &v.devices[1]).unwrap();
    v.umount();
}

/// A lost device: mount refuses and points at --degraded; `--degraded` mounts read-only, files
/// without data on the lost device read as ever, the others give EIO, `find` names them, and
/// `status` says so. With the device back, a normal mount has everything.
#[test]
fn a_volume_with_a_lost_device_mounts_degraded_read_only() {
    let mut v = TestVolume::new(3, "64K", "");
    v.mount();
    let pinned = |name: &str, device: u32, data: &[u8]| {
        let p = v.path(name);
        File::create(&p).unwrap();
        setxattr(
            &p,
            "user.stripefs.layout",
            format!("stripe_size=64K width=1 first_device={device}").as_bytes(),
        )
        .unwrap();
        fs::write(&p, data).unwrap();
    };
    let a = vec![7u8; 100_000];
    pinned("on0", 0, &a);
    pinned("on2", 2, &a);
    fs::write(v.path("wide"), vec![9u8; 1 << 20]).unwrap();
    v.umount();
    let gone = v.root.path().join("d2.gone");
    fs::rename(&v.devices[2], &gone).unwrap();
    let out = stripefs(&["mount", v.cfg(), v.mnt_str()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--degraded"), "{err}");

    stripefs_ok(&["mount", v.cfg(), v.mnt_str(), "--degraded"]);
    let guard = MountGuard(v.mnt.clone());
    let st = status(&v);
    assert_eq!(st["degraded"], true, "{st}");
    assert_eq!(st["devices"][2]["state"], "missing", "{st}");
    assert!(stripefs_ok(&["status", v.mnt_str()]).contains("DEGRADED"));
    assert_eq!(fs::read(v.path("on0")).unwrap(), a);
    let e = fs::read(v.path("on2")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    let e = fs::read(v.path("wide")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    let e = fs::write(v.path("new"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    let lost = stripefs_ok(&["find", v.mnt_str(), "--device", "2"]);
    let lost: Vec<&str> = lost
        .lines()
        .map(|l| l.trim_start_matches(v.mnt_str()))
        .collect();
    assert_eq!(lost, ["/on2", "/wide"]);
    drop(guard);

    fs::rename(&gone, &v.devices[2]).unwrap();
    v.mount();
    assert_eq!(fs::read(v.path("on2")).unwrap(), a);
    assert_eq!(fs::read(v.path("wide")).unwrap(), vec![9u8; 1 << 20]);
    v.umount();
    v.assert_fsck_clean("after a degraded mount");
}

/// Unmounts a mount made outside `TestVolume`, also when the test fails.
struct MountGuard(std::path::PathBuf);

impl Drop for MountGuard {
    fn drop(&mut self) {
        let _ = stripefs(&["umount", self.0.to_str().unwrap()]);
    }
}
