//! Results kept as they are measured: each finished test is appended to a CSV file and to a
//! JSON Lines file beside it (`.jsonl`), flushed before the next test starts, so a run that is
//! stopped (Ctrl-C, SIGTERM, a crash) loses nothing it finished. A later run given the same
//! file resumes: rows already there, keyed by their parameters, are not measured again.

use crate::engine::RunSpec;
use crate::report::{csv_row, Target, TestResult, CSV_HEADER};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// One line of the JSON Lines file: a finished test and what it was measured on.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Record {
    /// The row's parameters, as `key` makes them; what a resumed run matches on.
    pub key: String,
    pub baseline: bool,
    /// Test file size, O_DIRECT and the load's CPUs (`--cpus`) of the run.
    pub size: u64,
    pub direct: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<String>,
    /// The target, without results.
    pub target: Target,
    pub result: TestResult,
}

/// The key of a row: everything that makes it a different measurement (the target as labelled
/// and configured, the test, the test file size, I/O mode and the load's CPUs).
pub fn key(t: &Target, baseline: bool, test: &str, direction: &str, run: &RunSpec) -> String {
    let cpus = match &run.cpus {
        Some(c) => format!("|cpus {c}"),
        None => String::new(), // as rows were keyed before --cpus
    };
    format!(
        "{baseline}|{}|{:?}|{:?}|{:?}|{}|{:?}|{}|{test}|{direction}|{}|{}{cpus}",
        t.label,
        t.devices,
        t.stripe_size,
        t.width,
        t.cache.as_deref().unwrap_or("none"),
        t.controller_cache,
        t.emulated.join(";"),
        run.size,
        if run.direct { "direct" } else { "buffered" }
    )
}

/// What a baseline's row must share with a row to be its ratio's denominator.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Conditions {
    size: u64,
    direct: bool,
    cpus: Option<String>,
}

impl Conditions {
    fn of_record(r: &Record) -> Conditions {
        Conditions {
            size: r.size,
            direct: r.direct,
            cpus: r.cpus.clone(),
        }
    }

    fn of_run(run: &RunSpec) -> Conditions {
        Conditions {
            size: run.size,
            direct: run.direct,
            cpus: run.cpus.as_ref().map(|c| c.to_string()),
        }
    }
}

/// The CSV and JSON Lines files of a run, open for appending.
pub struct ResultLog {
    pub csv_path: PathBuf,
    pub jsonl_path: PathBuf,
    csv: File,
    jsonl: File,
    done: HashMap<String, Record>,
    /// Baseline MB/s by test, direction and run conditions, for the ratio column.
    base: HashMap<(String, String, Conditions), f64>,
    /// Rows this run appended.
    pub appended: usize,
}

/// The JSON Lines file beside a CSV file.
pub fn jsonl_beside(csv: &Path) -> PathBuf {
    csv.with_extension("jsonl")
}

