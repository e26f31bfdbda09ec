//! Defects a hostile review of collapse/insert, the namespace store's recovery, the control
//! channel, file handles, st_blocks and lseek found: each test failed before its fix and is
//! named for the defect it pins.

mod common;

use common::*;
use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

const STRIPE: u64 = 16 << 10;
const DEVICES: u64 = 3;
const ROW: u64 = STRIPE * DEVICES;

fn open_rw(path: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .unwrap()
}

fn shift(path: &Path, insert: bool, offset: u64, len: u64) -> std::io::Result<()> {
    let how = if insert { "insert" } else { "collapse" };
    setxattr(
        path,
        "user.stripefs.shift",
        format!("{how} {offset} {len}").as_bytes(),
    )
}

fn drop_caches() {
    fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
}

/// Where `needle` is in `hay`, for messages.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// First offset where `a` and `b` differ, for messages.
fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .or((a.len() != b.len()).then(|| a.len().min(b.len())))
}

/// A collapse (`user.stripefs.shift`) while the kernel holds dirty pages of the file (here
/// under `-o writeback_cache`, where write(2) only dirties the page cache): the daemon copies
/// what the devices hold, switches, and then tells the kernel to drop its pages — which makes
/// the kernel write the dirty pages back first (launder), at their pre-collapse offsets, into
/// the collapsed file. An acknowledged write ends up a row away from where it belongs and the
/// bytes that should be there are the old ones. fallocate(COLLAPSE_RANGE) on ext4 writes the
/// dirty pages back before it shifts.
#[test]
fn shift_lands_kernel_dirty_pages_at_their_pre_shift_offsets() {
    let mut v = TestVolume::new(DEVICES as usize, "16K", "");
    v.mount_with(&["-o", "writeback_cache"]);
    let mut rng = Rng::new(11);
    let mut model = rng.bytes((8 * ROW) as usize);
    fs::write(v.path("f"), &model).unwrap();
    File::open(v.path("f")).unwrap().sync_all().unwrap();

    // Acknowledged by write(2), still dirty in the kernel's page cache.
    let f = open_rw(&v.path("f"));
    let patch = vec![0xABu8; 4096];
    let at = 5 * ROW as usize;
    f.write_all_at(&patch, at as u64).unwrap();
    model[at..at + patch.len()].copy_from_slice(&patch);

    shift(&v.path("f"), false, 2 * ROW, ROW).unwrap();
    model.drain(2 * ROW as usize..3 * ROW as usize);

    f.sync_all().unwrap();
    drop(f);
    drop_caches();
    let now = fs::read(v.path("f")).unwrap();
    assert!(
        now == model,
        "after a collapse under dirty pages the file differs from the model at {:?} (len {} vs \
         {}); the written bytes belong at {} and are at {:?}",
        first_diff(&now, &model),
        now.len(),
        model.len(),
        4 * ROW,
        find(&now, &patch)
    );
    v.umount();
}

/// The same with a shared mapping on a default mount (no writeback_cache): a store through
/// the map dirties the page, the collapse does not write it back first, and the kernel's
/// invalidation then launders it to its old offset in the new file.
#[test]
fn shift_lands_mmap_dirty_pages_at_their_pre_shift_offsets() {
    let mut v = TestVolume::new(DEVICES as usize, "16K", "");
    v.mount();
    let mut rng = Rng::new(12);
    let len = (8 * ROW) as usize;
    let mut model = rng.bytes(len);
    fs::write(v.path("f"), &model).unwrap();
    File::open(v.path("f")).unwrap().sync_all().unwrap();

    let f = open_rw(&v.path("f"));
    let at = 5 * ROW as usize;
    // SAFETY: a shared map of a file we hold open; unmapped below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
    // SAFETY: inside the map.
    unsafe { std::ptr::write_bytes((p as *mut u8).add(at), 0xCD, 4096) };
    model[at..at + 4096].fill(0xCD);

    shift(&v.path("f"), false, 2 * ROW, ROW).unwrap();
    model.drain(2 * ROW as usize..3 * ROW as usize);

    // SAFETY: the map made above.
    unsafe { libc::munmap(p, len) };
    f.sync_all().unwrap();
    drop(f);
    drop_caches();
    let now = fs::read(v.path("f")).unwrap();
    assert!(
        now == model,
        "after a collapse under a dirty shared map the file differs from the model at {:?} \
         (len {} vs {}); the stored bytes belong at {} and are at {:?}",
        first_diff(&now, &model),
        now.len(),
        model.len(),
        4 * ROW,
        find(&now, &[0xCD; 4096])
    );
    v.umount();
}

