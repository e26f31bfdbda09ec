//! How a volume is mounted and unmounted, as Linux tools see it: the kernel type
//! `fuse.stripefs` with the volume as source, clean unmounts that log no warning, `umount`
//! then `stripefs mount` at once, umount(8)'s helper returning only once the daemon is gone,
//! `install-helper`, and a daemon log that stays small and quiet.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn findmnt(mnt: &str, column: &str) -> String {
    let out = Command::new("findmnt")
        .args(["-n", "-o", column, mnt])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn daemon_log(v: &TestVolume) -> PathBuf {
    v.devices[0].join(".stripefs/daemon.log")
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !matches!(
            s.rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().next()),
            Some("Z") | Some("X")
        )
    })
}

/// Waits (bounded) for `pid` to exit.
fn wait_gone(pid: i32) {
    let start = Instant::now();
    while alive(pid) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "daemon {pid} still runs"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Plain umount(8), bounded.
fn umount8(mnt: &str) -> std::process::Output {
    run_with_timeout(Command::new("umount").arg(mnt), Duration::from_secs(120))
}

/// umount(8) without its helpers (`-i`): the kernel unmounts and umount(8) returns while the
/// daemon may still be finishing.
fn umount8_no_helper(mnt: &str) -> std::process::Output {
    run_with_timeout(
        Command::new("umount").args(["-i", mnt]),
        Duration::from_secs(120),
    )
}

/// Lines of the daemon log that warn or err.
fn warnings(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_kernel_type_is_fuse_stripefs_and_the_source_is_the_volume() {
    let mut v = TestVolume::new(2, "64K", "");
    v.mount();
    assert_eq!(findmnt(v.mnt_str(), "FSTYPE"), "fuse.stripefs");
    assert_eq!(findmnt(v.mnt_str(), "SOURCE"), v.cfg());
    // df -T, and mount(8)'s list by type, see it too.
    let df = Command::new("df")
        .args(["-T", v.mnt_str()])
        .output()
        .unwrap();
    let df = String::from_utf8_lossy(&df.stdout);
    assert!(df.contains("fuse.stripefs") && df.contains(v.cfg()), "{df}");
    let listed = Command::new("mount")
        .args(["-l", "-t", "fuse.stripefs"])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.lines().any(|l| l.starts_with(&format!(
            "{} on {} type fuse.stripefs",
            v.cfg(),
            v.mnt_str()
        ))),
        "{listed}"
    );
    // The mount options still reach the kernel, and remount still switches them.
    let opts = findmnt(v.mnt_str(), "OPTIONS");
    assert!(opts.split(',').any(|o| o == "nosuid"), "{opts}");
    stripefs_ok(&["mount", "-o", "remount,ro", v.mnt_str()]);
    assert!(findmnt(v.mnt_str(), "OPTIONS").starts_with("ro,"));
    stripefs_ok(&["mount", "-o", "remount,rw", v.mnt_str()]);
    std::fs::write(v.path("f"), b"x").unwrap();
    v.umount();

    // fsname names the source instead.
    v.mount_with(&["-o", "fsname=tank,noexec"]);
    assert_eq!(findmnt(v.mnt_str(), "SOURCE"), "tank");
    assert!(findmnt(v.mnt_str(), "OPTIONS")
        .split(',')
        .any(|o| o == "noexec"));
    v.umount();
}

#[test]
fn a_clean_unmount_logs_no_warning() {
    let mut v = TestVolume::new(2, "64K", "");
    let log = daemon_log(&v);
    // stripefs umount.
    v.mount();
    std::fs::write(v.path("a"), vec![7u8; 300_000]).unwrap();
    v.umount();
    // Plain umount(8) (the kernel unmounts first, then the daemon finds it gone).
    v.mount();
    let pid = v.daemon_pid();
    std::fs::write(v.path("b"), b"b").unwrap();
    let out = umount8(v.mnt_str());
    assert!(out.status.success(), "{out:?}");
    wait_gone(pid);
    // SIGTERM (the daemon unmounts itself).
    v.mount();
    let pid = v.daemon_pid();
    // SAFETY: plain syscall.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    wait_gone(pid);
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.matches("unmounted").count(), 3, "{text}");
    assert_eq!(warnings(&log), Vec::<String>::new(), "{text}");
    v.assert_fsck_clean("after the unmounts");
}

