//! Crash rounds: a write-heavy workload (creates, O_DIRECT writes, mmap writes, truncates,
//! renames to new names and over existing files, unlinks, each acknowledged by fsync/msync)
//! is cut off by SIGKILL of the daemon at a random moment; after a remount every acknowledged
//! byte and name is there, the operation under way shows all of its effect or none of it,
//! and fsck is clean. 20 rounds each without a cache, with a RAM write-back cache and with a
//! file write-back cache; STRIPEFS_LONG=1 runs 200 rounds and every other mode and store.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn rounds() -> u64 {
    if std::env::var_os("STRIPEFS_LONG").is_some() {
        200
    } else {
        20
    }
}

/// What was acknowledged (name -> content), and the operation under way when the daemon
/// died: the states it leads its names to (`None`: gone), all of which or none may show.
#[derive(Clone, Default)]
struct Acked {
    files: BTreeMap<String, Vec<u8>>,
    pending: Option<BTreeMap<String, Option<Vec<u8>>>>,
}

impl Acked {
    /// Records `op` as under way (if it is one that lands whole or not at all), runs it, and
    /// on success makes its states the acknowledged ones. A new file is not such an op: its
    /// create and its writes are separate calls, and until fsync any prefix of them may show.
    fn run(
        acked: &Mutex<Acked>,
        whole: bool,
        op: BTreeMap<String, Option<Vec<u8>>>,
        f: impl FnOnce() -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        acked.lock().unwrap().pending = whole.then(|| op.clone());
        f()?;
        let mut a = acked.lock().unwrap();
        for (name, state) in op {
            match state {
                Some(data) => a.files.insert(name, data),
                None => a.files.remove(&name),
            };
        }
        a.pending = None;
        Ok(())
    }
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// A page-aligned copy of `data` (O_DIRECT needs one).
fn aligned(data: &[u8]) -> (Vec<u8>, usize) {
    let mut buf = vec![0u8; data.len() + 4096];
    let at = buf.as_ptr().align_offset(4096);
    buf[at..at + data.len()].copy_from_slice(data);
    (buf, at)
}

/// Overwrites one page of `path` at `page` through a shared mapping, then msync. In a child
/// process: touching a mapping whose daemon was just killed raises SIGBUS, which must end the
/// child, not the test.
fn mmap_write(path: &Path, page: usize, data: &[u8; 4096]) -> std::io::Result<()> {
    let f = OpenOptions::new().read(true).write(true).open(path)?;
    let len = f.metadata()?.len() as usize;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
    // SAFETY: the child runs only syscalls and a copy into the mapping, then _exit; the
    // parent waits for it.
    unsafe {
        let child = libc::fork();
        if child < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if child == 0 {
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            );
            if p == libc::MAP_FAILED {
                libc::_exit(1);
            }
            std::ptr::copy_nonoverlapping(data.as_ptr(), (p as *mut u8).add(page * 4096), 4096);
            let ok = libc::msync(p, len, libc::MS_SYNC) == 0;
            libc::_exit(if ok { 0 } else { 1 });
        }
        let mut status = 0;
        libc::waitpid(child, &mut status, 0);
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
            Ok(())
        } else {
            Err(std::io::Error::other(format!(
                "mmap writer ended with {status:#x}"
            )))
        }
    }
}

/// Runs until an operation fails (the daemon died) or `stop`; records only acknowledged state.
fn workload(mnt: &Path, round: u64, acked: &Mutex<Acked>, stop: &AtomicBool) {
    let mut rng = Rng::new(round * 7919 + 1);
    let dir = mnt.join("data");
    let mut i = 0u64;
    let mut step = |i: u64| -> std::io::Result<()> {
        let choice = rng.below(10);
        let files = acked.lock().unwrap().files.clone();
        let names: Vec<&String> = files.keys().collect();
        let pick = |rng: &mut Rng| names[rng.below(names.len() as u64) as usize].clone();
        let one = |name: &str, state: Option<Vec<u8>>| BTreeMap::from([(name.to_string(), state)]);
        if choice < 4 || names.is_empty() {
            // A new file, written and fsynced, its name made durable by fsync of the directory.
            let name = format!("r{round}-f{i}");
            let len = 1 + rng.below(200_000) as usize;
            let data = rng.bytes(len);
            Acked::run(acked, false, one(&name, Some(data.clone())), || {
                let f = OpenOptions::new()
                    .create(true)
                    .truncate(true)
                    .write(true)
                    .open(dir.join(&name))?;
                f.write_all_at(&data, 0)?;
                f.sync_all()?;
                sync_dir(&dir)
            })
        } else if choice == 4 {
            // The same through O_DIRECT, whole pages.
            let name = format!("r{round}-d{i}");
            let pages = 1 + rng.below(16) as usize;
            let data = rng.bytes(4096 * pages);
            Acked::run(acked, false, one(&name, Some(data.clone())), || {
                let f = OpenOptions::new()
                    .create(true)
                    .truncate(true)
                    .write(true)
                    .custom_flags(libc::O_DIRECT)
                    .open(dir.join(&name))?;
                let (buf, at) = aligned(&data);
                f.write_all_at(&buf[at..at + data.len()], 0)?;
                f.sync_all()?;
                sync_dir(&dir)
            })
        } else if choice == 5 {
            // One page of an existing file rewritten through mmap, then msync.
            let name = pick(&mut rng);
            let mut data = files[&name].clone();
            if data.len() < 4096 {
                return Ok(());
            }
            let page = rng.below((data.len() / 4096) as u64) as usize;
            let new: [u8; 4096] = rng.bytes(4096).try_into().unwrap();
            data[page * 4096..page * 4096 + 4096].copy_from_slice(&new);
            Acked::run(acked, true, one(&name, Some(data)), || {
                mmap_write(&dir.join(&name), page, &new)
            })
        } else if choice == 6 {
            // A shrink.
            let name = pick(&mut rng);
            let data = &files[&name];
            let keep = rng.below(data.len() as u64 + 1) as usize;
            Acked::run(acked, true, one(&name, Some(data[..keep].to_vec())), || {
                let f = OpenOptions::new().write(true).open(dir.join(&name))?;
                f.set_len(keep as u64)?;
                f.sync_all()
            })
        } else if choice == 7 || choice == 8 {
            // A rename to a new name, or over another file.
            let from = pick(&mut rng);
            let to = if choice == 7 || names.len() < 2 {
                format!("r{round}-m{i}")
            } else {
                pick(&mut rng)
            };
            if to == from {
                return Ok(());
            }
            let op = BTreeMap::from([
                (from.clone(), None),
                (to.clone(), Some(files[&from].clone())),
            ]);
            Acked::run(acked, true, op, || {
                fs::rename(dir.join(&from), dir.join(&to))?;
                sync_dir(&dir)
            })
        } else {
            let victim = pick(&mut rng);
            Acked::run(acked, true, one(&victim, None), || {
                fs::remove_file(dir.join(&victim))?;
                sync_dir(&dir)
            })
        }
    };
    while !stop.load(Ordering::Relaxed) {
        if step(i).is_err() {
            return;
        }
        i += 1;
    }
}

