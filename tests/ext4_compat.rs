//! What ext4 users and tools rely on beyond POSIX: open directories that outlive their name,
//! one largest file size for every call, RENAME_WHITEOUT and an overlayfs upper layer on the
//! volume, file handles that survive dropped caches (NFS export), and shared maps of files
//! opened with O_DIRECT. Where ext4's answer is the reference, the same steps run on a plain
//! directory of the host (ext4 here) and on the volume, and the answers must match.

mod common;

use common::*;
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const RENAME_NOREPLACE: u32 = 1;
const RENAME_EXCHANGE: u32 = 2;
const RENAME_WHITEOUT: u32 = 4;

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// The errno of the last failed call, as a result.
fn check(r: i64) -> Result<i64, i32> {
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    } else {
        Ok(r)
    }
}

fn open_dir(p: &Path) -> OwnedFd {
    // SAFETY: open of a C string; the descriptor is owned at once.
    let fd = unsafe { libc::open(cstr(p).as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
    assert!(fd >= 0, "open {p:?}: {}", std::io::Error::last_os_error());
    // SAFETY: a fresh descriptor.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn fstat(fd: RawFd) -> libc::stat {
    // SAFETY: fstat fills the struct we pass.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::fstat(fd, &mut st) }, 0, "fstat");
    st
}

/// The names getdents64 reads from `fd` (from where its offset is), or its errno.
fn getdents(fd: RawFd) -> Result<Vec<String>, i32> {
    let mut names = Vec::new();
    let mut buf = vec![0u8; 8192];
    loop {
        // SAFETY: getdents64 writes at most buf.len() bytes into buf.
        let n =
            check(unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) })?
                as usize;
        if n == 0 {
            return Ok(names);
        }
        let mut at = 0;
        while at < n {
            let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
            let name = &buf[at + 19..at + reclen];
            let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            names.push(String::from_utf8_lossy(&name[..end]).into_owned());
            at += reclen;
        }
    }
}

/// What a removed directory still open looks like through its descriptor.
#[derive(Debug, PartialEq)]
struct DeadDir {
    nlink: u64,
    is_dir: bool,
    entries: Result<Vec<String>, i32>,
    create: Result<i64, i32>,
    mkdir: Result<i64, i32>,
}

fn dead_dir(fd: &OwnedFd) -> DeadDir {
    let st = fstat(fd.as_raw_fd());
    let name = c"new";
    DeadDir {
        nlink: st.st_nlink,
        is_dir: st.st_mode & libc::S_IFMT == libc::S_IFDIR,
        entries: getdents(fd.as_raw_fd()),
        // SAFETY: openat/mkdirat on a live descriptor with a static C string.
        create: check(unsafe {
            libc::openat(
                fd.as_raw_fd(),
                name.as_ptr(),
                libc::O_CREAT | libc::O_WRONLY,
                0o644,
            )
        } as i64),
        mkdir: check(unsafe { libc::mkdirat(fd.as_raw_fd(), name.as_ptr(), 0o755) } as i64),
    }
}

/// rmdir of an open directory, and a rename over one: what the descriptor shows.
fn removed_while_open(base: &Path) -> (DeadDir, DeadDir) {
    fs::create_dir(base.join("gone")).unwrap();
    let gone = open_dir(&base.join("gone"));
    fs::remove_dir(base.join("gone")).unwrap();
    let removed = dead_dir(&gone);

    fs::create_dir(base.join("a")).unwrap();
    fs::create_dir(base.join("b")).unwrap();
    let b = open_dir(&base.join("b"));
    let b_ino = fstat(b.as_raw_fd()).st_ino;
    fs::rename(base.join("a"), base.join("b")).unwrap();
    assert_ne!(fs::metadata(base.join("b")).unwrap().ino(), b_ino);
    let renamed_over = dead_dir(&b);
    (removed, renamed_over)
}

/// The volume's inode count, from `stripefs status`.
fn inodes(v: &TestVolume) -> u64 {
    let status = stripefs_ok(&["status", v.mnt_str(), "--json"]);
    let s: serde_json::Value = serde_json::from_str(&status).unwrap();
    s["inodes"].as_u64().unwrap()
}

