//! Which cache class a request goes to, on mounted volumes: classes follow a file's current
//! names (hard links, renames, unlinks, names in two targets), config targets follow their
//! folder across renames and remounts, and IO classes by size, extension, folder and
//! direction, from the config and live.

mod common;

use common::*;
use std::fs::{self, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

fn stats(v: &TestVolume) -> serde_json::Value {
    let both: serde_json::Value =
        serde_json::from_str(&stripefs_ok(&["stats", v.mnt_str(), "--json"])).unwrap();
    both["cache"].clone()
}

/// The stats of the cache class named exactly `name` ("default", "class big", or a target's
/// "dir 12", its `class_name`: `name` is the folder's path).
fn class(stats: &serde_json::Value, name: &str) -> serde_json::Value {
    stats["classes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name || c["class_name"] == name)
        .unwrap_or_else(|| panic!("no class {name} in {stats}"))
        .clone()
}

fn n(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// Write requests a class served (hits, misses and pass-through).
fn writes(c: &serde_json::Value) -> u64 {
    let k = &c["counters"];
    n(&k["write_hits"])
        + n(&k["write_partial_misses"])
        + n(&k["write_full_misses"])
        + n(&k["pass_through_writes"])
}

fn reads(c: &serde_json::Value) -> u64 {
    let k = &c["counters"];
    n(&k["read_hits"])
        + n(&k["read_partial_misses"])
        + n(&k["read_full_misses"])
        + n(&k["pass_through_reads"])
}

fn target_class(dir: &Path) -> String {
    format!("dir {}", fs::metadata(dir).unwrap().ino())
}

/// Writes 64K at `offset` of `path` (made if missing).
fn write_at(path: &Path, offset: u64) {
    let f = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(path)
        .unwrap();
    f.write_all_at(&[7u8; 65536], offset).unwrap();
}

/// Which of `names` (cache classes) served the write requests of `f()`: exactly one must.
fn served_writes(v: &TestVolume, names: &[&str], f: impl FnOnce()) -> String {
    let before: Vec<u64> = {
        let s = stats(v);
        names.iter().map(|c| writes(&class(&s, c))).collect()
    };
    f();
    let s = stats(v);
    let grew: Vec<&str> = names
        .iter()
        .zip(before)
        .filter(|(c, b)| writes(&class(&s, c)) > *b)
        .map(|(c, _)| *c)
        .collect();
    assert_eq!(grew.len(), 1, "writes went to {grew:?} of {names:?}");
    grew[0].to_string()
}

const TARGETS: &str =
    "[cache]\nstore = \"ram\"\nsize = \"8M\"\nline_size = \"64K\"\nmode = \"wt\"\n\
    default = \"targets\"\n\
    [[cache.target]]\npath = \"/wb\"\nmode = \"wb\"\npriority = 0\n\
    [[cache.target]]\npath = \"/wt\"\nmode = \"wt\"\npriority = 3\n";

#[test]
fn a_files_class_follows_its_current_names() {
    let mut v = TestVolume::new(2, "64K", TARGETS);
    v.mount();
    let (wb, wt) = (target_class(&v.path("wb")), target_class(&v.path("wt")));
    let all = ["default", wb.as_str(), wt.as_str()];
    fs::create_dir(v.path("outside")).unwrap();
    let f = v.path("outside/f");
    assert_eq!(served_writes(&v, &all, || write_at(&f, 0)), "default");
    // A hard link into the wb target: writes through either name are write-back.
    fs::hard_link(&f, v.path("wb/f2")).unwrap();
    assert_eq!(
        served_writes(&v, &all, || write_at(&v.path("wb/f2"), 65536)),
        wb
    );
    assert_eq!(served_writes(&v, &all, || write_at(&f, 0)), wb);
    let dirty = n(&class(&stats(&v), &wb)["dirty_lines"]);
    assert!(dirty >= 2, "write-back lines are dirty: {dirty}");
    // Its name in the target goes: no longer that class.
    fs::remove_file(v.path("wb/f2")).unwrap();
    assert_eq!(served_writes(&v, &all, || write_at(&f, 0)), "default");
    // Renamed in, and out again.
    fs::rename(&f, v.path("wt/f")).unwrap();
    assert_eq!(served_writes(&v, &all, || write_at(&v.path("wt/f"), 0)), wt);
    fs::rename(v.path("wt/f"), v.path("outside/g")).unwrap();
    assert_eq!(
        served_writes(&v, &all, || write_at(&v.path("outside/g"), 0)),
        "default"
    );
    // A folder moved into a target takes its files along.
    fs::rename(v.path("outside"), v.path("wt/outside")).unwrap();
    assert_eq!(
        served_writes(&v, &all, || write_at(&v.path("wt/outside/g"), 0)),
        wt
    );
    // Names in two targets: the lowest priority number wins (wb 0 over wt 3)...
    let two = v.path("wt/two");
    write_at(&two, 0);
    fs::hard_link(&two, v.path("wb/two")).unwrap();
    assert_eq!(served_writes(&v, &all, || write_at(&two, 0)), wb);
    // ...a tie goes to the older folder (the lower inode: /wb, made first)...
    stripefs_ok(&[
        "target",
        "add",
        v.path("wt").to_str().unwrap(),
        "--mode",
        "wt",
        "--priority",
        "0",
    ]);
    assert_eq!(served_writes(&v, &all, || write_at(&two, 0)), wb);
    // ...and a change of priority is seen at the next request.
    stripefs_ok(&[
        "target",
        "add",
        v.path("wb").to_str().unwrap(),
        "--mode",
        "wb",
        "--priority",
        "5",
    ]);
    assert_eq!(served_writes(&v, &all, || write_at(&two, 0)), wt);
    // What was written is what is read, through every name.
    let mut want = vec![7u8; 65536];
    want.truncate(65536);
    assert_eq!(fs::read(v.path("wb/two")).unwrap(), want);
    v.umount();
    v.assert_fsck_clean("after the names moved");
}

#[test]
fn a_config_target_follows_its_folder_across_remounts() {
    let cache = "[cache]\nstore = \"ram\"\nsize = \"8M\"\nline_size = \"64K\"\nmode = \"wt\"\n\
        default = \"targets\"\n[[cache.target]]\npath = \"/vm\"\nmode = \"wb\"\n";
    let mut v = TestVolume::new(2, "64K", cache);
    v.mount();
    write_at(&v.path("vm/disk.img"), 0);
    fs::rename(v.path("vm"), v.path("vms")).unwrap();
    v.remount();
    assert!(!v.path("vm").exists(), "no empty vm made again");
    let list: serde_json::Value =
        serde_json::from_str(&stripefs_ok(&["target", "ls", v.mnt_str(), "--json"])).unwrap();
    let t = &list.as_array().unwrap()[..];
    assert_eq!(t.len(), 1, "{list}");
    assert_eq!(
        (t[0]["path"].as_str(), t[0]["config_path"].as_str()),
        (Some("/vms"), Some("/vm"))
    );
    assert_eq!(t[0]["mode"], "wb");
    assert_eq!(t[0]["from_config"], true);
    let table = stripefs_ok(&["target", "ls", v.mnt_str()]);
    assert!(
        table.contains("/vms") && table.contains("config /vm"),
        "{table}"
    );
    let vms = target_class(&v.path("vms"));
    assert_eq!(
        served_writes(&v, &["default", &vms], || write_at(
            &v.path("vms/new.img"),
            0
        )),
        vms
    );
    assert!(
        n(&class(&stats(&v), &vms)["dirty_lines"]) > 0,
        "written back later: wb"
    );
    // Removed live, it comes back at the next mount, on its folder: target rm says so.
    let out = stripefs(&["target", "rm", v.path("vms").to_str().unwrap()]);
    assert!(out.status.success());
    let warning = String::from_utf8_lossy(&out.stderr);
    assert!(
        warning.contains("path = \"/vm\"")
            && warning.contains("comes back on this folder at the next mount"),
        "{warning}"
    );
    assert_eq!(
        stripefs_ok(&["target", "ls", v.mnt_str(), "--json"]).trim(),
        "[]"
    );
    v.remount();
    let list: serde_json::Value =
        serde_json::from_str(&stripefs_ok(&["target", "ls", v.mnt_str(), "--json"])).unwrap();
    assert_eq!(list[0]["path"], "/vms", "{list}");
    assert!(!v.path("vm").exists());
    // A folder removed is made again at its config path, as a path never bound is.
    for e in fs::read_dir(v.path("vms")).unwrap() {
        fs::remove_file(e.unwrap().path()).unwrap();
    }
    fs::remove_dir(v.path("vms")).unwrap();
    v.remount();
    assert!(v.path("vm").is_dir(), "made again");
    let list: serde_json::Value =
        serde_json::from_str(&stripefs_ok(&["target", "ls", v.mnt_str(), "--json"])).unwrap();
    assert_eq!(
        (list[0]["path"].as_str(), list[0]["config_path"].as_str()),
        (Some("/vm"), Some("/vm"))
    );
}

const CLASSES: &str = "[cache]\nstore = \"ram\"\nsize = \"16M\"\nline_size = \"64K\"\nmode = \"wt\"\n\
    default = \"targets\"\n\
    [[cache.class]]\nname = \"big\"\nmin_size = \"1M\"\nmode = \"wb\"\npriority = 0\n\
    [[cache.class]]\nname = \"images\"\nextension = [\"img\", \"qcow2\"]\nmode = \"wt\"\npriority = 1\n\
    [[cache.class]]\nname = \"vm-logs\"\ndirectory = \"vm\"\nextension = \"log\"\nmode = \"wa\"\n\
    [[cache.class]]\nname = \"log-reads\"\nextension = \"log\"\ndirection = \"read\"\nmode = \"wt\"\npriority = 2\n";

#[test]
fn io_classes_by_size_extension_folder_and_direction() {
    let mut v = TestVolume::new(2, "64K", CLASSES);
    v.mount();
    let all = [
        "default",
        "class big",
        "class images",
        "class vm-logs",
        "class log-reads",
    ];
    // Neither rule, the extension rule, the size rule, both (big: priority 0 before 1).
    let cases = [
        ("small.txt", 0, "default"),
        ("small.img", 0, "class images"),
        ("large.bin", 1 << 20, "class big"),
        ("large.IMG", 1 << 20, "class images"),
    ];
    for (name, at, _) in &cases {
        write_at(&v.path(name), *at);
    }
    for (name, at, want) in cases {
        let got = served_writes(&v, &all, || write_at(&v.path(name), at));
        // large.IMG's write at 1M ends past 1M: big, by the size it has with the request.
        let want = if name == "large.IMG" {
            "class big"
        } else {
            want
        };
        assert_eq!(got, want, "{name}");
    }
    let s = stats(&v);
    assert_eq!(class(&s, "class big")["mode"], "wb");
    assert!(n(&class(&s, "class big")["dirty_lines"]) > 0, "{s}");
    assert_eq!(
        n(&class(&s, "class images")["dirty_lines"]),
        0,
        "write-through"
    );
    // A file changes class as it grows: at its first request with the size past the bound.
    let grows = v.path("grows.txt");
    assert_eq!(served_writes(&v, &all, || write_at(&grows, 0)), "default");
    assert_eq!(
        served_writes(&v, &all, || write_at(&grows, 1 << 20)),
        "class big"
    );
    assert_eq!(served_writes(&v, &all, || write_at(&grows, 0)), "class big");
    // A folder with an extension: both met by one name.
    assert!(
        v.path("vm").is_dir(),
        "a class's folder is made at mount, as a target's"
    );
    fs::create_dir(v.path("other")).unwrap();
    assert_eq!(
        served_writes(&v, &all, || write_at(&v.path("vm/a.log"), 0)),
        "class vm-logs"
    );
    assert_eq!(
        served_writes(&v, &all, || write_at(&v.path("other/a.log"), 0)),
        "default"
    );
    // Direction: reads of a .log outside vm are log-reads', its writes are not.
    let before = reads(&class(&stats(&v), "class log-reads"));
    assert_eq!(fs::read(v.path("other/a.log")).unwrap().len(), 65536);
    assert!(reads(&class(&stats(&v), "class log-reads")) > before);
    // class ls shows each with its lines.
    let list: serde_json::Value =
        serde_json::from_str(&stripefs_ok(&["class", "ls", v.mnt_str(), "--json"])).unwrap();
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["big", "images", "vm-logs", "log-reads"]);
    let big = &list[0];
    assert_eq!(
        (big["min_size"].as_u64(), big["mode"].as_str()),
        (Some(1 << 20), Some("wb"))
    );
    assert!(n(&big["occupancy_lines"]) > 0, "{big}");
    assert_eq!(list[2]["directory"], "/vm");
    assert_eq!(list[2]["extensions"], serde_json::json!(["log"]));
    let table = stripefs_ok(&["class", "ls", v.mnt_str()]);
    assert!(
        table.contains("under /vm, *.log") && table.contains(">= 1M"),
        "{table}"
    );
}

#[test]
fn io_classes_change_live_and_bad_rules_are_refused_with_their_reason() {
    let cache = "[mount]\nallow_other = true\n\
        [cache]\nstore = \"ram\"\nsize = \"8M\"\nline_size = \"64K\"\nmode = \"wt\"\n\
        default = \"targets\"\n";
    let mut v = TestVolume::new(1, "64K", cache);
    v.mount();
    fs::create_dir(v.path("db")).unwrap();
    let out = stripefs_ok(&[
        "class",
        "add",
        v.mnt_str(),
        "db-small",
        "--directory",
        v.path("db").to_str().unwrap(),
        "--max-size",
        "256K",
        "--direction",
        "write",
        "--mode",
        "wb",
        "--priority",
        "1",
        "--allocation",
        "0.5",
        "--min-allocation",
        "0.1",
    ]);
    assert!(
        out.contains("name=db-small directory=/db max_size=256K direction=write mode=wb priority=1 allocation=0.5 min_allocation=0.1 pinned=0"),
        "{out}"
    );
    let all = ["default", "class db-small"];
    assert_eq!(
        served_writes(&v, &all, || write_at(&v.path("db/t"), 0)),
        "class db-small"
    );
    assert_eq!(
        served_writes(&v, &all, || write_at(&v.path("t"), 0)),
        "default"
    );
    // The folder is held by inode: renamed, it keeps the class.
    fs::rename(v.path("db"), v.path("data")).unwrap();
    assert_eq!(
        served_writes(&v, &all, || write_at(&v.path("data/t"), 0)),
        "class db-small"
    );
    // Kept across a remount, shown where the folder is now.
    v.remount();
    let list: serde_json::Value =
        serde_json::from_str(&stripefs_ok(&["class", "ls", v.mnt_str(), "--json"])).unwrap();
    assert_eq!(list[0]["directory_now"], "/data", "{list}");
    assert_eq!(list[0]["from_config"], false);
    assert_eq!(list[0]["min_allocation"], 0.1);
    assert_eq!(
        served_writes(&v, &all, || write_at(&v.path("data/t"), 0)),
        "class db-small"
    );
    // Refusals carry their reasons.
    for (args, why) in [
        (vec!["--max-size", "1Q"], "unknown unit"),
        (vec!["--mode", "wb"], "at least one condition"),
        (vec!["--extension", "tar.gz"], "follows the last dot"),
        (
            vec!["--min-size", "2M", "--max-size", "1M"],
            "no file would match",
        ),
        (vec!["--directory", "/tmp"], "not on the volume"),
    ] {
        let mut cmd = vec!["class", "add", v.mnt_str(), "x"];
        cmd.extend(args);
        let out = stripefs(&cmd);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(why), "{cmd:?}: {err}");
    }
    // Another user, who may write the root (else the kernel refuses before the daemon sees it).
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&v.mnt, fs::Permissions::from_mode(0o777)).unwrap();
    let out = as_tests(&[
        BIN,
        "class",
        "add",
        v.mnt_str(),
        "mine",
        "--extension",
        "iso",
        "--mode",
        "wb",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err
                .contains("only root or the user who mounted the volume may change the IO classes"),
        "{err}"
    );
    // Removed: its files go back to the default.
    let out = stripefs_ok(&["class", "rm", v.mnt_str(), "db-small"]);
    assert!(out.contains("IO class db-small removed"), "{out}");
    assert_eq!(
        stripefs_ok(&["class", "ls", v.mnt_str(), "--json"]).trim(),
        "[]"
    );
    let s = stats(&v);
    assert!(s["classes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["name"] != "class db-small"));
    assert_eq!(n(&s["dirty_lines"]), 0, "written back before it went");
    let out = stripefs(&["class", "rm", v.mnt_str(), "db-small"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no IO class \"db-small\""));
    // A bad rule in the config: file, line and key at mount.
    v.umount();
    let text = fs::read_to_string(&v.config).unwrap()
        + "[[cache.class]]\nname = \"bad\"\nmin_size = \"2G\"\nmax_size = \"1G\"\n";
    fs::write(&v.config, text).unwrap();
    let out = stripefs(&["mount", v.cfg(), v.mnt_str()]);
    let err = String::from_utf8_lossy(&out.stderr);
    let line = fs::read_to_string(&v.config).unwrap().lines().count();
    assert!(
        !out.status.success()
            && err.contains(&format!(
                "vol.toml:{line}: cache.class.max_size: min_size = 2G is above max_size = 1G"
            )),
        "{err}"
    );
}
