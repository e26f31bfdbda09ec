//! Damaged input: a namespace store truncated, with a page of garbage, or deleted; a device's
//! superblock of garbage, truncated, or another volume's. Mount refuses each with a message
//! naming the file and writes nothing; fsck says it cannot check the volume (exit 8); neither
//! panics. Also: fsck's exit codes, no false alarm for a sparse file behind a write-back cache,
//! and dead mounts (daemon killed) cleared by `stripefs umount` and `stripefs mount`.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Output;

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A panic exits 101 and prints "panicked"; neither may happen.
fn assert_no_panic(out: &Output, what: &str) {
    assert_ne!(
        out.status.code(),
        Some(101),
        "{what} panicked: {}",
        text(out)
    );
    assert!(
        !text(out).contains("panicked"),
        "{what} panicked: {}",
        text(out)
    );
}

fn namespace(v: &TestVolume) -> PathBuf {
    v.devices[0].join(".stripefs/namespace.redb")
}

fn superblock(v: &TestVolume, dev: usize) -> PathBuf {
    v.devices[dev].join(".stripefs/superblock")
}

/// The bytes of the namespace store and every superblock: what must not be written over.
fn metadata_bytes(v: &TestVolume) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut files = vec![namespace(v)];
    files.extend((0..v.devices.len()).map(|d| superblock(v, d)));
    files
        .into_iter()
        .map(|f| (f.clone(), fs::read(f).ok()))
        .collect()
}

/// A 2-device volume holding a few hundred names (a namespace of several pages), unmounted.
fn populated() -> TestVolume {
    let mut v = TestVolume::new(2, "64K", "");
    v.mount();
    fs::create_dir(v.path("dir")).unwrap();
    for i in 0..300 {
        fs::write(v.path(&format!("dir/file-number-{i}")), format!("{i}")).unwrap();
    }
    v.umount();
    v.assert_fsck_clean("before the damage");
    v
}

/// `stripefs mount` is refused, naming `file`, with nothing mounted and nothing written.
fn assert_mount_refused(v: &TestVolume, file: &Path) {
    let before = metadata_bytes(v);
    let out = stripefs(&["mount", v.cfg(), v.mnt_str()]);
    if is_mounted(&v.mnt) {
        lazy_umount(&v.mnt);
        panic!("mounted despite damaged {}: {}", file.display(), text(&out));
    }
    assert_no_panic(&out, "mount");
    assert!(!out.status.success(), "mount succeeded: {}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(file.to_str().unwrap()),
        "mount's message does not name {}: {err}",
        file.display()
    );
    assert!(
        before == metadata_bytes(v),
        "the refused mount wrote over metadata"
    );
}

/// `stripefs fsck` exits 8 (cannot check the volume), naming `file`, writing nothing.
fn assert_fsck_cannot_check(v: &TestVolume, file: &Path) {
    let before = metadata_bytes(v);
    let out = stripefs(&["fsck", v.cfg()]);
    assert_no_panic(&out, "fsck");
    assert_eq!(out.status.code(), Some(8), "fsck: {}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("could not be checked") && err.contains(file.to_str().unwrap()),
        "fsck's message does not name {}: {err}",
        file.display()
    );
    assert!(before == metadata_bytes(v), "fsck wrote over metadata");
}

#[test]
fn a_truncated_namespace_is_refused_by_name() {
    let v = populated();
    let ns = namespace(&v);
    let len = fs::metadata(&ns).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(&ns)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    assert_mount_refused(&v, &ns);
    assert_fsck_cannot_check(&v, &ns);
}

#[test]
fn a_deleted_namespace_is_refused_by_name() {
    let v = populated();
    let ns = namespace(&v);
    fs::remove_file(&ns).unwrap();
    assert_mount_refused(&v, &ns);
    assert_fsck_cannot_check(&v, &ns);
    assert!(!ns.exists(), "nothing made a new namespace");
}

