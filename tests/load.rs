//! Load and permissions: many threads creating, writing, reading, renaming and deleting at
//! once with every file verified at the end and the daemon's peak memory bounded; permission
//! checks for other users on an allow_other mount.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const THREADS: u64 = 8;
/// Long enough to mix every operation; `STRIPEFS_LOAD_SECS` runs it longer (60 for the note).
fn duration() -> Duration {
    let secs = std::env::var("STRIPEFS_LOAD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    Duration::from_secs(secs)
}

/// Peak resident memory of a process, in bytes (VmHWM).
fn peak_rss(pid: i32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

fn worker(dir: &Path, t: u64, until: Instant) -> (u64, BTreeMap<String, Vec<u8>>) {
    let mut rng = Rng::new(t + 100);
    let mut mine: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut ops = 0u64;
    let mut i = 0u64;
    while Instant::now() < until {
        i += 1;
        let names: Vec<String> = mine.keys().cloned().collect();
        match rng.below(10) {
            0..=3 => {
                let name = format!("t{t}-{i}");
                let len = rng.below(256 << 10) as usize;
                let data = rng.bytes(len);
                fs::write(dir.join(&name), &data).unwrap();
                mine.insert(name, data);
            }
            4..=5 if !names.is_empty() => {
                let name = &names[rng.below(names.len() as u64) as usize];
                let got = fs::read(dir.join(name)).unwrap();
                assert!(
                    got == mine[name],
                    "thread {t}: {name} differs while running"
                );
            }
            6 if !names.is_empty() => {
                let from = names[rng.below(names.len() as u64) as usize].clone();
                let to = format!("t{t}-r{i}");
                fs::rename(dir.join(&from), dir.join(&to)).unwrap();
                let data = mine.remove(&from).unwrap();
                mine.insert(to, data);
            }
            7 if !names.is_empty() => {
                let name = names[rng.below(names.len() as u64) as usize].clone();
                fs::remove_file(dir.join(&name)).unwrap();
                mine.remove(&name);
            }
            8 if !names.is_empty() => {
                // Overwrite the middle of a file.
                let name = &names[rng.below(names.len() as u64) as usize];
                let mut data = mine[name].clone();
                if !data.is_empty() {
                    let at = rng.below(data.len() as u64) as usize;
                    let patch = rng.bytes((data.len() - at).min(8192));
                    let f = fs::OpenOptions::new()
                        .write(true)
                        .open(dir.join(name))
                        .unwrap();
                    std::os::unix::fs::FileExt::write_all_at(&f, &patch, at as u64).unwrap();
                    data[at..at + patch.len()].copy_from_slice(&patch);
                    mine.insert(name.clone(), data);
                }
            }
            _ => {
                let _ = fs::read_dir(dir).unwrap().count();
            }
        }
        ops += 1;
    }
    (ops, mine)
}

fn load_on(extra: &str, cache_bytes: u64, label: &str) {
    let mut v = TestVolume::new(4, "64K", extra);
    v.mount();
    let dir = v.path("load");
    fs::create_dir(&dir).unwrap();
    let pid = v.daemon_pid();
    let until = Instant::now() + duration();
    let results: Vec<(u64, BTreeMap<String, Vec<u8>>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let dir = &dir;
                s.spawn(move || worker(dir, t, until))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ops: u64 = results.iter().map(|r| r.0).sum();
    let expected: BTreeMap<String, Vec<u8>> = results.into_iter().flat_map(|r| r.1).collect();
    let check = |when: &str| {
        let mut on_disk: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        on_disk.sort();
        assert_eq!(
            on_disk,
            expected.keys().cloned().collect::<Vec<_>>(),
            "{label}: names {when}"
        );
        for (name, data) in &expected {
            assert!(
                fs::read(dir.join(name)).unwrap() == *data,
                "{label}: {name} differs {when}"
            );
        }
    };
    check("at the end");
    let rss = peak_rss(pid);
    // Bounded: the cache (a RAM store's pages count here) plus a margin for the daemon itself.
    let margin = 160 << 20;
    eprintln!(
        "{label}: {THREADS} threads, {ops} operations in {:?}, {} files verified, peak RSS {} MiB (bound {} MiB)",
        duration(),
        expected.len(),
        rss >> 20,
        (cache_bytes + margin) >> 20
    );
    assert!(
        rss <= cache_bytes + margin,
        "{label}: peak RSS {rss} over the bound"
    );
    v.remount();
    check("after a remount");
}

#[test]
fn many_threads_at_once_without_a_cache() {
    load_on("", 0, "no cache");
}

/// Large direct writes keep their data in the buffer the request was read into while the
/// devices take it (no copy): from many threads at once, each write's bytes land as written,
/// never the next request's. With one FUSE thread too, which hands every request's I/O to the
/// engine.
#[test]
fn large_direct_writes_from_many_threads_land_intact() {
    large_direct_writes_land_intact_on("");
    large_direct_writes_land_intact_on("[mount]\nthreads = 1\n");
}

fn large_direct_writes_land_intact_on(extra: &str) {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let mut v = TestVolume::new(4, "64K", extra);
    v.mount();
    let pattern = |t: u64, k: u64, len: usize| -> Vec<u8> {
        let mut rng = Rng::new(t * 1000 + k);
        rng.bytes(len)
    };
    // Sizes around the point where data is kept rather than copied (512 KiB), and 1 MiB.
    let sizes = [1 << 20, 512 << 10, (512 << 10) - 4096, 64 << 10, 1 << 20];
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let path = v.path(&format!("w{t}"));
            s.spawn(move || {
                let f = fs::OpenOptions::new()
                    .create(true)
                    .truncate(true)
                    .write(true)
                    .custom_flags(libc::O_DIRECT)
                    .open(&path)
                    .unwrap();
                for k in 0..12u64 {
                    let data = pattern(t, k, sizes[k as usize % sizes.len()]);
                    f.write_all_at(&data, k << 20).unwrap();
                }
            });
        }
    });
    v.remount();
    for t in 0..4u64 {
        let f = fs::File::open(v.path(&format!("w{t}"))).unwrap();
        for k in 0..12u64 {
            let want = pattern(t, k, sizes[k as usize % sizes.len()]);
            let mut got = vec![0u8; want.len()];
            f.read_exact_at(&mut got, k << 20).unwrap();
            assert!(got == want, "file w{t}, write {k}: other bytes");
        }
    }
}

