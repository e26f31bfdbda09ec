//! POSIX conformance (pjdfstest) and data integrity (fsx) over a mounted striped volume.
//! Both tools come from crates.io (`cargo install pjdfstest fsx`); `scripts/test.sh` installs
//! them and creates the users pjdfstest switches to.

mod common;

use common::*;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

fn tool(name: &str) -> PathBuf {
    let candidates = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain(std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo/bin")));
    for dir in candidates {
        let p = dir.join(name);
        if p.is_file() {
            return p;
        }
    }
    panic!("{name} is not installed: run scripts/test.sh, or `cargo install pjdfstest fsx`");
}

/// Parses "Summary: 0 failed, 16 skipped, 382 passed, ..." into (failed, skipped, passed).
fn summary(text: &str) -> Option<(u32, u32, u32)> {
    let line = text.lines().find(|l| l.starts_with("Summary:"))?;
    let num = |word: &str| -> Option<u32> {
        let at = line.find(word)?;
        line[..at]
            .trim_end()
            .rsplit([' ', ','])
            .next()?
            .parse()
            .ok()
    };
    Some((num(" failed")?, num(" skipped")?, num(" passed")?))
}

/// A small write-back cache that must evict and clean all the time.
const TINY_WB_CACHE: &str = "[cache]\nsize = \"256K\"\nline_size = \"16K\"\nmode = \"wb\"\n\
    [cache.cleaner]\nstaleness = \"100ms\"\nwake_up = \"50ms\"\ndirty_high = 0.5\n";

#[test]
fn pjdfstest_has_no_failures() {
    pjdfstest_on("");
}

#[test]
fn pjdfstest_has_no_failures_with_a_write_back_cache() {
    pjdfstest_on(TINY_WB_CACHE);
}

fn pjdfstest_on(extra: &str) {
    let pjdfstest = tool("pjdfstest");
    for user in ["tests", "nobody"] {
        let known = Command::new("id")
            .arg(user)
            .output()
            .map(|o| o.status.success());
        assert_eq!(
            known.ok(),
            Some(true),
            "user {user} is missing: scripts/test.sh creates it"
        );
    }
    let mut v = TestVolume::new(3, "8K", &format!("[mount]\nallow_other = true\n{extra}"));
    v.mount();
    let config = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/pjdfstest.toml");
    let run = |names: &[String]| {
        let out = run_with_timeout(
            Command::new(&pjdfstest)
                .arg("-c")
                .arg(&config)
                .arg("-p")
                .arg(&v.mnt)
                .args(if names.is_empty() {
                    vec![]
                } else {
                    vec!["-e".to_string()]
                })
                .args(names)
                .current_dir(&v.mnt),
            Duration::from_secs(900),
        );
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    };
    // A failed test with the lines pjdfstest prints under it (the reason).
    let failures = |text: &str| -> Vec<(String, String)> {
        let lines: Vec<&str> = text.lines().collect();
        lines
            .iter()
            .enumerate()
            .filter(|(_, l)| l.trim_end().ends_with("FAILED"))
            .map(|(i, l)| {
                let name = l.split_whitespace().next().unwrap_or("").to_string();
                let why = lines[i + 1..]
                    .iter()
                    .take(2)
                    .copied()
                    .collect::<Vec<_>>()
                    .join(" / ");
                (name, why)
            })
            .collect()
    };
    let text = run(&[]);
    let (failed, skipped, passed) =
        summary(&text).unwrap_or_else(|| panic!("no summary in:\n{text}"));
    eprintln!(
        "pjdfstest{}: {failed} failed, {skipped} skipped, {passed} passed",
        if extra.is_empty() { "" } else { " (cache)" }
    );
    // open::etxtbsy fails now and then when the machine is loaded (5 in 150 runs beside a busy
    // fsx; never alone, never on ext4): a failure is run again, twice, before it counts.
    let mut left = failures(&text);
    for _ in 0..2 {
        if left.is_empty() {
            break;
        }
        for (name, why) in &left {
            eprintln!("pjdfstest: {name} failed ({why}); running it again");
        }
        let names: Vec<String> = left.iter().map(|f| f.0.clone()).collect();
        left = failures(&run(&names));
    }
    assert!(left.is_empty(), "pjdfstest failures: {left:?}");
    // The same config on ext4 here: 0 failed, 15 skipped, 383 passed. The one more skip is
    // link::link_count_max: glibc knows no LINK_MAX for FUSE.
    assert!(passed >= 380, "only {passed} passed:\n{text}");
}

#[test]
fn fsx_runs_without_a_miscompare() {
    fsx_on("");
}

#[test]
fn fsx_runs_over_a_tiny_write_back_cache() {
    fsx_on(TINY_WB_CACHE);
}

/// fsx operations per run: 100k, or `STRIPEFS_FSX_OPS` (the CI's second and third passes
/// run fewer; `STRIPEFS_LONG=1` runs a million).
fn fsx_ops() -> String {
    match std::env::var("STRIPEFS_FSX_OPS") {
        Ok(n) if n.parse::<u64>().is_ok() => n,
        _ if std::env::var("STRIPEFS_LONG").is_ok_and(|v| v == "1") => "1000000".into(),
        _ => "100000".into(),
    }
}

fn fsx_on(extra: &str) {
    let fsx = tool("fsx");
    let mut v = TestVolume::new(3, "8K", extra);
    v.mount();
    let out = run_with_timeout(
        Command::new(fsx)
            .args(["-N", &fsx_ops(), "-S", "20261201", "-P"])
            .arg(v.root.path())
            .arg(v.path("fsx.data"))
            .current_dir(&v.mnt),
        Duration::from_secs(
            1500 * fsx_ops()
                .parse::<u64>()
                .unwrap_or(100_000)
                .div_ceil(100_000),
        ),
    );
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    eprintln!("fsx: {}", text.lines().last().unwrap_or(""));
    assert!(
        out.status.success() && text.contains("All operations completed A-OK"),
        "fsx:\n{text}"
    );
}