/// Each page of the store in turn is overwritten with garbage: fsck finds every page the
/// store uses (its checksums), says 0 for the pages it does not use (old copies, free space),
/// never panics and never writes; mount refuses every page fsck found.
#[test]
fn a_page_of_garbage_in_the_namespace_is_found_and_refused() {
    let v = populated();
    let ns = namespace(&v);
    let good = fs::read(&ns).unwrap();
    let pages = good.len() / 4096;
    assert!(
        pages > 8,
        "a namespace of {pages} pages is too small to test"
    );
    let mut found = Vec::new();
    for page in 0..pages {
        let mut bad = good.clone();
        bad[page * 4096..(page + 1) * 4096].copy_from_slice(&Rng::new(page as u64).bytes(4096));
        fs::write(&ns, &bad).unwrap();
        let out = stripefs(&["fsck", v.cfg()]);
        assert_no_panic(&out, &format!("fsck with page {page} damaged"));
        match out.status.code() {
            Some(0) => {}
            Some(8) => {
                assert!(
                    String::from_utf8_lossy(&out.stderr).contains(ns.to_str().unwrap()),
                    "page {page}: {}",
                    text(&out)
                );
                found.push(page);
            }
            other => panic!("page {page}: fsck exited {other:?}: {}", text(&out)),
        }
        assert!(fs::read(&ns).unwrap() == bad, "fsck wrote to the store");
    }
    assert!(found.contains(&0), "the header page: {found:?}");
    assert!(
        found.len() >= 4,
        "the store's pages in use were not found: {found:?}"
    );
    for &page in &found {
        let mut bad = good.clone();
        bad[page * 4096..(page + 1) * 4096].copy_from_slice(&Rng::new(page as u64).bytes(4096));
        fs::write(&ns, &bad).unwrap();
        assert_mount_refused(&v, &ns);
    }
    fs::write(&ns, &good).unwrap();
    v.assert_fsck_clean("with the store restored");
}

/// One byte of a name changed: the tree still reads, as a name with a wrong letter. Only the
/// checksums tell; fsck and mount both verify them.
#[test]
fn one_changed_byte_in_a_name_is_found_by_its_checksum() {
    let v = populated();
    let ns = namespace(&v);
    let good = fs::read(&ns).unwrap();
    let needle = b"file-number-150";
    let hits: Vec<usize> = good
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| w == needle)
        .map(|(i, _)| i)
        .collect();
    assert!(!hits.is_empty(), "the name is in the store");
    let mut found = 0;
    for at in hits {
        let mut bad = good.clone();
        bad[at] = b'X';
        fs::write(&ns, &bad).unwrap();
        let out = stripefs(&["fsck", v.cfg()]);
        assert_no_panic(&out, "fsck");
        match out.status.code() {
            Some(0) => continue, // an old copy of the page, no longer in the tree
            Some(8) => found += 1,
            other => panic!("fsck exited {other:?}: {}", text(&out)),
        }
        assert!(text(&out).contains("checksums"), "{}", text(&out));
        assert_mount_refused(&v, &ns);
    }
    assert!(found > 0, "the live copy of the name was not found damaged");
}

#[test]
fn a_damaged_superblock_is_refused_by_name() {
    let v = populated();
    let other = TestVolume::new(2, "64K", "");
    let sb = superblock(&v, 1);
    let good = fs::read(&sb).unwrap();
    let damages: [(&str, Vec<u8>); 3] = [
        ("garbage", Rng::new(7).bytes(good.len())),
        ("truncated", good[..good.len() / 3].to_vec()),
        ("another volume's", fs::read(superblock(&other, 1)).unwrap()),
    ];
    for (what, bytes) in damages {
        fs::write(&sb, &bytes).unwrap();
        assert_mount_refused(&v, &sb);
        assert_fsck_cannot_check(&v, &sb);
        assert!(fs::read(&sb).unwrap() == bytes, "{what}: rewritten");
    }
    fs::write(&sb, &good).unwrap();
    v.assert_fsck_clean("with the superblock restored");
}

