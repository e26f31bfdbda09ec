//! What a hostile or careless user can try on a volume: planted symlinks among the objects,
//! permission checks switched off for other users, a namespace directory that is not ours.
//! Each refusal leaves nothing changed.

mod common;

use common::*;
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// Object files of a file, as the daemon reports them: (device, path).
fn object_paths(path: &std::path::Path) -> Vec<(usize, PathBuf)> {
    let v: serde_json::Value =
        serde_json::from_slice(&getxattr(path, "user.stripefs.layout.json").unwrap()).unwrap();
    v["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["device"].as_u64().unwrap() as usize,
                PathBuf::from(o["path"].as_str().unwrap()),
            )
        })
        .collect()
}

/// Every object replaced by a symlink to a file outside the volume: the daemon (root) neither
/// reads nor writes through it, and fsck names it.
#[test]
fn a_symlink_planted_among_the_objects_is_never_followed() {
    let mut v = TestVolume::new(2, "8K", "");
    let outside = v.root.path().join("secret");
    fs::write(&outside, b"root's secret, not to be read or written").unwrap();
    v.mount();
    let f = v.path("f");
    fs::write(&f, vec![7u8; 64 * 1024]).unwrap();
    let objects = object_paths(&f);
    assert_eq!(objects.len(), 2);
    v.umount();
    for (_, obj) in &objects {
        fs::remove_file(obj).unwrap();
        std::os::unix::fs::symlink(&outside, obj).unwrap();
    }
    v.mount();
    let read = fs::read(&f);
    assert!(read.is_err(), "a read through a planted symlink must fail");
    let file = fs::OpenOptions::new().write(true).open(&f).unwrap();
    assert!(file.write_at(b"overwrite", 0).is_err());
    drop(file);
    v.umount();
    assert_eq!(
        fs::read(&outside).unwrap(),
        b"root's secret, not to be read or written"
    );
    let out = stripefs(&["fsck", v.cfg()]);
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("not a regular file"), "{text}");
    // A repair removes the planted entries, never what they point at.
    stripefs(&["fsck", v.cfg(), "--repair"]);
    assert!(outside.exists());
    for (_, obj) in &objects {
        assert!(fs::symlink_metadata(obj).is_err(), "{}", obj.display());
    }
}

