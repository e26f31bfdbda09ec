//! The device set over a volume's life, on real mounts: devices added, removed and replaced
//! online, rebalances, the config updated in place, and each change killed at its durable
//! steps.

mod common;

use common::*;
use std::path::{Path, PathBuf};

fn layout_json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&getxattr(path, "user.stripefs.layout.json").unwrap()).unwrap()
}

fn devices_of(path: &Path) -> Vec<u64> {
    layout_json(path)["device_indices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap())
        .collect()
}

/// Files of a few hundred KiB each, written and fsynced; their contents by name.
fn fill(v: &TestVolume, names: &[&str], seed: u64) -> Vec<(String, Vec<u8>)> {
    let mut rng = Rng::new(seed);
    names
        .iter()
        .map(|name| {
            let len = 300_000 + rng.below(400_000) as usize;
            let data = rng.bytes(len);
            let f = std::fs::File::create(v.path(name)).unwrap();
            std::io::Write::write_all(&mut &f, &data).unwrap();
            f.sync_all().unwrap();
            (name.to_string(), data)
        })
        .collect()
}

fn assert_intact(v: &TestVolume, files: &[(String, Vec<u8>)], when: &str) {
    for (name, data) in files {
        let back = std::fs::read(v.path(name)).unwrap();
        assert!(back == *data, "{when}: {name} differs");
    }
}

fn device_count(v: &TestVolume) -> usize {
    let status = stripefs_ok(&["status", v.mnt_str(), "--json"]);
    let s: serde_json::Value = serde_json::from_str(&status).unwrap();
    s["devices"].as_array().unwrap().len()
}

fn new_device(v: &TestVolume, name: &str) -> PathBuf {
    let d = v.root.path().join(name);
    std::fs::create_dir(&d).unwrap();
    d
}

#[test]
fn a_device_added_online_takes_new_files_and_old_files_stay() {
    let alerts = tempfile::tempdir().unwrap();
    let script = alerts.path().join("alert");
    let log = alerts.path().join("log");
    std::fs::write(
        &script,
        format!("#!/bin/sh\necho \"$1 $3\" >> {}\n", log.display()),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut v = TestVolume::new(
        3,
        "64K",
        &format!(
            "# my volume, three disks\n[mount]\non_event = \"{}\"\n",
            script.display()
        ),
    );
    v.mount();
    let old = fill(&v, &["a", "b", "c"], 1);
    let before: Vec<Vec<u64>> = old.iter().map(|(n, _)| devices_of(&v.path(n))).collect();
    let d3 = new_device(&v, "d3");
    let out = stripefs_ok(&["device", "add", v.mnt_str(), d3.to_str().unwrap()]);
    assert!(out.contains("joined as device 3"), "{out}");
    assert_eq!(device_count(&v), 4);

    // Online: old files read the same from the same devices; new ones span all four.
    assert_intact(&v, &old, "after the add");
    let after: Vec<Vec<u64>> = old.iter().map(|(n, _)| devices_of(&v.path(n))).collect();
    assert_eq!(before, after, "an add moves no file");
    // The administrator's program hears of it (the daemon looks every second).
    let told = format!("device-added {}", d3.canonicalize().unwrap().display());
    let start = std::time::Instant::now();
    while !std::fs::read_to_string(&log).is_ok_and(|l| l.contains(&told)) {
        assert!(
            start.elapsed().as_secs() < 20,
            "no device-added event: {:?}",
            std::fs::read_to_string(&log)
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let root = stripefs_ok(&["layout", "get", v.mnt_str()]);
    assert!(
        root.contains("width=4") && root.contains("as devices are added"),
        "{root}"
    );
    let new = fill(&v, &["n1", "n2"], 2);
    for (name, _) in &new {
        let mut devs = devices_of(&v.path(name));
        devs.sort();
        assert_eq!(
            devs,
            [0, 1, 2, 3],
            "{name} is striped over the new device set"
        );
    }
    let list: serde_json::Value =
        serde_json::from_str(&stripefs_ok(&["device", "list", v.mnt_str(), "--json"])).unwrap();
    assert_eq!(list["generation"], 1);
    assert_eq!(
        list["devices"][3]["path"],
        d3.canonicalize().unwrap().to_str().unwrap()
    );

    // The config gained the device, its comment kept; the next mount needs nothing else.
    let config = std::fs::read_to_string(&v.config).unwrap();
    assert!(config.contains("# my volume, three disks"), "{config}");
    assert!(
        config.contains(&format!("\"{}\"", d3.canonicalize().unwrap().display())),
        "{config}"
    );
    let again = stripefs(&["device", "add", v.mnt_str(), d3.to_str().unwrap()]);
    assert!(!again.status.success(), "a device is added once");
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already device 3"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    v.remount();
    assert_eq!(device_count(&v), 4);
    assert_intact(&v, &old, "after a remount");
    assert_intact(&v, &new, "after a remount");
    v.umount();
    v.assert_fsck_clean("after the add");
}

#[test]
fn a_device_of_another_volume_or_a_read_only_mount_is_refused() {
    let mut v = TestVolume::new(2, "64K", "");
    let other = TestVolume::new(1, "64K", "");
    v.mount_with(&["-o", "ro"]);
    let d2 = new_device(&v, "d2");
    let out = stripefs(&["device", "add", v.mnt_str(), d2.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr).to_lowercase();
    assert!(err.contains("read-only"), "{err}");
    v.umount();
    v.mount();
    let out = stripefs(&[
        "device",
        "add",
        v.mnt_str(),
        other.devices[0].to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already holds stripefs volume"), "{err}");
    assert_eq!(device_count(&v), 2);
}

/// A crash at each durable step of an add: the volume mounts as before or as after, every
/// file intact, fsck clean, and it takes new work.
#[cfg(feature = "failpoints")]
#[test]
fn an_add_killed_at_each_step_leaves_the_volume_before_or_after() {
    for (point, action) in [
        ("device.add-joined", "return(crash)"),
        ("device.add-superblock", "return(crash)"),
        ("device.add-superblock", "1*off->return(crash)"),
        ("device.add-superblock", "return(eio)"),
    ] {
        let what = format!("{point}={action}");
        let mut v = TestVolume::new(3, "64K", "");
        v.mount();
        let files = fill(&v, &["a", "b"], 3);
        let pid = v.daemon_pid();
        setxattr(&v.mnt, "user.stripefs.failpoint", what.as_bytes()).unwrap();
        let d3 = new_device(&v, "d3");
        let out = stripefs(&["device", "add", v.mnt_str(), d3.to_str().unwrap()]);
        assert!(!out.status.success(), "{what}: the add reported success");
        if action.contains("crash") {
            v.forget_dead_daemon(pid);
        } else {
            setxattr(
                &v.mnt,
                "user.stripefs.failpoint",
                format!("{point}=off").as_bytes(),
            )
            .unwrap();
            v.umount();
        }
        v.mount();
        let n = device_count(&v);
        assert!(n == 3 || n == 4, "{what}: {n} devices");
        assert_intact(&v, &files, &what);
        let more = fill(&v, &["after"], 4);
        v.umount();
        v.assert_fsck_clean(&what);
        v.mount();
        assert_intact(&v, &more, &what);
        // Whatever state it was left in, the add can be done (again) now.
        if n == 3 {
            stripefs_ok(&["device", "add", v.mnt_str(), d3.to_str().unwrap()]);
        }
        assert_eq!(device_count(&v), 4, "{what}");
        v.umount();
    }
}

/// Files of whole stripe rows (so "evenly" is exact) striped over every device, and a
/// directory of one-device files; their contents by name.
fn fill_for_rebalance(v: &TestVolume) -> Vec<(String, Vec<u8>)> {
    let mut rng = Rng::new(7);
    let mut files = Vec::new();
    let row = 3 * 64 * 1024;
    std::fs::create_dir(v.path("narrow")).unwrap();
    stripefs_ok(&[
        "layout",
        "set",
        v.path("narrow").to_str().unwrap(),
        "--width",
        "1",
    ]);
    // A directory whose default layout spans every device: it holds nothing itself, so no
    // device change waits for it.
    std::fs::create_dir(v.path("empty")).unwrap();
    stripefs_ok(&[
        "layout",
        "set",
        v.path("empty").to_str().unwrap(),
        "--width",
        "3",
    ]);
    for k in 0..12 {
        files.push((format!("wide{k}"), rng.bytes(row * (1 + k % 4) * 4)));
    }
    for k in 0..8 {
        files.push((format!("narrow/n{k}"), rng.bytes(100_000)));
    }
    for (name, data) in &files {
        let f = std::fs::File::create(v.path(name)).unwrap();
        std::io::Write::write_all(&mut &f, data).unwrap();
        f.sync_all().unwrap();
    }
    files
}

/// Bytes each device holds, by the files' own accounts.
fn usage(v: &TestVolume, files: &[(String, Vec<u8>)], devices: usize) -> Vec<u64> {
    let mut per = vec![0u64; devices];
    for (name, _) in files {
        for o in layout_json(&v.path(name))["objects"].as_array().unwrap() {
            per[o["device"].as_u64().unwrap() as usize] += o["bytes"].as_u64().unwrap();
        }
    }
    per
}

/// SIGKILL of the daemon `pid` (as a crash would), and a fresh mount.
#[cfg(feature = "failpoints")]
fn kill_and_mount(v: &mut TestVolume, pid: i32) {
    // SAFETY: plain syscall.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    v.forget_dead_daemon(pid);
    v.mount();
}

/// Waits (a minute at most) for the daemon's rebalance, removal or replacement to end.
#[cfg(feature = "failpoints")]
fn wait_while_running(v: &TestVolume) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while rebalance_progress(v)["state"] == "running" {
        assert!(std::time::Instant::now() < deadline, "the run never ends");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

fn rebalance_progress(v: &TestVolume) -> serde_json::Value {
    serde_json::from_slice(&getxattr(&v.mnt, "user.stripefs.rebalance").unwrap()).unwrap()
}

#[test]
fn a_rebalance_after_an_add_spreads_the_files_evenly_and_keeps_every_byte() {
    let mut v = TestVolume::new(3, "64K", "");
    v.mount();
    let files = fill_for_rebalance(&v);
    let d3 = new_device(&v, "d3");
    stripefs_ok(&["device", "add", v.mnt_str(), d3.to_str().unwrap()]);
    assert_eq!(usage(&v, &files, 4)[3], 0, "an add alone moves nothing");
    let out = stripefs_ok(&["rebalance", v.mnt_str(), "--json"]);
    let p: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(p["state"], "done", "{p}");
    assert_eq!(p["files_failed"], 0);
    assert!(p["files_done"].as_u64().unwrap() >= 12, "{p}");
    assert_intact(&v, &files, "after the rebalance");
    let per = usage(&v, &files, 4);
    let mean = per.iter().sum::<u64>() as f64 / 4.0;
    for (d, &b) in per.iter().enumerate() {
        let off = (b as f64 - mean).abs() / mean;
        assert!(
            off <= 0.10,
            "device {d} holds {b} bytes, mean {mean}: {per:?}"
        );
    }
    for k in 0..8 {
        let devs = devices_of(&v.path(&format!("narrow/n{k}")));
        assert_eq!(devs.len(), 1, "a one-device file stays on one device");
    }
    // Nothing left to do: a second run moves nothing.
    let again: serde_json::Value =
        serde_json::from_str(&stripefs_ok(&["rebalance", v.mnt_str(), "--json"])).unwrap();
    assert_eq!(again["files_total"], 0, "{again}");
    v.umount();
    v.assert_fsck_clean("after the rebalance");
    v.mount();
    assert_intact(&v, &files, "after a remount");
}

#[test]
fn a_rebalance_killed_goes_on_at_the_next_mount_and_a_stopped_one_does_not() {
    let mut v = TestVolume::new(3, "64K", "");
    v.mount();
    let files = fill_for_rebalance(&v);
    let d3 = new_device(&v, "d3");
    stripefs_ok(&["device", "add", v.mnt_str(), d3.to_str().unwrap()]);
    // 1 MB/s: it runs for seconds, long enough to be killed in the middle.
    setxattr(&v.mnt, "user.stripefs.rebalance", b"start max_mbps=1").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let p = rebalance_progress(&v);
    assert_eq!(p["state"], "running", "{p}");
    let status: serde_json::Value =
        serde_json::from_str(&stripefs_ok(&["status", v.mnt_str(), "--json"])).unwrap();
    assert_eq!(status["rebalance"]["state"], "running");
    v.crash();
    v.mount();
    assert_intact(&v, &files, "after a crash in the rebalance");
    assert_eq!(rebalance_progress(&v)["state"], "running", "it goes on");
    // Stopped: and not resumed by the next mount.
    let out = stripefs_ok(&["rebalance", v.mnt_str(), "--stop", "--json"]);
    let p: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(p["state"], "stopped", "{p}");
    v.remount();
    assert_eq!(rebalance_progress(&v)["state"], "idle");
    assert_intact(&v, &files, "after a stop");
    // Finished at full speed.
    let out = stripefs_ok(&["rebalance", v.mnt_str(), "--max-mbps", "0", "--json"]);
    let p: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(p["state"], "done", "{p}");
    assert_intact(&v, &files, "after the rebalance");
    v.umount();
    v.assert_fsck_clean("after the rebalance");
}

#[test]
fn a_device_removed_online_leaves_every_byte_on_the_others() {
    let mut v = TestVolume::new(3, "64K", "# keep this comment\n");
    v.mount();
    let files = fill_for_rebalance(&v);
    let d3 = new_device(&v, "d3");
    stripefs_ok(&["device", "add", v.mnt_str(), d3.to_str().unwrap()]);
    let more = fill(&v, &["on4a", "on4b"], 9);
    // Device 0 holds the namespace: refused, with the reason.
    let out = stripefs(&["device", "remove", v.mnt_str(), "0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("namespace"));
    // Device 1, one of the devices of mkfs.
    let out = stripefs_ok(&["device", "remove", v.mnt_str(), "1", "--json"]);
    let p: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(p["state"], "done", "{p}");
    assert_intact(&v, &files, "after the removal");
    assert_intact(&v, &more, "after the removal");
    for (name, _) in files.iter().chain(&more) {
        assert!(
            !devices_of(&v.path(name)).contains(&1),
            "{name} still on device 1"
        );
    }
    let list: serde_json::Value =
        serde_json::from_str(&stripefs_ok(&["device", "list", v.mnt_str(), "--json"])).unwrap();
    assert_eq!(list["removed"], serde_json::json!([1]));
    assert_eq!(list["devices"].as_array().unwrap().len(), 3);
    let after = fill(&v, &["later"], 10);
    assert!(!devices_of(&v.path("later")).contains(&1));
    let config = std::fs::read_to_string(&v.config).unwrap();
    assert!(config.contains("# keep this comment"));
    assert!(
        !config.contains(&format!("\"{}\"", v.devices[1].display())),
        "{config}"
    );
    v.remount();
    assert_intact(&v, &files, "after a remount");
    assert_intact(&v, &after, "after a remount");
    assert_eq!(
        device_count(&v),
        4,
        "the removed id keeps its place in status"
    );
    v.umount();
    v.assert_fsck_clean("after the removal");
    // The directory left: it may join again, as a new device.
    v.mount();
    stripefs_ok(&["device", "add", v.mnt_str(), v.devices[1].to_str().unwrap()]);
    let list: serde_json::Value =
        serde_json::from_str(&stripefs_ok(&["device", "list", v.mnt_str(), "--json"])).unwrap();
    assert_eq!(list["devices"].as_array().unwrap().len(), 4);
    v.umount();
}

/// A removal killed in the middle of its moves and at each superblock write: the volume
/// mounts, every byte is there, and the removal can be finished.
#[cfg(feature = "failpoints")]
#[test]
fn a_removal_killed_at_each_step_loses_nothing() {
    for arm in [
        None,
        Some("device.remove-superblock=return(crash)"),
        Some("device.remove-superblock=1*off->return(crash)"),
        Some("engine.migrate-copied=2*off->return(crash)"),
    ] {
        let what = format!("{arm:?}");
        let mut v = TestVolume::new(3, "64K", "");
        v.mount();
        let files = fill_for_rebalance(&v);
        let pid = v.daemon_pid();
        match arm {
            Some(a) => setxattr(&v.mnt, "user.stripefs.failpoint", a.as_bytes()).unwrap(),
            // Killed while moving, at 1 MB/s.
            None => setxattr(&v.mnt, "user.stripefs.devices", b"remove 2 max_mbps=1").unwrap(),
        }
        if arm.is_some() {
            let _ = stripefs(&["device", "remove", v.mnt_str(), "2", "--json"]);
        } else {
            std::thread::sleep(std::time::Duration::from_millis(1500));
        }
        kill_and_mount(&mut v, pid);
        assert_intact(&v, &files, &what);
        // The removal goes on (or is asked for again), and finishes.
        let out = stripefs(&[
            "device",
            "remove",
            v.mnt_str(),
            "2",
            "--max-mbps",
            "0",
            "--json",
        ]);
        let list: serde_json::Value =
            serde_json::from_str(&stripefs_ok(&["device", "list", v.mnt_str(), "--json"])).unwrap();
        assert_eq!(list["removed"], serde_json::json!([2]), "{what}: {out:?}");
        assert_intact(&v, &files, &what);
        v.umount();
        v.assert_fsck_clean(&what);
    }
}

/// Devices older than the namespace (their superblocks from before an add, as a restore from
/// a backup would leave them) are refused, named, not mounted with a namespace that does not
/// go with them.
#[test]
fn devices_older_than_the_namespace_are_refused() {
    let mut v = TestVolume::new(2, "64K", "");
    let superblock = |d: &Path| d.join(".stripefs/superblock");
    let before: Vec<Vec<u8>> = v
        .devices
        .iter()
        .map(|d| std::fs::read(superblock(d)).unwrap())
        .collect();
    v.mount();
    let d2 = new_device(&v, "d2");
    stripefs_ok(&["device", "add", v.mnt_str(), d2.to_str().unwrap()]);
    v.umount();
    for (d, old) in v.devices.iter().zip(&before) {
        std::fs::write(superblock(d), old).unwrap();
    }
    std::fs::remove_dir_all(&d2).unwrap();
    std::fs::write(
        &v.config,
        std::fs::read_to_string(&v.config).unwrap().replace(
            &format!(
                ", \"{}\"",
                d2.canonicalize().unwrap_or(d2.clone()).display()
            ),
            "",
        ),
    )
    .unwrap();
    let out = stripefs(&["mount", v.cfg(), v.mnt_str()]);
    if out.status.success() {
        v.umount_on_drop();
    }
    assert!(
        !out.status.success(),
        "mounted devices older than the namespace"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("older copies"), "{err}");
}

/// Objects a device directory holds.
fn objects_on(device: &Path) -> usize {
    walk(&device.join(".stripefs/objects"))
}

fn walk(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| match e.file_type().unwrap().is_dir() {
                    true => walk(&e.path()),
                    false => 1,
                })
                .sum()
        })
        .unwrap_or(0)
}

fn removed_ids(v: &TestVolume) -> serde_json::Value {
    let list: serde_json::Value =
        serde_json::from_str(&stripefs_ok(&["device", "list", v.mnt_str(), "--json"])).unwrap();
    list["removed"].clone()
}

/// A device replaced while a writer rewrites its files (checking each write read back) and a
/// verifier reads the others: no mismatch, every byte on the new device after a remount, the
/// old one out of the set and the config, fsck clean.
#[test]
fn a_device_replaced_while_written_and_read_loses_no_byte() {
    use std::os::unix::fs::FileExt;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
    use std::sync::{Arc, Mutex};
    let mut v = TestVolume::new(3, "64K", "");
    v.mount();
    let files = fill_for_rebalance(&v);
    let live: Vec<(String, Vec<u8>)> = fill(&v, &["live0", "live1", "live2"], 11);
    let new = new_device(&v, "new1");
    // Refusals first: nothing changes.
    let e = stripefs(&["device", "replace", v.mnt_str(), "9", new.to_str().unwrap()]);
    assert!(!e.status.success());
    let inside = v.path("inside");
    std::fs::create_dir(&inside).unwrap();
    let e = stripefs(&[
        "device",
        "replace",
        v.mnt_str(),
        "1",
        inside.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&e.stderr);
    assert!(
        !e.status.success() && err.contains("inside the volume"),
        "{err}"
    );
    assert_eq!(device_count(&v), 3);

    let stop = Arc::new(AtomicBool::new(false));
    let mismatches = Arc::new(AtomicU64::new(0));
    let model = Arc::new(Mutex::new(live.clone()));
    let writer = {
        let (stop, mismatches, model) = (stop.clone(), mismatches.clone(), model.clone());
        let paths: Vec<PathBuf> = live.iter().map(|(n, _)| v.path(n)).collect();
        std::thread::spawn(move || {
            let mut rng = Rng::new(5);
            let mut writes = 0u64;
            while !stop.load(Relaxed) || writes < 20 {
                let k = rng.below(paths.len() as u64) as usize;
                let mut m = model.lock().unwrap();
                let len = 1 + rng.below(100_000) as usize;
                let at = rng.below(m[k].1.len() as u64 - len as u64) as usize;
                let data = rng.bytes(len);
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&paths[k])
                    .unwrap();
                f.write_all_at(&data, at as u64).unwrap();
                m[k].1[at..at + len].copy_from_slice(&data);
                let mut back = vec![0; len];
                f.read_exact_at(&mut back, at as u64).unwrap();
                if back != data {
                    mismatches.fetch_add(1, Relaxed);
                }
                if writes.is_multiple_of(8) {
                    f.sync_all().unwrap();
                }
                writes += 1;
            }
            writes
        })
    };
    let verifier = {
        let (stop, mismatches) = (stop.clone(), mismatches.clone());
        let files: Vec<(PathBuf, Vec<u8>)> =
            files.iter().map(|(n, d)| (v.path(n), d.clone())).collect();
        std::thread::spawn(move || {
            let mut rounds = 0u64;
            while !stop.load(Relaxed) || rounds < 2 {
                for (p, d) in &files {
                    if std::fs::read(p).unwrap() != *d {
                        mismatches.fetch_add(1, Relaxed);
                    }
                }
                rounds += 1;
            }
            rounds
        })
    };
    // Slow enough that the writer and the verifier run through the copy.
    let out = stripefs(&[
        "device",
        "replace",
        v.mnt_str(),
        "1",
        new.to_str().unwrap(),
        "--max-mbps",
        "8",
        "--json",
    ]);
    stop.store(true, Relaxed);
    let writes = writer.join().unwrap();
    verifier.join().unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let p: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(p["state"], "done", "{p}");
    assert_eq!(p["lost"], serde_json::json!([]), "{p}");
    assert_eq!(p["replacing"], serde_json::json!([1, 3]), "{p}");
    assert!(writes >= 20);
    assert_eq!(
        mismatches.load(Relaxed),
        0,
        "reads differed from what was written"
    );
    assert_eq!(removed_ids(&v), serde_json::json!([1]));
    let live = model.lock().unwrap().clone();
    for (name, _) in files.iter().chain(&live) {
        let devs = devices_of(&v.path(name));
        assert!(!devs.contains(&1), "{name} still on device 1: {devs:?}");
    }
    assert_eq!(
        objects_on(&v.devices[1]),
        0,
        "objects left on the old device"
    );
    assert!(objects_on(&new) > 0);
    let config = std::fs::read_to_string(&v.config).unwrap();
    assert!(
        config.contains(new.canonicalize().unwrap().to_str().unwrap()),
        "{config}"
    );
    assert!(
        !config.contains(&format!("\"{}\"", v.devices[1].display())),
        "{config}"
    );
    v.umount();
    v.assert_fsck_clean("after the replace");
    v.mount();
    assert_intact(&v, &files, "after the replace and a remount");
    assert_intact(&v, &live, "the rewritten files after a remount");
}

/// A replace from a device that gives EIO on one range of every object: it finishes,
/// reports exactly those file ranges (exit status 3), they read as zeros, the rest is intact.
#[test]
fn a_replace_from_a_failing_device_reports_exactly_the_ranges_lost() {
    let mut v = TestVolume::new(
        3,
        "64K",
        "[[volume.fault]]\ndevice = 1\nop = \"read\"\nerror = \"eio\"\nrange = [65536, 131072]\n",
    );
    v.mount();
    let files = fill_for_rebalance(&v);
    // Where the unreadable object range [64K, 128K) of device 1 falls in each file: one
    // stripe unit, the second row's.
    let mut want: Vec<(String, u64, u64)> = Vec::new();
    for (name, data) in &files {
        let devs = devices_of(&v.path(name));
        let Some(slot) = devs.iter().position(|&d| d == 1) else {
            continue;
        };
        let at = (devs.len() as u64 + slot as u64) * 65536;
        let end = (at + 65536).min(data.len() as u64);
        if at < end {
            want.push((format!("/{name}"), at, end - at));
        }
    }
    assert!(
        want.len() >= 8,
        "the fault touches a good part of the files: {want:?}"
    );
    let new = new_device(&v, "new1");
    let out = stripefs(&[
        "device",
        "replace",
        v.mnt_str(),
        "1",
        new.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let p: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(p["state"], "done", "{p}");
    let mut got: Vec<(String, u64, u64)> = p["lost"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["path"].as_str().unwrap().to_string(),
                l["offset"].as_u64().unwrap(),
                l["len"].as_u64().unwrap(),
            )
        })
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    assert_eq!(removed_ids(&v), serde_json::json!([1]));
    // The human report names them too.
    let status = stripefs_ok(&["status", v.mnt_str()]);
    assert!(status.contains("file ranges lost"), "{status}");
    v.umount();
    v.assert_fsck_clean("after a replace with lost ranges");
    v.mount();
    for (name, data) in &files {
        let mut expect = data.clone();
        for (_, at, len) in want.iter().filter(|w| w.0 == format!("/{name}")) {
            expect[*at as usize..(*at + *len) as usize].fill(0);
        }
        let back = std::fs::read(v.path(name)).unwrap();
        assert!(
            back == expect,
            "{name}: not the old bytes with the lost range zeroed"
        );
    }
}

/// A replace killed while copying and at each durable step: the volume mounts with every
/// byte, the replace goes on (or is asked again) and finishes, fsck clean.
#[cfg(feature = "failpoints")]
#[test]
fn a_replace_killed_at_each_step_loses_nothing() {
    for arm in [
        None,
        Some("device.add-superblock=1*off->return(crash)"),
        Some("replace.copied=3*off->return(crash)"),
        Some("replace.moved=2*off->return(crash)"),
    ] {
        let what = format!("{arm:?}");
        let mut v = TestVolume::new(3, "64K", "");
        v.mount();
        let files = fill_for_rebalance(&v);
        let new = new_device(&v, "new1");
        let pid = v.daemon_pid();
        match arm {
            Some(a) => {
                setxattr(&v.mnt, "user.stripefs.failpoint", a.as_bytes()).unwrap();
                let _ = stripefs(&[
                    "device",
                    "replace",
                    v.mnt_str(),
                    "1",
                    new.to_str().unwrap(),
                    "--json",
                ]);
            }
            None => {
                // Killed while copying, at 1 MB/s.
                let value = format!("replace 1 {} max_mbps=1", new.display());
                setxattr(&v.mnt, "user.stripefs.devices", value.as_bytes()).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(1500));
            }
        }
        kill_and_mount(&mut v, pid);
        assert_intact(&v, &files, &what);
        // A replace recorded before the crash goes on by itself: wait for it to end.
        wait_while_running(&v);
        if removed_ids(&v) != serde_json::json!([1]) {
            let out = stripefs(&[
                "device",
                "replace",
                v.mnt_str(),
                "1",
                new.to_str().unwrap(),
                "--max-mbps",
                "0",
                "--json",
            ]);
            assert!(out.status.success(), "{what}: {out:?}");
        }
        assert_eq!(removed_ids(&v), serde_json::json!([1]), "{what}");
        assert_intact(&v, &files, &what);
        v.umount();
        v.assert_fsck_clean(&what);
        v.mount();
        assert_intact(&v, &files, &what);
        v.umount();
    }
}

/// A device gone while mounted is replaced by an empty directory: every range it held is
/// reported lost (and reads as zeros), and the volume is whole again: writable, fsck clean,
/// mounting without it.
#[test]
fn a_vanished_device_is_replaced_and_all_it_held_is_reported_lost() {
    let mut v = TestVolume::new(3, "64K", "");
    v.mount();
    let files = fill_for_rebalance(&v);
    let mut want: Vec<(String, u64, u64)> = Vec::new();
    for (name, data) in &files {
        let devs = devices_of(&v.path(name));
        let Some(slot) = devs.iter().position(|&d| d == 1) else {
            continue;
        };
        let (w, n) = (devs.len() as u64, data.len() as u64);
        let mut k = slot as u64;
        while k * 65536 < n {
            let (at, end) = (k * 65536, ((k + 1) * 65536).min(n));
            match want.last_mut() {
                Some(last) if last.0 == format!("/{name}") && last.1 + last.2 == at => {
                    last.2 += end - at
                }
                _ => want.push((format!("/{name}"), at, end - at)),
            }
            k += w;
        }
    }
    let gone = v.root.path().join("d1.gone");
    std::fs::rename(&v.devices[1], &gone).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let s: serde_json::Value =
            serde_json::from_str(&stripefs_ok(&["status", v.mnt_str(), "--json"])).unwrap();
        if s["devices"][1]["state"] == "failed" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "device 1 never marked failed"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let new = new_device(&v, "new1");
    let out = stripefs(&[
        "device",
        "replace",
        v.mnt_str(),
        "1",
        new.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let p: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut got: Vec<(String, u64, u64)> = p["lost"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let s = |k: &str| l[k].as_u64().unwrap();
            (
                l["path"].as_str().unwrap().to_string(),
                s("offset"),
                s("len"),
            )
        })
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    assert_eq!(removed_ids(&v), serde_json::json!([1]));
    // Whole again: every file reads (zeros where device 1 was) and takes writes.
    for (name, _) in &files {
        std::fs::read(v.path(name)).unwrap();
    }
    std::fs::write(v.path("wide0"), b"new life").unwrap();
    v.umount();
    v.assert_fsck_clean("after replacing a vanished device");
    v.mount();
    assert_eq!(std::fs::read(v.path("wide0")).unwrap(), b"new life");
}

/// Files of `len` random bytes, written and fsynced.
fn files_of(v: &TestVolume, n: usize, len: usize) -> Vec<(String, Vec<u8>)> {
    let names: Vec<String> = (0..n).map(|i| format!("f{i:02}")).collect();
    let mut rng = Rng::new(3);
    names
        .into_iter()
        .map(|name| {
            let data = rng.bytes(len);
            let f = std::fs::File::create(v.path(&name)).unwrap();
            std::io::Write::write_all(&mut &f, &data).unwrap();
            f.sync_all().unwrap();
            (name, data)
        })
        .collect()
}

/// A write noted while its file is copied but landing only after the pass that copied its
/// range (held back at a fault point) still reaches the new device.
#[cfg(feature = "failpoints")]
#[test]
fn a_write_landing_after_its_range_was_copied_is_not_lost() {
    use std::os::unix::fs::FileExt;
    let mut v = TestVolume::new(3, "64K", "");
    v.mount();
    let mut rng = Rng::new(7);
    let old = rng.bytes(1 << 20);
    let p = v.path("f");
    std::fs::write(&p, &old).unwrap();
    let slot = devices_of(&p).iter().position(|&d| d == 1).unwrap() as u64;
    let at = slot * 65536;
    let fresh = rng.bytes(65536);
    // The replace is asked for first, slowly, so the write comes during the copy.
    setxattr(
        &v.mnt,
        "user.stripefs.failpoint",
        b"volume.write-noted=1*sleep(2000)",
    )
    .unwrap();
    let new = new_device(&v, "new1");
    let (mnt, newp) = (v.mnt_str().to_string(), new.to_str().unwrap().to_string());
    let cli = std::thread::spawn(move || {
        stripefs(&[
            "device",
            "replace",
            &mnt,
            "1",
            &newp,
            "--max-mbps",
            "1",
            "--json",
        ])
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.write_all_at(&fresh, at).unwrap();
    f.sync_all().unwrap();
    drop(f);
    let out = cli.join().unwrap();
    assert!(out.status.success(), "{out:?}");
    v.umount();
    v.mount();
    let mut back = vec![0u8; 65536];
    std::fs::File::open(&p)
        .unwrap()
        .read_exact_at(&mut back, at)
        .unwrap();
    assert!(back == fresh, "the fsynced write is lost");
}

/// A crash right after a file with lost ranges moved: its ranges are still reported when the
/// replace goes on after the remount.
#[cfg(feature = "failpoints")]
#[test]
fn lost_ranges_are_reported_after_a_crash_right_after_their_file_moved() {
    let mut v = TestVolume::new(
        3,
        "64K",
        "[[volume.fault]]\ndevice = 1\nop = \"read\"\nerror = \"eio\"\nrange = [0, 65536]\n",
    );
    v.mount();
    let files = files_of(&v, 4, 300_000);
    let new = new_device(&v, "new1");
    let pid = v.daemon_pid();
    setxattr(
        &v.mnt,
        "user.stripefs.failpoint",
        b"replace.moved=return(crash)",
    )
    .unwrap();
    let _ = stripefs(&["device", "replace", v.mnt_str(), "1", new.to_str().unwrap()]);
    kill_and_mount(&mut v, pid);
    wait_while_running(&v);
    let p = rebalance_progress(&v);
    assert_eq!(p["state"], "done", "{p}");
    let damaged = files
        .iter()
        .filter(|(n, d)| std::fs::read(v.path(n)).unwrap() != *d)
        .count();
    assert_eq!(damaged, 4, "every file had its first unit on device 1");
    assert_eq!(p["lost"].as_array().unwrap().len(), damaged, "{p}");
}

/// A replace stopped before its end exits 2 and does not say it replaced anything.
#[test]
fn a_stopped_replace_does_not_claim_success() {
    let mut v = TestVolume::new(3, "64K", "");
    v.mount();
    let _files = files_of(&v, 6, 1 << 20);
    let new = new_device(&v, "new1");
    let (mnt, newp) = (v.mnt_str().to_string(), new.to_str().unwrap().to_string());
    let cli = std::thread::spawn(move || {
        stripefs(&["device", "replace", &mnt, "1", &newp, "--max-mbps", "1"])
    });
    std::thread::sleep(std::time::Duration::from_millis(1500));
    setxattr(&v.mnt, "user.stripefs.rebalance", b"stop").unwrap();
    let out = cli.join().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(!text.contains("was replaced"), "{text}");
    // Asked again, it finishes.
    stripefs_ok(&["device", "replace", v.mnt_str(), "1", new.to_str().unwrap()]);
    assert_eq!(removed_ids(&v), serde_json::json!([1]));
}