/// A device whose superblock names another volume than most devices do is the one named.
#[test]
fn the_device_of_another_volume_is_the_one_named() {
    let v = TestVolume::new(3, "64K", "");
    let other = TestVolume::new(3, "64K", "");
    fs::copy(superblock(&other, 0), superblock(&v, 0)).unwrap();
    let out = stripefs(&["mount", v.cfg(), v.mnt_str()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let named = format!(
        "device {} belongs to volume",
        v.devices[0].to_str().unwrap()
    );
    assert!(err.contains(&named), "{err}");
    assert!(
        !err.contains(&format!("device {} belongs", v.devices[1].display())),
        "{err}"
    );
}

#[test]
fn fsck_exit_codes_follow_e2fsck() {
    let mut v = TestVolume::new(2, "64K", "");
    v.mount();
    fs::write(v.path("f"), b"data").unwrap();
    v.umount();
    let code = |args: &[&str]| {
        let out = stripefs(args);
        assert_no_panic(&out, "fsck");
        (out.status.code(), text(&out))
    };
    assert_eq!(code(&["fsck", v.cfg()]).0, Some(0), "a clean volume");

    // A problem: an object no file owns.
    let orphan = v.object(1, 999_999);
    fs::write(&orphan, b"stray").unwrap();
    let (c, out) = code(&["fsck", v.cfg()]);
    assert_eq!(c, Some(4), "found and left without --repair: {out}");
    assert!(out.contains("orphan-object"), "{out}");
    assert!(orphan.exists(), "nothing is repaired without --repair");
    let (c, out) = code(&["fsck", v.cfg(), "--repair"]);
    assert_eq!(c, Some(1), "repaired: {out}");
    assert!(!orphan.exists());
    assert_eq!(
        code(&["fsck", v.cfg()]).0,
        Some(0),
        "clean after the repair"
    );

    // A volume in use cannot be checked.
    v.mount();
    let (c, out) = code(&["fsck", v.cfg()]);
    assert_eq!(c, Some(8), "mounted: {out}");
    assert!(out.contains("in use"), "{out}");
    v.umount();

    // A namespace that cannot be opened.
    let ns = namespace(&v);
    let aside = ns.with_extension("aside");
    fs::rename(&ns, &aside).unwrap();
    let (c, out) = code(&["fsck", v.cfg(), "--repair"]);
    assert_eq!(c, Some(8), "no namespace: {out}");
    fs::rename(&aside, &ns).unwrap();

    // A namespace of another volume is not checked against these devices (a repair would
    // take every object for an orphan).
    let other = TestVolume::new(2, "64K", "");
    fs::copy(namespace(&other), &ns).unwrap();
    let (c, out) = code(&["fsck", v.cfg(), "--repair"]);
    assert_eq!(c, Some(8), "another volume's namespace: {out}");
    assert!(out.contains("belongs to volume"), "{out}");
    assert!(v.object(0, 2).exists(), "the file's object is still there");

    assert_eq!(code(&["fsck"]).0, Some(16), "a usage error");
    let (c, help) = code(&["fsck", "--help"]);
    assert_eq!(c, Some(0));
    for line in [
        "0  no problems",
        "1  problems found",
        "4  problems left",
        "8  operational",
    ] {
        assert!(help.contains(line), "help lacks \"{line}\": {help}");
    }
}

/// Sparse files written through a write-back cache, cleanly unmounted: fsck finds nothing.
#[test]
fn sparse_files_behind_a_write_back_cache_are_clean() {
    for store in ["ram", "file"] {
        let root = tempfile::tempdir().unwrap();
        let path = match store {
            "file" => format!("path = \"{}\"\n", root.path().display()),
            _ => String::new(),
        };
        let cache = format!(
            "[cache]\nstore = \"{store}\"\n{path}size = \"4M\"\nline_size = \"64K\"\nmode = \"wb\"\n"
        );
        let mut v = TestVolume::new(2, "64K", &cache);
        v.mount();
        // Written, then cut to nothing before any write-back, then extended: all a hole.
        let f = File::create(v.path("cut")).unwrap();
        f.write_all_at(&Rng::new(1).bytes(4096), 0).unwrap();
        f.set_len(0).unwrap();
        f.set_len(1 << 20).unwrap();
        drop(f);
        // Data in the middle of a large hole, and a tail cut off before write-back.
        let f = File::create(v.path("middle")).unwrap();
        f.set_len(8 << 20).unwrap();
        f.write_all_at(&Rng::new(2).bytes(4096), 4 << 20).unwrap();
        f.write_all_at(&Rng::new(3).bytes(4096), 7 << 20).unwrap();
        f.set_len(6 << 20).unwrap();
        drop(f);
        // Zeros only, restriped: the copy skips all-zero chunks.
        fs::write(v.path("zeros"), vec![0u8; 256 << 10]).unwrap();
        stripefs_ok(&[
            "migrate",
            v.path("zeros").to_str().unwrap(),
            "--stripe-size",
            "128K",
        ]);
        v.umount();
        let out = stripefs(&["fsck", v.cfg()]);
        assert_eq!(out.status.code(), Some(0), "{store} store: {}", text(&out));
        assert!(text(&out).contains("0 problems"), "{}", text(&out));
        v.mount();
        assert_eq!(fs::read(v.path("cut")).unwrap(), vec![0u8; 1 << 20]);
        let middle = fs::read(v.path("middle")).unwrap();
        assert_eq!(middle.len(), 6 << 20);
        assert_eq!(&middle[4 << 20..(4 << 20) + 4096], Rng::new(2).bytes(4096));
        v.umount();
    }
}

/// SIGKILLs the daemon and waits for it to be gone (pidfd: no polling), leaving the mount dead.
fn kill_daemon(v: &TestVolume) {
    let pid = v.daemon_pid();
    // SAFETY: plain syscalls on a pid and the descriptor they return.
    unsafe {
        let fd = libc::syscall(libc::SYS_pidfd_open, pid, 0) as i32;
        assert!(fd >= 0, "pidfd_open: {}", std::io::Error::last_os_error());
        assert_eq!(libc::kill(pid, libc::SIGKILL), 0);
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        assert_eq!(libc::poll(&mut p, 1, 30_000), 1, "daemon {pid} did not die");
        libc::close(fd);
    }
    // statfs always asks the daemon (a stat may come from the attribute cache).
    let c = std::ffi::CString::new(v.mnt_str()).unwrap();
    // SAFETY: statfs fills the zeroed struct.
    let r = unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut st)
    };
    let e = std::io::Error::last_os_error();
    assert!(
        r != 0 && e.raw_os_error() == Some(libc::ENOTCONN),
        "not a dead mount: {r} {e}"
    );
}

