//! The CLI as users meet it: the real binary against real mounts. Paths that are not on a
//! stripefs mount are refused and left untouched, every refusal says why, swapped arguments
//! are named, warnings, help, man page and completions.

mod common;

use common::*;
use std::path::Path;
use std::process::Output;

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Fails with exit code 1 and `want` in its error output.
fn refused(args: &[&str], want: &str) -> String {
    let out = stripefs(args);
    let err = stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "stripefs {args:?} should fail: {}{err}",
        stdout(&out)
    );
    assert!(err.contains(want), "stripefs {args:?}: {err}");
    err
}

/// Every xattr name on `path` (listxattr, not following a symlink).
fn xattr_names(path: &Path) -> Vec<String> {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    // SAFETY: the buffer and the string are valid for the call.
    let n = unsafe { libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(n >= 0, "listxattr {}", path.display());
    buf.truncate(n as usize);
    buf.split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect()
}

/// Item 1: every command that takes a path on a mounted volume refuses a plain directory,
/// says what it is on instead, and leaves no `user.stripefs.*` there.
#[test]
fn commands_refuse_a_path_that_is_not_on_stripefs_and_touch_nothing() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("plain");
    std::fs::create_dir(&dir).unwrap();
    let file = dir.join("file");
    std::fs::write(&file, b"data").unwrap();
    let (d, f) = (dir.to_str().unwrap(), file.to_str().unwrap());
    let not_ours = "is not on a stripefs mount (it is on ";
    for args in [
        vec!["target", "add", d, "--mode", "wb"],
        vec!["target", "rm", d],
        vec!["target", "ls", d],
        vec!["layout", "set", d, "--stripe-size", "128K"],
        vec!["layout", "clear", d],
        vec!["layout", "get", f],
        vec!["migrate", f, "--width", "1"],
        vec!["flush", d],
        vec!["mode", d, "wb"],
        vec!["stats", d],
        vec!["status", d],
        vec!["umount", d],
    ] {
        let err = refused(&args, not_ours);
        assert!(err.contains(" mounted at /"), "{args:?}: {err}");
    }
    for p in [&dir, &file] {
        let ours: Vec<String> = xattr_names(p)
            .into_iter()
            .filter(|n| n.starts_with("user.stripefs."))
            .collect();
        assert!(ours.is_empty(), "{} got {ours:?}", p.display());
    }
    assert_eq!(std::fs::read(&file).unwrap(), b"data");
}