fn crash_rounds(extra: &str, label: &str) {
    let mut v = TestVolume::new(3, "64K", extra);
    v.mount();
    fs::create_dir(v.path("data")).unwrap();
    sync_dir(&v.path("data")).unwrap();
    sync_dir(&v.mnt).unwrap();
    let acked = Arc::new(Mutex::new(Acked::default()));
    let mut dice = Rng::new(label.len() as u64);
    let (mut checked, mut landed, mut undone) = (0usize, 0usize, 0usize);
    for round in 0..rounds() {
        let stop = Arc::new(AtomicBool::new(false));
        let worker = {
            let (mnt, acked, stop) = (v.mnt.clone(), acked.clone(), stop.clone());
            std::thread::spawn(move || workload(&mnt, round, &acked, &stop))
        };
        std::thread::sleep(Duration::from_millis(30 + dice.below(250)));
        v.crash();
        stop.store(true, Ordering::Relaxed);
        worker.join().unwrap();
        let state = acked.lock().unwrap().clone();
        v.mount();
        let read = |name: &str| fs::read(v.path(&format!("data/{name}"))).ok();
        let what = |name: &str, got: &Option<Vec<u8>>| {
            format!(
                "{label} round {round}: {name} is {}",
                got.as_ref()
                    .map_or("gone".to_string(), |g| format!("{} bytes", g.len()))
            )
        };
        // The operation under way: all of it, or none of it.
        let pending = state.pending.clone().unwrap_or_default();
        let all_new = pending.iter().all(|(n, s)| read(n) == *s);
        let all_old = pending
            .iter()
            .all(|(n, _)| read(n) == state.files.get(n).cloned());
        assert!(
            all_new || all_old,
            "{label} round {round}: the operation under way half landed: {:?}",
            pending
                .keys()
                .map(|n| what(n, &read(n)))
                .collect::<Vec<_>>()
        );
        if !pending.is_empty() {
            if all_new && !all_old {
                landed += 1;
            } else {
                undone += 1;
            }
        }
        let mut survivors = BTreeMap::new();
        for (name, data) in &state.files {
            let got = read(name);
            if !pending.contains_key(name) {
                assert!(
                    got.as_ref() == Some(data),
                    "{} (acknowledged)",
                    what(name, &got)
                );
            }
            checked += 1;
        }
        for name in state.files.keys().chain(pending.keys()) {
            if let Some(got) = read(name) {
                survivors.insert(name.clone(), got);
            }
        }
        *acked.lock().unwrap() = Acked {
            files: survivors,
            pending: None,
        };
        if round % 5 == 4 {
            v.umount();
            v.assert_fsck_clean(&format!("{label} round {round}"));
            v.mount();
        }
    }
    v.umount();
    v.assert_fsck_clean(label);
    eprintln!(
        "{label}: {} crash rounds, {checked} acknowledged files checked, 0 bytes lost; \
         the operation under way landed whole {landed} times, not at all {undone} times, \
         never half",
        rounds()
    );
}

#[test]
fn crash_rounds_without_a_cache() {
    crash_rounds("", "no cache");
}

#[test]
fn crash_rounds_with_a_ram_write_back_cache() {
    crash_rounds(
        "[cache]\nsize = \"8M\"\nline_size = \"16K\"\nmode = \"wb\"\n",
        "RAM write-back",
    );
}

#[test]
fn crash_rounds_with_a_file_write_back_cache() {
    crash_rounds(
        "[cache]\nstore = \"file\"\npath = \".\"\nsize = \"8M\"\nline_size = \"16K\"\nmode = \"wb\"\n",
        "file write-back",
    );
}

#[test]
fn crash_rounds_in_every_other_mode_and_store_long() {
    if std::env::var_os("STRIPEFS_LONG").is_none() {
        eprintln!("STRIPEFS_LONG unset: the other modes and stores are skipped");
        return;
    }
    for mode in ["wt", "wa", "wi", "wo", "pt"] {
        crash_rounds(
            &format!(
                "[cache]\nstore = \"file\"\npath = \".\"\nsize = \"8M\"\nline_size = \"16K\"\nmode = \"{mode}\"\n"
            ),
            &format!("file {mode}"),
        );
        crash_rounds(
            &format!("[cache]\nsize = \"8M\"\nline_size = \"16K\"\nmode = \"{mode}\"\n"),
            &format!("RAM {mode}"),
        );
    }
}
