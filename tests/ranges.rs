//! A file's ranges as ext4 users rely on them, each operation checked against an in-memory
//! model of the file's bytes: copy_file_range (aligned, object to object, and not),
//! fallocate's ZERO_RANGE and PUNCH_HOLE, collapse and insert (fallocate's COLLAPSE_RANGE and
//! INSERT_RANGE, which the kernel does not pass to FUSE: `stripefs collapse|insert` and the
//! `user.stripefs.shift` key do them), SEEK_DATA and SEEK_HOLE, and st_blocks from what the
//! objects really hold; collapse and insert also across a crash (the old file or the new,
//! never a blend).

mod common;

use common::*;
use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

const STRIPE: u64 = 16 << 10;
const DEVICES: u64 = 3;
const ROW: u64 = STRIPE * DEVICES;

fn fallocate(f: &File, mode: i32, offset: u64, len: u64) -> std::io::Result<()> {
    // SAFETY: plain syscall on an open file.
    match unsafe { libc::fallocate(f.as_raw_fd(), mode, offset as i64, len as i64) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

fn copy_range(from: &File, from_off: u64, to: &File, to_off: u64, len: u64) -> u64 {
    let (mut a, mut b) = (from_off as i64, to_off as i64);
    let mut done = 0u64;
    while done < len {
        // SAFETY: plain syscall on open files with offsets we own.
        let n = unsafe {
            libc::copy_file_range(
                from.as_raw_fd(),
                &mut a,
                to.as_raw_fd(),
                &mut b,
                (len - done) as usize,
                0,
            )
        };
        assert!(
            n >= 0,
            "copy_file_range: {}",
            std::io::Error::last_os_error()
        );
        if n == 0 {
            break;
        }
        done += n as u64;
    }
    done
}

/// Collapse (`insert` false) or insert through the control key, as `stripefs collapse|insert`.
fn shift(path: &Path, insert: bool, offset: u64, len: u64) -> std::io::Result<()> {
    let how = if insert { "insert" } else { "collapse" };
    setxattr(
        path,
        "user.stripefs.shift",
        format!("{how} {offset} {len}").as_bytes(),
    )
}

fn seek(f: &File, offset: u64, whence: i32) -> Option<u64> {
    // SAFETY: plain syscall on an open file.
    let r = unsafe { libc::lseek(f.as_raw_fd(), offset as i64, whence) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        assert_eq!(e.raw_os_error(), Some(libc::ENXIO), "lseek: {e}");
        return None;
    }
    Some(r as u64)
}

fn open_rw(path: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .unwrap()
}

/// One file and what it must hold.
struct Modelled {
    file: File,
    model: Vec<u8>,
    name: &'static str,
}

impl Modelled {
    fn check(&self, after: &str) {
        let mut got = vec![0u8; self.model.len()];
        self.file.read_exact_at(&mut got, 0).unwrap();
        let len = self.file.metadata().unwrap().len() as usize;
        assert_eq!(len, self.model.len(), "{}: size after {after}", self.name);
        if let Some(at) = (0..got.len()).find(|&i| got[i] != self.model[i]) {
            panic!("{}: byte {at} differs after {after}", self.name);
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        self.file.write_all_at(data, offset).unwrap();
        let end = offset as usize + data.len();
        if self.model.len() < end {
            self.model.resize(end, 0);
        }
        self.model[offset as usize..end].copy_from_slice(data);
    }
}

/// Random operations on two files against their models, each checked at once and all of
/// them after a remount.
fn random_ranges(extra: &str) {
    let mut v = TestVolume::new(DEVICES as usize, "16K", extra);
    v.mount();
    let mut rng = Rng::new(11);
    let mut files = [
        Modelled {
            file: open_rw(&v.path("f")),
            model: Vec::new(),
            name: "f",
        },
        Modelled {
            file: open_rw(&v.path("g")),
            model: Vec::new(),
            name: "g",
        },
    ];
    let initial = rng.bytes(600 << 10);
    files[0].write(0, &initial);
    files[1].write(100 << 10, &rng.bytes(200 << 10));
    for step in 0..80 {
        let which = rng.below(2) as usize;
        let size = files[which].model.len() as u64;
        let op = rng.below(7);
        let what = match op {
            0 => {
                let offset = rng.below(size + 50_000);
                let n = 1 + rng.below(90_000) as usize;
                let data = rng.bytes(n);
                files[which].write(offset, &data);
                format!("write {} at {offset}", data.len())
            }
            1 | 2 => {
                // From one file into the other; every other time offsets that line up in a
                // stripe row (device to device), else not.
                let (src, dst) = if which == 0 { (0, 1) } else { (1, 0) };
                let src_len = files[src].model.len() as u64;
                let from = rng.below(src_len.max(1));
                let mut to = rng.below(files[dst].model.len() as u64 + 30_000);
                if op == 1 {
                    to = to / ROW * ROW + from % ROW;
                }
                let len = rng.below(200_000);
                let (s, d) = (&files[src], &files[dst]);
                let n = copy_range(&s.file, from, &d.file, to, len);
                let want = len.min(src_len.saturating_sub(from));
                assert_eq!(n, want, "step {step}: copied");
                let bytes = files[src].model[from as usize..(from + n) as usize].to_vec();
                let dst = &mut files[dst];
                let end = (to + n) as usize;
                if n > 0 && dst.model.len() < end {
                    dst.model.resize(end, 0);
                }
                dst.model[to as usize..to as usize + n as usize].copy_from_slice(&bytes);
                format!("copy {n} from {} at {from} to {to}", files[src].name)
            }
            3 => {
                let offset = rng.below(size + 20_000);
                let len = 1 + rng.below(80_000);
                let keep = rng.below(2) == 0;
                let mode =
                    libc::FALLOC_FL_ZERO_RANGE | if keep { libc::FALLOC_FL_KEEP_SIZE } else { 0 };
                let f = &mut files[which];
                fallocate(&f.file, mode, offset, len).unwrap();
                let end = (offset + len) as usize;
                if !keep && f.model.len() < end {
                    f.model.resize(end, 0);
                }
                let stop = end.min(f.model.len());
                if (offset as usize) < stop {
                    f.model[offset as usize..stop].fill(0);
                }
                format!("zero {len} at {offset} (keep size {keep})")
            }
            4 => {
                let offset = rng.below(size.max(1));
                let len = 1 + rng.below(80_000);
                let f = &mut files[which];
                fallocate(
                    &f.file,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    offset,
                    len,
                )
                .unwrap();
                let stop = ((offset + len) as usize).min(f.model.len());
                f.model[offset as usize..stop].fill(0);
                format!("punch {len} at {offset}")
            }
            5 if size > 2 * ROW => {
                let offset = rng.below(size / ROW - 1) * ROW;
                let rows = 1 + rng.below(((size - offset) / ROW - 1).clamp(1, 3));
                let len = rows * ROW;
                let path = v.path(files[which].name);
                if offset + len >= size {
                    let e = shift(&path, false, offset, len).unwrap_err();
                    assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
                    "collapse to the end (refused)".to_string()
                } else {
                    shift(&path, false, offset, len).unwrap();
                    let at = offset as usize;
                    files[which].model.drain(at..at + len as usize);
                    format!("collapse {len} at {offset}")
                }
            }
            6 if size > ROW => {
                let offset = rng.below(size / ROW) * ROW;
                let len = (1 + rng.below(2)) * ROW;
                shift(&v.path(files[which].name), true, offset, len).unwrap();
                let at = offset as usize;
                files[which]
                    .model
                    .splice(at..at, std::iter::repeat_n(0u8, len as usize));
                format!("insert {len} at {offset}")
            }
            _ => continue,
        };
        for f in &files {
            f.check(&format!("step {step}: {what} on {}", files[which].name));
        }
    }
    // Ranges not in whole stripe rows are refused, as ext4 refuses them off its blocks.
    let f = &files[0];
    for (offset, len) in [(STRIPE, ROW), (0, STRIPE), (ROW, ROW + 4096)] {
        for insert in [false, true] {
            let e = shift(&v.path("f"), insert, offset, len).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{len} at {offset}");
        }
    }
    f.check("refused shifts");
    let models: Vec<Vec<u8>> = files.iter().map(|f| f.model.clone()).collect();
    drop(files);
    v.remount();
    for (name, model) in ["f", "g"].iter().zip(&models) {
        assert!(
            fs::read(v.path(name)).unwrap() == *model,
            "{name} after a remount"
        );
    }
    v.umount();
    v.assert_fsck_clean("after the range operations");
}

#[test]
fn range_operations_match_a_model_of_the_bytes() {
    random_ranges("");
}

#[test]
fn range_operations_match_a_model_through_a_write_back_cache() {
    random_ranges("[cache]\nstore = \"ram\"\nsize = \"4M\"\nline_size = \"16K\"\nmode = \"wb\"\n");
}

/// A sparse file shows its holes: SEEK_DATA and SEEK_HOLE find them, st_blocks counts only
/// what is there, and a copy (copy_file_range, as cp does) keeps them.
#[test]
fn holes_are_seen_by_seek_blocks_and_copies() {
    let mut v = TestVolume::new(DEVICES as usize, "16K", "");
    v.mount();
    let f = open_rw(&v.path("sparse"));
    f.write_all_at(&[1u8; 4096], 0).unwrap();
    f.write_all_at(&[2u8; 65536], 1 << 20).unwrap();
    f.set_len(4 << 20).unwrap();
    f.sync_all().unwrap();
    assert_eq!(seek(&f, 0, libc::SEEK_DATA), Some(0));
    assert_eq!(seek(&f, 0, libc::SEEK_HOLE), Some(4096));
    assert_eq!(seek(&f, 4096, libc::SEEK_DATA), Some(1 << 20));
    assert_eq!(seek(&f, 1 << 20, libc::SEEK_HOLE), Some((1 << 20) + 65536));
    assert_eq!(seek(&f, (1 << 20) + 65536, libc::SEEK_DATA), None);
    assert_eq!(seek(&f, 3 << 20, libc::SEEK_HOLE), Some(3 << 20));
    assert_eq!(seek(&f, 4 << 20, libc::SEEK_DATA), None);
    let blocks = |p: &Path| fs::metadata(p).unwrap().blocks() * 512;
    let held = blocks(&v.path("sparse"));
    assert!(
        (69_632..(1 << 20)).contains(&held),
        "st_blocks of a 4 MiB file holding 68 KiB: {held} bytes"
    );
    // Device to device, and read and written (not row-aligned): holes stay holes.
    for (name, to) in [("aligned", 0u64), ("shifted", 4096)] {
        let g = open_rw(&v.path(name));
        assert_eq!(copy_range(&f, 0, &g, to, 4 << 20), 4 << 20);
        g.sync_all().unwrap();
        let mut want = vec![0u8; (to + (4 << 20)) as usize];
        want[to as usize..to as usize + 4096].fill(1);
        let at = (to + (1 << 20)) as usize;
        want[at..at + 65536].fill(2);
        assert!(fs::read(v.path(name)).unwrap() == want, "{name} copy");
        if to == 0 {
            let copied = blocks(&v.path(name));
            assert!(
                copied < 1 << 20,
                "the aligned copy filled the holes: {copied}"
            );
        }
    }
    // cp as users run it.
    let out = std::process::Command::new("cp")
        .arg("--sparse=always")
        .arg(v.path("sparse"))
        .arg(v.path("cp"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        fs::read(v.path("cp")).unwrap(),
        fs::read(v.path("sparse")).unwrap()
    );
    assert!(
        blocks(&v.path("cp")) < 1 << 20,
        "cp --sparse filled the holes"
    );
    drop((f,));
    v.umount();
    v.assert_fsck_clean("after sparse copies");
}

/// Data only a write-back cache holds is data to SEEK_DATA too.
#[test]
fn seek_sees_data_still_in_a_write_back_cache() {
    let mut v = TestVolume::new(
        2,
        "16K",
        "[cache]\nstore = \"ram\"\nsize = \"4M\"\nline_size = \"16K\"\nmode = \"wb\"\n\
         [cache.cleaner]\nstaleness = \"1h\"\n",
    );
    v.mount();
    let f = open_rw(&v.path("f"));
    f.set_len(1 << 20).unwrap();
    f.write_all_at(&[9u8; 8192], 512 << 10).unwrap();
    assert_eq!(seek(&f, 0, libc::SEEK_DATA), Some(512 << 10));
    assert_eq!(
        seek(&f, 512 << 10, libc::SEEK_HOLE),
        Some((512 << 10) + 8192)
    );
    drop(f);
    v.umount();
}

/// Collapse and insert rebuild the file into new objects and switch in one commit: a crash
/// before the switch shows the old file, after it the new one, never a file shifted on some
/// devices only.
#[cfg(feature = "failpoints")]
#[test]
fn a_crash_in_a_collapse_or_insert_shows_the_old_file_or_the_new() {
    let mut v = TestVolume::new(DEVICES as usize, "16K", "");
    v.mount();
    let mut rng = Rng::new(3);
    fs::write(v.path("f"), rng.bytes((8 * ROW) as usize)).unwrap();
    File::open(v.path("f")).unwrap().sync_all().unwrap();
    for (insert, name) in [(false, "collapse"), (true, "insert")] {
        let before = fs::read(v.path("f")).unwrap();
        let mut after = before.clone();
        let (at, len) = (2 * ROW as usize, ROW as usize);
        if insert {
            after.splice(at..at, std::iter::repeat_n(0u8, len));
        } else {
            after.drain(at..at + len);
        }
        // Killed with the new objects written, before the switch.
        let armed = b"engine.shift-copied=return(crash)";
        setxattr(&v.mnt, "user.stripefs.failpoint", armed).unwrap();
        let pid = v.daemon_pid();
        assert!(shift(&v.path("f"), insert, at as u64, len as u64).is_err());
        v.forget_dead_daemon(pid);
        v.mount();
        let now = fs::read(v.path("f")).unwrap();
        assert!(now == before, "{name}: crash before the switch");
        // Killed right after it returned: the new file.
        shift(&v.path("f"), insert, at as u64, len as u64).unwrap();
        v.crash();
        v.mount();
        let now = fs::read(v.path("f")).unwrap();
        assert!(now == after, "{name}: crash after it returned");
    }
    v.umount();
    v.assert_fsck_clean("after crashes in collapse and insert");
}

/// The kernel refuses fallocate's COLLAPSE_RANGE and INSERT_RANGE on FUSE before the daemon
/// sees them (fs/fuse/file.c), so they are commands; their refusals say why.
#[test]
fn collapse_and_insert_are_commands_and_say_why_they_refuse() {
    let mut v = TestVolume::new(DEVICES as usize, "16K", "");
    v.mount();
    let data: Vec<u8> = (0..(4 * ROW)).map(|i| (i / 4096) as u8).collect();
    fs::write(v.path("f"), &data).unwrap();
    let f = open_rw(&v.path("f"));
    let e = fallocate(&f, libc::FALLOC_FL_COLLAPSE_RANGE, 0, ROW).unwrap_err();
    assert_eq!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP),
        "the kernel passes it on now: {e}"
    );
    drop(f);
    let f = v.path("f");
    let f = f.to_str().unwrap();
    let out = stripefs(&["collapse", f, "16K", "48K"]);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("whole stripe rows") && said.contains("48K"),
        "{said}"
    );
    let out = stripefs_ok(&["collapse", f, "48K", "48K"]);
    assert!(out.contains("now 147456 bytes"), "{out}");
    let mut want = data.clone();
    want.drain(ROW as usize..2 * ROW as usize);
    assert!(fs::read(v.path("f")).unwrap() == want);
    stripefs_ok(&["insert", f, "0", "96K"]);
    want.splice(0..0, std::iter::repeat_n(0u8, 2 * ROW as usize));
    assert!(fs::read(v.path("f")).unwrap() == want);
    let out = stripefs(&["insert", f, "48000K", "48K"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("before the end of the file"));
    v.umount();
}