#[test]
fn many_threads_at_once_over_a_ram_write_back_cache() {
    load_on(
        "[cache]\nsize = \"32M\"\nline_size = \"64K\"\nmode = \"wb\"\n",
        32 << 20,
        "RAM write-back 32 MiB",
    );
}

/// Runs `stripefs ARGS` as the user `tests`.
fn as_tests_user(args: &[&str]) -> std::process::Output {
    run_with_timeout(
        Command::new("setpriv")
            .args(["--reuid=tests", "--regid=tests", "--clear-groups", BIN])
            .args(args),
        Duration::from_secs(60),
    )
}

#[test]
fn other_users_are_checked_and_controls_need_ownership() {
    let known = Command::new("id")
        .arg("tests")
        .output()
        .map(|o| o.status.success());
    assert_eq!(
        known.ok(),
        Some(true),
        "user tests is missing: scripts/test.sh creates it"
    );
    let mut v = TestVolume::new(
        2,
        "64K",
        "[mount]\nallow_other = true\n[cache]\nsize = \"4M\"\nmode = \"wt\"\n",
    );
    v.mount();
    // What stripefs makes on the devices is for the mounting user only.
    use std::os::unix::fs::PermissionsExt;
    for d in &v.devices {
        let mode = fs::metadata(d.join(".stripefs"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o700, "{}", d.display());
    }
    fs::create_dir(v.path("rootdir")).unwrap();
    fs::create_dir(v.path("open")).unwrap();
    fs::set_permissions(v.path("open"), fs::Permissions::from_mode(0o777)).unwrap();
    // The kernel checks permissions for other users (default_permissions).
    let touch = |p: &Path| {
        run_with_timeout(
            Command::new("setpriv")
                .args(["--reuid=tests", "--regid=tests", "--clear-groups", "touch"])
                .arg(p),
            Duration::from_secs(30),
        )
    };
    assert!(
        !touch(&v.path("rootdir/x")).status.success(),
        "tests may not write into root's 0755 dir"
    );
    assert!(
        touch(&v.path("open/x")).status.success(),
        "tests may write into a 0777 dir"
    );
    // A folder's target and layout: its owner or root.
    let out = as_tests_user(&[
        "target",
        "add",
        v.path("rootdir").to_str().unwrap(),
        "--mode",
        "wb",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("permission denied"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = as_tests_user(&[
        "layout",
        "set",
        v.path("rootdir").to_str().unwrap(),
        "--width",
        "1",
    ]);
    assert!(!out.status.success());
    // Volume-wide controls: root or the user who mounted.
    let out = as_tests_user(&["mode", v.mnt_str(), "wb"]);
    assert!(!out.status.success());
    let out = as_tests_user(&["flush", v.mnt_str()]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("only root or the user who mounted"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        getxattr(&v.mnt, "user.stripefs.mode").unwrap(),
        b"wt",
        "nothing changed"
    );
    // Root may.
    stripefs_ok(&[
        "target",
        "add",
        v.path("rootdir").to_str().unwrap(),
        "--mode",
        "wb",
    ]);
    stripefs_ok(&["mode", v.mnt_str(), "wa"]);
}

/// The byte a file of this test holds at `offset` (never zero, so a hole tells).
fn busy_byte(offset: u64) -> u8 {
    (offset / 4096 % 251 + 1) as u8
}

/// Truncates, punches, fsyncs and chmods of a file while readers and a writer keep direct
/// I/O in flight on it: nothing stalls (over FUSE over io_uring such a request must not wait
/// on a ring thread for locks that thread's own device I/O holds), no call fails, and every
/// byte read is the file's data or a hole's zero.
#[test]
fn resizes_and_punches_under_io_in_flight_never_stall() {
    use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
    use std::os::unix::io::AsRawFd;
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    use std::sync::{mpsc, Arc};
    const SIZE: u64 = 8 << 20;
    let mut v = TestVolume::new(4, "64K", "");
    v.mount();
    let path = v.path("busy");
    let conn = fuse_connection(&v.mnt);
    fs::write(&path, (0..SIZE).map(busy_byte).collect::<Vec<u8>>()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let open = |write: bool| {
        fs::OpenOptions::new()
            .read(true)
            .write(write)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .unwrap()
    };
    let mut workers = Vec::new();
    for t in 0..5u64 {
        let (f, stop) = (open(t == 0), stop.clone());
        workers.push(std::thread::spawn(move || {
            let mut rng = Rng::new(t + 7);
            let mut buf = Aligned::new(256 << 10);
            let mut ops = 0u64;
            while !stop.load(Relaxed) {
                let len = (rng.below(64) as usize + 1) * 4096;
                let off = rng.below(SIZE / 4096 - 64) * 4096;
                let b = &mut buf.buf()[..len];
                if t == 0 {
                    // The writer puts the file's own bytes back: the data stays data or hole.
                    for (i, x) in b.iter_mut().enumerate() {
                        *x = busy_byte(off + i as u64);
                    }
                    f.write_all_at(b, off).unwrap();
                } else {
                    let n = f.read_at(b, off).unwrap();
                    for (i, &x) in b[..n].iter().enumerate() {
                        let at = off + i as u64;
                        assert!(x == 0 || x == busy_byte(at), "byte {at}: {x}");
                    }
                }
                ops += 1;
            }
            ops
        }));
    }
    let (tx, rx) = mpsc::channel();
    let (f, p) = (open(true), path.clone());
    std::thread::spawn(move || {
        let mut rng = Rng::new(3);
        for round in 0..40u32 {
            f.set_len(SIZE / 2).unwrap();
            let at = rng.below(SIZE / 4096 - 256) as i64 * 4096;
            // SAFETY: fallocate(2) on an open descriptor.
            let r = unsafe {
                libc::fallocate(
                    f.as_raw_fd(),
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    at,
                    1 << 20,
                )
            };
            assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
            f.set_len(SIZE).unwrap();
            f.sync_all().unwrap();
            let mode = if round % 2 == 0 { 0o600 } else { 0o644 };
            fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
        }
        let _ = tx.send(());
    });
    let finished = rx.recv_timeout(Duration::from_secs(120));
    stop.store(true, Relaxed);
    match finished {
        Ok(()) => {}
        Err(mpsc::RecvTimeoutError::Timeout) => {
            // The stalled requests cannot be interrupted otherwise.
            abort_fuse_connection(conn);
            panic!("truncates and punches stalled under I/O in flight")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            panic!("the truncating thread failed (its panic is above)")
        }
    }
    let ops: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    eprintln!("{ops} direct reads and writes beside 40 truncate/punch/fsync rounds");
    assert!(ops > 0);
    // What stays is the file's data or holes, at its last size, after a remount too.
    for when in ["at the end", "after a remount"] {
        let back = fs::read(&path).unwrap();
        assert_eq!(back.len() as u64, SIZE, "{when}");
        let wrong = (0..SIZE).find(|&at| ![0, busy_byte(at)].contains(&back[at as usize]));
        assert_eq!(wrong, None, "{when}: a byte neither data nor hole");
        if when == "at the end" {
            v.remount();
        }
    }
}