#[test]
fn umount_clears_a_dead_mount() {
    let mut v = TestVolume::new(2, "64K", "");
    v.mount();
    let f = File::create(v.path("kept")).unwrap();
    f.write_all_at(b"synced", 0).unwrap();
    f.sync_all().unwrap();
    drop(f);
    kill_daemon(&v);
    let out = stripefs(&["status", v.mnt_str()]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("is a dead mount"),
        "status on a dead mount: {}",
        text(&out)
    );
    let out = stripefs(&["umount", v.mnt_str()]);
    assert_no_panic(&out, "umount");
    assert!(out.status.success(), "umount: {}", text(&out));
    let msg = text(&out);
    assert!(msg.contains("dead mount"), "{msg}");
    assert!(msg.contains("nothing was written back"), "{msg}");
    assert!(!msg.contains("flushed"), "{msg}");
    assert!(!is_mounted(&v.mnt), "still mounted");
    v.mount();
    assert_eq!(fs::read(v.path("kept")).unwrap(), b"synced");
    v.umount();
    v.assert_fsck_clean("after the dead mount");
}

/// A file cache's fsynced dirty lines wait in the cache file when the daemon dies; mounting
/// over the dead mount detaches it, says so, and the mount writes them back.
#[test]
fn mount_over_a_dead_mount_detaches_it_and_recovers_the_cache() {
    let root = tempfile::tempdir().unwrap();
    let cache = format!(
        "[cache]\nstore = \"file\"\npath = \"{}\"\nsize = \"4M\"\nline_size = \"64K\"\nmode = \"wb\"\n\
         [cache.cleaner]\nstaleness = \"1h\"\n",
        root.path().display()
    );
    let mut v = TestVolume::new(2, "64K", &cache);
    v.mount();
    let data = Rng::new(9).bytes(300 << 10);
    let f = File::create(v.path("dirty")).unwrap();
    f.write_all_at(&data, 0).unwrap();
    f.sync_all().unwrap();
    drop(f);
    kill_daemon(&v);
    let out = stripefs(&["mount", v.cfg(), v.mnt_str()]);
    assert_no_panic(&out, "mount");
    assert!(out.status.success(), "mount: {}", text(&out));
    v.umount_on_drop();
    let msg = text(&out);
    assert!(
        msg.contains("dead mount") && msg.contains("detached"),
        "{msg}"
    );
    assert!(msg.contains("next mount"), "{msg}");
    assert!(!msg.contains("flushed"), "{msg}");
    assert_eq!(fs::read(v.path("dirty")).unwrap(), data);
    v.umount();
    v.assert_fsck_clean("after recovering the dead mount's cache");
}
