//! The benchmark lab end to end: a tiny sweep over real mounted volumes, its JSON, CSV and
//! chart, and a bench of an emulated volume. No test asserts a speed.

mod common;

use common::*;
use std::fs;

#[test]
fn tiny_sweep_writes_json_csv_and_chart_and_leaves_no_mount() {
    let root = tempfile::tempdir().unwrap();
    let devs: Vec<String> = (0..2)
        .map(|i| {
            let d = root.path().join(format!("dev{i}"));
            fs::create_dir(&d).unwrap();
            d.display().to_string()
        })
        .collect();
    let chart = root.path().join("sweep.svg");
    let csv = root.path().join("sweep.csv");
    let out = stripefs(&[
        "bench",
        "sweep",
        "--devices",
        &devs.join(","),
        "--stripe-sizes",
        "8K,64K",
        "--widths",
        "2,4",
        "--cache",
        "none,ram:wb",
        "--size",
        "4M",
        "--duration",
        "1s",
        "--profile",
        "custom:rw=rand,bs=4K,qd=2",
        "--json",
        "--chart",
        chart.to_str().unwrap(),
        "--csv",
        csv.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "sweep failed: {stderr}");
    assert!(stderr.contains("width 4 skipped"), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let baseline = &report["baseline"];
    assert_eq!(
        baseline["results"].as_array().unwrap().len(),
        2,
        "read and write"
    );
    let targets = report["targets"].as_array().unwrap();
    assert_eq!(targets.len(), 4);
    let shape: Vec<(u64, &str)> = targets
        .iter()
        .map(|t| {
            (
                t["stripe_size"].as_u64().unwrap(),
                t["cache"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            (8192, "none"),
            (65536, "none"),
            (8192, "ram:wb"),
            (65536, "ram:wb")
        ]
    );
    for t in targets {
        assert_eq!(t["width"], 2);
        for r in t["results"].as_array().unwrap() {
            assert!(r["median"]["ops"].as_u64().unwrap() > 0, "{r}");
            assert!(r["median"]["max_in_flight"].as_u64().unwrap() >= 1);
            assert_eq!(r["runs"].as_array().unwrap().len(), 1);
        }
    }
    let svg = fs::read_to_string(&chart).unwrap();
    assert!(svg.contains("<svg") && svg.contains("RND4K Q2T1"), "chart");
    assert_eq!(fs::read_to_string(&csv).unwrap().lines().count(), 1 + 2 + 8);
    // Each configuration was unmounted and its devices cleaned up.
    let mounts = fs::read_to_string("/proc/mounts").unwrap();
    assert!(!mounts.contains("stripefs-sweep-mnt"), "{mounts}");
    for d in &devs {
        assert_eq!(fs::read_dir(d).unwrap().count(), 0, "{d} left dirty");
    }
}

#[test]
fn bench_of_an_emulated_volume_says_emulated() {
    let mut v = TestVolume::new(
        2,
        "64K",
        "[[volume.emulate]]\ndevice = 1\nprofile = \"sata-ssd\"\n",
    );
    v.mount();
    let status = stripefs_ok(&["status", v.mnt_str()]);
    assert!(status.contains("sata-ssd (emulated"), "{status}");
    let out = stripefs_ok(&[
        "bench",
        v.mnt_str(),
        "--size",
        "2M",
        "--duration",
        "1s",
        "--profile",
        "custom:rw=randread,bs=4K,qd=4",
    ]);
    assert!(out.contains("EMULATED"), "{out}");
    assert!(out.contains("RND4K Q4T1"), "{out}");
    assert!(!v.path("stripefs-bench.dat").exists());
}

#[test]
fn bench_refuses_bad_arguments() {
    for (args, says) in [
        (
            vec!["bench", "/tmp", "--profile", "cdm9"],
            "unknown profile",
        ),
        (vec!["bench", "/tmp", "--size", "12Q"], "--size 12Q"),
        (
            vec![
                "bench",
                "sweep",
                "--devices",
                "/tmp",
                "--stripe-sizes",
                "12K",
            ],
            "power of two",
        ),
        (
            vec!["bench", "sweep", "--devices", "/tmp", "--cache", "ram:fast"],
            "--cache ram:fast",
        ),
        (
            vec![
                "bench",
                "sweep",
                "--devices",
                "/tmp",
                "--cache",
                "file:wb:/nonexistent",
            ],
            "not a directory",
        ),
        (
            vec!["bench", "sweep", "--devices", "/tmp", "--emulate", "floppy"],
            "--emulate floppy",
        ),
        (vec!["bench", "preset", "nope"], "unknown preset"),
    ] {
        let out = stripefs(&args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn queue_depth_is_really_reached_on_a_slow_device() {
    // An emulated HDD serves one I/O in 12 ms or more: every queue slot is seen in flight.
    let mut v = TestVolume::new(
        1,
        "64K",
        "[[volume.emulate]]\ndevice = 0\nprofile = \"hdd-5400\"\n",
    );
    v.mount();
    let out = stripefs_ok(&[
        "bench",
        v.mnt_str(),
        "--size",
        "2M",
        "--duration",
        "1s",
        "--profile",
        "custom:rw=randread,bs=4K,qd=6",
        "--json",
    ]);
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let r = &report["targets"][0]["results"][0]["median"];
    assert_eq!(r["max_in_flight"], 6, "{r}");
    assert!(r["ops"].as_u64().unwrap() > 0);
    assert_eq!(
        r["bytes"].as_u64().unwrap(),
        r["ops"].as_u64().unwrap() * 4096
    );
}
