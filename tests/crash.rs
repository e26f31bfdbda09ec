//! Crash rounds: a write-heavy workload (creates, writes, renames, unlinks, fsyncs) is cut off
//! by SIGKILL of the daemon at a random moment; after a remount every fsync-acknowledged byte
//! and name is there and fsck is clean. 20 rounds each without a cache, with a RAM write-back
//! cache and with a file write-back cache.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const ROUNDS: u64 = 20;

/// What fsync acknowledged (name -> content), and the operation under way when the daemon
/// died, which may or may not have landed.
#[derive(Clone, Default)]
struct Acked {
    files: BTreeMap<String, Vec<u8>>,
    pending: Option<Pending>,
}

#[derive(Clone, Debug)]
enum Pending {
    Rename(String, String),
    Remove(String),
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Runs until an operation fails (the daemon died) or `stop`; records only acknowledged state.
fn workload(mnt: &Path, round: u64, acked: &Mutex<Acked>, stop: &AtomicBool) {
    let mut rng = Rng::new(round * 7919 + 1);
    let dir = mnt.join("data");
    let mut i = 0u64;
    let mut step = |i: u64| -> std::io::Result<()> {
        let choice = rng.below(10);
        let names: Vec<String> = acked.lock().unwrap().files.keys().cloned().collect();
        if choice < 6 || names.is_empty() {
            // A new file, written and fsynced, its name made durable by fsync of the directory.
            let name = format!("r{round}-f{i}");
            let len = 1 + rng.below(200_000) as usize;
            let data = rng.bytes(len);
            let f = OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true)
                .open(dir.join(&name))?;
            f.write_all_at(&data, 0)?;
            f.sync_all()?;
            sync_dir(&dir)?;
            acked.lock().unwrap().files.insert(name, data);
        } else if choice < 8 {
            let from = names[rng.below(names.len() as u64) as usize].clone();
            let to = format!("r{round}-m{i}");
            acked.lock().unwrap().pending = Some(Pending::Rename(from.clone(), to.clone()));
            fs::rename(dir.join(&from), dir.join(&to))?;
            sync_dir(&dir)?;
            let mut a = acked.lock().unwrap();
            let data = a.files.remove(&from).unwrap();
            a.files.insert(to, data);
            a.pending = None;
        } else {
            let victim = names[rng.below(names.len() as u64) as usize].clone();
            acked.lock().unwrap().pending = Some(Pending::Remove(victim.clone()));
            fs::remove_file(dir.join(&victim))?;
            sync_dir(&dir)?;
            let mut a = acked.lock().unwrap();
            a.files.remove(&victim);
            a.pending = None;
        }
        Ok(())
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
    let mut checked = 0usize;
    for round in 0..ROUNDS {
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
        let mut survivors = BTreeMap::new();
        for (name, data) in &state.files {
            match (read(name), &state.pending) {
                (Some(got), _) => {
                    assert!(
                        got == *data,
                        "{label} round {round}: {name} differs ({} vs {} bytes)",
                        got.len(),
                        data.len()
                    );
                    survivors.insert(name.clone(), data.clone());
                }
                // The rename or unlink under way landed: allowed, it was asked for.
                (None, Some(Pending::Rename(from, to))) if from == name => {
                    let got = read(to).unwrap_or_else(|| {
                        panic!("{label} round {round}: {name} and {to} both gone")
                    });
                    assert!(got == *data, "{label} round {round}: {to} differs");
                    survivors.insert(to.clone(), data.clone());
                }
                (None, Some(Pending::Remove(victim))) if victim == name => {}
                (None, _) => panic!("{label} round {round}: acknowledged {name} lost"),
            }
            checked += 1;
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
    eprintln!("{label}: {ROUNDS} crash rounds, {checked} acknowledged files checked, 0 bytes lost");
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