/// Waits (bounded) for the volume's inode count to come to `want`: the kernel sends a close's
/// release after close(2) has returned.
fn wait_for_inodes(v: &TestVolume, want: u64, what: &str) {
    let start = Instant::now();
    loop {
        let now = inodes(v);
        if now == want {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{what}: {now} inodes, expected {want}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_open_directory_outlives_rmdir_and_a_rename_over_it_as_on_ext4() {
    let host = tempfile::tempdir().unwrap();
    let reference = removed_while_open(host.path());
    assert_eq!(reference.0.nlink, 0, "the host's own answer: {reference:?}");

    let mut v = TestVolume::new(2, "64K", "");
    v.mount();
    let before = inodes(&v);
    fs::create_dir(v.path("t")).unwrap();
    let ours = removed_while_open(&v.path("t"));
    assert_eq!(ours, reference, "stripefs vs ext4");
    // The removed directories went with their last handle: t and the renamed a are left.
    wait_for_inodes(&v, before + 2, "after the last close");

    // A crash while a removed directory (and an unlinked file) is open: fsck sees orphans,
    // not damage, and the next mount frees them.
    fs::create_dir(v.path("t/doomed")).unwrap();
    let doomed = open_dir(&v.path("t/doomed"));
    fs::remove_dir(v.path("t/doomed")).unwrap();
    assert_eq!(fstat(doomed.as_raw_fd()).st_nlink, 0);
    fs::write(v.path("t/file"), b"open").unwrap();
    let file = File::open(v.path("t/file")).unwrap();
    fs::remove_file(v.path("t/file")).unwrap();
    // The removals durable (fsyncdir), with both still open.
    File::open(&v.mnt).unwrap().sync_all().unwrap();
    v.crash();
    drop((doomed, file));
    v.assert_fsck_clean("with orphans left by a crash");
    v.mount();
    assert_eq!(inodes(&v), before + 2, "the orphans are freed at mount");
    v.umount();
    v.assert_fsck_clean("after the orphans were freed");
}

/// The largest size a file of this volume takes, found by truncate alone.
fn largest_by_truncate(f: &File) -> u64 {
    let (mut ok, mut too_big) = (0u64, i64::MAX as u64 + 1);
    while too_big - ok > 1 {
        let mid = ok + (too_big - ok) / 2;
        match f.set_len(mid) {
            Ok(()) => ok = mid,
            Err(e) => {
                assert_eq!(
                    e.raw_os_error(),
                    Some(libc::EFBIG),
                    "truncate to {mid}: {e}"
                );
                too_big = mid;
            }
        }
    }
    ok
}

/// The largest file the filesystem of `dir` takes (its s_maxbytes), probed as the daemon does.
fn backing_limit(dir: &Path) -> u64 {
    let f = tempfile::tempfile_in(dir).unwrap();
    let (mut ok, mut too_big) = (0u64, i64::MAX as u64);
    if f.set_len(too_big).is_ok() {
        return too_big;
    }
    while too_big - ok > 1 {
        let mid = ok + (too_big - ok) / 2;
        match f.set_len(mid) {
            Ok(()) => ok = mid,
            Err(_) => too_big = mid,
        }
    }
    ok
}

fn fallocate_at(f: &File, offset: u64, len: u64) -> Result<(), i32> {
    // SAFETY: plain syscall on an open file.
    check(unsafe { libc::fallocate(f.as_raw_fd(), 0, offset as i64, len as i64) } as i64)
        .map(|_| ())
}

/// Every call agrees on the largest file: truncate, write and fallocate, exactly at the
/// boundary, on a sparse file (only the bytes written at the end hold data).
fn one_largest_file(v: &TestVolume, expected: u64) {
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(v.path("sparse"))
        .unwrap();
    let max = largest_by_truncate(&f);
    assert_eq!(max, expected, "the largest file truncate allows");
    f.set_len(0).unwrap();

    assert_eq!(fallocate_at(&f, max, 1), Err(libc::EFBIG), "fallocate past");
    assert_eq!(
        fallocate_at(&f, max - 1, 2),
        Err(libc::EFBIG),
        "fallocate across"
    );
    // Past i64::MAX no call can even ask (off_t).
    if max < i64::MAX as u64 {
        let e = f.set_len(max + 1).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFBIG), "truncate past: {e}");
        let e = f.write_at(b"z", max).unwrap_err();
        assert_eq!(
            e.raw_os_error(),
            Some(libc::EFBIG),
            "write at the limit: {e}"
        );
    }
    // Just below: the last byte a file can hold is written, read back, and sizes the file.
    assert_eq!(f.write_at(b"z", max - 1).unwrap(), 1);
    assert_eq!(f.metadata().unwrap().len(), max);
    let mut b = [0u8; 2];
    assert_eq!(f.read_at(&mut b, max - 2).unwrap(), 2);
    assert_eq!(&b, b"\0z");
    fallocate_at(&f, max - 4096, 4096).unwrap();
    f.set_len(max).unwrap();
    f.set_len(0).unwrap();
    drop(f);
    fs::remove_file(v.path("sparse")).unwrap();
}

#[test]
fn truncate_write_and_fallocate_agree_on_the_largest_file() {
    // Devices on the host's filesystem (ext4: 16 TiB - 4 KiB per object): whole stripe rows.
    let mut v = TestVolume::new(2, "64K", "");
    v.mount();
    let per_object = backing_limit(&v.devices[0]);
    let s = 64 * 1024;
    let max = (per_object / s * s * 2).min(i64::MAX as u64);
    one_largest_file(&v, max);
    v.umount();

    // With the kernel's write-back cache, buffered writes go to the page cache without a word
    // to the daemon, and FUSE has no way to tell the kernel the largest file: a write past it
    // is refused at fsync (as any write-back error is) instead of at write.
    if max < i64::MAX as u64 {
        v.mount_with(&["-o", "writeback_cache"]);
        let f = File::create(v.path("wb")).unwrap();
        f.write_at(b"z", max - 1).unwrap();
        f.sync_all().unwrap();
        let e = f.set_len(max + 1).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFBIG), "truncate past: {e}");
        f.write_at(b"z", max).unwrap();
        let e = f.sync_all().unwrap_err();
        assert_eq!(
            e.raw_os_error(),
            Some(libc::EFBIG),
            "fsync of a write past: {e}"
        );
        drop(f);
        v.remount();
        assert_eq!(fs::metadata(v.path("wb")).unwrap().len(), max);
        fs::remove_file(v.path("wb")).unwrap();
        v.umount();
    }

    // Devices on tmpfs (no limit below the kernel's): the largest file is 2^63 - 1 bytes.
    let ram = tempfile::tempdir().unwrap();
    let _tmpfs = Tmpfs::over(ram.path(), "16m");
    let devices: Vec<_> = (0..2).map(|i| ram.path().join(format!("d{i}"))).collect();
    for d in &devices {
        fs::create_dir(d).unwrap();
    }
    let mut v = TestVolume::on(tempfile::tempdir().unwrap(), devices, "64K", "");
    v.mount();
    one_largest_file(&v, i64::MAX as u64);
    v.umount();
}

