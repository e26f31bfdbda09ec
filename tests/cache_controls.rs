//! The controls casadm users expect, on mounted volumes: a mode switch without flush, counters
//! reset, purge of clean lines, flush of one target or file, detach and attach with I/O going
//! on, and the statistics in every format.

mod common;

use common::*;
use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn stats(v: &TestVolume) -> serde_json::Value {
    let both: serde_json::Value =
        serde_json::from_str(&stripefs_ok(&["stats", v.mnt_str(), "--json"])).unwrap();
    both["cache"].clone()
}

/// The class named `name` ("default", a target's folder path, "class NAME").
fn class<'a>(s: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    s["classes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no class {name} in {s}"))
}

fn n(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn objects_bytes(v: &TestVolume, path: &Path) -> u64 {
    let ino = std::os::unix::fs::MetadataExt::ino(&fs::metadata(path).unwrap());
    (0..v.devices.len())
        .filter_map(|d| fs::metadata(v.object(d, ino)).ok())
        .map(|m| m.len())
        .sum()
}

const RAM_WB: &str =
    "[cache]\nstore = \"ram\"\nsize = \"8M\"\nline_size = \"64K\"\nmode = \"wb\"\n\
                      [cache.cleaner]\nstaleness = \"1h\"\n";

#[test]
fn mode_no_flush_keeps_the_dirty_lines_and_serves_them() {
    let mut v = TestVolume::new(2, "64K", RAM_WB);
    v.mount();
    let data = Rng::new(1).bytes(1 << 20);
    fs::write(v.path("f"), &data).unwrap();
    assert_eq!(n(&stats(&v)["dirty_lines"]), 16);
    // To pass-through without writing back: the dirty lines stay, the devices lack the data.
    let out = stripefs_ok(&["mode", v.mnt_str(), "pt", "--no-flush"]);
    assert!(
        out.contains("16 dirty lines were not written back"),
        "{out}"
    );
    let s = stats(&v);
    assert_eq!(s["default_mode"], "pt");
    assert_eq!(n(&s["dirty_lines"]), 16, "{s}");
    assert_eq!(objects_bytes(&v, &v.path("f")), 0, "nothing written back");
    // Pass-through serves them right: a read writes the dirty sectors back first; a write
    // over part of them is not undone by a later write-back.
    let f = OpenOptions::new().write(true).open(v.path("f")).unwrap();
    f.write_all_at(&[7u8; 4096], 8192).unwrap();
    drop(f);
    let mut want = data.clone();
    want[8192..12288].fill(7);
    assert!(fs::read(v.path("f")).unwrap() == want);
    // Without --no-flush, leaving wb writes everything back.
    stripefs_ok(&["mode", v.mnt_str(), "wb"]);
    fs::write(v.path("g"), &data).unwrap();
    assert!(n(&stats(&v)["dirty_lines"]) >= 16);
    stripefs_ok(&["mode", v.mnt_str(), "wt"]);
    assert_eq!(n(&stats(&v)["dirty_lines"]), 0);
    assert!(fs::read(v.path("f")).unwrap() == want);
    // A bad value is refused with its reason.
    let out = stripefs(&["mode", v.mnt_str(), "fast", "--no-flush"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("must be wt, wb"));
    v.umount();
    v.assert_fsck_clean("after mode --no-flush");
}

#[test]
fn stats_reset_zeroes_every_counter_per_class_and_in_total() {
    let cfg = format!(
        "[mount]\nallow_other = true\n{RAM_WB}[[cache.target]]\npath = \"/vm\"\nmode = \"wt\"\n"
    );
    let mut v = TestVolume::new(2, "64K", &cfg);
    v.mount();
    fs::write(v.path("vm/a"), vec![1u8; 300_000]).unwrap();
    fs::write(v.path("b"), vec![2u8; 300_000]).unwrap();
    let _ = fs::read(v.path("vm/a")).unwrap();
    let s = stats(&v);
    assert!(n(&s["total_requests"]) > 0);
    assert!(n(&class(&s, "/vm")["total_requests"]) > 0);
    let out = as_tests(&[BIN, "stats", v.mnt_str(), "--reset"]);
    assert!(!out.status.success(), "only root or the mounter resets");
    // The kernel already refuses a user xattr on a root directory the caller cannot write.
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(
        why.contains("permission denied") || why.contains("only root or the user who mounted"),
        "{why}"
    );
    let out = stripefs_ok(&["stats", v.mnt_str(), "--reset"]);
    assert!(out.contains("reset"), "{out}");
    let s = stats(&v);
    let zero = |c: &serde_json::Value, what: &str| {
        for (k, val) in c["counters"].as_object().unwrap() {
            assert_eq!(n(val), 0, "{what}: {k} after reset: {c}");
        }
        assert_eq!(n(&c["total_requests"]), 0, "{what}");
    };
    zero(&s, "total");
    for c in s["classes"].as_array().unwrap() {
        zero(c, c["name"].as_str().unwrap());
    }
    assert_eq!(n(&s["cleaner_passes"]), 0);
    // What is cached stays; counting starts again.
    assert!(n(&s["occupancy_lines"]) > 0);
    let _ = fs::read(v.path("vm/a")).unwrap();
    assert!(n(&class(&stats(&v), "/vm")["counters"]["read_hits"]) > 0);
}

#[test]
fn purge_drops_clean_lines_and_keeps_dirty_ones() {
    let cfg = format!(
        "[mount]\nallow_other = true\n{RAM_WB}[[cache.target]]\npath = \"/ro\"\nmode = \"wt\"\n\
         [[cache.target]]\npath = \"/rw\"\nmode = \"wb\"\n"
    );
    let mut v = TestVolume::new(2, "64K", &cfg);
    v.mount();
    let data = Rng::new(2).bytes(512 << 10);
    fs::write(v.path("ro/a"), &data).unwrap();
    fs::write(v.path("ro/b"), &data).unwrap();
    fs::write(v.path("rw/c"), &data).unwrap();
    let s = stats(&v);
    assert_eq!(n(&class(&s, "/ro")["occupancy_lines"]), 16);
    assert_eq!(n(&class(&s, "/rw")["dirty_lines"]), 8);
    // One file: only its lines go.
    let out = stripefs_ok(&["cache", "purge", v.mnt_str(), "ro/a"]);
    assert!(out.contains("dropped 8 clean lines"), "{out}");
    assert_eq!(n(&class(&stats(&v), "/ro")["occupancy_lines"]), 8);
    // A target folder: its clean lines; the dirty ones stay, and the command says so.
    let out = stripefs_ok(&["cache", "purge", v.mnt_str(), "/rw"]);
    assert!(out.contains("dropped 0 clean lines"), "{out}");
    assert!(out.contains("8 dirty lines kept"), "{out}");
    assert_eq!(n(&class(&stats(&v), "/rw")["dirty_lines"]), 8);
    // A folder that is no target is refused, with the reason.
    fs::create_dir(v.path("plain")).unwrap();
    let out = stripefs(&["cache", "purge", v.mnt_str(), "plain"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a cache target"));
    // The whole cache: every clean line, the dirty ones kept.
    let out = stripefs_ok(&["cache", "purge", v.mnt_str()]);
    assert!(out.contains("dropped 8 clean lines"), "{out}");
    let s = stats(&v);
    assert_eq!(n(&s["occupancy_lines"]), 8, "{s}");
    assert_eq!(n(&s["dirty_lines"]), 8);
    // Nothing was lost.
    for f in ["ro/a", "ro/b", "rw/c"] {
        assert!(fs::read(v.path(f)).unwrap() == data, "{f}");
    }
    // Someone else may not purge the whole cache.
    let out = as_tests(&[BIN, "cache", "purge", v.mnt_str()]);
    assert!(!out.status.success());
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(
        why.contains("permission denied") || why.contains("purge the whole cache"),
        "{why}"
    );
    v.umount();
    v.assert_fsck_clean("after purges");
}

#[test]
fn flush_of_a_target_or_a_file_writes_back_only_those() {
    let cfg = format!(
        "{RAM_WB}[[cache.target]]\npath = \"/a\"\nmode = \"wb\"\n\
         [[cache.target]]\npath = \"/b\"\nmode = \"wb\"\n"
    );
    let mut v = TestVolume::new(2, "64K", &cfg);
    v.mount();
    let data = Rng::new(3).bytes(256 << 10);
    for f in ["a/1", "b/1", "b/2"] {
        fs::write(v.path(f), &data).unwrap();
    }
    let s = stats(&v);
    assert_eq!(n(&class(&s, "/a")["dirty_lines"]), 4);
    assert_eq!(n(&class(&s, "/b")["dirty_lines"]), 8);
    let out = stripefs_ok(&["flush", v.mnt_str(), "a"]);
    assert!(out.contains("flushed 4 dirty lines; 0 dirty now"), "{out}");
    let s = stats(&v);
    assert_eq!(n(&class(&s, "/a")["dirty_lines"]), 0);
    assert_eq!(
        n(&class(&s, "/b")["dirty_lines"]),
        8,
        "the other target waits"
    );
    assert!(objects_bytes(&v, &v.path("a/1")) >= data.len() as u64);
    assert_eq!(objects_bytes(&v, &v.path("b/1")), 0);
    // One file of a target.
    let file = v.path("b/2");
    stripefs_ok(&["flush", v.mnt_str(), file.to_str().unwrap()]);
    assert_eq!(n(&class(&stats(&v), "/b")["dirty_lines"]), 4);
    assert!(objects_bytes(&v, &file) >= data.len() as u64);
    assert_eq!(objects_bytes(&v, &v.path("b/1")), 0);
    // Everything.
    stripefs_ok(&["flush", v.mnt_str()]);
    assert_eq!(n(&stats(&v)["dirty_lines"]), 0);
}

/// A writer and a reader keep going on their own files while the cache is detached and
/// attached again; each checks what it reads back.
struct Load {
    stop: Arc<AtomicBool>,
    ops: Arc<AtomicU64>,
    handles: Vec<std::thread::JoinHandle<Result<(), String>>>,
}

impl Load {
    fn start(v: &TestVolume) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let ops = Arc::new(AtomicU64::new(0));
        let mut handles = Vec::new();
        for t in 0..2u8 {
            let path = v.path(&format!("load{t}"));
            let (stop, ops) = (stop.clone(), ops.clone());
            handles.push(std::thread::spawn(move || {
                let f = OpenOptions::new()
                    .create(true)
                    .truncate(true)
                    .read(true)
                    .write(true)
                    .open(&path)
                    .map_err(|e| e.to_string())?;
                let mut round = 0u64;
                let mut rng = Rng::new(100 + t as u64);
                while !stop.load(Ordering::Relaxed) {
                    let at = rng.below(64) * 16384;
                    let block = vec![(round % 251) as u8 + t; 16384];
                    f.write_all_at(&block, at)
                        .map_err(|e| format!("write: {e}"))?;
                    let mut back = vec![0u8; 16384];
                    f.read_exact_at(&mut back, at)
                        .map_err(|e| format!("read: {e}"))?;
                    if back != block {
                        return Err(format!("round {round}: read back other data at {at}"));
                    }
                    round += 1;
                    ops.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            }));
        }
        Load { stop, ops, handles }
    }

    fn ops(&self) -> u64 {
        self.ops.load(Ordering::Relaxed)
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles {
            h.join().unwrap().unwrap();
        }
    }
}

fn file_store(v: &TestVolume, dir: &str) -> std::path::PathBuf {
    let ssd = v.root.path().join(dir);
    fs::create_dir(&ssd).unwrap();
    let cfg = fs::read_to_string(&v.config).unwrap()
        + &format!(
            "[cache]\nstore = \"file\"\npath = \"{}\"\nsize = \"8M\"\nline_size = \"16K\"\n\
             mode = \"wb\"\n[cache.cleaner]\nstaleness = \"1h\"\n",
            ssd.display()
        );
    fs::write(&v.config, cfg).unwrap();
    ssd
}

#[test]
fn detach_and_attach_with_io_going_on() {
    let mut v = TestVolume::new(2, "64K", "");
    let ssd = file_store(&v, "ssd");
    v.mount();
    let data = Rng::new(4).bytes(1 << 20);
    fs::write(v.path("kept"), &data).unwrap();
    let load = Load::start(&v);
    while load.ops() < 200 {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(n(&stats(&v)["dirty_lines"]) > 0);
    let before = load.ops();
    let out = stripefs_ok(&["cache", "detach", v.mnt_str()]);
    assert!(out.contains("cache detached"), "{out}");
    let t = Instant::now();
    while load.ops() < before + 200 && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(load.ops() >= before + 200, "I/O goes on once detached");
    let status: serde_json::Value =
        serde_json::from_str(&stripefs_ok(&["status", v.mnt_str(), "--json"])).unwrap();
    assert_eq!(status["cache"]["state"], "detached", "{status}");
    assert_eq!(stats(&v)["state"], "detached");
    // Written back: the devices hold the data.
    assert!(objects_bytes(&v, &v.path("kept")) >= data.len() as u64);
    let out = stripefs(&["cache", "detach", v.mnt_str()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("detached already"));
    // Attached again, still under load: writes are cached again.
    let before = load.ops();
    stripefs_ok(&["cache", "attach", v.mnt_str()]);
    let t = Instant::now();
    while load.ops() < before + 200 && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let s = stats(&v);
    assert_eq!(s["state"], "attached");
    assert!(n(&s["dirty_lines"]) > 0, "wb again: {s}");
    load.stop();
    assert!(fs::read(v.path("kept")).unwrap() == data);
    // Another file store, of another size; what is changed while detached applies then.
    stripefs_ok(&["cache", "detach", v.mnt_str()]);
    fs::create_dir(v.path("t")).unwrap();
    stripefs_ok(&[
        "target",
        "add",
        v.path("t").to_str().unwrap(),
        "--mode",
        "wt",
    ]);
    stripefs_ok(&["mode", v.mnt_str(), "wo"]);
    let out = stripefs(&["stats", v.mnt_str(), "--reset"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("the cache is detached"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let other = v.root.path().join("ssd2");
    fs::create_dir(&other).unwrap();
    stripefs_ok(&[
        "cache",
        "attach",
        v.mnt_str(),
        "--path",
        other.to_str().unwrap(),
        "--size",
        "4M",
    ]);
    let s = stats(&v);
    assert_eq!(n(&s["size_bytes"]), 4 << 20);
    assert_eq!(s["default_mode"], "wo");
    assert_eq!(class(&s, "/t")["mode"], "wt");
    fs::write(v.path("t/x"), b"through").unwrap();
    assert!(n(&class(&stats(&v), "/t")["occupancy_lines"]) > 0);
    assert!(s["path"]
        .as_str()
        .unwrap()
        .starts_with(other.to_str().unwrap()));
    fs::write(v.path("new"), &data).unwrap();
    v.umount();
    v.mount();
    assert!(fs::read(v.path("new")).unwrap() == data);
    assert!(fs::read(v.path("kept")).unwrap() == data);
    assert!(ssd.join("stripefs.cache").exists());
    v.umount();
    v.assert_fsck_clean("after detach and attach");
}

/// A crash after a detach: the volume records that no cache holds its data, so it mounts
/// with its configured cache (whose lines are stale and dropped), nothing lost.
#[test]
fn a_crash_after_detach_mounts_with_the_configured_cache() {
    let mut v = TestVolume::new(2, "64K", "");
    file_store(&v, "ssd");
    v.mount();
    let data = Rng::new(5).bytes(1 << 20);
    fs::write(v.path("a"), &data).unwrap();
    assert!(n(&stats(&v)["dirty_lines"]) > 0);
    stripefs_ok(&["cache", "detach", v.mnt_str()]);
    // Written while detached: straight to the devices; the cache file's lines of "a" are
    // stale now and must never be served.
    let newer = Rng::new(6).bytes(1 << 20);
    let f = OpenOptions::new().write(true).open(v.path("a")).unwrap();
    f.write_all_at(&newer, 0).unwrap();
    f.sync_all().unwrap();
    drop(f);
    v.crash();
    v.mount();
    assert!(
        fs::read(v.path("a")).unwrap() == newer,
        "the stale cache lines were served"
    );
    assert_eq!(stats(&v)["state"], "attached");
    v.umount();
    v.assert_fsck_clean("after a crash past a detach");
}

#[test]
fn stats_name_classes_by_path_and_come_in_every_format() {
    let cfg = format!(
        "{RAM_WB}[[cache.target]]\npath = \"/vm\"\nmode = \"wb\"\n\
         [[cache.class]]\nname = \"logs\"\nextension = \"log\"\nmode = \"wt\"\n"
    );
    let mut v = TestVolume::new(2, "64K", &cfg);
    v.mount();
    fs::write(v.path("vm/disk"), vec![1u8; 200_000]).unwrap();
    fs::write(v.path("x.log"), vec![2u8; 100_000]).unwrap();
    let _ = fs::read(v.path("x.log")).unwrap();
    fs::rename(v.path("vm"), v.path("images")).unwrap();
    let s = stats(&v);
    // A target by its folder's path now (it was renamed), not by inode.
    let vm = class(&s, "/images");
    assert_eq!(vm["path"], "/images");
    assert!(vm["class_name"].as_str().unwrap().starts_with("dir "));
    assert!(n(&vm["dirty_lines"]) > 0);
    assert!(vm["dirty_for_secs"].as_f64().is_some());
    assert!(s["dirty_for_secs"].as_f64().unwrap() >= vm["dirty_for_secs"].as_f64().unwrap());
    class(&s, "class logs");
    assert!(n(&s["serviced_requests"]) <= n(&s["total_requests"]));
    assert!(n(&s["serviced_requests"]) > 0);
    assert_eq!(s["policy"]["seq_cutoff"], "full");
    let m = &s["metadata_memory"];
    assert!(n(&m["total_bytes"]) >= n(&m["slots_bytes"]) + n(&m["lru_bytes"]));
    assert_eq!(
        n(&m["bytes_per_line"]),
        n(&m["total_bytes"]) / n(&s["lines"])
    );
    // The table.
    let table = stripefs_ok(&["stats", v.mnt_str()]);
    for want in [
        "(/images)",
        "(class logs)",
        "dirty for",
        "metadata memory",
        "serviced requests",
        "policy: mode wb",
    ] {
        assert!(table.contains(want), "no {want} in\n{table}");
    }
    // --json and --format json say the same.
    let json: serde_json::Value =
        serde_json::from_str(&stripefs_ok(&["stats", v.mnt_str(), "--format", "json"])).unwrap();
    assert_eq!(json["cache"]["lines"], s["lines"]);
    // CSV: a header and a row per scope, as many cells each.
    let csv = stripefs_ok(&["stats", v.mnt_str(), "--format", "csv"]);
    let rows: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 1 + 1 + s["classes"].as_array().unwrap().len());
    assert!(rows.iter().all(|r| r.len() == rows[0].len()), "{csv}");
    let col = rows[0].iter().position(|c| *c == "dirty_lines").unwrap();
    let vm_row = rows
        .iter()
        .find(|r| r[1] == "/images")
        .expect("a row for /images");
    assert_eq!(vm_row[col], vm["dirty_lines"].to_string());
    // Prometheus: valid exposition format, line by line.
    let prom = stripefs_ok(&["stats", v.mnt_str(), "--format", "prometheus"]);
    check_exposition(&prom);
    assert!(prom.contains("stripefs_cache_dirty_lines{class=\"/images\"} "));
    assert!(prom.contains("stripefs_cache_read_hits_total{class=\"class logs\"} "));
    assert!(prom.contains("\nstripefs_cache_attached 1\n"));
    // --watch: each screen fits 80x24.
    let frames = watch_output(&v);
    let screens: Vec<&str> = frames
        .split("\x1b[2J\x1b[H")
        .filter(|f| !f.is_empty())
        .collect();
    assert!(!screens.is_empty(), "no screen in {frames:?}");
    for screen in &screens {
        let lines: Vec<&str> = screen.lines().collect();
        assert!(lines.len() <= 23, "{} lines:\n{screen}", lines.len());
        assert!(lines.iter().all(|l| l.chars().count() <= 80), "{screen}");
        assert!(screen.contains("/images"), "{screen}");
    }
}

/// The first screens of `stats --watch`, then the command is stopped.
fn watch_output(v: &TestVolume) -> String {
    use std::io::Read;
    let mut child = std::process::Command::new(BIN)
        .args(["stats", v.mnt_str(), "--watch"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let _ = child.kill();
    let _ = child.wait();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    out
}

/// Checks the Prometheus text format: `# HELP`/`# TYPE` before a family's samples, each
/// family once, names and labels well formed, values numbers.
fn check_exposition(text: &str) {
    let name_ok = |s: &str| {
        !s.is_empty()
            && s.chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    let mut typed = std::collections::HashMap::new();
    let mut seen_samples = std::collections::HashSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# ") {
            let mut w = rest.splitn(3, ' ');
            let (kind, name) = (w.next().unwrap(), w.next().unwrap());
            assert!(name_ok(name), "bad name in {line}");
            match kind {
                "HELP" => assert!(w.next().is_some_and(|h| !h.is_empty()), "{line}"),
                "TYPE" => {
                    let t = w.next().unwrap();
                    assert!(["counter", "gauge"].contains(&t), "{line}");
                    assert!(
                        typed.insert(name.to_string(), t.to_string()).is_none(),
                        "{line} twice"
                    );
                }
                _ => panic!("unknown comment {line}"),
            }
            continue;
        }
        assert!(!line.is_empty(), "empty line in\n{text}");
        let (series, value) = line.rsplit_once(' ').unwrap();
        value
            .parse::<f64>()
            .unwrap_or_else(|_| panic!("bad value in {line}"));
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (n, Some(l.strip_suffix('}').expect("labels end with }"))),
            None => (series, None),
        };
        assert!(name_ok(name), "bad name in {line}");
        assert!(name.starts_with("stripefs_cache_"), "{line}");
        let t = typed
            .get(name)
            .unwrap_or_else(|| panic!("no TYPE before {line}"));
        if t == "counter" {
            assert!(name.ends_with("_total"), "a counter ends in _total: {line}");
        }
        if let Some(l) = labels {
            let (k, v) = l.split_once('=').unwrap();
            assert!(name_ok(k), "{line}");
            assert!(
                v.starts_with('"') && v.ends_with('"') && v.len() >= 2,
                "{line}"
            );
            let inner = &v[1..v.len() - 1];
            assert!(!inner.replace("\\\"", "").contains('"'), "{line}");
        }
        assert!(seen_samples.insert(series.to_string()), "{series} twice");
    }
    assert!(text.ends_with('\n'));
}

/// After `mode --no-flush` the dirty lines are the cleaner's: it writes them back in the new
/// mode as it would have in the old one.
#[test]
fn the_cleaner_writes_back_what_a_mode_switch_left_dirty() {
    let cfg = "[cache]\nstore = \"ram\"\nsize = \"8M\"\nline_size = \"64K\"\nmode = \"wb\"\n\
               [cache.cleaner]\nstaleness = \"3s\"\nwake_up = \"1s\"\n";
    let mut v = TestVolume::new(2, "64K", cfg);
    v.mount();
    let data = Rng::new(7).bytes(1 << 20);
    fs::write(v.path("f"), &data).unwrap();
    stripefs_ok(&["mode", v.mnt_str(), "wt", "--no-flush"]);
    assert!(n(&stats(&v)["dirty_lines"]) > 0, "left dirty by the switch");
    let t = Instant::now();
    while n(&stats(&v)["dirty_lines"]) > 0 && t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(200));
    }
    let s = stats(&v);
    assert_eq!(n(&s["dirty_lines"]), 0, "the cleaner wrote them back: {s}");
    assert!(n(&s["cleaned_lines"]) >= 16);
    assert!(objects_bytes(&v, &v.path("f")) >= data.len() as u64);
}

/// A crash at each step of a detach leaves a volume that mounts with its cache and has lost
/// nothing acknowledged.
#[cfg(feature = "failpoints")]
#[test]
fn a_crash_during_detach_loses_nothing() {
    for point in ["cache.detach-flushed", "cache.detach-recorded"] {
        let mut v = TestVolume::new(2, "64K", "");
        file_store(&v, "ssd");
        v.mount();
        let data = Rng::new(8).bytes(1 << 20);
        let f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(v.path("a"))
            .unwrap();
        f.write_all_at(&data, 0).unwrap();
        f.sync_all().unwrap();
        drop(f);
        assert!(n(&stats(&v)["dirty_lines"]) > 0);
        let pid = v.daemon_pid();
        setxattr(
            &v.mnt,
            "user.stripefs.failpoint",
            format!("{point}=return(crash)").as_bytes(),
        )
        .unwrap();
        let out = stripefs(&["cache", "detach", v.mnt_str()]);
        assert!(
            !out.status.success(),
            "{point}: the daemon died in the detach"
        );
        v.forget_dead_daemon(pid);
        v.mount();
        assert!(fs::read(v.path("a")).unwrap() == data, "{point}: data lost");
        assert_eq!(stats(&v)["state"], "attached", "{point}");
        v.umount();
        v.assert_fsck_clean(point);
    }
}