#[repr(C)]
struct Handle {
    bytes: u32,
    kind: i32,
    f: [u8; 128],
}

fn name_to_handle(path: &Path) -> Handle {
    let mut h = Handle {
        bytes: 128,
        kind: 0,
        f: [0; 128],
    };
    let mut mount_id: libc::c_int = 0;
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a buffer of the size it says.
    let r = unsafe {
        libc::syscall(
            libc::SYS_name_to_handle_at,
            libc::AT_FDCWD,
            c.as_ptr(),
            &mut h as *mut Handle,
            &mut mount_id as *mut libc::c_int,
            0,
        )
    };
    assert_eq!(
        r,
        0,
        "name_to_handle_at: {}",
        std::io::Error::last_os_error()
    );
    h
}

fn open_by_handle(mount: &File, h: &mut Handle) -> std::io::Result<File> {
    // SAFETY: a handle from name_to_handle_at.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            mount.as_raw_fd(),
            h as *mut Handle,
            libc::O_RDONLY,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor we now own.
    Ok(unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) })
}

/// FUSE_EXPORT_SUPPORT with generation 0: a file handle is just the inode number. A creation
/// that a crash loses (not yet durable, and an empty file leaves no object for
/// `skip_ids_to`) hands its number out again after the remount, so a handle taken on the lost
/// file (an NFS client's, or open_by_handle_at's) opens a different, unrelated file — here one
/// with another owner and mode 0600 — instead of failing with ESTALE.
#[test]
fn file_handle_of_a_file_lost_in_a_crash_opens_the_file_that_reuses_its_number() {
    let mut v = TestVolume::new(2, "64K", "");
    v.mount();
    // Something durable first, so the crash below loses only "lost".
    fs::write(v.path("keep"), b"k").unwrap();
    File::open(v.path("keep")).unwrap().sync_all().unwrap();
    File::create(v.path("lost")).unwrap();
    let lost_ino = fs::metadata(v.path("lost")).unwrap().ino();
    let mut handle = name_to_handle(&v.path("lost"));
    v.crash();
    v.mount();
    assert!(!v.path("lost").exists(), "the crash was to lose \"lost\"");

    fs::write(v.path("secret"), b"another user's private data").unwrap();
    let secret = v.path("secret");
    std::os::unix::fs::chown(&secret, Some(4242), Some(4242)).unwrap();
    fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let secret_ino = fs::metadata(&secret).unwrap().ino();
    drop_caches();

    let mount = File::open(&v.mnt).unwrap();
    match open_by_handle(&mount, &mut handle) {
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "{e}"),
        Ok(f) => {
            let mut got = Vec::new();
            std::io::Read::read_to_end(&mut &f, &mut got).unwrap();
            panic!(
                "the handle of lost inode {lost_ino} opened inode {} (\"secret\" is {secret_ino}), \
                 reading {:?}",
                f.metadata().unwrap().ino(),
                String::from_utf8_lossy(&got)
            );
        }
    }
    drop(mount);
    v.umount();
}