/// Item 2: the daemon's reason for a refusal reaches the CLI, which prints it and exits 1.
#[test]
fn refusals_reach_the_cli_with_their_reason() {
    let mut v = TestVolume::new(
        3,
        "64K",
        "[mount]\nallow_other = true\n[cache]\nsize = \"4M\"\nmode = \"wt\"\n",
    );
    v.mount();
    let dir = v.path("dir");
    std::fs::create_dir(&dir).unwrap();
    let file = v.path("dir/file");
    std::fs::write(&file, vec![7u8; 200_000]).unwrap();
    let (d, f) = (dir.to_str().unwrap(), file.to_str().unwrap());

    refused(
        &["layout", "set", d, "--width", "5"],
        "stripefs: layout set: width 5 must be from 1 to the number of devices (3)",
    );
    refused(
        &["migrate", d, "--width", "2"],
        "stripefs: migrate: a directory is not migrated",
    );
    refused(
        &["migrate", f, "--width", "4"],
        "stripefs: migrate: width 4 must be from 1 to the number of devices (3)",
    );
    refused(
        &["layout", "set", f, "--width", "2"],
        "stripefs: layout set: the file already holds data",
    );
    refused(
        &["layout", "clear", f],
        "stripefs: layout clear: only a directory's layout can be cleared",
    );
    refused(
        &["target", "rm", d],
        "stripefs: target rm: this directory is not a cache target",
    );
    // The CLI checks the mode names it knows; a raw value reaches the daemon, which says why.
    refused(
        &["mode", v.mnt_str(), "fast"],
        "stripefs: mode: mode \"fast\": must be wt, wb, wa, wi, wo or pt",
    );
    // Nothing changed.
    let layout = stripefs_ok(&["layout", "get", f]);
    assert!(layout.contains("width=3"), "{layout}");

    // A user who may not write the folder is refused by the kernel before the daemon hears
    // of it: the CLI says so from the errno.
    let bin = BIN;
    let out = as_tests(&[bin, "target", "add", d, "--mode", "wb"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("permission denied"),
        "{}",
        stderr(&out)
    );
    // A user who may write it but does not own it may not make it a cache target...
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = as_tests(&[bin, "target", "add", d, "--mode", "wb"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("stripefs: target add: only the folder's owner (uid 0)"),
        "{}",
        stderr(&out)
    );
    // ...and its owner chooses the mode, not the share of the cache.
    let mine = v.path("mine");
    std::fs::create_dir(&mine).unwrap();
    let chown = std::process::Command::new("chown")
        .args(["tests:tests", mine.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(chown.success());
    let m = mine.to_str().unwrap();
    let out = as_tests(&[bin, "target", "add", m, "--mode", "wb", "--priority", "0"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "stripefs: target add: priority, allocation and pinning are for root or the user \
             who mounted"
        ),
        "{}",
        stderr(&out)
    );
    let out = as_tests(&[bin, "flush", v.mnt_str()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("only root or the user who mounted the volume"),
        "{}",
        stderr(&out)
    );
    let out = as_tests(&[bin, "target", "add", m, "--mode", "wb"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(xattr_names(&mine)
        .iter()
        .all(|n| !n.starts_with("user.stripefs.")));
}

/// `user.stripefs.error` hands the caller's last reason over once; a size query leaves it.
#[test]
fn the_error_key_hands_the_last_reason_over_once() {
    let mut v = TestVolume::new(2, "64K", "");
    v.mount();
    let dir = v.path("d");
    std::fs::create_dir(&dir).unwrap();
    assert_eq!(
        getxattr(&dir, "user.stripefs.error")
            .unwrap_err()
            .raw_os_error(),
        Some(libc::ENODATA)
    );
    let e = setxattr(&dir, "user.stripefs.layout", b"width=7").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    // Read on the thread that was refused: the daemon keys reasons by it.
    let c = std::ffi::CString::new(dir.to_str().unwrap()).unwrap();
    let name = std::ffi::CString::new("user.stripefs.error").unwrap();
    // SAFETY: a size query with no buffer.
    let size = unsafe { libc::getxattr(c.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) };
    assert!(size > 0);
    let reason = String::from_utf8(getxattr(&dir, "user.stripefs.error").unwrap()).unwrap();
    assert_eq!(reason.len(), size as usize);
    assert_eq!(
        reason,
        "user.stripefs.layout: width 7 must be from 1 to the number of devices (2)"
    );
    assert_eq!(
        getxattr(&dir, "user.stripefs.error")
            .unwrap_err()
            .raw_os_error(),
        Some(libc::ENODATA)
    );
    // The handshake key answers on any inode.
    let hello = String::from_utf8(getxattr(&dir, "user.stripefs.control").unwrap()).unwrap();
    assert!(hello.starts_with("stripefs protocol=1 pid="), "{hello}");
}

/// Item 6: `stripefs demo` checks before it speaks, prints its hints once mounted, with the
/// binary's real path when PATH has no `stripefs`, and lists object files, not buckets.
#[test]
fn demo_checks_first_then_hints_with_the_real_binary() {
    use std::io::BufRead;
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("demo");
    let mut first = std::process::Command::new(BIN)
        .args(["demo", "--dir", dir.to_str().unwrap(), "--devices", "2"])
        .env("PATH", "/usr/bin:/bin")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mnt = dir.join("mnt");
    let _guard = Unmount(mnt.clone());
    // Read the first demo's output on a thread, so a hang fails the test instead of blocking.
    let (tx, rx) = std::sync::mpsc::channel();
    let out = first.stdout.take().unwrap();
    std::thread::spawn(move || {
        let mut text = String::new();
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            text.push_str(&line);
            text.push('\n');
            if line.starts_with("Ctrl-C") {
                break;
            }
        }
        let _ = tx.send(text);
    });
    let hints = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the demo never said it was mounted");
    assert!(hints.contains(&format!("{BIN} layout get ")), "{hints}");
    assert!(hints.contains(&format!("{BIN} status ")), "{hints}");
    assert!(hints.contains("-type f"), "{hints}");
    assert!(!hints.contains("objects/*/"), "{hints}");
    // It is mounted now: a second demo says so at once, and prints no hints.
    let second = stripefs(&["demo", "--dir", dir.to_str().unwrap(), "--devices", "2"]);
    assert_eq!(second.status.code(), Some(1));
    assert!(stdout(&second).is_empty(), "{}", stdout(&second));
    assert!(
        stderr(&second).contains("the demo is already mounted on"),
        "{}",
        stderr(&second)
    );
    // SAFETY: signalling the child we started.
    unsafe { libc::kill(first.id() as i32, libc::SIGINT) };
    let start = std::time::Instant::now();
    while first.try_wait().unwrap().is_none() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "demo did not stop"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Detaches a mount left behind by a failed test.
struct Unmount(std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        if find_mount(&self.0) {
            lazy_umount(&self.0);
        }
    }
}

fn find_mount(p: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let p = p.to_str().unwrap();
    info.lines().any(|l| l.split(' ').nth(4) == Some(p))
}

/// Item 7: a directory where the config belongs is named, and swapped arguments are said to be.
#[test]
fn swapped_arguments_say_which_is_the_config() {
    let v = TestVolume::new(1, "64K", "");
    let err = refused(
        &["mount", v.mnt_str(), v.cfg()],
        "the arguments are swapped",
    );
    assert!(
        err.contains(&format!("stripefs mount {} {}", v.cfg(), v.mnt_str())),
        "{err}"
    );
    let d0 = v.devices[0].to_str().unwrap();
    refused(
        &["mkfs", d0],
        "is a directory, not a config file: stripefs mkfs takes",
    );
    let out = stripefs(&["fsck", d0]);
    assert_eq!(out.status.code(), Some(8));
    assert!(stderr(&out).contains("is a directory, not a config file"));
    let file = v.root.path().join("notes.txt");
    std::fs::write(&file, "x").unwrap();
    refused(
        &["mount", v.cfg(), file.to_str().unwrap()],
        "is a file: it must be the directory the volume appears on",
    );
}

/// Item 8: a config mode that reaches nothing is warned about; `target rm` says what it did,
/// and that a config target comes back at the next mount.
#[test]
fn ignored_mode_and_removed_config_targets_are_told() {
    let mut v = TestVolume::new(
        1,
        "64K",
        "[cache]\nsize = \"4M\"\nmode = \"wb\"\ndefault = \"targets\"\n\
         [[cache.target]]\npath = \"/fast\"\nmode = \"wt\"\n",
    );
    let out = stripefs(&["mount", v.cfg(), v.mnt_str()]);
    assert!(out.status.success(), "{}", stderr(&out));
    v.umount_on_drop();
    assert!(
        stderr(&out).contains("cache.mode = \"wb\" is not used"),
        "{}",
        stderr(&out)
    );
    let fast = v.path("fast");
    let out = stripefs(&["target", "rm", fast.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("no longer a cache target (it was mode=wt"),
        "{}",
        stdout(&out)
    );
    assert!(
        stderr(&out)
            .contains("it comes back on this folder at the next mount; remove it from the config"),
        "{}",
        stderr(&out)
    );
    // A live target goes without that warning.
    let live = v.path("live");
    std::fs::create_dir(&live).unwrap();
    stripefs_ok(&["target", "add", live.to_str().unwrap(), "--mode", "wb"]);
    let out = stripefs(&["target", "rm", live.to_str().unwrap()]);
    assert!(out.status.success());
    assert!(!stderr(&out).contains("comes back"), "{}", stderr(&out));
}

fn statvfs_total(p: &Path) -> u64 {
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    // SAFETY: statvfs fills the zeroed struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    st.f_blocks as u64 * st.f_frsize as u64
}

/// Item 9 and the per-device view of `status`: devices on one filesystem are warned about
/// by mkfs, mount and status, df counts that filesystem once, and status shows what each
/// device holds beside its filesystem's space.
#[test]
fn devices_on_one_filesystem_are_warned_about_and_counted_once() {
    let mut v = TestVolume::new(2, "64K", "");
    let out = stripefs(&["mkfs", v.cfg(), "--force"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let one_fs = "are on one filesystem: striping over them is no faster than one disk";
    assert!(stderr(&out).contains(one_fs), "{}", stderr(&out));
    let out = stripefs(&["mount", v.cfg(), v.mnt_str()]);
    assert!(out.status.success(), "{}", stderr(&out));
    v.umount_on_drop();
    assert!(stderr(&out).contains(one_fs), "{}", stderr(&out));
    // df: the backing filesystem once, not twice.
    let backing = statvfs_total(&v.devices[0]);
    let volume = statvfs_total(&v.mnt);
    assert!(volume <= backing, "volume {volume} > backing {backing}");
    assert!(volume > backing / 2, "volume {volume}, backing {backing}");
    // 256K over two devices with 64K stripes: 128K in one object on each.
    std::fs::write(v.path("f"), vec![1u8; 256 * 1024]).unwrap();
    let human = stripefs_ok(&["status", v.mnt_str()]);
    assert!(human.contains(one_fs), "{human}");
    for header in ["objects", "stripefs", "share", "fs size", "fs free"] {
        assert!(human.contains(header), "{header}: {human}");
    }
    assert!(human.contains("50.0%"), "{human}");
    let json: serde_json::Value =
        serde_json::from_str(&stripefs_ok(&["status", v.mnt_str(), "--json"])).unwrap();
    for d in 0..2 {
        let u = &json["usage"][d];
        assert_eq!(u["objects"], 1, "{u}");
        assert!(u["bytes"].as_u64().unwrap() >= 128 * 1024, "{u}");
        assert_eq!(u["shares_filesystem_with"][0], 1 - d, "{u}");
    }
}

const COMMANDS: &[&[&str]] = &[
    &["mkfs"],
    &["mount"],
    &["umount"],
    &["status"],
    &["layout", "get"],
    &["layout", "set"],
    &["layout", "clear"],
    &["migrate"],
    &["fsck"],
    &["target", "add"],
    &["target", "rm"],
    &["target", "ls"],
    &["class", "add"],
    &["class", "rm"],
    &["class", "ls"],
    &["stats"],
    &["flush"],
    &["mode"],
    &["cleaner"],
    &["cache", "purge"],
    &["cache", "attach"],
    &["cache", "detach"],
    &["bench"],
    &["bench", "sweep"],
    &["bench", "compare"],
    &["bench", "preset"],
    &["demo"],
    &["man"],
    &["completions"],
];

/// `--help` of every command ends with an example; the ranges are given where there are some.
#[test]
fn every_command_has_help_with_an_example() {
    for cmd in COMMANDS {
        let mut args = cmd.to_vec();
        args.push("--help");
        let help = stripefs_ok(&args);
        assert!(help.contains("Example:\n  stripefs "), "{cmd:?}: {help}");
    }
    let help = stripefs_ok(&["layout", "set", "--help"]);
    assert!(help.contains("8K to 256K"), "{help}");
    assert!(help.contains("1 to the number of devices"), "{help}");
    let help = stripefs_ok(&["target", "add", "--help"]);
    assert!(help.contains("0 to 255"), "{help}");
    let help = stripefs_ok(&["demo", "--help"]);
    assert!(help.contains("1 to 256"), "{help}");
    refused_usage(&["demo", "--devices", "0"]);
}

fn refused_usage(args: &[&str]) {
    let out = stripefs(args);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
}

/// `stripefs man` prints a man page naming every command; `stripefs completions SHELL`
/// completes them.
#[test]
fn man_page_and_completions_name_the_commands() {
    let page = stripefs_ok(&["man"]);
    assert!(
        page.starts_with(".ie") || page.contains(".TH stripefs 8"),
        "{page}"
    );
    for cmd in COMMANDS {
        let title = format!(".SH \"STRIPEFS {}\"", cmd.join(" ").to_uppercase());
        assert!(page.contains(&title), "{title} missing");
    }
    assert!(page.contains("stripefs migrate /mnt/vol/vm/disk.img"));
    for shell in ["bash", "zsh", "fish"] {
        let script = stripefs_ok(&["completions", shell]);
        assert!(!script.is_empty(), "{shell}");
        for word in [
            "mkfs",
            "migrate",
            "target",
            "layout",
            "completions",
            "stripe-size",
        ] {
            assert!(script.contains(word), "{shell} completions lack {word}");
        }
    }
    refused_usage(&["completions", "tcsh"]);
}

/// `migrate` and `fsck` show progress on a terminal, and nothing of it when stderr is not one.
#[test]
fn migrate_and_fsck_show_progress_on_a_terminal_only() {
    let mut v = TestVolume::new(2, "64K", "");
    v.mount();
    let f = v.path("f");
    std::fs::write(&f, vec![5u8; 300_000]).unwrap();
    let fs = f.to_str().unwrap();
    let out = stripefs(&["migrate", fs, "--width", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    // On a terminal (script(1) gives the command one).
    let on_tty = |cmd: String| {
        run_with_timeout(
            std::process::Command::new("script").args(["-qec", &cmd, "/dev/null"]),
            std::time::Duration::from_secs(60),
        )
    };
    let out = on_tty(format!("{BIN} migrate {fs} --width 2"));
    assert!(out.status.success(), "{}", stdout(&out));
    assert!(stdout(&out).contains("migrating "), "{}", stdout(&out));
    assert_eq!(std::fs::read(&f).unwrap(), vec![5u8; 300_000]);
    v.umount();
    let out = on_tty(format!("{BIN} fsck {}", v.cfg()));
    assert!(out.status.success(), "{}", stdout(&out));
    assert!(stdout(&out).contains("checking "), "{}", stdout(&out));
    let out = stripefs(&["fsck", v.cfg()]);
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
}
