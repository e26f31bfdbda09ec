//! Striped volumes mounted for real: data integrity, layouts on the devices, migrate, device
//! checks at mount, crash durability and fsck.

mod common;

use common::*;
use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::process::Command;

fn layout_json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&getxattr(path, "user.stripefs.layout.json").unwrap()).unwrap()
}

/// Object id and per-device object sizes of a file, as the daemon reports them.
fn object_sizes(path: &Path) -> Vec<(usize, u64)> {
    layout_json(path)["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["device"].as_u64().unwrap() as usize,
                o["bytes"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn check_random_io(n: usize, stripe: &str, seed: u64) {
    let mut v = TestVolume::new(n, stripe, "");
    v.mount();
    const SPAN: usize = 3 << 20;
    let mut model = vec![0u8; 0];
    let mut rng = Rng::new(seed);
    let path = v.path("data");
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    for _ in 0..60 {
        let off = rng.below(SPAN as u64) as usize;
        let len = 1 + rng.below(300_000) as usize;
        let data = rng.bytes(len);
        f.write_all_at(&data, off as u64).unwrap();
        if model.len() < off + len {
            model.resize(off + len, 0);
        }
        model[off..off + len].copy_from_slice(&data);
        if rng.below(8) == 0 {
            let new_len = rng.below(SPAN as u64) as usize;
            f.set_len(new_len as u64).unwrap();
            model.resize(new_len, 0);
        }
    }
    drop(f);
    let check = |when: &str| {
        let back = fs::read(&path).unwrap();
        assert_eq!(
            back.len(),
            model.len(),
            "{n} devices, {stripe}: size {when}"
        );
        assert!(
            back == model,
            "{n} devices, {stripe}: content differs {when}"
        );
    };
    check("before remount");
    v.remount();
    check("after remount");
}

#[test]
fn random_writes_read_back_for_every_device_count_and_stripe_size() {
    let mut seed = 1;
    for n in 1..=4 {
        for stripe in ["8K", "64K", "256K"] {
            check_random_io(n, stripe, seed);
            seed += 1;
        }
    }
}

#[test]
fn one_mib_on_four_devices_puts_256k_on_each_with_bytes_where_the_layout_says() {
    let mut v = TestVolume::new(4, "64K", "");
    v.mount();
    let path = v.path("f");
    // Stripe k is filled with byte k.
    let data: Vec<u8> = (0..1 << 20).map(|i| (i / 65536) as u8).collect();
    fs::write(&path, &data).unwrap();
    let info = layout_json(&path);
    assert_eq!(info["stripe_size"], 65536);
    assert_eq!(info["width"], 4);
    let first = info["first_device"].as_u64().unwrap() as usize;
    let sizes = object_sizes(&path);
    assert_eq!(sizes.len(), 4);
    assert!(sizes.iter().all(|&(_, b)| b == 256 * 1024), "{sizes:?}");
    let object: u64 = fs::metadata(&path)
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        .unwrap();
    for slot in 0..4 {
        let dev = (first + slot) % 4;
        let obj = fs::read(v.object(dev, object)).unwrap();
        for row in 0..4 {
            let want = (row * 4 + slot) as u8;
            assert!(
                obj[row * 65536..(row + 1) * 65536]
                    .iter()
                    .all(|&b| b == want),
                "device {dev} row {row} should hold stripe {want}"
            );
        }
    }
    // Files rotate their first device, so small files spread over the devices.
    let firsts: std::collections::HashSet<u64> = (0..4)
        .map(|i| {
            let p = v.path(&format!("small{i}"));
            fs::write(&p, b"x").unwrap();
            layout_json(&p)["first_device"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(firsts.len(), 4);
}

#[test]
fn directory_layout_is_inherited_by_new_files_and_settable_by_xattr() {
    let mut v = TestVolume::new(4, "64K", "");
    v.mount();
    fs::create_dir_all(v.path("vm/sub")).unwrap();
    stripefs_ok(&[
        "layout",
        "set",
        v.path("vm").to_str().unwrap(),
        "--stripe-size",
        "128K",
        "--width",
        "2",
    ]);
    let dir_layout =
        String::from_utf8(getxattr(&v.path("vm/sub"), "user.stripefs.layout").unwrap()).unwrap();
    assert!(
        dir_layout.starts_with("stripe_size=128K width=2"),
        "{dir_layout}"
    );
    let f = v.path("vm/sub/disk.img");
    fs::write(&f, vec![5u8; 1 << 20]).unwrap();
    let info = layout_json(&f);
    assert_eq!(
        (info["stripe_size"].as_u64(), info["width"].as_u64()),
        (Some(131072), Some(2))
    );
    assert!(object_sizes(&f).iter().all(|&(_, b)| b == 512 * 1024));
    // Files outside keep the volume default.
    fs::write(v.path("outside"), b"abc").unwrap();
    assert_eq!(layout_json(&v.path("outside"))["width"], 4);
    // setfattr-style: an empty file's own layout; refused once it holds data.
    let e = v.path("empty");
    File::create(&e).unwrap();
    setxattr(&e, "user.stripefs.layout", b"stripe_size=8K width=1").unwrap();
    assert_eq!(layout_json(&e)["stripe_size"], 8192);
    let busy = setxattr(&f, "user.stripefs.layout", b"stripe_size=8K").unwrap_err();
    assert_eq!(busy.raw_os_error(), Some(libc::EBUSY));
    for bad in [&b"stripe_size=12K"[..], b"width=9", b"colour=red", b""] {
        let err = setxattr(&v.path("vm"), "user.stripefs.layout", bad).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{bad:?}");
    }
    let unknown = getxattr(&v.path("vm"), "user.stripefs.nonsense").unwrap_err();
    assert_eq!(unknown.raw_os_error(), Some(libc::ENODATA));
    // The directory layout persists across a remount.
    v.remount();
    let again =
        String::from_utf8(getxattr(&v.path("vm"), "user.stripefs.layout").unwrap()).unwrap();
    assert!(again.starts_with("stripe_size=128K width=2"), "{again}");
}

#[test]
fn migrate_restripes_with_content_unchanged() {
    let mut v = TestVolume::new(3, "8K", "");
    v.mount();
    let path = v.path("big");
    let data = Rng::new(42).bytes(3 << 20);
    fs::write(&path, &data).unwrap();
    let before = layout_json(&path);
    assert_eq!(before["stripe_size"], 8192);
    let out = stripefs_ok(&[
        "migrate",
        path.to_str().unwrap(),
        "--stripe-size",
        "256K",
        "--width",
        "2",
    ]);
    assert!(out.contains("stripe_size=256K width=2"), "{out}");
    assert_eq!(fs::read(&path).unwrap(), data);
    let sizes = object_sizes(&path);
    assert_eq!(sizes.len(), 2, "{sizes:?}");
    assert_eq!(sizes.iter().map(|s| s.1).sum::<u64>(), 3 << 20);
    // The old objects are gone once the switch is durable.
    let total_objects: usize = v
        .devices
        .iter()
        .map(|d| {
            fs::read_dir(d.join(".stripefs/objects"))
                .unwrap()
                .map(|fan| fs::read_dir(fan.unwrap().path()).unwrap().count())
                .sum::<usize>()
        })
        .sum();
    assert_eq!(total_objects, 2);
    v.remount();
    assert_eq!(fs::read(&path).unwrap(), data);
    v.umount();
    v.assert_fsck_clean("after the test");
}

#[test]
fn mount_refuses_a_wrong_device_set_and_names_the_device() {
    let v = TestVolume::new(3, "64K", "");
    let other = TestVolume::new(1, "64K", "");
    let root = v.root.path();
    let d = |i: usize| v.devices[i].display().to_string();
    let cases = [
        (
            format!("[\"{}\", \"{}\", \"{}\"]", d(1), d(0), d(1)),
            "is listed twice",
            d(1),
        ),
        (
            format!("[\"{}\", \"{}\"]", d(0), d(1)),
            "has 3 devices, but 2 are listed",
            String::new(),
        ),
        (
            format!(
                "[\"{}\", \"{}\", \"{}\"]",
                d(0),
                d(1),
                other.devices[0].display()
            ),
            "belongs to volume",
            other.devices[0].display().to_string(),
        ),
    ];
    for (i, (devices, why, named)) in cases.iter().enumerate() {
        let cfg = root.join(format!("bad{i}.toml"));
        fs::write(&cfg, format!("[volume]\ndevices = {devices}\n")).unwrap();
        let out = stripefs(&["mount", cfg.to_str().unwrap(), v.mnt_str()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "mount with {devices} should fail");
        assert!(err.contains(why), "expected \"{why}\" in: {err}");
        assert!(
            err.contains(named.as_str()),
            "expected {named} named in: {err}"
        );
    }
    // A blank directory in place of a device.
    let blank = root.join("blank");
    fs::create_dir(&blank).unwrap();
    let cfg = root.join("blank.toml");
    fs::write(
        &cfg,
        format!(
            "[volume]\ndevices = [\"{}\", \"{}\", \"{}\"]\n",
            d(0),
            d(1),
            blank.display()
        ),
    )
    .unwrap();
    let out = stripefs(&["mount", cfg.to_str().unwrap(), v.mnt_str()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "device {} holds no stripefs volume",
            blank.display()
        )),
        "{err}"
    );
    // A mountpoint inside a device (or a device inside the mountpoint) is refused.
    let inside = v.devices[0].join("mnt");
    fs::create_dir(&inside).unwrap();
    let out = stripefs(&["mount", v.cfg(), inside.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("overlap"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fs::remove_dir(&inside).unwrap();
    // mkfs over a formatted device needs --force.
    let out = stripefs(&["mkfs", v.cfg()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("already holds stripefs volume"));
}

#[test]
fn a_second_mount_of_the_same_devices_is_refused() {
    let mut v = TestVolume::new(2, "64K", "");
    v.mount();
    let other_mnt = v.root.path().join("mnt2");
    fs::create_dir(&other_mnt).unwrap();
    let out = stripefs(&["mount", v.cfg(), other_mnt.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in use by another stripefs mount"), "{err}");
    let out = stripefs(&["mkfs", v.cfg(), "--force"]);
    assert!(
        !out.status.success(),
        "mkfs over a mounted volume must fail"
    );
}

#[test]
fn sigkill_after_fsync_loses_nothing_and_fsck_is_clean() {
    let mut v = TestVolume::new(3, "64K", "");
    v.mount();
    let mut rng = Rng::new(7);
    let mut expected = Vec::new();
    fs::create_dir(v.path("dir")).unwrap();
    for i in 0..20 {
        let name = format!("dir/file{i}");
        let len = 1 + rng.below(400_000) as usize;
        let data = rng.bytes(len);
        let f = File::create(v.path(&name)).unwrap();
        f.write_all_at(&data, 0).unwrap();
        f.sync_all().unwrap();
        expected.push((name, data));
    }
    // A rename made durable by fsync of the directory.
    fs::rename(v.path("dir/file0"), v.path("dir/renamed")).unwrap();
    File::open(v.path("dir")).unwrap().sync_all().unwrap();
    expected[0].0 = "dir/renamed".into();
    v.crash();
    v.mount();
    for (name, data) in &expected {
        assert_eq!(&fs::read(v.path(name)).unwrap(), data, "{name}");
    }
    assert!(!v.path("dir/file0").exists());
    v.umount();
    v.assert_fsck_clean("after the test");
}

#[test]
fn fsck_finds_and_repairs_orphans_and_stale_tails() {
    let mut v = TestVolume::new(2, "8K", "");
    v.mount();
    fs::write(v.path("keep"), vec![1u8; 100_000]).unwrap();
    let ino = std::os::unix::fs::MetadataExt::ino(&fs::metadata(v.path("keep")).unwrap());
    v.umount();
    // An orphan object, and a tail past the file's size.
    fs::write(v.object(0, 999_999), b"orphan").unwrap();
    let obj = OpenOptions::new()
        .write(true)
        .open(v.object(0, ino))
        .unwrap();
    obj.set_len(200_000).unwrap();
    let out = stripefs(&["fsck", v.cfg()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(4), "{text}");
    assert!(
        text.contains("orphan-object") && text.contains("stale-tail"),
        "{text}"
    );
    let out = stripefs(&["fsck", v.cfg(), "--repair"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = stripefs(&["fsck", v.cfg()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    v.mount();
    assert_eq!(fs::read(v.path("keep")).unwrap(), vec![1u8; 100_000]);
}

#[test]
fn large_sparse_files_and_holes() {
    let mut v = TestVolume::new(2, "64K", "");
    v.mount();
    let path = v.path("sparse");
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let far = 5u64 << 30;
    f.write_all_at(b"beyond 4 GiB", far).unwrap();
    assert_eq!(f.metadata().unwrap().len(), far + 12);
    let mut buf = vec![1u8; 100_000];
    f.read_exact_at(&mut buf, 1 << 30).unwrap();
    assert!(buf.iter().all(|&b| b == 0), "holes read as zeros");
    let mut tail = [0u8; 12];
    f.read_exact_at(&mut tail, far).unwrap();
    assert_eq!(&tail, b"beyond 4 GiB");
    // Devices hold only what was written.
    let allocated: u64 = layout_json(&path)["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["allocated"].as_u64().unwrap())
        .sum();
    assert!(allocated < 1 << 20, "allocated {allocated}");
    // Shrink and grow: the cut-off part reads as zeros.
    f.set_len(far + 3).unwrap();
    f.set_len(far + 12).unwrap();
    f.read_exact_at(&mut tail, far).unwrap();
    assert_eq!(&tail, b"bey\0\0\0\0\0\0\0\0\0");
}

/// Reads fill buffers that served earlier requests (over io_uring, the ring entry the kernel
/// copies from): a hole, a file grown by truncate and a short read at the end show zeros and
/// the file's own bytes, never another file's.
#[test]
fn reads_never_show_an_earlier_requests_bytes() {
    reads_show_only_their_files_bytes("");
    // Through a RAM cache, which fills the buffer itself.
    reads_show_only_their_files_bytes("[cache]\nsize = \"8M\"\nmode = \"wb\"\n");
}

fn reads_show_only_their_files_bytes(extra: &str) {
    let mut v = TestVolume::new(4, "64K", extra);
    v.mount();
    let open = |name: &str| {
        OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(v.path(name))
            .unwrap()
    };
    let mib = 1 << 20;
    let (busy, holey, grown) = (open("busy"), open("holey"), open("grown"));
    busy.write_all_at(&vec![0xa5; 4 * mib], 0).unwrap();
    holey.write_all_at(&vec![7; 4096], 3 * mib as u64).unwrap();
    grown.write_all_at(&vec![9; 4096], 0).unwrap();
    grown.set_len(2 * mib as u64 + 100).unwrap();
    let mut buf = vec![0u8; mib];
    for round in 0..8 {
        for k in 0..4 {
            busy.read_exact_at(&mut buf, (k * mib) as u64).unwrap();
        }
        holey.read_exact_at(&mut buf, 0).unwrap();
        assert!(buf.iter().all(|&b| b == 0), "round {round}: a hole");
        holey
            .read_exact_at(&mut buf, (2 * mib + 4096) as u64)
            .unwrap();
        assert!(buf[..mib - 4096].iter().all(|&b| b == 0), "round {round}");
        assert!(buf[mib - 4096..].iter().all(|&b| b == 7), "round {round}");
        grown.read_exact_at(&mut buf, 0).unwrap();
        assert!(buf[..4096].iter().all(|&b| b == 9), "round {round}");
        assert!(buf[4096..].iter().all(|&b| b == 0), "round {round}: grown");
        // Past the end: 100 bytes of the file, then nothing.
        let n = grown.read_at(&mut buf, 2 * mib as u64).unwrap();
        assert_eq!(n, 100, "round {round}");
        assert!(buf[..n].iter().all(|&b| b == 0), "round {round}: the tail");
    }
}

#[test]
fn direct_io_reaches_the_daemon() {
    let mut v = TestVolume::new(2, "64K", "");
    v.mount();
    let path = v.path("direct");
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .unwrap();
    let data = Rng::new(3).bytes(1 << 20);
    f.write_all_at(&data, 0).unwrap();
    let mut back = vec![0u8; 1 << 20];
    f.read_exact_at(&mut back, 0).unwrap();
    assert_eq!(back, data);
    // The bytes are on the devices, not in a page cache.
    assert_eq!(
        object_sizes(&path).iter().map(|s| s.1).sum::<u64>(),
        1 << 20
    );
}

#[test]
fn status_layout_and_cli_errors() {
    let mut v = TestVolume::new(2, "128K", "");
    v.mount();
    fs::write(v.path("a"), b"hello").unwrap();
    let status: serde_json::Value =
        serde_json::from_str(&stripefs_ok(&["status", v.mnt_str(), "--json"])).unwrap();
    assert_eq!(status["devices"].as_array().unwrap().len(), 2);
    assert_eq!(status["stripe_size"], 131072);
    assert_eq!(status["files"], 1);
    assert!(status["uuid"].as_str().unwrap().len() == 36);
    let human = stripefs_ok(&["status", v.mnt_str()]);
    assert!(human.contains("stripe_size=128K width=2"), "{human}");
    let out = stripefs_ok(&["layout", "get", v.path("a").to_str().unwrap()]);
    assert!(out.contains("stripe_size=128K width=2"), "{out}");
    // statfs: bounded by the fullest device, times the device count.
    let st = nix_statvfs(&v.mnt);
    assert!(st > 0);
    // Not a stripefs mount.
    let out = stripefs(&["status", v.root.path().to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not on a stripefs mount"));
    // Wrong arguments give usage.
    let out = stripefs(&["layout", "set"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Usage"));
    let out = stripefs(&["layout", "set", v.mnt_str(), "--stripe-size", "12K"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("power of two"));
}

fn nix_statvfs(p: &Path) -> u64 {
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    // SAFETY: zeroed struct filled by the call.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    st.f_blocks as u64 * st.f_frsize as u64
}

#[test]
fn bad_config_is_refused_with_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("d0")).unwrap();
    let cfg = dir.path().join("vol.toml");
    fs::write(
        &cfg,
        "[volume]\ndevices = [\"d0\"]\nstripe_size = \"12K\"\n",
    )
    .unwrap();
    let out = stripefs(&["mkfs", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("vol.toml:3: volume.stripe_size: stripe_size = \"12K\": must be a power of two from 8K to 256K"),
        "{err}"
    );
}

#[test]
fn posix_basics_on_a_striped_volume() {
    let mut v = TestVolume::new(3, "8K", "");
    v.mount();
    fs::write(v.path("a"), b"A").unwrap();
    fs::write(v.path("b"), b"B").unwrap();
    fs::hard_link(v.path("a"), v.path("a2")).unwrap();
    assert_eq!(
        std::os::unix::fs::MetadataExt::nlink(&fs::metadata(v.path("a")).unwrap()),
        2
    );
    std::os::unix::fs::symlink("a", v.path("ln")).unwrap();
    assert_eq!(fs::read_link(v.path("ln")).unwrap(), Path::new("a"));
    assert_eq!(fs::read(v.path("ln")).unwrap(), b"A");
    let renameat2 = |from: &str, to: &str, flags: u32| {
        let f = std::ffi::CString::new(v.path(from).to_str().unwrap()).unwrap();
        let t = std::ffi::CString::new(v.path(to).to_str().unwrap()).unwrap();
        // SAFETY: valid C strings.
        let r = unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                f.as_ptr(),
                libc::AT_FDCWD,
                t.as_ptr(),
                flags,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    assert_eq!(
        renameat2("a", "b", libc::RENAME_NOREPLACE)
            .unwrap_err()
            .raw_os_error(),
        Some(libc::EEXIST)
    );
    renameat2("a", "b", libc::RENAME_EXCHANGE).unwrap();
    assert_eq!(fs::read(v.path("a")).unwrap(), b"B");
    assert_eq!(fs::read(v.path("b")).unwrap(), b"A");
    let fifo = std::ffi::CString::new(v.path("fifo").to_str().unwrap()).unwrap();
    // SAFETY: valid C string.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(
        &fs::metadata(v.path("fifo")).unwrap().file_type()
    ));
    setxattr(&v.path("a"), "user.colour", b"blue").unwrap();
    assert_eq!(getxattr(&v.path("a"), "user.colour").unwrap(), b"blue");
    let f = OpenOptions::new().write(true).open(v.path("b")).unwrap();
    // SAFETY: plain syscall on an open fd.
    assert_eq!(
        unsafe { libc::fallocate(std::os::unix::io::AsRawFd::as_raw_fd(&f), 0, 0, 1 << 20) },
        0
    );
    assert_eq!(f.metadata().unwrap().len(), 1 << 20);
    drop(f);
    let mut names: Vec<String> = fs::read_dir(&v.mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["a", "a2", "b", "fifo", "ln"]);
    v.remount();
    assert_eq!(getxattr(&v.path("a"), "user.colour").unwrap(), b"blue");
    // "a2" is the other name of the inode now called "b", which fallocate grew.
    let b = fs::read(v.path("b")).unwrap();
    assert_eq!(b.len(), 1 << 20);
    assert_eq!(&b[..1], b"A");
    assert!(fs::read(v.path("a2")).unwrap() == b);
}

#[test]
fn mount_helper_serves_mount_8_and_fstab() {
    let mut v = TestVolume::new(2, "64K", "");
    let helper = v.root.path().join("mount.fuse.stripefs");
    std::os::unix::fs::symlink(BIN, &helper).unwrap();
    let out = run_with_timeout(
        Command::new(&helper).args([v.cfg(), v.mnt_str(), "-o", "rw,noatime,threads=3"]),
        std::time::Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The guard unmounts it.
    v.umount_on_drop();
    let status: serde_json::Value =
        serde_json::from_str(&stripefs_ok(&["status", v.mnt_str(), "--json"])).unwrap();
    assert_eq!(status["options"]["threads"], 3);
    // `transport = "auto"`: io_uring only where the kernel parameter allows it (and
    // STRIPEFS_TRANSPORT, which the CI sets for its io_uring pass, does not say `dev`).
    let uring =
        kernel_offers_fuse_uring() && std::env::var("STRIPEFS_TRANSPORT").as_deref() != Ok("dev");
    let want = if uring { "io_uring" } else { "/dev/fuse" };
    assert_eq!(status["options"]["transport"], want);
    let table = stripefs_ok(&["status", v.mnt_str()]);
    assert!(table.contains(&format!("transport   {want}")), "{table}");
}

/// `[mount] uring_affinity`: over io_uring each ring thread runs on its queue's CPU
/// (`queue`) or anywhere (`any`); `auto` pins them when every device is in memory.
#[test]
fn ring_threads_run_where_uring_affinity_says() {
    // "0-2,5" -> {0, 1, 2, 5}
    let cpu_list = |s: &str| -> BTreeSet<usize> {
        let mut set = BTreeSet::new();
        for part in s.trim().split(',').filter(|p| !p.is_empty()) {
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            set.extend(a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap());
        }
        set
    };
    let in_memory = |p: &Path| {
        let out = Command::new("stat")
            .args(["-f", "-c", "%T"])
            .arg(p)
            .output();
        let kind = String::from_utf8_lossy(&out.unwrap().stdout)
            .trim()
            .to_string();
        kind == "tmpfs" || kind == "ramfs"
    };
    for affinity in ["queue", "any", "auto"] {
        let extra = format!("[mount]\nuring_affinity = \"{affinity}\"\n");
        let mut v = TestVolume::new(2, "64K", &extra);
        v.mount();
        fs::write(v.path("f"), b"served").unwrap();
        assert_eq!(fs::read(v.path("f")).unwrap(), b"served");
        let status: serde_json::Value =
            serde_json::from_str(&stripefs_ok(&["status", v.mnt_str(), "--json"])).unwrap();
        let pid = v.daemon_pid();
        let cpus_of = |task: &Path| {
            let s = fs::read_to_string(task.join("status")).unwrap_or_default();
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(cpu_list)
        };
        let all = cpus_of(Path::new(&format!("/proc/{pid}"))).unwrap();
        let rings: Vec<(usize, BTreeSet<usize>)> = fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .filter_map(|t| {
                let t = t.ok()?.path();
                let comm = fs::read_to_string(t.join("comm")).ok()?;
                let n = comm.trim().strip_prefix("fuse-ring-")?.parse().ok()?;
                Some((n, cpus_of(&t)?))
            })
            .collect();
        if status["options"]["transport"] != "io_uring" {
            assert!(rings.is_empty(), "ring threads over /dev/fuse: {rings:?}");
            continue;
        }
        let all_in_memory = v.devices.iter().all(|d| in_memory(d));
        // uring_threads = 0: one thread per queue (per possible CPU) over memory, two over
        // disks, thread n on queue n mod queues.
        let possible = fs::read_to_string("/sys/devices/system/cpu/possible").unwrap();
        let queues = cpu_list(&possible).len();
        let threads = if all_in_memory { queues } else { 2 * queues };
        assert_eq!(rings.len(), threads, "{affinity}: {rings:?}");
        assert_eq!(status["options"]["ring_threads"], threads, "{status}");
        let pinned = match affinity {
            "queue" => true,
            "any" => false,
            _ => all_in_memory,
        };
        for (n, cpus) in rings {
            // Pinned, a thread runs on its queue's CPU if that CPU is the daemon's to use
            // (online, in its cpuset); else it stays free.
            let queue = n % queues;
            let want = if pinned && all.contains(&queue) {
                BTreeSet::from([queue])
            } else {
                all.clone()
            };
            assert_eq!(cpus, want, "{affinity}: ring thread {n}");
        }
    }
}

/// The config may list the devices in any order: mount finds each by its superblock (as mdadm
/// assembles by UUID), files read back whatever the order, and `status` says which config
/// entry is which device.
#[test]
fn the_config_may_list_the_devices_in_any_order() {
    let mut v = TestVolume::new(3, "64K", "");
    v.mount();
    let data = Rng::new(3).bytes(1 << 20);
    fs::write(v.path("f"), &data).unwrap();
    v.umount();
    let text = fs::read_to_string(&v.config).unwrap();
    let d = |i: usize| format!("\"{}\"", v.devices[i].display());
    let listed = format!("{}, {}, {}", d(0), d(1), d(2));
    assert!(text.contains(&listed), "{text}");
    fs::write(
        &v.config,
        text.replace(&listed, &format!("{}, {}, {}", d(2), d(0), d(1))),
    )
    .unwrap();
    v.mount();
    assert_eq!(fs::read(v.path("f")).unwrap(), data);
    let status: serde_json::Value =
        serde_json::from_str(&stripefs_ok(&["status", v.mnt_str(), "--json"])).unwrap();
    let by_index: Vec<(u64, u64, String)> = status["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["index"].as_u64().unwrap(),
                d["config_entry"].as_u64().unwrap(),
                d["path"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let path = |i: usize| v.devices[i].display().to_string();
    assert_eq!(
        by_index,
        [(0, 1, path(0)), (1, 2, path(1)), (2, 0, path(2))]
    );
    let human = stripefs_ok(&["status", v.mnt_str()]);
    assert!(human.contains("config entry 1"), "{human}");
    fs::write(v.path("g"), &data[..4096]).unwrap();
    v.umount();
    v.assert_fsck_clean("after a mount in another order");
}

/// `stripefs find --device` lists exactly the files with data on a device, by index or by
/// directory, with the bytes each keeps there.
#[test]
fn find_lists_the_files_with_data_on_a_device() {
    let mut v = TestVolume::new(3, "64K", "");
    v.mount();
    fs::create_dir(v.path("dir")).unwrap();
    let pinned = |name: &str, device: u32| {
        let p = v.path(name);
        File::create(&p).unwrap();
        setxattr(
            &p,
            "user.stripefs.layout",
            format!("stripe_size=64K width=1 first_device={device}").as_bytes(),
        )
        .unwrap();
        fs::write(&p, vec![1u8; 100_000]).unwrap();
    };
    pinned("on2", 2);
    pinned("dir/on0", 0);
    pinned("dir/also2", 2);
    fs::write(v.path("dir/wide"), vec![2u8; 1 << 20]).unwrap();
    File::create(v.path("empty")).unwrap();
    let list = |device: &str| stripefs_ok(&["find", v.mnt_str(), "--device", device]);
    let names = |out: String| -> Vec<String> {
        out.lines()
            .map(|l| l.trim_start_matches(v.mnt_str()).to_string())
            .collect()
    };
    assert_eq!(names(list("2")), ["/dir/also2", "/dir/wide", "/on2"]);
    assert_eq!(
        names(list(&v.devices[0].display().to_string())),
        ["/dir/on0", "/dir/wide"]
    );
    let json: serde_json::Value = serde_json::from_str(&stripefs_ok(&[
        "find",
        v.mnt_str(),
        "--device",
        "1",
        "--json",
    ]))
    .unwrap();
    let hits = json.as_array().unwrap();
    assert_eq!(hits.len(), 1, "{json}");
    // 1 MiB in 64K stripes over 3 devices: 16 stripes, 5 or 6 on each.
    let on1 = hits[0]["bytes_on_device"].as_u64().unwrap();
    assert!(on1 == 5 << 16 || on1 == 6 << 16, "{json}");
    assert_eq!(hits[0]["size"], 1 << 20);
    let bad = stripefs(&["find", v.mnt_str(), "--device", "7"]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("no device 7"),
        "{bad:?}"
    );
    v.umount();
}

/// `STRIPEFS_TRANSPORT` overrides `[mount] transport` (the CI's io_uring pass sets it): a bad
/// value refuses the mount, `dev` wins over a config that asks for io_uring, and `uring` runs
/// io_uring where the kernel parameter allows it and fails the mount, saying why, where not.
#[test]
fn stripefs_transport_overrides_the_config() {
    let mut v = TestVolume::new(2, "64K", "[mount]\ntransport = \"uring\"\n");
    let (cfg, mnt) = (v.cfg().to_string(), v.mnt_str().to_string());
    let mount_with = |value: &str| {
        run_with_timeout(
            Command::new(BIN)
                .args(["mount", &cfg, &mnt])
                .env("STRIPEFS_TRANSPORT", value),
            std::time::Duration::from_secs(60),
        )
    };
    let transport = |v: &TestVolume| {
        let status: serde_json::Value =
            serde_json::from_str(&stripefs_ok(&["status", v.mnt_str(), "--json"])).unwrap();
        status["options"]["transport"].as_str().unwrap().to_string()
    };
    let out = mount_with("fast");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("STRIPEFS_TRANSPORT=fast: must be auto, uring or dev"),
        "{err}"
    );
    assert!(!is_mounted(&v.mnt), "{err}");

    let out = mount_with("dev");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    v.umount_on_drop();
    assert_eq!(transport(&v), "/dev/fuse");
    v.umount();

    let uring = kernel_offers_fuse_uring();
    let out = mount_with("uring");
    if uring {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        v.umount_on_drop();
        assert_eq!(transport(&v), "io_uring");
        v.umount();
    } else {
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("STRIPEFS_TRANSPORT=uring: FUSE over io_uring is"),
            "{err}"
        );
        assert!(!is_mounted(&v.mnt), "{err}");
    }
}

/// With a cache, `auto` takes FUSE over io_uring where the kernel allows it, as without one:
/// the cache's requests that may wait on a device go to its own threads, not the ring's.
#[test]
fn a_cached_volume_takes_io_uring_where_allowed() {
    let mut v = TestVolume::new(2, "64K", "[cache]\nsize = \"8M\"\nmode = \"wb\"\n");
    let uring = kernel_offers_fuse_uring();
    let out = run_with_timeout(
        Command::new(BIN)
            .args(["mount", v.cfg(), v.mnt_str()])
            .env("STRIPEFS_TRANSPORT", "auto"),
        std::time::Duration::from_secs(60),
    );
    assert!(out.status.success(), "{out:?}");
    v.umount_on_drop();
    fs::write(v.path("f"), b"cached").unwrap();
    assert_eq!(fs::read(v.path("f")).unwrap(), b"cached");
    let s: serde_json::Value =
        serde_json::from_str(&stripefs_ok(&["status", v.mnt_str(), "--json"])).unwrap();
    let expected = if uring { "io_uring" } else { "/dev/fuse" };
    assert_eq!(s["options"]["transport"], expected, "{s}");
    v.umount();
}

/// Over /dev/fuse, `dev_wait` decides how the workers wait for requests: on rings of their
/// own (the device I/O of their requests completes there) or in read(2). Both serve
/// concurrent O_DIRECT I/O, and a truncate under it (which goes to the offload thread while a
/// worker has I/O of its own in flight), with every byte where it belongs, and unmount.
#[test]
fn dev_fuse_workers_wait_on_rings_or_in_read_as_configured() {
    for (wait, on_rings) in [("ring", 2), ("read", 0)] {
        let extra =
            format!("device_io = \"direct\"\n[mount]\ndev_wait = \"{wait}\"\nthreads = 2\n");
        let mut v = TestVolume::new(2, "64K", &extra);
        let out = run_with_timeout(
            Command::new(BIN)
                .args(["mount", v.cfg(), v.mnt_str()])
                .env("STRIPEFS_TRANSPORT", "dev"),
            std::time::Duration::from_secs(60),
        );
        assert!(out.status.success(), "{out:?}");
        v.umount_on_drop();
        // The workers count themselves in as they start serving.
        let since = std::time::Instant::now();
        let workers = loop {
            let s: serde_json::Value =
                serde_json::from_str(&stripefs_ok(&["status", v.mnt_str(), "--json"])).unwrap();
            let n = s["options"]["dev_ring_workers"].as_u64();
            if n == Some(on_rings) || since.elapsed() > std::time::Duration::from_secs(10) {
                break n;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        assert_eq!(workers, Some(on_rings), "dev_wait = {wait}");

        let writers: Vec<_> = (0..6u8)
            .map(|k| {
                let path = v.path(&format!("f{k}"));
                std::thread::spawn(move || {
                    let f = OpenOptions::new()
                        .create(true)
                        .read(true)
                        .write(true)
                        .custom_flags(libc::O_DIRECT)
                        .open(&path)
                        .unwrap();
                    let mut block = Aligned::new(65536);
                    for i in 0..32u64 {
                        block.buf().fill(k.wrapping_mul(31).wrapping_add(i as u8));
                        f.write_all_at(block.buf(), i * 65536).unwrap();
                    }
                    for i in 0..32u64 {
                        f.read_exact_at(block.buf(), i * 65536).unwrap();
                        let want = k.wrapping_mul(31).wrapping_add(i as u8);
                        assert!(block.buf().iter().all(|&b| b == want), "f{k} block {i}");
                    }
                })
            })
            .collect();
        // A truncate of a file under I/O: a worker with I/O of its own in flight hands it off.
        let busy = v.path("f0");
        let cutter = std::thread::spawn(move || {
            for _ in 0..20 {
                if let Ok(f) = OpenOptions::new().write(true).open(&busy) {
                    let _ = f.set_len(32 * 65536);
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        });
        for w in writers {
            w.join().unwrap();
        }
        cutter.join().unwrap();
        v.umount();
        v.assert_fsck_clean(&format!("after dev_wait = {wait}"));
    }
}