/// A signal while the volume is busy (a file open on it): the unmount the signal asks for is
/// refused (EBUSY), so the daemon detaches the mount instead and exits once the file is let
/// go. It used to wait forever for a lock it held itself.
#[test]
fn a_signal_on_a_busy_mount_detaches_it_and_the_daemon_exits_when_let_go() {
    let mut v = TestVolume::new(2, "64K", "");
    v.mount();
    let pid = v.daemon_pid();
    std::fs::write(v.path("kept"), vec![5u8; 200_000]).unwrap();
    let open = std::fs::File::open(v.path("kept")).unwrap();
    // SAFETY: plain syscall.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let start = Instant::now();
    while !findmnt(v.mnt_str(), "FSTYPE").is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the busy mount was not detached"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Detached, the open file still reads; the daemon serves it until it is closed.
    use std::io::Read;
    let mut back = Vec::new();
    (&open).read_to_end(&mut back).unwrap();
    assert_eq!(back, vec![5u8; 200_000]);
    assert!(alive(pid));
    drop(open);
    wait_gone(pid);
    v.mount();
    assert_eq!(std::fs::read(v.path("kept")).unwrap(), vec![5u8; 200_000]);
    v.umount();
    v.assert_fsck_clean("after the detach");
}

/// The daemon keeps none of the descriptors `stripefs mount` was started with: a flock the
/// caller holds would stay held, and a file of a lazily detached volume would keep that
/// volume's daemon alive, for as long as this volume stays mounted.
#[test]
fn the_daemon_keeps_none_of_its_callers_descriptors() {
    use std::os::fd::AsRawFd;
    let mut v = TestVolume::new(1, "64K", "");
    let marker = v.root.path().join("callers-file");
    let f = std::fs::File::create(&marker).unwrap();
    // SAFETY: plain fcntl on our own descriptor; children started meanwhile inherit it.
    unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETFD, 0) };
    v.mount();
    // SAFETY: as above.
    unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
    let pid = v.daemon_pid();
    let held: Vec<PathBuf> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .collect();
    assert!(!held.contains(&marker), "{held:?}");
    assert!(held.iter().any(|p| p.ends_with("fuse")), "{held:?}");
    v.umount();
}