#[cfg(feature = "failpoints")]
fn list_xattrs(path: &Path) -> Vec<String> {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    let mut buf = vec![0u8; 64 << 10];
    // SAFETY: a buffer of the size we pass.
    let n = unsafe { libc::listxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(n >= 0, "listxattr: {}", std::io::Error::last_os_error());
    buf[..n as usize]
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

#[cfg(feature = "failpoints")]
fn arm(v: &TestVolume, point: &str) {
    setxattr(&v.mnt, "user.stripefs.failpoint", point.as_bytes()).unwrap();
}

/// While the store is down (a write failed and it could not be reopened), a setxattr that met
/// the failure stands in memory and getxattr answers it from `unsynced`
/// (namespace/xattrs.rs), but listxattr reads only the store: the name is missing from the
/// list while getxattr returns its value — and `getfattr -d`, cp -a, rsync -X, tar --xattrs
/// copy the file without it.
#[cfg(feature = "failpoints")]
#[test]
fn listxattr_misses_names_set_while_the_store_is_down() {
    let mut v = TestVolume::new(2, "64K", "");
    v.mount();
    fs::write(v.path("x"), b"x").unwrap();
    setxattr(&v.path("x"), "user.old", b"1").unwrap();
    File::open(v.path("x")).unwrap().sync_all().unwrap();

    arm(&v, "namespace.reopen=return(eio)");
    arm(&v, "namespace.store-write=1*return(eio)");
    // Meets the failed write; the change stands in memory (as the store's design says).
    setxattr(&v.path("x"), "user.new", b"2").unwrap();
    assert_eq!(getxattr(&v.path("x"), "user.new").unwrap(), b"2");
    let names = list_xattrs(&v.path("x"));
    arm(&v, "namespace.reopen=off");
    arm(&v, "namespace.store-write=off");
    assert!(
        names.iter().any(|n| n == "user.new"),
        "getxattr user.new answers, listxattr lists only {names:?}"
    );
    std::thread::sleep(std::time::Duration::from_millis(1100));
    v.umount();
}

/// Refusal reasons (`user.stripefs.error`) are kept by the requesting pid alone, not by pid
/// and uid: once root's refused request has exited, any process that gets the same pid — here
/// user `tests`, a minute's pid wrap-around reproduced with ns_last_pid — reads root's reason
/// (and takes it away from root). The reason quotes root's request (the value it set).
#[test]
fn another_user_reads_roots_refusal_reason_through_a_reused_pid() {
    let mut v = TestVolume::new(2, "64K", "[mount]\nallow_other = true\n");
    v.mount();
    fs::write(v.path("f"), b"f").unwrap();
    let f = v.path("f");
    let fs_ = f.to_str().unwrap();
    let mut leaked = None;
    for _ in 0..20 {
        // Root's request, refused with a reason that quotes its value.
        let mut child = std::process::Command::new("setfattr")
            .args(["-n", "user.stripefs.layout", "-v", "root-secret-value", fs_])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let root_pid = child.id() as i32;
        assert!(!child.wait().unwrap().success());
        // The next fork gets root's pid (as a wrap-around of the pid space would).
        fs::write("/proc/sys/kernel/ns_last_pid", (root_pid - 1).to_string()).unwrap();
        let out = as_tests(&[
            "getfattr",
            "--only-values",
            "-n",
            "user.stripefs.error",
            fs_,
        ]);
        if out.status.success() {
            leaked = Some(String::from_utf8_lossy(&out.stdout).into_owned());
            break;
        }
    }
    v.umount();
    assert!(
        leaked.is_none(),
        "user tests read root's refusal reason: {leaked:?}"
    );
}

fn lseek(f: &File, offset: u64, whence: i32) -> Option<u64> {
    // SAFETY: plain syscall on an open file.
    let r = unsafe { libc::lseek(f.as_raw_fd(), offset as i64, whence) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        assert_eq!(e.raw_os_error(), Some(libc::ENXIO), "lseek: {e}");
        return None;
    }
    Some(r as u64)
}

/// A truncate that meets a failed store write (the store then cannot be reopened): the new
/// size stands in memory (`mutate_tx` answers Ok for a change that met a failed write), but
/// `set_size`'s commit fails, so the caller gets EIO and the objects are never cut, and no
/// cut is left pending. The file now shows size 0; once the store is back, extending it
/// (ftruncate up, or a write past the end) brings the old bytes back instead of zeros.
#[cfg(feature = "failpoints")]
#[test]
fn truncate_that_met_a_failed_store_write_lets_old_bytes_reappear() {
    let mut v = TestVolume::new(2, "64K", "");
    v.mount();
    let len = 256usize << 10;
    fs::write(v.path("f"), vec![0xEEu8; len]).unwrap();
    let f = open_rw(&v.path("f"));
    f.sync_all().unwrap();

    arm(&v, "namespace.reopen=return(eio)");
    arm(&v, "namespace.store-write=1*return(eio)");
    let r = f.set_len(0);
    arm(&v, "namespace.reopen=off");
    arm(&v, "namespace.store-write=off");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    drop_caches();
    let seen = fs::metadata(v.path("f")).unwrap().len();
    // The store comes back at the next change.
    f.set_len(len as u64).unwrap();
    drop(f);
    drop_caches();
    let now = fs::read(v.path("f")).unwrap();
    let stale = now.iter().filter(|&&b| b == 0xEE).count();
    v.umount();
    assert!(
        !(seen == 0 && stale > 0),
        "the truncate answered {r:?} yet the file showed size {seen}; extended again it shows \
         {stale} of its old bytes (0xEE) where zeros belong"
    );
}

/// A collapse whose switch meets a failed store write that cannot be taken back: the file is
/// switched in memory (`mutate_tx` answers Ok), then `shift_range`'s commit fails and the
/// caller gets EIO — yet the file is collapsed, and stays so once the store is back. A caller
/// that retries the failed collapse (as one does after EIO) cuts out a second row of data.
#[cfg(feature = "failpoints")]
#[test]
fn shift_answered_eio_is_applied_all_the_same() {
    let mut v = TestVolume::new(DEVICES as usize, "16K", "");
    v.mount();
    let mut rng = Rng::new(5);
    let before = rng.bytes((8 * ROW) as usize);
    fs::write(v.path("f"), &before).unwrap();
    let f = open_rw(&v.path("f"));
    f.sync_all().unwrap();
    let mut buf = vec![0u8; before.len()];
    f.read_exact_at(&mut buf, 0).unwrap(); // the kernel's page cache holds it now
    let mut after = before.clone();
    after.drain(2 * ROW as usize..3 * ROW as usize);

    arm(&v, "namespace.reopen=return(eio)");
    // The first store write of the collapse allocates the new object id; the second switches.
    arm(&v, "namespace.store-write=1*off->1*return(eio)");
    let r = shift(&v.path("f"), false, 2 * ROW, ROW);
    arm(&v, "namespace.reopen=off");
    arm(&v, "namespace.store-write=off");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let size = f.metadata().unwrap().len() as usize;
    let mut now = vec![0u8; size];
    f.read_exact_at(&mut now, 0).unwrap();
    drop(f);
    v.umount();
    assert!(
        now == before || now == after,
        "the collapse answered {r:?}; the file is neither old nor new"
    );
    assert!(
        r.is_ok() || now == before,
        "the collapse answered {r:?}, yet the file is collapsed ({} bytes, was {})",
        now.len(),
        before.len()
    );
}

/// Aborts the FUSE connection of the mount at `mnt` (its device minor names it under
/// /sys/fs/fuse/connections), so a hung test does not leave a hung mount.
fn abort_connection(mnt: &Path) {
    // From mountinfo, not stat(2): a stat of the hung mount would hang too.
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mnt = mnt.to_str().unwrap();
    for line in info.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() > 4 && f[4] == mnt {
            let minor = f[2].split(':').nth(1).unwrap();
            let abort = format!("/sys/fs/fuse/connections/{minor}/abort");
            if !Path::new(&abort).exists() {
                // The FUSE control filesystem, where systemd normally mounts it.
                let _ = std::process::Command::new("mount")
                    .args(["-t", "fusectl", "fusectl", "/sys/fs/fuse/connections"])
                    .status();
            }
            if let Err(e) = fs::write(&abort, "1") {
                eprintln!("cannot abort the FUSE connection of {mnt}: {abort}: {e}");
            }
        }
    }
}

/// With one FUSE thread (`-o threads=1`), a collapse of a file with dirty pages in the
/// kernel deadlocks the mount: the only session thread, still inside the setxattr request,
/// tells the kernel to drop the file's pages (`inval_inode`, fs.rs), the kernel first writes
/// the dirty ones back (launder) and waits for that WRITE, which no thread is left to serve.
/// Every later request on the mount hangs with it.
#[test]
fn shift_under_dirty_pages_deadlocks_a_single_session_thread() {
    let mut v = TestVolume::new(DEVICES as usize, "16K", "");
    v.mount_with(&["-o", "writeback_cache,threads=1"]);
    fs::write(v.path("f"), vec![1u8; (8 * ROW) as usize]).unwrap();
    File::open(v.path("f")).unwrap().sync_all().unwrap();
    let f = open_rw(&v.path("f"));
    f.write_all_at(&[2u8; 4096], 5 * ROW).unwrap(); // dirty in the page cache
    let path = v.path("f");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(shift(&path, false, 2 * ROW, ROW));
    });
    let done = rx.recv_timeout(std::time::Duration::from_secs(20));
    if done.is_err() {
        abort_connection(&v.mnt);
    }
    drop(f);
    assert!(
        done.is_ok(),
        "the collapse did not return within 20 s: the mount deadlocked (connection aborted)"
    );
    v.umount();
}