fn renameat2(from: &Path, to: &Path, flags: u32) -> Result<i64, i32> {
    // SAFETY: renameat2 with two C strings.
    check(unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            cstr(from).as_ptr(),
            libc::AT_FDCWD,
            cstr(to).as_ptr(),
            flags,
        )
    })
}

fn is_whiteout(p: &Path) -> bool {
    let m = fs::symlink_metadata(p).unwrap();
    m.file_type().is_char_device() && m.rdev() == 0
}

#[test]
fn rename_whiteout_leaves_a_whiteout_in_one_step() {
    let mut v = TestVolume::new(2, "64K", "");
    v.mount();
    fs::write(v.path("a"), b"moved").unwrap();
    fs::write(v.path("old"), b"replaced").unwrap();
    renameat2(&v.path("a"), &v.path("old"), RENAME_WHITEOUT).unwrap();
    assert_eq!(fs::read(v.path("old")).unwrap(), b"moved");
    assert!(is_whiteout(&v.path("a")));
    let m = fs::symlink_metadata(v.path("a")).unwrap();
    assert_eq!((m.mode() & 0o7777, m.nlink(), m.uid()), (0, 1, 0));

    // A directory too, to another directory, with NOREPLACE.
    fs::create_dir(v.path("d")).unwrap();
    fs::create_dir(v.path("e")).unwrap();
    fs::write(v.path("d/f"), b"in d").unwrap();
    renameat2(
        &v.path("d"),
        &v.path("e/d"),
        RENAME_WHITEOUT | RENAME_NOREPLACE,
    )
    .unwrap();
    assert!(is_whiteout(&v.path("d")));
    assert_eq!(fs::read(v.path("e/d/f")).unwrap(), b"in d");
    assert_eq!(fs::metadata(v.path("e")).unwrap().nlink(), 3);
    assert_eq!(
        renameat2(
            &v.path("old"),
            &v.path("e/d"),
            RENAME_WHITEOUT | RENAME_NOREPLACE
        ),
        Err(libc::EEXIST)
    );
    assert!(
        !is_whiteout(&v.path("old")),
        "a refused rename leaves no whiteout"
    );
    assert_eq!(
        renameat2(
            &v.path("old"),
            &v.path("e/d"),
            RENAME_WHITEOUT | RENAME_EXCHANGE
        ),
        Err(libc::EINVAL)
    );

    // The whiteouts are in the namespace like any node: they survive a crash after fsync.
    File::open(&v.mnt).unwrap().sync_all().unwrap();
    v.crash();
    v.mount();
    assert!(is_whiteout(&v.path("a")) && is_whiteout(&v.path("d")));
    assert_eq!(fs::read(v.path("old")).unwrap(), b"moved");
    v.umount();
    v.assert_fsck_clean("after whiteouts");
}

