//! The cache on mounted volumes: folder targets and their modes seen in the stats, targets
//! following renames, live control, write-back durability and unmount write-back.

mod common;

use common::*;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

fn stats(v: &TestVolume) -> serde_json::Value {
    let both: serde_json::Value =
        serde_json::from_str(&stripefs_ok(&["stats", v.mnt_str(), "--json"])).unwrap();
    both["cache"].clone()
}

fn class<'a>(stats: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    stats["classes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| {
            c["name"].as_str().unwrap_or("").contains(name)
                || c["class_name"].as_str().unwrap_or("").contains(name)
        })
        .unwrap_or_else(|| panic!("no class {name} in {stats}"))
}

fn file_ino(p: &Path) -> u64 {
    std::os::unix::fs::MetadataExt::ino(&fs::metadata(p).unwrap())
}

/// Bytes of an object on the devices (all devices' object files, concatenated sizes).
fn bytes_on_devices(v: &TestVolume, object: u64) -> u64 {
    (0..v.devices.len())
        .filter_map(|d| fs::metadata(v.object(d, object)).ok())
        .map(|m| m.len())
        .sum()
}

/// Appends a `[cache]` on a file store in `ssd` (16K lines) to `v`'s config; `rest` holds its
/// other keys and sections.
fn add_file_cache(v: &TestVolume, ssd: &Path, rest: &str) {
    let cfg = fs::read_to_string(&v.config).unwrap()
        + &format!(
            "[cache]\nstore = \"file\"\npath = \"{}\"\nline_size = \"16K\"\n{rest}",
            ssd.display()
        );
    fs::write(&v.config, cfg).unwrap();
}

/// [`add_file_cache`] on a new directory `ssd` of the volume's root, which it returns.
fn with_file_cache(v: &TestVolume, rest: &str) -> PathBuf {
    let ssd = v.root.path().join("ssd");
    fs::create_dir(&ssd).unwrap();
    add_file_cache(v, &ssd, rest);
    ssd
}

#[test]
fn targets_decide_the_mode_and_the_stats_show_it() {
    let cache = "[cache]\nstore = \"ram\"\nsize = \"8M\"\nline_size = \"64K\"\nmode = \"wt\"\ndefault = \"targets\"\n\
                 [[cache.target]]\npath = \"/vm\"\nmode = \"wb\"\n";
    let mut v = TestVolume::new(2, "64K", cache);
    v.mount();
    assert!(
        v.path("vm").is_dir(),
        "a config target's folder is made at mount"
    );
    fs::create_dir(v.path("backup")).unwrap();
    let data = Rng::new(1).bytes(1 << 20);
    fs::write(v.path("vm/disk.img"), &data).unwrap();
    fs::write(v.path("backup/dump"), &data).unwrap();
    let s = stats(&v);
    let vm = class(&s, "dir");
    assert_eq!(vm["mode"], "wb");
    assert_eq!(vm["dirty_lines"], 16, "1 MiB in 64K lines, all dirty: {vm}");
    // The backup folder is no target: the default class passes it through to the devices.
    let default = class(&s, "default");
    assert_eq!(default["mode"], "pt");
    assert!(
        default["counters"]["pass_through_writes"].as_u64().unwrap() > 0,
        "{default}"
    );
    assert_eq!(
        bytes_on_devices(&v, file_ino(&v.path("backup/dump"))),
        1 << 20
    );
    assert_eq!(
        bytes_on_devices(&v, file_ino(&v.path("vm/disk.img"))),
        0,
        "write-back: not yet"
    );
    // Reads of the cached file hit.
    assert_eq!(fs::read(v.path("vm/disk.img")).unwrap(), data);
    // A live target on backup: write-through from now on.
    stripefs_ok(&[
        "target",
        "add",
        v.path("backup").to_str().unwrap(),
        "--mode",
        "wt",
        "--priority",
        "3",
        "--allocation",
        "0.5",
    ]);
    let got =
        String::from_utf8(getxattr(&v.path("backup"), "user.stripefs.cache").unwrap()).unwrap();
    assert_eq!(got, "mode=wt priority=3 allocation=0.5 pinned=0");
    fs::write(v.path("backup/second"), &data).unwrap();
    let s = stats(&v);
    let backup = s["classes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["mode"] == "wt")
        .unwrap();
    assert!(backup["occupancy_lines"].as_u64().unwrap() > 0, "{backup}");
    assert_eq!(
        bytes_on_devices(&v, file_ino(&v.path("backup/second"))),
        1 << 20,
        "write-through reached the devices"
    );
    // A renamed folder keeps its target.
    fs::rename(v.path("vm"), v.path("images")).unwrap();
    let list: serde_json::Value =
        serde_json::from_str(&stripefs_ok(&["target", "ls", v.mnt_str(), "--json"])).unwrap();
    let paths: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["/backup", "/images"]);
    fs::write(v.path("images/new.img"), b"after the rename").unwrap();
    assert_eq!(
        bytes_on_devices(&v, file_ino(&v.path("images/new.img"))),
        0,
        "still write-back"
    );
    // Removing the wb target writes its dirty lines back; the folder follows the default.
    let dirty_before = stats(&v)["dirty_lines"].as_u64().unwrap();
    assert!(dirty_before > 0);
    fs::remove_dir(v.path("images")).unwrap_err(); // not empty: stays
    stripefs_ok(&["target", "rm", v.path("images").to_str().unwrap()]);
    assert_eq!(stats(&v)["dirty_lines"], 0);
    assert_eq!(
        bytes_on_devices(&v, file_ino(&v.path("images/disk.img"))),
        1 << 20
    );
    assert_eq!(fs::read(v.path("images/disk.img")).unwrap(), data);
    // The live target is still there after a remount; the config one comes back on its
    // folder, renamed to /images (the mount that first applied it bound it there), and no /vm
    // is made.
    v.remount();
    let list: serde_json::Value =
        serde_json::from_str(&stripefs_ok(&["target", "ls", v.mnt_str(), "--json"])).unwrap();
    let paths: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["/backup", "/images"]);
    assert_eq!(list[1]["config_path"], "/vm");
    assert!(!v.path("vm").exists());
}