/// The same deadlock with the default thread count on 2 cores (`threads=2` made explicit):
/// two collapses of two files with dirty pages, at once, put both session threads into
/// `inval_inode`, each waiting for a WRITE that only the other could serve.
#[test]
fn two_concurrent_shifts_under_dirty_pages_deadlock_two_session_threads() {
    let mut v = TestVolume::new(DEVICES as usize, "16K", "");
    v.mount_with(&["-o", "writeback_cache,threads=2"]);
    let mut open = Vec::new();
    for name in ["a", "b"] {
        fs::write(v.path(name), vec![1u8; (64 * ROW) as usize]).unwrap();
        File::open(v.path(name)).unwrap().sync_all().unwrap();
        let f = open_rw(&v.path(name));
        f.write_all_at(&[2u8; 4096], 50 * ROW).unwrap(); // dirty in the page cache
        open.push(f);
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
    for name in ["a", "b"] {
        let (path, tx, barrier) = (v.path(name), tx.clone(), barrier.clone());
        std::thread::spawn(move || {
            barrier.wait();
            let _ = tx.send(shift(&path, false, 2 * ROW, ROW));
        });
    }
    let done = (0..2)
        .map(|_| rx.recv_timeout(std::time::Duration::from_secs(30)))
        .all(|r| r.is_ok());
    if !done {
        abort_connection(&v.mnt);
    }
    drop(open);
    assert!(
        done,
        "two collapses did not return within 30 s: the mount deadlocked (connection aborted)"
    );
    v.umount();
}

/// SEEK_DATA under `-o writeback_cache`: data the kernel holds dirty (write(2) returned) is
/// not on the daemon's side yet, and the daemon answers from the objects: the written range
/// reads as a hole, so cp --sparse, rsync and backup tools that walk SEEK_DATA skip
/// acknowledged data.
#[test]
fn seek_data_never_skips_data_dirty_in_the_kernel_page_cache() {
    let mut v = TestVolume::new(2, "16K", "");
    v.mount_with(&["-o", "writeback_cache"]);
    let f = open_rw(&v.path("f"));
    f.set_len(1 << 20).unwrap();
    f.write_all_at(&[7u8; 8192], 512 << 10).unwrap();
    let data = lseek(&f, 0, libc::SEEK_DATA);
    drop(f);
    v.umount();
    // The kernel answers itself now (the whole file as data): never past the written range.
    assert!(
        data.is_some_and(|d| d <= 512 << 10),
        "SEEK_DATA from 0 after a write at 512K skipped it: {data:?}"
    );
}

/// st_blocks counts only what the objects hold: a file whose data is all in the daemon's
/// write-back cache reports 0 blocks. GNU tar --sparse (and other tools) take st_blocks 0
/// for a file of holes only and archive no data. ext4 counts delayed-allocation blocks in
/// st_blocks for this reason.
#[test]
fn st_blocks_is_zero_for_data_held_in_the_write_back_cache() {
    let mut v = TestVolume::new(
        2,
        "16K",
        "[cache]\nstore = \"ram\"\nsize = \"4M\"\nline_size = \"16K\"\nmode = \"wb\"\n\
         [cache.cleaner]\nstaleness = \"1h\"\n",
    );
    v.mount();
    let data = vec![0x5Au8; 256 << 10];
    fs::write(v.path("f"), &data).unwrap();
    drop_caches();
    let blocks = fs::metadata(v.path("f")).unwrap().blocks();
    let archive = v.root.path().join("f.tar");
    let ok = std::process::Command::new("tar")
        .args(["--sparse", "-cf"])
        .arg(&archive)
        .arg("-C")
        .arg(&v.mnt)
        .arg("f")
        .status()
        .unwrap()
        .success();
    v.umount();
    assert!(ok);
    let out = v.root.path().join("out");
    fs::create_dir(&out).unwrap();
    std::process::Command::new("tar")
        .arg("-xf")
        .arg(&archive)
        .arg("-C")
        .arg(&out)
        .status()
        .unwrap();
    let restored = fs::read(out.join("f")).unwrap();
    assert!(
        blocks > 0 && restored == data,
        "st_blocks {blocks} for 256K of data; tar --sparse restored {} bytes of which {} are data",
        restored.len(),
        restored.iter().filter(|&&b| b == 0x5A).count()
    );
}

/// `insert OFFSET LEN` with LEN near 2^64 (a whole number of rows, OFFSET + LEN not
/// overflowing): `shift_range` computes the new size as `inode.size + len` unchecked. In
/// the debug build the FUSE event-loop thread panics on the overflow (ranges.rs:178; fuser
/// answers EIO and that session thread is gone for good — with `threads=1` the mount stops
/// serving); in a release build the size
/// wraps to a small number that passes `check_size`, and the rebuilt file is switched in
/// with that size (on a device filesystem that takes offsets up to 2^63, such as XFS or
/// tmpfs). Either way any user who may write one file can do it; the answer must be EFBIG.
#[test]
fn insert_of_a_huge_length_overflows_the_new_size() {
    let mut v = TestVolume::new(DEVICES as usize, "16K", "[mount]\nallow_other = true\n");
    v.mount();
    fs::write(v.path("f"), vec![3u8; (8 * ROW) as usize]).unwrap();
    let len = u64::MAX / ROW * ROW;
    let r = shift(&v.path("f"), true, 0, len);
    // The daemon still answers, and the file is as it was.
    let alive = fs::read(v.path("f"));
    let ok = matches!(&alive, Ok(b) if b.len() == (8 * ROW) as usize);
    if !ok {
        abort_connection(&v.mnt);
    }
    assert!(
        ok,
        "after insert {len}: {r:?}; the file now reads {:?}",
        alive.map(|b| b.len())
    );
    assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EFBIG));
    v.umount();
}

/// On a `dirsync` mount every namespace change must be durable when the call returns. A
/// creation that meets a failed store write which cannot be taken back (the store cannot be
/// reopened) still answers success (`mutate_tx`: "the change stands in memory") — durable
/// nowhere. A crash then loses a file whose mkdir/creat/rename the caller was told was on
/// disk.
#[cfg(feature = "failpoints")]
#[test]
fn dirsync_acknowledges_a_creation_that_is_not_durable() {
    let mut v = TestVolume::new(2, "64K", "");
    v.mount_with(&["-o", "dirsync"]);
    fs::create_dir(v.path("before")).unwrap();
    arm(&v, "namespace.reopen=return(eio)");
    arm(&v, "namespace.store-write=1*return(eio)");
    let r = fs::create_dir(v.path("acknowledged"));
    v.crash();
    v.mount();
    let there = v.path("acknowledged").exists();
    assert!(v.path("before").exists());
    v.umount();
    assert!(
        r.is_err() || there,
        "mkdir on a dirsync mount answered {r:?}, and the directory is gone after a crash"
    );
}