/// Kernel log lines from overlayfs since `skip` lines.
fn overlay_messages(skip: usize) -> Vec<String> {
    let out = Command::new("dmesg").output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(skip)
        .filter(|l| l.contains("overlayfs"))
        .map(str::to_string)
        .collect()
}

fn dmesg_lines() -> usize {
    let out = Command::new("dmesg").output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().count()
}

struct Overlay(std::path::PathBuf);

impl Overlay {
    fn mount(lower: &Path, upper: &Path, work: &Path, merged: &Path) -> Overlay {
        let opts = format!(
            "lowerdir={},upperdir={},workdir={}",
            lower.display(),
            upper.display(),
            work.display()
        );
        let out = run_with_timeout(
            Command::new("mount")
                .args(["-t", "overlay", "overlay", "-o", &opts])
                .arg(merged),
            Duration::from_secs(30),
        );
        assert!(
            out.status.success(),
            "mount overlay: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Overlay(merged.to_path_buf())
    }
}

impl Drop for Overlay {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut n: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    n.sort();
    n
}

#[test]
fn the_volume_is_an_overlayfs_upper_layer() {
    let mut v = TestVolume::new(2, "64K", "");
    v.mount();
    let host = tempfile::tempdir().unwrap();
    let (lower, merged) = (host.path().join("lower"), host.path().join("merged"));
    fs::create_dir_all(lower.join("dir")).unwrap();
    fs::create_dir(&merged).unwrap();
    fs::write(lower.join("keep"), b"lower keep").unwrap();
    fs::write(lower.join("gone"), b"lower gone").unwrap();
    fs::write(lower.join("moved"), b"lower moved").unwrap();
    fs::write(lower.join("edited"), b"lower").unwrap();
    fs::write(lower.join("dir/x"), b"x").unwrap();
    let (upper, work) = (v.path("upper"), v.path("work"));
    fs::create_dir(&upper).unwrap();
    fs::create_dir(&work).unwrap();

    let skip = dmesg_lines();
    let ov = Overlay::mount(&lower, &upper, &work, &merged);
    // The upper layer passes overlayfs's checks (xattrs, RENAME_WHITEOUT, d_type, file
    // handles, O_TMPFILE). Kernels that probe tmpfile differently may still say it lacks
    // it, which overlayfs works around with a temporary name in the work directory.
    let said = overlay_messages(skip);
    let unexpected: Vec<&String> = said
        .iter()
        .filter(|l| !l.contains("upper fs does not support tmpfile"))
        .collect();
    assert!(unexpected.is_empty(), "overlayfs fell back: {said:?}");

    fs::remove_file(merged.join("gone")).unwrap();
    fs::rename(merged.join("moved"), merged.join("renamed")).unwrap();
    let mut f = OpenOptions::new()
        .append(true)
        .open(merged.join("edited"))
        .unwrap();
    std::io::Write::write_all(&mut f, b" and upper").unwrap();
    drop(f);
    fs::write(merged.join("new"), b"upper new").unwrap();
    fs::remove_dir_all(merged.join("dir")).unwrap();
    fs::create_dir(merged.join("dir")).unwrap();

    let check_merged = |when: &str| {
        assert_eq!(
            names(&merged),
            ["dir", "edited", "keep", "new", "renamed"],
            "{when}"
        );
        assert!(names(&merged.join("dir")).is_empty(), "{when}: opaque dir");
        assert_eq!(fs::read(merged.join("keep")).unwrap(), b"lower keep");
        assert_eq!(fs::read(merged.join("renamed")).unwrap(), b"lower moved");
        assert_eq!(fs::read(merged.join("edited")).unwrap(), b"lower and upper");
        assert_eq!(fs::read(merged.join("new")).unwrap(), b"upper new");
    };
    check_merged("mounted");
    // The lower layer is untouched; the upper holds whiteouts for what went.
    assert_eq!(fs::read(lower.join("gone")).unwrap(), b"lower gone");
    assert_eq!(fs::read(lower.join("edited")).unwrap(), b"lower");
    assert!(is_whiteout(&upper.join("gone")) && is_whiteout(&upper.join("moved")));
    assert_eq!(
        getxattr(&upper.join("dir"), "trusted.overlay.opaque").unwrap(),
        b"y"
    );

    // Again on a fresh overlay over a remounted volume: all of it was the volume's.
    drop(ov);
    v.remount();
    let _ov = Overlay::mount(&lower, &upper, &work, &merged);
    check_merged("remounted");
}

/// name_to_handle_at: the handle's bytes (handle_bytes, handle_type, f_handle).
fn handle_of(p: &Path) -> Vec<u8> {
    let mut buf = vec![0u8; 8 + 128];
    buf[..4].copy_from_slice(&128u32.to_ne_bytes());
    let mut mount_id: libc::c_int = 0;
    // SAFETY: the buffer is a struct file_handle with room for 128 bytes of handle.
    check(unsafe {
        libc::syscall(
            libc::SYS_name_to_handle_at,
            libc::AT_FDCWD,
            cstr(p).as_ptr(),
            buf.as_mut_ptr(),
            &mut mount_id,
            0,
        )
    })
    .unwrap_or_else(|e| panic!("name_to_handle_at {p:?}: errno {e}"));
    let len = u32::from_ne_bytes(buf[..4].try_into().unwrap()) as usize;
    buf.truncate(8 + len);
    buf
}

fn open_by_handle(mount: &File, handle: &[u8], flags: i32) -> Result<File, i32> {
    let mut h = handle.to_vec();
    // SAFETY: a struct file_handle as name_to_handle_at gave it.
    let fd = check(unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            mount.as_raw_fd(),
            h.as_mut_ptr(),
            flags,
        )
    })?;
    // SAFETY: a fresh descriptor.
    Ok(unsafe { File::from_raw_fd(fd as RawFd) })
}

