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
    let heat = fs::read_to_string(root.path().join("sweep-heatmap.svg")).unwrap();
    assert!(
        heat.contains("stripe size") && heat.contains("devices"),
        "heat map"
    );
    assert_eq!(fs::read_to_string(&csv).unwrap().lines().count(), 1 + 2 + 8);
    // Each configuration was unmounted and its devices cleaned up (mounts of this sweep only:
    // other tests run sweeps at the same time).
    let left = stripefs_mounts_of(root.path().to_str().unwrap());
    assert!(left.is_empty(), "{left:?}");
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
fn a_volume_behind_an_emulated_card_says_so_in_status_and_bench() {
    let mut v = TestVolume::new(
        2,
        "64K",
        "[[volume.emulate]]\ndevice = \"all\"\nprofile = \"sata-port\"\n\
         [volume.controller]\ndevice = \"all\"\nprofile = \"lsi-9260-8i\"\ncache = false\n",
    );
    v.mount();
    let status = stripefs_ok(&["status", v.mnt_str()]);
    assert!(
        status.contains("controller: lsi-9260-8i (emulated controller")
            && status.contains("cache off"),
        "{status}"
    );
    // Data goes through the card and comes back whole.
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    fs::write(v.path("f"), &data).unwrap();
    assert_eq!(fs::read(v.path("f")).unwrap(), data);
    let out = stripefs_ok(&[
        "bench",
        v.mnt_str(),
        "--size",
        "2M",
        "--duration",
        "1s",
        "--profile",
        "custom:rw=read,bs=1M,qd=2",
    ]);
    assert!(
        out.contains("controller: lsi-9260-8i (emulated controller"),
        "{out}"
    );
    assert!(out.contains("EMULATED"), "{out}");
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
        (
            vec!["bench", "/tmp", "--cpus", "1-0"],
            "--cpus 1-0: a range",
        ),
        (
            vec!["bench", "/tmp", "--cpus", "1023"],
            "CPU 1023 not available",
        ),
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

/// Splits a CSV line on commas outside quotes.
fn csv_fields(line: &str) -> Vec<String> {
    let (mut out, mut cur, mut quoted) = (Vec::new(), String::new(), false);
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    assert!(!quoted, "unbalanced quotes: {line}");
    out.push(cur);
    out
}

/// Every line of a CSV has the header's fields; returns the data rows' fields.
fn valid_csv(text: &str) -> Vec<Vec<String>> {
    assert!(text.ends_with('\n'), "a half row at the end: {text:?}");
    let mut lines = text.lines();
    let header = csv_fields(lines.next().expect("a header"));
    assert_eq!(header[0], "target");
    lines
        .map(|l| {
            let f = csv_fields(l);
            assert_eq!(f.len(), header.len(), "{l}");
            assert!(f[11].parse::<f64>().is_ok(), "mb_per_s of {l}");
            f
        })
        .collect()
}

fn stripefs_mounts_of(tag: &str) -> Vec<String> {
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.contains("fuse.stripefs") && l.contains(tag))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_sweep_stopped_by_sigint_keeps_its_rows_and_resume_measures_only_the_rest() {
    let root = tempfile::tempdir().unwrap();
    let devs: Vec<String> = (0..2)
        .map(|i| {
            let d = root.path().join(format!("dev{i}"));
            fs::create_dir(&d).unwrap();
            d.display().to_string()
        })
        .collect();
    let csv = root.path().join("sweep.csv");
    let jsonl = root.path().join("sweep.jsonl");
    let chart = root.path().join("sweep.svg");
    let devices = devs.join(",");
    let sweep = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = [
            "bench",
            "sweep",
            "--devices",
            &devices,
            "--stripe-sizes",
            "8K,64K",
            "--widths",
            "2",
            "--size",
            "4M",
            "--duration",
            "1s",
            "--profile",
            "custom:rw=rand,bs=4K,qd=2",
            "--chart",
            chart.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    // 2 rows of the baseline, 2 of each of the two volumes.
    let mut child = std::process::Command::new(BIN)
        .args(sweep(&["--csv", csv.to_str().unwrap()]))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let start = std::time::Instant::now();
    // The first volume's first row: that volume is mounted, measuring its next test.
    loop {
        let text = fs::read_to_string(&csv).unwrap_or_default();
        if text.lines().any(|l| l.contains("\",false,")) {
            break;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the sweep ended before it was stopped"
        );
        assert!(start.elapsed().as_secs() < 60, "no row in a minute: {text}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        !stripefs_mounts_of(&format!("stripefs-sweep-mnt-{pid}-")).is_empty(),
        "a volume is mounted while it is measured"
    );
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("stopped by a signal") && stderr.contains("--resume"),
        "{stderr}"
    );
    assert!(
        stripefs_mounts_of(&format!("stripefs-sweep-mnt-{pid}-")).is_empty(),
        "a mount left behind"
    );
    for d in &devs {
        assert_eq!(fs::read_dir(d).unwrap().count(), 0, "{d} left dirty");
    }
    let rows = valid_csv(&fs::read_to_string(&csv).unwrap());
    assert!((3..6).contains(&rows.len()), "{rows:?}");
    assert_eq!(
        fs::read_to_string(&jsonl).unwrap().lines().count(),
        rows.len(),
        "one JSON line per CSV row"
    );
    let before = rows.len();
    // Volumes whose two rows are both in: not mounted again.
    let whole = ["8K", "64K"]
        .iter()
        .filter(|s| {
            rows.iter()
                .filter(|r| r[0].contains(&format!("stripe {s},")))
                .count()
                == 2
        })
        .count();

    let out = stripefs(
        &sweep(&["--resume", csv.to_str().unwrap(), "--json"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("{before} rows already measured")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "{} configurations mounted and measured, {whole} taken whole",
            2 - whole
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("({} rows measured now)", 6 - before)),
        "{stderr}"
    );
    let text = fs::read_to_string(&csv).unwrap();
    let rows = valid_csv(&text);
    assert_eq!(rows.len(), 6, "{text}");
    let mut keys: Vec<(String, String)> =
        rows.iter().map(|r| (r[0].clone(), r[10].clone())).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 6, "no row measured twice: {text}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for t in report["targets"].as_array().unwrap() {
        assert_eq!(t["results"].as_array().unwrap().len(), 2, "{t}");
    }
    assert_eq!(fs::read_to_string(&jsonl).unwrap().lines().count(), 6);

    // All done: nothing mounted, nothing measured, the files as they were.
    let out = stripefs(
        &sweep(&["--resume", csv.to_str().unwrap()])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("0 configurations mounted and measured, 2 taken whole")
            && stderr.contains("(0 rows measured now)"),
        "{stderr}"
    );
    assert_eq!(fs::read_to_string(&csv).unwrap(), text);
}

#[test]
fn a_chart_in_an_unknown_format_is_refused_before_the_run() {
    let root = tempfile::tempdir().unwrap();
    let dev = root.path().join("dev0");
    fs::create_dir(&dev).unwrap();
    let chart = root.path().join("out.jpg");
    let csv = root.path().join("out.csv");
    let preset_dir = root.path().join("preset");
    for args in [
        vec![
            "bench",
            "sweep",
            "--devices",
            dev.to_str().unwrap(),
            "--widths",
            "1",
        ],
        vec!["bench", dev.to_str().unwrap()],
        vec![
            "bench",
            "compare",
            dev.to_str().unwrap(),
            dev.to_str().unwrap(),
        ],
        vec![
            "bench",
            "preset",
            "raidcard",
            "--dir",
            preset_dir.to_str().unwrap(),
        ],
    ] {
        let mut args = args;
        args.extend(["--chart", chart.to_str().unwrap()]);
        args.extend(["--csv", csv.to_str().unwrap(), "--size", "4M"]);
        let start = std::time::Instant::now();
        let out = stripefs(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            err.contains("unknown chart format \".jpg\"") && err.contains(".svg, .png"),
            "{args:?}: {err}"
        );
        // Nothing was run: no test, no file, no mount, no RAM disk.
        assert!(start.elapsed().as_secs() < 5, "{args:?} ran first");
        assert!(!chart.exists() && !csv.exists(), "{args:?}");
        assert_eq!(fs::read_dir(&dev).unwrap().count(), 0, "{args:?}");
        assert!(!preset_dir.exists(), "{args:?}");
    }
}

#[test]
fn every_run_header_says_its_io_mode_engine_cache_and_devices() {
    // A sweep over emulated devices, O_DIRECT throughout (/tmp's ext4 takes it).
    let root = tempfile::tempdir().unwrap();
    let devs: Vec<String> = (0..2)
        .map(|i| {
            let d = root.path().join(format!("dev{i}"));
            fs::create_dir(&d).unwrap();
            d.display().to_string()
        })
        .collect();
    let chart = root.path().join("h.svg");
    let sweep = |device_io: &str| {
        stripefs_ok(&[
            "bench",
            "sweep",
            "--devices",
            &devs.join(","),
            "--stripe-sizes",
            "64K",
            "--widths",
            "2",
            "--cache",
            "ram:wb",
            "--emulate",
            "nvme",
            "--device-io",
            device_io,
            "--size",
            "2M",
            "--duration",
            "1s",
            "--profile",
            "custom:rw=randread,bs=4K,qd=1",
            "--chart",
            chart.to_str().unwrap(),
        ])
    };
    let out = sweep("direct");
    assert!(out.contains("test file I/O: O_DIRECT\n"), "{out}");
    assert!(
        out.contains("workload engine: the built-in engine"),
        "{out}"
    );
    assert!(
        out.contains("device I/O direct (O_DIRECT), io engine ")
            && out.contains(", cache ram:wb\n"),
        "{out}"
    );
    assert!(
        !out.contains("BUFFERED"),
        "a direct run is not marked: {out}"
    );
    assert!(out.contains(": real directory, no FUSE"), "{out}");
    for (i, d) in devs.iter().enumerate() {
        assert!(
            out.contains(&format!("device {i} {d}/stripefs-sweep-"))
                && out.contains(": EMULATED nvme (emulated"),
            "{out}"
        );
    }
    assert!(out.contains("cache: in RAM"), "{out}");
    let engine = out
        .split("io engine ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .unwrap();
    assert!(["uring", "threads"].contains(&engine), "{engine}");

    // Buffered device I/O: marked as flattered by the page cache.
    let out = sweep("buffered");
    assert!(
        out.contains("BUFFERED: figures are flattered by the page cache"),
        "{out}"
    );
    assert!(
        out.contains("device I/O BUFFERED (flattered by the devices' page cache)"),
        "{out}"
    );

    // A mounted volume over real directories, a buffered test file.
    let mut v = TestVolume::new(2, "64K", "");
    v.mount();
    let out = stripefs_ok(&[
        "bench",
        v.mnt_str(),
        "--buffered",
        "--size",
        "2M",
        "--duration",
        "1s",
        "--profile",
        "custom:rw=randread,bs=4K,qd=1",
    ]);
    assert!(out.contains("test file I/O: buffered\n"), "{out}");
    assert!(
        out.contains("BUFFERED: figures are flattered by the page cache"),
        "{out}"
    );
    assert!(
        out.contains("device I/O direct (O_DIRECT), io engine "),
        "{out}"
    );
    assert!(out.contains(", cache none\n"), "{out}");
    assert!(
        out.contains("device 0 ") && out.contains("device 1 "),
        "{out}"
    );
    assert_eq!(out.matches(": real\n").count(), 2, "{out}");
    assert!(!out.contains("EMULATED"), "{out}");
}

#[test]
fn sigterm_to_the_whole_process_group_also_stops_cleanly() {
    // As a terminal's Ctrl-C or a service manager's stop: every process of the group gets the
    // signal, mkfs and mount included when they run.
    use std::os::unix::process::CommandExt;
    let root = tempfile::tempdir().unwrap();
    let dev = root.path().join("dev0");
    fs::create_dir(&dev).unwrap();
    let csv = root.path().join("t.csv");
    let mut child = std::process::Command::new(BIN)
        .args([
            "bench",
            "sweep",
            "--devices",
            dev.to_str().unwrap(),
            "--stripe-sizes",
            "8K,64K",
            "--widths",
            "1",
            "--size",
            "2M",
            "--duration",
            "1s",
            "--profile",
            "custom:rw=randread,bs=4K,qd=1",
            "--csv",
            csv.to_str().unwrap(),
        ])
        .process_group(0)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let start = std::time::Instant::now();
    // The baseline's row is in: the first volume is being built or measured.
    while !fs::read_to_string(&csv)
        .unwrap_or_default()
        .contains("\",true,")
    {
        assert!(child.try_wait().unwrap().is_none(), "ended before stopped");
        assert!(start.elapsed().as_secs() < 60);
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    unsafe { libc::kill(-(pid as i32), libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("stopped by a signal"), "{stderr}");
    assert!(
        stripefs_mounts_of(&format!("stripefs-sweep-mnt-{pid}-")).is_empty(),
        "a mount left behind"
    );
    assert_eq!(fs::read_dir(&dev).unwrap().count(), 0, "device left dirty");
    let rows = valid_csv(&fs::read_to_string(&csv).unwrap());
    assert!((1..4).contains(&rows.len()), "{rows:?}");
    assert_eq!(rows[0][1], "true", "the baseline's row first");
}

#[test]
fn the_cas_preset_with_a_custom_profile_prints_real_rows() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("ram");
    let chart = root.path().join("cas.svg");
    let out = stripefs_ok(&[
        "bench",
        "preset",
        "cas",
        "--dir",
        dir.to_str().unwrap(),
        "--profile",
        "custom:rw=randread,bs=4K,qd=1",
        "--size",
        "2M",
        "--duration",
        "1s",
        "--chart",
        chart.to_str().unwrap(),
    ]);
    let table = out
        .split("speedup of a write-back cache over the HDD alone\n")
        .nth(1)
        .expect(&out);
    let rows: Vec<&str> = table.lines().skip(1).collect();
    assert_eq!(rows.len(), 1, "only the test measured: {table}");
    let f: Vec<&str> = rows[0].split_whitespace().collect();
    assert_eq!(&f[..3], ["RND4K", "Q1T1", "read"], "{table}");
    let hdd: f64 = f[3].parse().unwrap();
    assert!(hdd > 0.0, "{table}");
    for (mb, x, seed) in [(4, 5, 6), (7, 8, 9)] {
        assert!(f[mb].parse::<f64>().unwrap() > 0.0, "{table}");
        assert!(
            f[x].trim_end_matches('x').parse::<f64>().unwrap() > 0.0,
            "{table}"
        );
        assert!(
            f[seed].ends_with('x'),
            "the seed has RND4K Q1T1 read: {table}"
        );
    }
    // Its volumes read and write their devices buffered (RAM disks): said so.
    assert!(out.contains("BUFFERED: figures are flattered"), "{out}");
    assert!(chart.exists());
    assert!(!fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .contains(dir.to_str().unwrap()));
}

#[test]
fn the_raidcard_preset_writes_the_grid_with_its_columns_marked_emulated() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("ram");
    let csv = root.path().join("raidcard.csv");
    let chart = root.path().join("raidcard.svg");
    let out = stripefs(&[
        "bench",
        "preset",
        "raidcard",
        "--dir",
        dir.to_str().unwrap(),
        "--profile",
        "custom:rw=read,bs=1M,qd=2",
        "--size",
        "2M",
        "--duration",
        "1s",
        "--csv",
        csv.to_str().unwrap(),
        "--chart",
        chart.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // Nothing of the preset stays mounted: neither the RAM disk nor a volume.
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(dir.to_str().unwrap()), "{mounts}");

    let text = fs::read_to_string(&csv).unwrap();
    let header = csv_fields(text.lines().next().unwrap());
    let col = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no column {name} in {header:?}"))
    };
    let rows = valid_csv(&text);
    let volumes: Vec<&Vec<String>> = rows
        .iter()
        .filter(|r| r[col("baseline")] == "false")
        .collect();
    // 4 and 8 ports × 8K/64K/256K × the card's cache on and off, one test each.
    assert_eq!(volumes.len(), 12, "{text}");
    let mut grid: Vec<(String, String, String)> = volumes
        .iter()
        .map(|r| {
            assert_eq!(r[col("emulated")], "true", "{r:?}");
            assert!(r[col("models")].contains("lsi-9260-8i"), "{r:?}");
            assert_eq!(r[col("cache")], "none");
            assert_eq!(
                (r[col("profile")].as_str(), r[col("direction")].as_str()),
                ("SEQ1M Q2T1", "read")
            );
            assert!(r[col("iops")].parse::<f64>().is_ok());
            (
                r[col("devices")].clone(),
                r[col("stripe_size")].clone(),
                r[col("controller_cache")].clone(),
            )
        })
        .collect();
    grid.sort();
    grid.dedup();
    assert_eq!(grid.len(), 12, "every cell once: {grid:?}");
    assert!(grid.iter().all(|g| g.2 == "on" || g.2 == "off"), "{grid:?}");
    // The panels beside the seed's figures, and the shape lines.
    assert!(stdout.contains("raidcard panel, EMULATED"), "{stdout}");
    assert!(
        stdout.contains("658") && stdout.contains("<1000"),
        "{stdout}"
    );
    assert!(stdout.contains("8 ports / 4 ports at 64K"), "{stdout}");
    assert_eq!(stdout.matches("  model alone").count(), 2, "{stdout}");
    assert!(stdout.contains("emulated controller"), "{stdout}");
    assert!(chart.exists());
}

#[test]
fn the_fio_cross_check_runs_after_each_engine_run_and_reports_the_median() {
    let dir = tempfile::tempdir().unwrap();
    let out = stripefs_ok(&[
        "bench",
        dir.path().to_str().unwrap(),
        "--profile",
        "custom:rw=randwrite,bs=4K,qd=4",
        "--size",
        "4M",
        "--duration",
        "1s",
        "--runs",
        "3",
        "--fio",
        "--json",
    ]);
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let result = &report["targets"][0]["results"][0];
    assert_eq!(result["runs"].as_array().unwrap().len(), 3, "{result}");
    let by_fio = result["fio_runs"].as_array().unwrap();
    assert_eq!(
        by_fio.len(),
        3,
        "one fio run beside each engine run: {result}"
    );
    let mut mb: Vec<f64> = by_fio
        .iter()
        .map(|r| {
            assert_eq!(r["io_engine"], "fio", "{r}");
            assert!(r["ops"].as_u64().unwrap() > 0, "{r}");
            r["mb_per_s"].as_f64().unwrap()
        })
        .collect();
    mb.sort_by(f64::total_cmp);
    assert_eq!(
        result["fio"]["mb_per_s"].as_f64().unwrap(),
        mb[1],
        "{result}"
    );
    assert!(!dir.path().join("stripefs-bench.dat").exists());
}

/// `--cpus` keeps the load on the CPUs named, with fio (compare drives fio where it is
/// installed: a bad `cpus_allowed` would fail it) as with the engine; the header and the JSON
/// say so, and the CSV keys its rows by it.
#[test]
fn the_load_kept_to_one_cpu_is_said_in_the_header_json_and_csv() {
    let root = tempfile::tempdir().unwrap();
    let (a, b) = (root.path().join("a"), root.path().join("b"));
    fs::create_dir(&a).unwrap();
    fs::create_dir(&b).unwrap();
    let csv = root.path().join("r.csv");
    // The first CPU this process may use (a cpuset or taskset may leave CPU 0 out).
    let status = fs::read_to_string("/proc/self/status").unwrap();
    let allowed = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim();
    let cpu = allowed
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .to_string();
    let args = |cmd: &[&str], json: bool| {
        let mut v: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
        v.extend(
            ["--cpus", &cpu, "--size", "4M", "--duration", "300ms"]
                .iter()
                .map(|s| s.to_string()),
        );
        v.extend(["--profile", "custom:rw=randread,bs=4K,qd=1"].map(String::from));
        if json {
            v.push("--json".into());
        }
        v
    };
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    for cmd in [vec!["bench", "compare", a, b], vec!["bench", a]] {
        let v = args(&cmd, false);
        let out = stripefs(&v.iter().map(String::as_str).collect::<Vec<_>>());
        let text = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{cmd:?}: {err}");
        assert!(
            text.contains("load kept to CPU 0 (--cpus)"),
            "{cmd:?}: {text}"
        );
    }
    let mut run = args(&["bench", a], true);
    run.extend(["--csv".to_string(), csv.display().to_string()]);
    let out = stripefs(&run.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["cpus"], "0");
    let jsonl = fs::read_to_string(root.path().join("r.jsonl")).unwrap();
    assert!(
        jsonl.lines().all(|l| l.contains(r#""cpus":"0""#)),
        "{jsonl}"
    );
}
