//! The cache's promotion and cutoff policies on a mounted volume, read back from
//! `stripefs stats --json` as Open CAS users read `casadm -P`: sequential cutoff by stream,
//! nhit promotion with its trigger threshold. (The cleaning policies have theirs in
//! tests/cache.rs; every policy's unit tests drive it on an injectable clock in cache/.)

mod common;

use common::*;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};

const LINE: usize = 64 << 10;

fn counters(v: &TestVolume) -> serde_json::Value {
    let stats: serde_json::Value =
        serde_json::from_str(&stripefs_ok(&["stats", v.mnt_str(), "--json"])).unwrap();
    stats["cache"]["counters"].clone()
}

/// Reads `len` bytes at `offset` with O_DIRECT, so every request reaches the daemon.
fn direct_read(f: &File, offset: u64, len: usize) {
    f.read_exact_at(Aligned::new(len).buf(), offset).unwrap();
}

fn volume(policies: &str) -> TestVolume {
    let mut v = TestVolume::new(
        1,
        "64K",
        &format!("[cache]\nsize = \"8M\"\nline_size = \"64K\"\nmode = \"wt\"\n{policies}"),
    );
    v.mount();
    // 4 MiB of data on the devices; the remount starts the (RAM) cache and its counters empty.
    std::fs::write(v.path("f"), vec![5u8; 4 << 20]).unwrap();
    v.remount();
    v
}

fn open_direct(v: &TestVolume) -> File {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(v.path("f"))
        .unwrap()
}

/// `always` with a 1M threshold: a sequential stream read in 128K requests is cached until
/// its bytes with the next request reach 1M (7 requests), and passes through from there;
/// random reads are never cut.
#[test]
fn a_sequential_stream_passes_through_once_it_reaches_the_threshold() {
    let mut v = volume(
        "[cache.seq_cutoff]\npolicy = \"always\"\nthreshold = \"1M\"\npromotion_count = 1\n",
    );
    let f = open_direct(&v);
    for i in 0..32u64 {
        direct_read(&f, i * (128 << 10), 128 << 10);
    }
    let c = counters(&v);
    assert_eq!(c["read_full_misses"], 7, "{c}");
    assert_eq!(c["pass_through_reads"], 25, "{c}");
    // Random single lines, far apart: no stream, no cut; they are hits or misses.
    for i in [40u64, 3, 57, 12, 33] {
        direct_read(&f, i * LINE as u64, LINE);
    }
    let c = counters(&v);
    assert_eq!(c["pass_through_reads"], 25, "a random read was cut: {c}");
    drop(f);
    v.umount();
}

/// nhit with `hits = 3` and the trigger at 0 (nhit from the first line): a line is inserted on
/// its third miss; the two before pass through, the read after is a hit. With the trigger at
/// its default (80 %) an almost empty cache inserts every miss at once.
#[test]
fn nhit_inserts_a_line_on_its_third_miss_above_the_trigger_threshold() {
    let mut v = volume("[cache.promotion]\npolicy = \"nhit\"\nhits = 3\ntrigger_threshold = 0\n");
    let f = open_direct(&v);
    for _ in 0..4 {
        direct_read(&f, 10 * LINE as u64, LINE);
    }
    let c = counters(&v);
    assert_eq!(c["pass_through_reads"], 2, "{c}");
    assert_eq!(c["read_full_misses"], 1, "{c}");
    assert_eq!(c["read_hits"], 1, "{c}");
    drop(f);
    v.umount();

    let mut v = volume("[cache.promotion]\npolicy = \"nhit\"\nhits = 3\n");
    let f = open_direct(&v);
    direct_read(&f, 10 * LINE as u64, LINE);
    direct_read(&f, 10 * LINE as u64, LINE);
    let c = counters(&v);
    assert_eq!(c["read_full_misses"], 1, "{c}");
    assert_eq!(
        c["read_hits"], 1,
        "below the trigger every miss inserts: {c}"
    );
    drop(f);
    v.umount();
}

/// `stripefs params` changes the sequential cutoff, promotion and error threshold live, as
/// `casadm --set-param` does: the same stream that was cached is cut once the cutoff is set;
/// bad values and other users are refused with their reason, and nothing changes.
#[test]
fn params_change_the_cutoff_and_promotion_live() {
    let mut v = volume("[cache.seq_cutoff]\npolicy = \"never\"\n");
    let f = open_direct(&v);
    for i in 0..8u64 {
        direct_read(&f, i * (128 << 10), 128 << 10);
    }
    assert_eq!(counters(&v)["pass_through_reads"], 0);
    let out = stripefs_ok(&[
        "params",
        v.mnt_str(),
        "--seq-cutoff",
        "always",
        "--seq-threshold",
        "256K",
        "--seq-promotion-count",
        "1",
        "--promotion",
        "nhit",
        "--nhit-hits",
        "2",
        "--error-threshold",
        "5",
    ]);
    assert!(
        out.contains("(changed)") && out.contains("seq_threshold"),
        "{out}"
    );
    let stats: serde_json::Value =
        serde_json::from_str(&stripefs_ok(&["stats", v.mnt_str(), "--json"])).unwrap();
    let policy = &stats["cache"]["policy"];
    assert_eq!(policy["seq_cutoff"], "always", "{policy}");
    assert_eq!(policy["seq_threshold"], 256 << 10, "{policy}");
    assert_eq!(
        policy["promotion"]["nhit"]["insertion_threshold"], 2,
        "{policy}"
    );
    assert_eq!(stats["cache"]["error_threshold"], 5);
    // A new stream: 128K requests reach 256K at the second, which passes through on.
    for i in 16..24u64 {
        direct_read(&f, i * (128 << 10), 128 << 10);
    }
    assert_eq!(counters(&v)["pass_through_reads"], 7);

    for (args, reason) in [
        (vec!["--nhit-hits", "1"], "from 2 to 1000"),
        (vec!["--seq-cutoff", "sometimes"], "always, full or never"),
        (
            vec!["--promotion", "always", "--nhit-trigger", "50"],
            "promotion=nhit only",
        ),
    ] {
        let mut all = vec!["params", v.mnt_str()];
        all.extend(args);
        let bad = stripefs(&all);
        assert!(!bad.status.success(), "{bad:?}");
        assert!(
            String::from_utf8_lossy(&bad.stderr).contains(reason),
            "{reason}: {bad:?}"
        );
    }
    let other = as_tests(&[BIN, "params", v.mnt_str(), "--seq-cutoff", "never"]);
    assert!(!other.status.success(), "{other:?}");
    let out = stripefs_ok(&["params", v.mnt_str()]);
    assert!(
        out.contains("always") && !out.contains("(changed)"),
        "{out}"
    );
    drop(f);
    v.umount();
}
