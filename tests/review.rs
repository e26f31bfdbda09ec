//! Review tests: each fails on the code as reviewed and names the defect it shows.

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
    assert_eq!(r, 0, "name_to_handle_at: {}", std::io::Error::last_os_error());
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
        let out = as_tests(&["getfattr", "--only-values", "-n", "user.stripefs.error", fs_]);
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
