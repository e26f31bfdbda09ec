//! The device set over a volume's life, on real mounts: a device added online, the config
//! updated in place, and an add killed at each of its durable steps.

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
        // SAFETY: plain syscall.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        v.forget_dead_daemon(pid);
        v.mount();
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