/// Cuts a file back to its last complete line (a row half written when the process was
/// killed outright), and returns its text.
fn whole_lines(f: &mut File) -> io::Result<String> {
    let mut bytes = Vec::new();
    f.seek(SeekFrom::Start(0))?;
    f.read_to_end(&mut bytes)?;
    let keep = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    if keep < bytes.len() {
        f.set_len(keep as u64)?;
        bytes.truncate(keep);
    }
    f.seek(SeekFrom::End(0))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

impl ResultLog {
    /// Starts `csv` (and its `.jsonl`) afresh: the header, no rows.
    pub fn create(csv: &Path) -> io::Result<ResultLog> {
        let jsonl_path = jsonl_beside(csv);
        let mut csv_file = File::create(csv)?;
        writeln!(csv_file, "{CSV_HEADER}")?;
        csv_file.sync_data()?;
        let jsonl = File::create(&jsonl_path)?;
        Ok(ResultLog {
            csv_path: csv.to_path_buf(),
            jsonl_path,
            csv: csv_file,
            jsonl,
            done: HashMap::new(),
            base: HashMap::new(),
            appended: 0,
        })
    }

    /// Continues the run that wrote `csv`: its `.jsonl` says which rows are done. A file that
    /// does not exist yet is started afresh.
    pub fn resume(csv: &Path) -> io::Result<ResultLog> {
        let jsonl_path = jsonl_beside(csv);
        if !csv.exists() {
            return ResultLog::create(csv);
        }
        let open = |p: &Path| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(p)
        };
        let mut csv_file = open(csv)?;
        let text = whole_lines(&mut csv_file)?;
        if text.lines().next() != Some(CSV_HEADER) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} is not a CSV of this bench (its header differs)",
                    csv.display()
                ),
            ));
        }
        let mut jsonl = open(&jsonl_path)?;
        let lines = whole_lines(&mut jsonl)?;
        let mut log = ResultLog {
            csv_path: csv.to_path_buf(),
            jsonl_path,
            csv: csv_file,
            jsonl,
            done: HashMap::new(),
            base: HashMap::new(),
            appended: 0,
        };
        let mut records = Vec::new();
        for line in lines.lines().filter(|l| !l.trim().is_empty()) {
            let record: Record = serde_json::from_str(line).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: {e}", log.jsonl_path.display()),
                )
            })?;
            log.remember(record.clone());
            records.push(record);
        }
        let rows = text.lines().count().saturating_sub(1);
        if records.len() == rows + 1 {
            // Killed between the JSON line and its CSV row: the row is written now.
            let r = &records[rows];
            let base = log.base_of(&r.result, Conditions::of_record(r));
            let mut row = csv_row(
                &r.target,
                r.baseline,
                &r.result,
                if r.baseline { None } else { base },
            );
            row.push('\n');
            log.csv.write_all(row.as_bytes())?;
            log.csv.sync_data()?;
        } else if rows != records.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} has {rows} rows but {} has {}: they are not from the same run",
                    csv.display(),
                    log.jsonl_path.display(),
                    records.len()
                ),
            ));
        }
        Ok(log)
    }

    fn remember(&mut self, r: Record) {
        if r.baseline {
            self.base.insert(
                (
                    r.result.test.clone(),
                    r.result.direction.clone(),
                    Conditions::of_record(&r),
                ),
                r.result.median.mb_per_s,
            );
        }
        self.done.insert(r.key.clone(), r);
    }

    /// Rows already measured (by an earlier run, or this one).
    pub fn rows(&self) -> usize {
        self.done.len()
    }

    /// The result of an earlier run for this row, if it has one.
    pub fn done(
        &self,
        t: &Target,
        baseline: bool,
        test: &str,
        direction: &str,
        run: &RunSpec,
    ) -> Option<TestResult> {
        let key = key(t, baseline, test, direction, run);
        // Logs written before 1-device labels were singular key those rows "1 devices".
        let old = || key.replacen("1 device,", "1 devices,", 1);
        self.done
            .get(&key)
            .or_else(|| self.done.get(&old()))
            .map(|r| r.result.clone())
    }

    fn base_of(&self, r: &TestResult, c: Conditions) -> Option<f64> {
        self.base
            .get(&(r.test.clone(), r.direction.clone(), c))
            .copied()
    }

    /// Appends a finished test to both files and flushes them to the disk.
    pub fn append(
        &mut self,
        t: &Target,
        baseline: bool,
        r: &TestResult,
        run: &RunSpec,
    ) -> io::Result<()> {
        let base = self.base_of(r, Conditions::of_run(run));
        let record = Record {
            key: key(t, baseline, &r.test, &r.direction, run),
            baseline,
            size: run.size,
            direct: run.direct,
            cpus: Conditions::of_run(run).cpus,
            target: Target {
                results: Vec::new(),
                ..t.clone()
            },
            result: r.clone(),
        };
        let mut line = serde_json::to_string(&record).map_err(io::Error::other)?;
        line.push('\n');
        // The JSON line first: a row in the CSV always has its record.
        self.jsonl.write_all(line.as_bytes())?;
        self.jsonl.sync_data()?;
        let mut row = csv_row(t, baseline, r, if baseline { None } else { base });
        row.push('\n');
        self.csv.write_all(row.as_bytes())?;
        self.csv.sync_data()?;
        self.appended += 1;
        self.remember(record);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Measured;

    fn result(test: &str, mb: f64) -> TestResult {
        let m = Measured {
            mb_per_s: mb,
            ops: 1,
            ..Measured::default()
        };
        TestResult {
            test: test.into(),
            direction: "read".into(),
            runs: vec![m.clone()],
            median: m.clone(),
            best: m,
            fio: None,
            fio_runs: Vec::new(),
        }
    }

    fn run(size: u64, direct: bool, cpus: Option<crate::CpuList>) -> RunSpec {
        RunSpec {
            size,
            direct,
            cpus,
            ..RunSpec::default()
        }
    }

    #[test]
    fn rows_survive_a_torn_tail_and_resume_by_key() {
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("r.csv");
        let base = Target {
            label: "base".into(),
            ..Target::default()
        };
        let vol = Target {
            label: "vol".into(),
            stripe_size: Some(65536),
            ..Target::default()
        };
        // The run's conditions: 1 MiB test file, O_DIRECT, the load on any CPU.
        let mib = run(1 << 20, true, None);
        {
            let mut log = ResultLog::create(&csv).unwrap();
            log.append(&base, true, &result("SEQ1M Q8T1", 100.0), &mib)
                .unwrap();
            log.append(&vol, false, &result("SEQ1M Q8T1", 150.0), &mib)
                .unwrap();
        }
        let text = std::fs::read_to_string(&csv).unwrap();
        assert_eq!(text.lines().count(), 3);
        assert!(text.lines().nth(2).unwrap().contains(",1.5000,"), "{text}");
        // A process killed mid-row leaves half a line in each file.
        for p in [&csv, &jsonl_beside(&csv)] {
            let mut f = OpenOptions::new().append(true).open(p).unwrap();
            f.write_all(b"\"half a ro").unwrap();
        }
        let mut log = ResultLog::resume(&csv).unwrap();
        assert_eq!(log.rows(), 2);
        assert!(log.done(&vol, false, "SEQ1M Q8T1", "read", &mib).is_some());
        // Another size, another I/O mode, another stripe: other rows.
        assert!(log
            .done(&vol, false, "SEQ1M Q8T1", "read", &run(2 << 20, true, None))
            .is_none());
        assert!(log
            .done(
                &vol,
                false,
                "SEQ1M Q8T1",
                "read",
                &run(1 << 20, false, None)
            )
            .is_none());
        // The load kept to other CPUs: another row.
        let cpu0 = crate::CpuList::parse("0").unwrap();
        assert!(log
            .done(
                &vol,
                false,
                "SEQ1M Q8T1",
                "read",
                &run(1 << 20, true, Some(cpu0))
            )
            .is_none());
        let other = Target {
            stripe_size: Some(8192),
            ..vol.clone()
        };
        assert!(log
            .done(&other, false, "SEQ1M Q8T1", "read", &mib)
            .is_none());
        log.append(&other, false, &result("SEQ1M Q8T1", 50.0), &mib)
            .unwrap();
        drop(log);
        let text = std::fs::read_to_string(&csv).unwrap();
        assert_eq!(text.lines().count(), 4, "{text}");
        assert!(!text.contains("half"), "{text}");
        assert!(text.ends_with('\n'));
        assert!(text.lines().nth(3).unwrap().contains(",0.5000,"), "{text}");
        assert_eq!(ResultLog::resume(&csv).unwrap().rows(), 3);

        // Killed between a JSON line and its CSV row: the row is restored from the line.
        let full = std::fs::read_to_string(&csv).unwrap();
        let cut = full[..full.len() - 1].rfind('\n').unwrap() + 1;
        std::fs::write(&csv, &full[..cut]).unwrap();
        let log = ResultLog::resume(&csv).unwrap();
        assert_eq!(log.rows(), 3);
        drop(log);
        assert_eq!(std::fs::read_to_string(&csv).unwrap(), full);
        // Rows missing from the JSON Lines: not the same run.
        let jl = std::fs::read_to_string(jsonl_beside(&csv)).unwrap();
        std::fs::write(
            jsonl_beside(&csv),
            jl.lines().next().unwrap().to_string() + "\n",
        )
        .unwrap();
        let err = ResultLog::resume(&csv).err().unwrap();
        assert!(err.to_string().contains("not from the same run"), "{err}");
    }

    #[test]
    fn a_row_logged_as_1_devices_is_found_under_its_singular_label() {
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("r.csv");
        let label = |n: &str| Target {
            label: format!("{n}, stripe 64 KiB, width 1, cache none"),
            devices: Some(1),
            ..Target::default()
        };
        let mib = run(1 << 20, true, None);
        ResultLog::create(&csv)
            .unwrap()
            .append(
                &label("1 devices"),
                false,
                &result("SEQ1M Q8T1", 150.0),
                &mib,
            )
            .unwrap();
        let log = ResultLog::resume(&csv).unwrap();
        let found = log.done(&label("1 device"), false, "SEQ1M Q8T1", "read", &mib);
        assert_eq!(found.map(|r| r.median.mb_per_s), Some(150.0));
        let other = log.done(&label("2 devices"), false, "SEQ1M Q8T1", "read", &mib);
        assert!(other.is_none());
    }

    #[test]
    fn resume_refuses_a_foreign_csv() {
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("other.csv");
        std::fs::write(&csv, "a,b\n1,2\n").unwrap();
        let err = ResultLog::resume(&csv).err().unwrap();
        assert!(err.to_string().contains("header differs"), "{err}");
    }
}