#[test]
fn control_xattrs_refuse_bad_values_and_unknown_keys() {
    let mut v = TestVolume::new(1, "64K", "[cache]\nsize = \"4M\"\nmode = \"wb\"\n");
    v.mount();
    fs::create_dir(v.path("d")).unwrap();
    for bad in [&b"mode=fast"[..], b"allocation=2", b"colour=red", b""] {
        let e = setxattr(&v.path("d"), "user.stripefs.cache", bad).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{bad:?}");
    }
    assert_eq!(
        getxattr(&v.path("d"), "user.stripefs.cache")
            .unwrap_err()
            .raw_os_error(),
        Some(libc::ENODATA)
    );
    assert_eq!(
        getxattr(&v.mnt, "user.stripefs.bogus")
            .unwrap_err()
            .raw_os_error(),
        Some(libc::ENODATA)
    );
    assert_eq!(
        setxattr(&v.mnt, "user.stripefs.targets", b"x")
            .unwrap_err()
            .raw_os_error(),
        Some(libc::EROFS)
    );
    // stats takes `reset` only.
    assert_eq!(
        setxattr(&v.mnt, "user.stripefs.stats", b"x")
            .unwrap_err()
            .raw_os_error(),
        Some(libc::EINVAL)
    );
    assert_eq!(
        setxattr(&v.mnt, "user.stripefs.mode", b"turbo")
            .unwrap_err()
            .raw_os_error(),
        Some(libc::EINVAL)
    );
    // Nothing changed.
    assert_eq!(getxattr(&v.mnt, "user.stripefs.mode").unwrap(), b"wb");
    setxattr(&v.mnt, "user.stripefs.mode", b"write-through").unwrap();
    assert_eq!(getxattr(&v.mnt, "user.stripefs.mode").unwrap(), b"wt");
    let out = stripefs_ok(&["mode", v.mnt_str(), "wa"]);
    assert!(out.contains("default cache mode wa"), "{out}");
    let stats: serde_json::Value =
        serde_json::from_slice(&getxattr(&v.mnt, "user.stripefs.stats").unwrap()).unwrap();
    assert_eq!(stats["default_mode"], "wa");
    let human = stripefs_ok(&["stats", v.mnt_str()]);
    assert!(
        human.contains("Usage statistics") && human.contains("read hits"),
        "{human}"
    );
    // A volume without a cache says so.
    let mut plain = TestVolume::new(1, "64K", "");
    plain.mount();
    let out = stripefs_ok(&["stats", plain.mnt_str()]);
    assert!(
        out.contains("(no cache on this volume)") && out.contains("read errors"),
        "{out}"
    );
    let out = stripefs(&["target", "ls", plain.mnt_str()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("has no cache"));
}

#[test]
fn ram_write_back_is_written_back_by_fsync_and_by_unmount() {
    let mut v = TestVolume::new(
        2,
        "64K",
        "[cache]\nsize = \"8M\"\nmode = \"wb\"\n[cache.cleaner]\nstaleness = \"1h\"\n",
    );
    v.mount();
    let data = Rng::new(5).bytes(600_000);
    let f = File::create(v.path("a")).unwrap();
    f.write_all_at(&data, 0).unwrap();
    let ino = file_ino(&v.path("a"));
    assert_eq!(bytes_on_devices(&v, ino), 0);
    f.sync_all().unwrap();
    drop(f);
    assert!(
        bytes_on_devices(&v, ino) >= 600_000,
        "fsync wrote the lines back"
    );
    fs::write(v.path("b"), &data).unwrap();
    let ino_b = file_ino(&v.path("b"));
    assert_eq!(bytes_on_devices(&v, ino_b), 0);
    v.umount();
    assert!(
        bytes_on_devices(&v, ino_b) >= 600_000,
        "unmount wrote every dirty line back"
    );
    v.assert_fsck_clean("after the test");
    v.mount();
    assert_eq!(fs::read(v.path("b")).unwrap(), data);
}

/// An emulated cache device holds each answer back (on the engine's timer) until the modelled
/// device would have finished: requests one at a time and from four threads at once alike land
/// where they were written, before and after a remount.
#[test]
fn an_emulated_cache_device_answers_lone_and_concurrent_requests_intact() {
    let mut v = TestVolume::new(2, "64K", "");
    with_file_cache(&v, "size = \"16M\"\nmode = \"wb\"\nemulate = \"nvme\"\n");
    v.mount();
    const BLOCK: usize = 4096;
    fn check(v: &TestVolume, name: &str, data: &[u8]) {
        let f = File::open(v.path(name)).unwrap();
        let mut back = vec![0u8; BLOCK];
        for (i, want) in data.chunks(BLOCK).enumerate() {
            f.read_exact_at(&mut back, (i * BLOCK) as u64).unwrap();
            assert!(back == want, "{name}: block {i} differs");
        }
    }
    let data = Rng::new(17).bytes(2 << 20);
    // Alone: one 4K request at a time.
    let f = File::create(v.path("lone")).unwrap();
    for (i, block) in data.chunks(BLOCK).enumerate() {
        f.write_all_at(block, (i * BLOCK) as u64).unwrap();
    }
    drop(f);
    check(&v, "lone", &data);
    // Together: four threads interleaving their blocks of one file.
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(v.path("together"))
        .unwrap();
    std::thread::scope(|s| {
        for t in 0..4 {
            let (f, data) = (&f, &data);
            s.spawn(move || {
                for (i, block) in data.chunks(BLOCK).enumerate().skip(t).step_by(4) {
                    f.write_all_at(block, (i * BLOCK) as u64).unwrap();
                }
                let mut back = vec![0u8; BLOCK];
                for (i, want) in data.chunks(BLOCK).enumerate().skip(t).step_by(4) {
                    f.read_exact_at(&mut back, (i * BLOCK) as u64).unwrap();
                    assert!(back == want, "thread {t}: block {i} differs");
                }
            });
        }
    });
    drop(f);
    check(&v, "together", &data);
    v.umount();
    v.mount();
    check(&v, "lone", &data);
    check(&v, "together", &data);
}

#[test]
fn file_store_write_back_survives_sigkill_after_fsync() {
    let mut v = TestVolume::new(2, "64K", "");
    let ssd = with_file_cache(
        &v,
        "size = \"8M\"\nmode = \"wb\"\n[cache.cleaner]\nstaleness = \"1h\"\n",
    );
    v.mount();
    let mut rng = Rng::new(11);
    let mut files = Vec::new();
    for i in 0..5 {
        let len = 10_000 + rng.below(300_000) as usize;
        let data = rng.bytes(len);
        let f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(v.path(&format!("f{i}")))
            .unwrap();
        f.write_all_at(&data, 0).unwrap();
        f.sync_all().unwrap();
        files.push((format!("f{i}"), data, file_ino(&v.path(&format!("f{i}")))));
    }
    // Acknowledged, but only in the cache: nothing on the devices yet.
    for (_, _, ino) in &files {
        assert_eq!(bytes_on_devices(&v, *ino), 0);
    }
    v.crash();
    v.mount();
    for (name, data, _) in &files {
        assert_eq!(&fs::read(v.path(name)).unwrap(), data, "{name}");
    }
    v.umount();
    // The remount found the dirty lines and wrote them back.
    for (_, data, ino) in &files {
        assert!(bytes_on_devices(&v, *ino) >= data.len() as u64);
    }
    v.assert_fsck_clean("after the test");
    // Another volume's cache file is refused, and --cache-reset discards it.
    let mut other = TestVolume::new(1, "64K", "");
    add_file_cache(&other, &ssd, "size = \"8M\"\n");
    let out = stripefs(&["mount", other.cfg(), other.mnt_str()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("belongs to another volume"));
    other.mount_with(&["--cache-reset"]);
}

/// The request counters on a mounted volume, through `stripefs stats --json`: each read and
/// write counted once, by what the cache held before it (every request reaches the daemon as
/// written: direct_io = "always").
#[test]
fn stats_count_hits_misses_and_pass_through_apart() {
    let mut v = TestVolume::new(
        2,
        "64K",
        "[mount]\ndirect_io = \"always\"\n[cache]\nstore = \"ram\"\nsize = \"8M\"\nline_size = \"64K\"\nmode = \"wt\"\n",
    );
    v.mount();
    let chunk = Rng::new(3).bytes(64 << 10);
    let rw = |name: &str| {
        OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(v.path(name))
            .unwrap()
    };
    let a = rw("a");
    a.write_all_at(&chunk, 0).unwrap(); // write full miss (inserted)
    a.write_all_at(&chunk, 64 << 10).unwrap(); // write full miss (inserted)
    let mut buf = vec![0u8; 64 << 10];
    a.read_exact_at(&mut buf, 0).unwrap(); // read hit
    assert_eq!(buf, chunk);
    stripefs_ok(&["mode", v.mnt_str(), "pt"]);
    let b = rw("b");
    b.write_all_at(&chunk, 0).unwrap(); // pass-through write
    b.write_all_at(&chunk, 64 << 10).unwrap(); // pass-through write
    a.read_exact_at(&mut buf, 64 << 10).unwrap(); // pass-through read
    stripefs_ok(&["mode", v.mnt_str(), "wt"]);
    b.read_exact_at(&mut buf, 0).unwrap(); // read full miss (inserted)
    let mut small = vec![0u8; 8 << 10];
    b.read_exact_at(&mut small, 60 << 10).unwrap(); // read partial miss: 4K cached, 4K not
    assert_eq!(&small[..4096], &chunk[60 << 10..]);
    assert_eq!(&small[4096..], &chunk[..4096]);
    let s = stats(&v);
    let c = &s["counters"];
    let got: Vec<u64> = [
        "read_hits",
        "read_partial_misses",
        "read_full_misses",
        "pass_through_reads",
        "write_hits",
        "write_partial_misses",
        "write_full_misses",
        "pass_through_writes",
    ]
    .iter()
    .map(|k| c[k].as_u64().unwrap_or_else(|| panic!("{k} in {c}")))
    .collect();
    assert_eq!(got, [1, 1, 1, 1, 0, 0, 2, 2], "{c}");
    assert_eq!(c["caller_read_bytes"], (3 * 64 + 8) << 10, "{c}");
    assert_eq!(c["caller_write_bytes"], (4 * 64) << 10, "{c}");
}

/// A hole punched in a file with dirty lines in a write-back file cache: zeros there, the
/// data elsewhere, only the range left the cache, and the same after a crash (recovery writes
/// back the dirty lines outside the hole, nothing into it).
#[test]
fn a_punched_hole_leaves_only_its_range_of_the_cache_and_survives_a_crash() {
    let mut v = TestVolume::new(2, "64K", "");
    with_file_cache(
        &v,
        "size = \"8M\"\nmode = \"wb\"\n[cache.cleaner]\nstaleness = \"1h\"\n",
    );
    v.mount();
    let data = Rng::new(21).bytes(256 << 10);
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(v.path("f"))
        .unwrap();
    f.write_all_at(&data, 0).unwrap();
    f.sync_all().unwrap();
    let dirty_before = stats(&v)["dirty_lines"].as_u64().unwrap();
    assert_eq!(dirty_before, 16, "256K in 16K lines, all dirty");
    // 10000..110000: parts of lines 0 and 6, lines 1..5 whole.
    let (at, len) = (10_000u64, 100_000u64);
    // SAFETY: plain syscall on an open file.
    let r = unsafe {
        libc::fallocate(
            std::os::fd::AsRawFd::as_raw_fd(&f),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            at as i64,
            len as i64,
        )
    };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    let mut want = data.clone();
    want[at as usize..(at + len) as usize].fill(0);
    let s = stats(&v);
    assert_eq!(
        s["dirty_lines"].as_u64().unwrap(),
        16 - 5,
        "lines wholly inside freed, the rest still dirty: {s}"
    );
    drop(f);
    assert!(fs::read(v.path("f")).unwrap() == want, "before the crash");
    v.crash();
    v.mount();
    assert!(fs::read(v.path("f")).unwrap() == want, "after the crash");
    v.umount();
    v.assert_fsck_clean("after the test");
    v.mount();
    assert!(
        fs::read(v.path("f")).unwrap() == want,
        "after a clean remount"
    );
}

/// The cleaning policy from the config, shown by `stats` and `stripefs cleaner`, changed live:
/// nop keeps the dirty lines; switched to alru with no staleness they are written back by the
/// cleaner itself (no flush), the next pass at once while there is work, although wake_up is
/// an hour. Bad settings and other users are refused with the daemon's reason.
#[test]
fn the_cleaner_is_chosen_in_the_config_and_changed_live() {
    let mut v = TestVolume::new(
        2,
        "64K",
        "[mount]\ndirect_io = \"always\"\n[cache]\nstore = \"ram\"\nsize = \"8M\"\nline_size = \"64K\"\nmode = \"wb\"\nerror_threshold = 7\n[cache.cleaner]\npolicy = \"nop\"\n",
    );
    v.mount();
    let data = Rng::new(5).bytes(1 << 20);
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(v.path("f"))
        .unwrap();
    f.write_all_at(&data, 0).unwrap();
    let s = stats(&v);
    assert!(s["cleaner"].as_str().unwrap().starts_with("nop"), "{s}");
    assert_eq!(s["dirty_lines"], 16, "{s}");
    assert_eq!(s["error_threshold"], 7);
    for k in [
        "cache_read_errors",
        "cache_write_errors",
        "core_read_errors",
        "core_write_errors",
    ] {
        assert_eq!(s["counters"][k], 0, "{k}");
    }
    let out = stripefs_ok(&["cleaner", v.mnt_str()]);
    assert!(out.contains("policy") && out.contains("nop"), "{out}");
    let human = stripefs_ok(&["stats", v.mnt_str()]);
    assert!(human.contains("policy nop"), "{human}");

    let bad = stripefs(&["cleaner", v.mnt_str(), "--policy", "lazy"]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("must be alru, acp or nop"),
        "{bad:?}"
    );
    let other = as_tests(&[BIN, "cleaner", v.mnt_str(), "--max-mbps", "1"]);
    assert!(!other.status.success(), "{other:?}");
    assert!(stats(&v)["cleaner"].as_str().unwrap().starts_with("nop"));

    let out = stripefs_ok(&[
        "cleaner",
        v.mnt_str(),
        "--policy",
        "alru",
        "--staleness",
        "0s",
        "--wake-up",
        "1h",
        "--flush-max-buffers",
        "2",
    ]);
    assert!(out.contains("(changed)") && out.contains("alru"), "{out}");
    assert!(
        out.contains("flush_max_buffers") && out.contains("3600s"),
        "{out}"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while stats(&v)["dirty_lines"] != 0 {
        assert!(std::time::Instant::now() < deadline, "{}", stats(&v));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let s = stats(&v);
    assert!(s["cleaned_lines"].as_u64().unwrap() >= 16, "{s}");
    assert!(
        s["cleaner_passes"].as_u64().unwrap() >= 8,
        "2 lines a pass: {s}"
    );
    let mut back = vec![0u8; 1 << 20];
    f.read_exact_at(&mut back, 0).unwrap();
    assert_eq!(back, data);
}