/// A FIFO planted in place of an object: the read and the write that reach it fail (EIO) at
/// once, instead of waiting, unkillably, for someone to write to the FIFO or drain it, and
/// holding the file's data lock meanwhile; fsck names it. The same for every I/O path: one
/// device and several (over disks, a request over several devices goes out on the worker's
/// own ring).
#[test]
fn a_fifo_planted_among_the_objects_fails_the_io_at_once() {
    for devices in [1, 3] {
        let mut v = TestVolume::new(devices, "8K", "");
        v.mount();
        let f = v.path("f");
        fs::write(&f, vec![7u8; 64 * 1024]).unwrap();
        let objects = object_paths(&f);
        v.umount();
        for (_, obj) in &objects {
            fs::remove_file(obj).unwrap();
            let c = std::ffi::CString::new(obj.to_str().unwrap()).unwrap();
            // SAFETY: plain syscall with a valid C string.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        }
        v.mount();
        // Bounded: a child reads and writes; a hang would fail the test, not stall it.
        let mnt = v.path("f");
        let script = format!(
            "dd if={f} of=/dev/null bs=64k count=1 iflag=direct 2>&1; echo read=$?; \
             dd if=/dev/zero of={f} bs=64k count=1 oflag=direct conv=notrunc 2>&1; echo write=$?",
            f = mnt.display()
        );
        let out = run_with_timeout(
            std::process::Command::new("sh").args(["-c", &script]),
            std::time::Duration::from_secs(60),
        );
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(said.contains("read=1"), "{devices} devices: {said}");
        assert!(said.contains("write=1"), "{devices} devices: {said}");
        assert!(said.contains("Input/output error"), "{said}");
        v.umount();
        let out = stripefs(&["fsck", v.cfg()]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("not a regular file"), "{text}");
    }
}

/// Without default_permissions stripefs would check nothing: with allow_other that combination
/// is refused, from the config and from -o alike.
#[test]
fn allow_other_without_default_permissions_is_refused() {
    let mut v = TestVolume::new(1, "64K", "[mount]\nallow_other = true\n");
    let out = stripefs(&[
        "mount",
        v.cfg(),
        v.mnt_str(),
        "-o",
        "no_default_permissions",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("every local user"), "{err}");
    let cfg = fs::read_to_string(&v.config).unwrap() + "default_permissions = false\n";
    fs::write(&v.config, cfg).unwrap();
    let out = stripefs(&["mount", v.cfg(), v.mnt_str()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("mount.default_permissions"), "{err}");
    // Nothing was mounted.
    v.umount_on_drop();
    assert!(!fs::read_to_string("/proc/mounts")
        .unwrap()
        .contains(v.mnt_str()));
}

/// `meta` must name a directory of stripefs's own: mkfs refuses one holding other files
/// before anything is written, devices included.
#[test]
fn a_namespace_directory_holding_other_files_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let (dev, meta) = (root.path().join("d0"), root.path().join("etc"));
    fs::create_dir(&dev).unwrap();
    fs::create_dir(&meta).unwrap();
    fs::write(meta.join("passwd"), b"root:x:0:0").unwrap();
    let config = root.path().join("vol.toml");
    fs::write(
        &config,
        format!(
            "[volume]\ndevices = [\"{}\"]\nmeta = \"{}\"\n",
            dev.display(),
            meta.display()
        ),
    )
    .unwrap();
    let out = stripefs(&["mkfs", config.to_str().unwrap(), "--force"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("passwd"), "{err}");
    assert_eq!(fs::read_dir(&meta).unwrap().count(), 1);
    assert_eq!(
        fs::read_dir(&dev).unwrap().count(),
        0,
        "the device was not formatted"
    );
}

fn mode_of(p: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

/// Another user's data change drops set-user-ID and set-group-ID on every path, as ext4 does:
/// O_DIRECT writes, every write with direct_io = "always", fallocate and hole punching.
#[test]
fn set_id_bits_fall_when_another_user_changes_the_data() {
    use std::os::unix::fs::PermissionsExt;
    for extra in ["", "direct_io = \"always\"\n"] {
        let mut v = TestVolume::new(2, "8K", &format!("[mount]\nallow_other = true\n{extra}"));
        v.mount();
        let set = |name: &str, mode: u32| {
            let p = v.path(name);
            fs::write(&p, vec![1u8; 16384]).unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(mode_of(&p), mode);
            p
        };
        // A direct write: set-user-ID falls, and set-group-ID with group execute.
        let p = set("direct", 0o6777);
        let of = format!("of={}", p.display());
        let out = as_tests(&[
            "dd",
            "if=/dev/zero",
            &of,
            "bs=4096",
            "count=1",
            "oflag=direct",
            "conv=notrunc",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(mode_of(&p), 0o777, "{extra}");
        // fallocate by a user outside the file's group: set-group-ID falls even without
        // group execute.
        let p = set("falloc", 0o2666);
        let out = as_tests(&["fallocate", "-l", "65536", p.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(mode_of(&p), 0o666, "{extra}");
        let p = set("punch", 0o6766);
        let out = as_tests(&[
            "fallocate",
            "-p",
            "-o",
            "0",
            "-l",
            "4096",
            p.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(mode_of(&p), 0o766, "{extra}");
        // Root's own changes keep them (CAP_FSETID).
        let p = set("root", 0o6755);
        fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .write_at(b"x", 0)
            .unwrap();
        assert_eq!(mode_of(&p), 0o6755);
        v.umount();
    }
}

/// The cache is shared: a folder's owner may make it a target and choose its mode, but
/// priority, allocation and pinning are for root and the user who mounted. A refusal is EPERM,
/// logged with its reason, and changes nothing.
#[test]
fn a_folder_owner_chooses_the_mode_but_not_the_share_of_the_cache() {
    let mut v = TestVolume::new(
        1,
        "64K",
        "[mount]\nallow_other = true\n[cache]\nsize = \"4M\"\nmode = \"wt\"\n",
    );
    v.mount();
    let dir = v.path("mine");
    fs::create_dir(&dir).unwrap();
    let out = std::process::Command::new("chown")
        .args(["tests:tests", dir.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(out.success());
    let d = dir.to_str().unwrap();
    let set = |value: &str| as_tests(&["setfattr", "-n", "user.stripefs.cache", "-v", value, d]);
    let get = || String::from_utf8(getxattr(&dir, "user.stripefs.cache").unwrap()).unwrap();
    for grab in [
        "mode=wb priority=0 allocation=1 pinned=1",
        "pinned=1",
        "mode=wb priority=0",
        "mode=wb allocation=0.5",
    ] {
        let out = set(grab);
        assert!(!out.status.success(), "{grab} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("Operation not permitted"), "{grab}: {err}");
        assert_eq!(
            getxattr(&dir, "user.stripefs.cache")
                .unwrap_err()
                .raw_os_error(),
            Some(libc::ENODATA),
            "{grab} made a target"
        );
    }
    let log = fs::read_to_string(v.devices[0].join(".stripefs/daemon.log")).unwrap();
    assert!(
        log.contains("refused uid 1001") && log.contains("are for root or the user who mounted"),
        "{log}"
    );
    // The mode alone: a target with the share of the files outside every target.
    let out = set("mode=wb");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(get(), "mode=wb priority=1 allocation=1 pinned=0");
    // Restating the share it has is no grab.
    let out = set("mode=wa priority=1 allocation=1 pinned=0");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(get(), "mode=wa priority=1 allocation=1 pinned=0");
    // Root gives the folder a share; its owner may still change the mode, and the share stays.
    setxattr(&dir, "user.stripefs.cache", b"priority=0 pinned=1").unwrap();
    assert_eq!(get(), "mode=wa priority=0 allocation=1 pinned=1");
    let out = set("mode=wt");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(get(), "mode=wt priority=0 allocation=1 pinned=1");
    let out = set("allocation=0.9");
    assert!(!out.status.success());
    assert_eq!(get(), "mode=wt priority=0 allocation=1 pinned=1");
    // Nor may the owner take back the share root gave by removing the target.
    let out = as_tests(&["setfattr", "-x", "user.stripefs.cache", d]);
    assert!(!out.status.success(), "the owner removed root's share");
    assert_eq!(get(), "mode=wt priority=0 allocation=1 pinned=1");
    // A target of its own share, the owner may remove.
    setxattr(&dir, "user.stripefs.cache", b"priority=1 pinned=0").unwrap();
    let out = as_tests(&["setfattr", "-x", "user.stripefs.cache", d]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(getxattr(&dir, "user.stripefs.cache").is_err());
    // Another user's folder is refused whatever the setting.
    fs::create_dir(v.path("roots")).unwrap();
    let out = as_tests(&[
        "setfattr",
        "-n",
        "user.stripefs.cache",
        "-v",
        "mode=wb",
        v.path("roots").to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    v.umount();
}

/// VmRSS of a process, in bytes.
fn rss(pid: i32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb * 1024
}

/// xattrs cannot grow the daemon: one inode holds at most 64 KiB of names and values (ENOSPC
/// past it, E2BIG for one value past 64 KiB), and values live in the store, not in the
/// daemon's memory, so writing many megabytes of them leaves its RSS where it was. What was
/// accepted survives a remount.
#[test]
fn xattrs_are_capped_per_inode_and_do_not_grow_the_daemon() {
    let mut v = TestVolume::new(1, "64K", "[mount]\nallow_other = true\n");
    v.mount();
    // An unprivileged user floods one of its files: refused once 64 KiB are used.
    let flood = v.path("flood");
    fs::write(&flood, b"").unwrap();
    let out = std::process::Command::new("chown")
        .args(["tests:tests", flood.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(out.success());
    let value = format!("0x{}", "ab".repeat(8 * 1024));
    let mut accepted = 0;
    let refusal = loop {
        let name = format!("user.flood{accepted}");
        let out = as_tests(&[
            "setfattr",
            "-n",
            &name,
            "-v",
            &value,
            flood.to_str().unwrap(),
        ]);
        if !out.status.success() {
            break String::from_utf8_lossy(&out.stderr).into_owned();
        }
        accepted += 1;
        assert!(accepted <= 8, "more than 64 KiB accepted on one inode");
    };
    assert!(refusal.contains("No space left on device"), "{refusal}");
    // 7 values of 8 KiB and their names fit, the 8th does not.
    assert_eq!(accepted, 7);
    // One value past 64 KiB is E2BIG, as Linux has it; a value of 64 KiB and its name do not
    // fit either.
    let big = v.path("big");
    fs::write(&big, b"").unwrap();
    let e = setxattr(&big, "user.big", &vec![1u8; 64 * 1024 + 1]).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::E2BIG));
    let e = setxattr(&big, "user.big", &vec![1u8; 64 * 1024]).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
    // Removing makes room again.
    stripefs::xattr::remove(&flood, "user.flood0").unwrap();
    setxattr(&flood, "user.again", &[2u8; 4096]).unwrap();

    // Many values just under the cap, on many files: the daemon does not keep them.
    // The first WARM files settle the allocator's arenas and the store's cache (several MB
    // of noise on their own); the baseline is taken after them.
    const WARM: usize = 100;
    const FILES: usize = 700;
    const SIZE: usize = 60 * 1024;
    let value_of = |i: usize| -> Vec<u8> { (0..SIZE).map(|j| (i * 7 + j) as u8).collect() };
    fs::create_dir(v.path("many")).unwrap();
    for i in 0..FILES {
        fs::write(v.path(&format!("many/{i}")), b"").unwrap();
    }
    for i in 0..WARM {
        setxattr(&v.path(&format!("many/{i}")), "user.v", &value_of(i)).unwrap();
    }
    let pid = v.daemon_pid();
    let before = rss(pid);
    for i in WARM..FILES {
        setxattr(&v.path(&format!("many/{i}")), "user.v", &value_of(i)).unwrap();
    }
    let written = ((FILES - WARM) * SIZE) as u64;
    let after = rss(pid);
    let growth = after.saturating_sub(before);
    assert!(
        growth < written / 2,
        "the daemon grew by {growth} bytes (RSS {before} -> {after}) for {written} bytes of xattrs"
    );
    v.remount();
    for i in 0..FILES {
        assert_eq!(
            getxattr(&v.path(&format!("many/{i}")), "user.v").unwrap(),
            value_of(i),
            "many/{i}"
        );
    }
    for n in 1..7 {
        assert_eq!(
            getxattr(&flood, &format!("user.flood{n}")).unwrap(),
            vec![0xab; 8 * 1024]
        );
    }
    assert_eq!(getxattr(&flood, "user.again").unwrap(), vec![2u8; 4096]);
    v.umount();
}

/// `sh -c SCRIPT` as root, bounded in time; its stdout, or a panic with its stderr.
fn sh(script: &str) -> String {
    let out = run_with_timeout(
        std::process::Command::new("sh").args(["-c", script]),
        std::time::Duration::from_secs(30),
    );
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// POSIX ACLs are enforced as on ext4, never stored and ignored: a user:X:--- entry denies X
/// what the mode bits allow, a named entry grants what they do not (up to the mask), chmod
/// moves the mask, a directory's default ACL is inherited (the umask then does not apply,
/// while without one it does), and all of it survives a remount.
#[test]
fn posix_acls_are_enforced_as_on_ext4() {
    let mut v = TestVolume::new(2, "8K", "[mount]\nallow_other = true\n");
    v.mount();
    let m = v.mnt_str().to_string();
    let f = format!("{m}/secret");
    fs::write(&f, b"root's words").unwrap();
    sh(&format!("chmod 0644 {f}"));
    // Readable by everyone, then not by user tests.
    assert!(as_tests(&["cat", &f]).status.success());
    sh(&format!("setfacl -m u:tests:--- {f}"));
    let out = as_tests(&["cat", &f]);
    assert!(!out.status.success(), "user:tests:--- did not deny");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Permission denied"));
    let acl = sh(&format!("getfacl -c {f}"));
    assert!(
        acl.contains("user:tests:---") && acl.contains("mask::r--"),
        "{acl}"
    );
    assert_eq!(mode_of(std::path::Path::new(&f)), 0o644);
    // A grant beyond the mode bits, limited by the mask; chmod moves the mask.
    sh(&format!("setfacl -m u:tests:rw- {f} && chmod 0600 {f}"));
    let acl = sh(&format!("getfacl -c {f}"));
    assert!(acl.contains("mask::---"), "chmod 0600 left the mask: {acl}");
    assert!(!as_tests(&["cat", &f]).status.success());
    sh(&format!("chmod 0640 {f}"));
    let acl = sh(&format!("getfacl -c {f}"));
    assert!(
        acl.contains("mask::r--") && acl.contains("user:tests:rw-"),
        "{acl}"
    );
    let out = as_tests(&["cat", &f]);
    assert_eq!(out.stdout, b"root's words", "the ACL did not grant read");
    let out = as_tests(&["sh", "-c", &format!("echo more >> {f}")]);
    assert!(
        !out.status.success(),
        "the mask did not limit the grant to read"
    );
    // Setting the mask through the ACL sets the mode's group bits.
    sh(&format!("setfacl -m m::rw- {f}"));
    assert_eq!(mode_of(std::path::Path::new(&f)), 0o660);
    assert!(as_tests(&["sh", "-c", &format!("echo more >> {f}")])
        .status
        .success());

    // No default ACL: the umask applies.
    sh(&format!(
        "cd {m} && umask 027 && touch plain && mkdir plaindir"
    ));
    assert_eq!(mode_of(&v.path("plain")), 0o640);
    assert_eq!(mode_of(&v.path("plaindir")), 0o750);
    // A default ACL: inherited by new files and directories, the umask ignored.
    let d = format!("{m}/shared");
    sh(&format!(
        "mkdir -m 0700 {d} && setfacl -d -m u:tests:rwx {d} && setfacl -m u:tests:rwx {d}"
    ));
    sh(&format!("cd {d} && umask 077 && touch new && mkdir sub"));
    let acl = sh(&format!("getfacl -c {d}/new"));
    assert!(
        acl.contains("user:tests:rwx") && acl.contains("mask::rw-"),
        "the default ACL was not inherited: {acl}"
    );
    assert!(as_tests(&["sh", "-c", &format!("echo hi > {d}/new")])
        .status
        .success());
    assert_eq!(fs::read(v.path("shared/new")).unwrap(), b"hi\n");
    let acl = sh(&format!("getfacl -c {d}/sub"));
    assert!(
        acl.contains("default:user:tests:rwx") && acl.contains("\nuser:tests:rwx"),
        "the new directory did not inherit the default ACL: {acl}"
    );
    // A file user tests makes in the shared directory carries the ACL too.
    assert!(as_tests(&["touch", &format!("{d}/sub/theirs")])
        .status
        .success());
    let acl = sh(&format!("getfacl -c {d}/sub/theirs"));
    assert!(acl.contains("user:tests:rwx"), "{acl}");

    // Everything survives a remount, and is still enforced.
    let before = sh(&format!("getfacl -cR {m}"));
    v.remount();
    assert_eq!(sh(&format!("getfacl -cR {m}")), before);
    assert!(!as_tests(&["cat", &format!("{m}/plain")]).status.success());
    sh(&format!("setfacl -m u:tests:--- {f}"));
    assert!(!as_tests(&["cat", &f]).status.success());
    // setfacl -b takes the ACL away, and the mode bits decide again.
    sh(&format!("setfacl -b {f} && chmod 0644 {f}"));
    let acl = sh(&format!("getfacl -c {f}"));
    assert!(
        !acl.contains("user:tests") && !acl.contains("mask"),
        "{acl}"
    );
    let e = getxattr(std::path::Path::new(&f), "system.posix_acl_access").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENODATA));
    assert!(as_tests(&["cat", &f]).status.success());
    v.umount();
}

/// Where the kernel does not check permissions (no default_permissions) ACLs could not be
/// enforced, so they are refused rather than stored and ignored.
#[test]
fn posix_acls_are_refused_where_they_cannot_be_enforced() {
    let mut v = TestVolume::new(1, "64K", "");
    v.mount_with(&["-o", "no_default_permissions"]);
    let f = v.path("f");
    fs::write(&f, b"x").unwrap();
    let out = run_with_timeout(
        std::process::Command::new("setfacl").args(["-m", "u:tests:---", f.to_str().unwrap()]),
        std::time::Duration::from_secs(30),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Operation not supported"), "{err}");
    let e = getxattr(&f, "system.posix_acl_access").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP));
    v.umount();
}