fn drop_caches() {
    fs::write("/proc/sys/vm/drop_caches", b"3").unwrap();
}

#[test]
fn file_handles_outlive_dropped_caches() {
    let mut v = TestVolume::new(2, "64K", "");
    v.mount();
    fs::create_dir_all(v.path("a/b")).unwrap();
    fs::write(v.path("a/b/f"), b"by handle").unwrap();
    fs::write(v.path("a/b/deleted"), b"x").unwrap();
    let file = handle_of(&v.path("a/b/f"));
    let dir = handle_of(&v.path("a/b"));
    let deleted = handle_of(&v.path("a/b/deleted"));
    fs::remove_file(v.path("a/b/deleted")).unwrap();
    for round in 0..2 {
        drop_caches();
        let mount = File::open(&v.mnt).unwrap();
        let mut f = open_by_handle(&mount, &file, libc::O_RDONLY)
            .unwrap_or_else(|e| panic!("round {round}: open the file by handle: errno {e}"));
        let mut s = String::new();
        std::io::Read::read_to_string(&mut f, &mut s).unwrap();
        assert_eq!(s, "by handle");
        drop(f);
        drop_caches();
        let d = open_by_handle(&mount, &dir, libc::O_RDONLY | libc::O_DIRECTORY)
            .unwrap_or_else(|e| panic!("round {round}: open the directory by handle: errno {e}"));
        let mut listed = getdents(d.as_raw_fd()).unwrap();
        listed.sort();
        assert_eq!(listed, [".", "..", "f"]);
        // The directory was reconnected to its path: its parent is a, found by "..".
        let at = fs::read_link(format!("/proc/self/fd/{}", d.as_raw_fd())).unwrap();
        assert_eq!(at, v.path("a/b"));
        // A deleted file's handle is stale, never another file.
        assert_eq!(
            open_by_handle(&mount, &deleted, libc::O_RDONLY).err(),
            Some(libc::ESTALE)
        );
        drop((d, mount));
        // Node ids are inode numbers, kept in the store: the handles hold across a remount.
        v.remount();
    }
}