/// A daemon that does not answer (stopped) is named as such within a bound, with what to do,
/// instead of hanging the command that asks it.
#[test]
fn a_stopped_daemon_is_said_not_to_answer_instead_of_hanging_commands() {
    struct Continue(i32);
    impl Drop for Continue {
        fn drop(&mut self) {
            // SAFETY: plain syscall.
            unsafe { libc::kill(self.0, libc::SIGCONT) };
        }
    }
    let mut v = TestVolume::new(1, "64K", "");
    v.mount();
    let pid = v.daemon_pid();
    // SAFETY: plain syscall.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let stopped = Continue(pid);
    // Every command that takes a path on a volume asks the same way first (`status` too).
    let out = run_with_timeout(
        Command::new(common::BIN).args(["umount", v.mnt_str()]),
        Duration::from_secs(90),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(err.contains("did not answer within 20s"), "{err}");
    assert!(
        err.contains(&format!("`umount -l {}`", v.mnt_str())),
        "{err}"
    );
    assert!(err.contains("/abort` ends its connection"), "{err}");
    drop(stopped);
    v.umount();
}

/// `umount --lazy` of a busy mount returns at once, and its daemon exits when the last file
/// is closed; by then another volume may be mounted on the same mountpoint, and the utab entry
/// there (which makes umount(8) run our helper) is that mount's: the old daemon leaves it.
#[test]
fn a_lazily_detached_daemon_leaves_the_next_mounts_utab_entry() {
    let mut first = TestVolume::new(1, "64K", "");
    let mut second = TestVolume::new(1, "64K", "");
    second.mnt = first.mnt.clone();
    first.mount();
    let pid = first.daemon_pid();
    std::fs::write(first.path("f"), b"first").unwrap();
    let open = std::fs::File::open(first.path("f")).unwrap();
    // --lazy returns at once: the daemon goes on until the file is closed.
    let out = run_with_timeout(
        Command::new(common::BIN).args(["umount", "--lazy", first.mnt_str()]),
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("detached; its daemon"), "{said}");
    first.forget_mount();
    second.mount();
    let entry = format!("SRC={} TARGET={} ", second.cfg(), second.mnt_str());
    let utab = || std::fs::read_to_string("/run/mount/utab").unwrap_or_default();
    assert!(utab().contains(&entry), "{}", utab());
    assert!(alive(pid));
    drop(open);
    wait_gone(pid);
    assert!(utab().contains(&entry), "{}", utab());
    // --lazy on a volume nobody uses unmounts it and waits for its daemon, as without.
    let second_pid = second.daemon_pid();
    stripefs_ok(&["umount", "--lazy", second.mnt_str()]);
    second.forget_mount();
    assert!(!alive(second_pid));
    assert!(!utab().contains(&entry), "{}", utab());
}

#[test]
fn a_volume_in_use_elsewhere_is_named() {
    let mut v = TestVolume::new(1, "64K", "");
    v.mount();
    let other = v.root.path().join("mnt2");
    std::fs::create_dir(&other).unwrap();
    let out = stripefs(&["mount", v.cfg(), other.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(&format!(
            "is in use by another stripefs mount: the volume is mounted on {} (daemon pid",
            v.mnt_str()
        )),
        "{err}"
    );
    assert!(findmnt(other.to_str().unwrap(), "FSTYPE").is_empty());
    v.umount();
}

/// A daemon that takes a while to finish (its last commit paused by a fault point) is waited
/// for, saying so, instead of refused.
#[cfg(feature = "failpoints")]
#[test]
fn mount_waits_for_a_daemon_still_unmounting() {
    let mut v = TestVolume::new(2, "64K", "");
    v.mount();
    let pid = v.daemon_pid();
    setxattr(
        &v.mnt,
        "user.stripefs.failpoint",
        b"namespace.mark-clean=sleep(1500)",
    )
    .unwrap();
    let out = umount8_no_helper(v.mnt_str());
    assert!(out.status.success(), "{out:?}");
    let out = stripefs(&["mount", v.cfg(), v.mnt_str()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    v.umount_on_drop();
    assert!(
        err.contains(&format!(
            "waiting for the daemon of {} (pid {pid}) to finish unmounting",
            v.mnt_str()
        )),
        "{err}"
    );
    assert!(!alive(pid));
    v.umount();
}

/// Puts the umount(8)/mount(8) helpers into /sbin for the test and takes them away after
/// (restoring what was there).
struct SbinHelpers {
    saved: Vec<(PathBuf, Option<PathBuf>)>,
}

impl SbinHelpers {
    fn install() -> SbinHelpers {
        let mut saved = Vec::new();
        for name in ["mount.fuse.stripefs", "umount.fuse.stripefs"] {
            let link = Path::new("/sbin").join(name);
            let old = std::fs::read_link(&link).ok();
            assert!(
                old.is_some() || std::fs::symlink_metadata(&link).is_err(),
                "{} is a file, not a link: not touching it",
                link.display()
            );
            saved.push((link, old));
        }
        let guard = SbinHelpers { saved };
        stripefs_ok(&["install-helper"]);
        guard
    }
}

impl Drop for SbinHelpers {
    fn drop(&mut self) {
        for (link, old) in &self.saved {
            let _ = std::fs::remove_file(link);
            if let Some(target) = old {
                let _ = std::os::unix::fs::symlink(target, link);
            }
        }
    }
}

#[test]
fn umount_then_mount_at_once_is_never_refused() {
    let mut v = TestVolume::new(
        2,
        "64K",
        "[cache]\nstore = \"ram\"\nsize = \"16M\"\nline_size = \"64K\"\nmode = \"wb\"\n",
    );
    // Without the umount(8) helper: stripefs mount waits for the old daemon.
    v.mount();
    for round in 0..10 {
        std::fs::write(v.path(&format!("f{round}")), vec![round as u8; 200_000]).unwrap();
        let out = umount8_no_helper(v.mnt_str());
        assert!(out.status.success(), "round {round}: {out:?}");
        v.mount();
    }
    // With it (in /sbin, where umount(8) looks): umount(8) returns once the daemon has
    // written everything back and exited, so the devices are free at once.
    let _helpers = SbinHelpers::install();
    for round in 0..10 {
        std::fs::write(v.path(&format!("g{round}")), vec![round as u8; 200_000]).unwrap();
        let pid = v.daemon_pid();
        let out = umount8(v.mnt_str());
        assert!(out.status.success(), "round {round}: {out:?}");
        assert!(
            !alive(pid),
            "round {round}: umount(8) returned before daemon {pid} ended: {out:?} {:?}",
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
        );
        let out = stripefs(&["mount", v.cfg(), v.mnt_str()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "round {round}: {err}");
        assert!(!err.contains("waiting"), "round {round}: {err}");
    }
    for round in 0..10 {
        assert_eq!(
            std::fs::read(v.path(&format!("f{round}"))).unwrap(),
            vec![round as u8; 200_000]
        );
        assert_eq!(
            std::fs::read(v.path(&format!("g{round}"))).unwrap(),
            vec![round as u8; 200_000]
        );
    }
    // mount(8) through the helper, and umount(8) again.
    v.umount();
    let out = run_with_timeout(
        Command::new("mount").args(["-t", "fuse.stripefs", v.cfg(), v.mnt_str(), "-o", "noatime"]),
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "{out:?}");
    v.umount_on_drop();
    assert_eq!(findmnt(v.mnt_str(), "FSTYPE"), "fuse.stripefs");
    let pid = v.daemon_pid();
    assert!(umount8(v.mnt_str()).status.success());
    assert!(!alive(pid));
    // An fstab line: `mount -a` mounts it, and then knows it is mounted (source and type
    // match what the kernel lists).
    let fstab = v.root.path().join("fstab");
    std::fs::write(
        &fstab,
        format!(
            "{} {} fuse.stripefs noatime,nofail 0 0\n",
            v.cfg(),
            v.mnt_str()
        ),
    )
    .unwrap();
    let mount_a = || {
        run_with_timeout(
            Command::new("mount").args(["-v", "-a", "-T"]).arg(&fstab),
            Duration::from_secs(60),
        )
    };
    let out = mount_a();
    assert!(out.status.success(), "{out:?}");
    v.umount_on_drop();
    assert!(String::from_utf8_lossy(&out.stdout).contains("successfully mounted"));
    let out = mount_a();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("already mounted"),
        "{out:?}"
    );
    v.umount();
}

#[test]
fn install_helper_makes_working_links() {
    let mut v = TestVolume::new(1, "64K", "");
    let prefix = v.root.path().join("prefix");
    let out = stripefs_ok(&["install-helper", "--prefix", prefix.to_str().unwrap()]);
    let exe = std::fs::canonicalize(BIN).unwrap();
    for name in ["mount.fuse.stripefs", "umount.fuse.stripefs"] {
        let link = prefix.join("sbin").join(name);
        assert_eq!(std::fs::read_link(&link).unwrap(), exe, "{out}");
    }
    // Again: nothing changes.
    let again = stripefs_ok(&["install-helper", "--prefix", prefix.to_str().unwrap()]);
    assert_eq!(again.matches("(already)").count(), 2, "{again}");
    // The links work as mount(8) and umount(8) call them.
    let sbin = prefix.join("sbin");
    let out = run_with_timeout(
        Command::new(sbin.join("mount.fuse.stripefs")).args([v.cfg(), v.mnt_str(), "-o", "rw"]),
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "{out:?}");
    v.umount_on_drop();
    std::fs::write(v.path("f"), b"kept").unwrap();
    let pid = v.daemon_pid();
    let out = run_with_timeout(
        Command::new(sbin.join("umount.fuse.stripefs")).args([v.mnt_str(), "-t", "fuse.stripefs"]),
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "{out:?}");
    assert!(!alive(pid));
    assert!(findmnt(v.mnt_str(), "FSTYPE").is_empty());
    v.mount();
    assert_eq!(std::fs::read(v.path("f")).unwrap(), b"kept");
    v.umount();
    // --uninstall takes them away; a file that is not a link is never touched.
    stripefs_ok(&[
        "install-helper",
        "--prefix",
        prefix.to_str().unwrap(),
        "--uninstall",
    ]);
    assert!(std::fs::read_dir(&sbin).unwrap().next().is_none());
    std::fs::write(sbin.join("umount.fuse.stripefs"), b"#!/bin/sh\n").unwrap();
    let out = stripefs(&["install-helper", "--prefix", prefix.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a link"));
    assert_eq!(
        std::fs::read(sbin.join("umount.fuse.stripefs")).unwrap(),
        b"#!/bin/sh\n"
    );
}

#[test]
fn unsupported_ioctls_are_enotty_and_the_log_stays_small() {
    let mut v = TestVolume::new(2, "64K", "");
    v.mount();
    let f = v.path("f");
    std::fs::write(&f, b"data").unwrap();
    use std::os::fd::AsRawFd;
    for i in 0..2000 {
        let file = std::fs::File::open(if i % 2 == 0 { &f } else { &v.mnt }).unwrap();
        // SAFETY: TCGETS fills a termios we own.
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::ioctl(file.as_raw_fd(), libc::TCGETS, &mut t) };
        assert_eq!(r, -1);
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::ENOTTY)
        );
    }
    v.umount();
    let log = daemon_log(&v);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.len() < 4096, "{} bytes: {text}", text.len());
    assert!(!text.to_lowercase().contains("ioctl"), "{text}");
}

#[test]
fn the_log_file_is_capped_and_rotated() {
    let mut v = TestVolume::new(1, "64K", "[mount]\nlog_size = \"64K\"\n");
    let log = daemon_log(&v);
    // An old log at its cap: the daemon's first line moves it to daemon.log.1.
    std::fs::write(&log, "old line\n".repeat(64 << 10 >> 3)).unwrap();
    v.mount();
    v.umount();
    let old = std::fs::read_to_string(log.with_file_name("daemon.log.1")).unwrap();
    assert!(old.starts_with("old line\n"));
    let now = std::fs::read_to_string(&log).unwrap();
    assert!(
        now.contains("mounted volume") && !now.contains("old line"),
        "{now}"
    );
}

/// The unit example: `systemd-analyze verify` accepts it (where systemd-analyze exists), and
/// its ExecStart and ExecStop command lines, read from the file and run as systemd would run
/// them, mount a volume and then write it back and unmount it.
#[test]
fn the_systemd_unit_verifies_and_its_commands_mount_and_unmount() {
    let unit_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/stripefs@.service");
    let unit = std::fs::read_to_string(&unit_path).unwrap();
    let mut v = TestVolume::new(
        2,
        "64K",
        "[cache]\nstore = \"ram\"\nsize = \"16M\"\nline_size = \"64K\"\nmode = \"wb\"\n\
         [cache.cleaner]\nstaleness = \"1h\"\n",
    );
    // The instance names the mountpoint (systemd-escape -p), %f gives it back.
    let instance = v
        .mnt_str()
        .trim_start_matches('/')
        .replace('-', "\\x2d")
        .replace('/', "-");

    // 1. systemd-analyze verify, on a copy whose binary is this build's.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join(format!("stripefs@{instance}.service"));
    std::fs::write(&copy, unit.replace("/usr/bin/stripefs", BIN)).unwrap();
    match Command::new("systemd-analyze").arg("--version").output() {
        Err(e) => println!("systemd-analyze verify skipped: systemd-analyze not found ({e})"),
        Ok(_) => {
            let out = run_with_timeout(
                Command::new("systemd-analyze")
                    .args(["verify", "--man=no"])
                    .arg(&copy),
                Duration::from_secs(60),
            );
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "systemd-analyze verify: {err}");
            assert!(
                !err.contains("stripefs@") && !err.contains("Unknown"),
                "systemd-analyze verify: {err}"
            );
        }
    }

    // 2. ExecStart and ExecStop as systemd would run them: specifiers and ${VAR} expanded,
    // the config pointed at the test volume's.
    let mut env = std::collections::HashMap::new();
    let (mut start, mut stop) = (Vec::new(), Vec::new());
    for line in unit.lines().map(str::trim) {
        if let Some(kv) = line.strip_prefix("Environment=") {
            let (k, val) = kv.split_once('=').unwrap();
            env.insert(k.to_string(), val.to_string());
        } else if let Some(cmd) = line.strip_prefix("ExecStart=") {
            start.push(cmd.to_string());
        } else if let Some(cmd) = line.strip_prefix("ExecStop=") {
            stop.push(cmd.to_string());
        }
    }
    assert!(!start.is_empty() && !stop.is_empty(), "{unit}");
    env.insert("STRIPEFS_CONFIG".into(), v.cfg().to_string());
    let mnt = v.mnt_str().to_string();
    let expand = |cmd: &str| -> Vec<String> {
        let cmd = cmd
            .trim_start_matches(['-', '@', '+', '!'])
            .replace("%f", &mnt)
            .replace("%i", &instance)
            .replace("%%", "%");
        cmd.split_whitespace()
            .enumerate()
            .map(|(i, word)| {
                let mut word = word.to_string();
                for (k, val) in &env {
                    word = word.replace(&format!("${{{k}}}"), val);
                }
                if i == 0 && word.ends_with("/stripefs") {
                    BIN.to_string()
                } else {
                    word
                }
            })
            .collect()
    };
    let run = |cmds: &[String]| {
        for cmd in cmds {
            let words = expand(cmd);
            let out = run_with_timeout(
                Command::new(&words[0]).args(&words[1..]),
                Duration::from_secs(120),
            );
            assert!(out.status.success(), "{words:?}: {out:?}");
        }
    };
    run(&start);
    v.umount_on_drop();
    assert_eq!(findmnt(v.mnt_str(), "FSTYPE"), "fuse.stripefs");
    // Data that sits in the write-back cache (no cleaning for an hour) when the unit stops.
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(v.path("kept"), &data).unwrap();
    let pid = v.daemon_pid();
    run(&stop);
    assert!(!alive(pid), "ExecStop returned before the daemon ended");
    assert!(findmnt(v.mnt_str(), "FSTYPE").is_empty());
    // The volume is whole without the (RAM) cache of the stopped daemon.
    v.assert_fsck_clean("after ExecStop");
    v.mount();
    assert_eq!(std::fs::read(v.path("kept")).unwrap(), data);
    v.umount();
}

/// The Debian package's description (`cargo deb` is not run here): its assets exist, and its
/// maintainer scripts, run against a temporary root with this build as /usr/bin/stripefs,
/// make the helper links (and the man page and completions where the binary has them) and
/// take them away again.
#[test]
fn the_debian_package_description_is_whole() {
    let root_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest: toml::Value =
        toml::from_str(&std::fs::read_to_string(root_dir.join("Cargo.toml")).unwrap()).unwrap();
    let deb = &manifest["package"]["metadata"]["deb"];
    for asset in deb["assets"].as_array().unwrap() {
        let src = asset[0].as_str().unwrap();
        if src != "target/release/stripefs" {
            assert!(root_dir.join(src).exists(), "asset {src} is missing");
        }
    }
    let scripts = root_dir.join(deb["maintainer-scripts"].as_str().unwrap());
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let run_script = |name: &str, arg: &str| {
        let text = std::fs::read_to_string(scripts.join(name)).unwrap();
        let text = text
            .replace(
                "/usr/bin/stripefs install-helper",
                &format!(
                    "/usr/bin/stripefs install-helper --prefix {}",
                    root.display()
                ),
            )
            .replace("/usr/share/", &format!("{}/usr/share/", root.display()))
            .replace("/usr/bin/stripefs", BIN);
        let out = run_with_timeout(
            Command::new("sh").arg("-c").arg(&text).args([name, arg]),
            Duration::from_secs(60),
        );
        assert!(out.status.success(), "{name} {arg}: {out:?}");
    };
    run_script("postinst", "configure");
    let exe = std::fs::canonicalize(BIN).unwrap();
    for name in ["mount.fuse.stripefs", "umount.fuse.stripefs"] {
        assert_eq!(
            std::fs::read_link(root.join("sbin").join(name)).unwrap(),
            exe
        );
    }
    // The man page and completions come from `stripefs man` and `stripefs completions`.
    let has = |args: &[&str]| stripefs(args).status.success();
    let generated = [
        (has(&["man"]), "usr/share/man/man1/stripefs.1.gz"),
        (
            has(&["completions", "bash"]),
            "usr/share/bash-completion/completions/stripefs",
        ),
        (
            has(&["completions", "zsh"]),
            "usr/share/zsh/vendor-completions/_stripefs",
        ),
        (
            has(&["completions", "fish"]),
            "usr/share/fish/vendor_completions.d/stripefs.fish",
        ),
    ];
    for (made, file) in generated {
        assert_eq!(root.join(file).exists(), made, "{file}");
        if !made {
            println!("{file}: this build has no such command yet; the postinst skips it");
        }
    }
    run_script("prerm", "remove");
    for name in ["mount.fuse.stripefs", "umount.fuse.stripefs"] {
        assert!(std::fs::symlink_metadata(root.join("sbin").join(name)).is_err());
    }
    for (_, file) in generated {
        assert!(!root.join(file).exists(), "{file}");
    }
}