#[test]
fn a_file_opened_with_o_direct_maps_shared() {
    let mut v = TestVolume::new(2, "64K", "");
    v.mount();
    let len = 256 * 1024;
    fs::write(v.path("m"), vec![b'.'; len]).unwrap();
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(v.path("m"))
        .unwrap();
    // SAFETY: a shared map of an open file; unmapped below, the file outlives it.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(
        map,
        libc::MAP_FAILED,
        "mmap of an O_DIRECT file: {}",
        std::io::Error::last_os_error()
    );
    let patch = Rng::new(6).bytes(100_000);
    // SAFETY: the map is `len` bytes, writable.
    let bytes = unsafe { std::slice::from_raw_parts_mut(map as *mut u8, len) };
    bytes[70_000..170_000].copy_from_slice(&patch);
    // SAFETY: the map made above.
    unsafe {
        assert_eq!(libc::msync(map, len, libc::MS_SYNC), 0, "msync");
        libc::munmap(map, len);
    }
    drop(f);
    let mut want = vec![b'.'; len];
    want[70_000..170_000].copy_from_slice(&patch);
    assert!(fs::read(v.path("m")).unwrap() == want, "read back");
    // From the devices, not from the page cache.
    v.remount();
    assert!(
        fs::read(v.path("m")).unwrap() == want,
        "read back after remount"
    );
}

/// O_TMPFILE as on ext4 (FUSE_TMPFILE): an unnamed file, nlink 0, that linkat through
/// /proc/self/fd gives a name; one never linked leaves nothing behind at its last close.
#[test]
fn o_tmpfile_is_unnamed_until_linked() {
    let mut v = TestVolume::new(2, "64K", "");
    v.mount();
    fs::create_dir(v.path("d")).unwrap();
    let before = inodes(&v);
    let tmp = |dir: &Path| {
        OpenOptions::new()
            .read(true)
            .write(true)
            .mode(0o640)
            .custom_flags(libc::O_TMPFILE)
            .open(dir)
            .unwrap()
    };
    // Spans stripes of both devices.
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();

    let f = tmp(&v.path("d"));
    f.write_all_at(&data, 0).unwrap();
    let mut back = vec![0u8; data.len()];
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back == data, "read back through the descriptor");
    let st = fstat(f.as_raw_fd());
    assert_eq!(st.st_nlink, 0);
    assert_eq!(st.st_size as usize, data.len());
    assert_eq!(st.st_mode & 0o7777, 0o640);
    assert!(
        names(&v.path("d")).is_empty(),
        "an O_TMPFILE file has no name"
    );

    // linkat(AT_FDCWD, "/proc/self/fd/N", AT_FDCWD, name, AT_SYMLINK_FOLLOW).
    let from = CString::new(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap();
    let to = CString::new(v.path("d/kept").as_os_str().as_bytes()).unwrap();
    // SAFETY: plain syscall with valid C strings.
    let r = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    assert_eq!(r, 0, "linkat: {}", std::io::Error::last_os_error());
    assert_eq!(fstat(f.as_raw_fd()).st_nlink, 1);
    drop(f);
    assert!(
        fs::read(v.path("d/kept")).unwrap() == data,
        "read back by name"
    );

    // Never linked: gone at the last close.
    let g = tmp(&v.path("d"));
    g.write_all_at(b"scratch", 0).unwrap();
    drop(g);
    assert_eq!(names(&v.path("d")), ["kept"]);
    wait_for_inodes(&v, before + 1, "after the unlinked O_TMPFILE file closed");

    v.remount();
    assert!(
        fs::read(v.path("d/kept")).unwrap() == data,
        "after a remount"
    );
    v.umount();
    v.assert_fsck_clean("after O_TMPFILE files");
}
