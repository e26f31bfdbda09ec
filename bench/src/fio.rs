//! The same test run by fio, on the same file, as a cross-check of the engine's figures.

use crate::engine::{Measured, RunSpec, TestFile};
use crate::profile::{Dir, Job, Pattern};
use std::io;
use std::process::Command;

fn rw(job: &Job, dir: Dir) -> &'static str {
    match (job.pattern, dir) {
        (Pattern::Seq, Dir::Read) => "read",
        (Pattern::Seq, Dir::Write) => "write",
        (Pattern::Seq, Dir::Mixed) => "rw",
        (Pattern::Rand, Dir::Read) => "randread",
        (Pattern::Rand, Dir::Write) => "randwrite",
        (Pattern::Rand, Dir::Mixed) => "randrw",
    }
}

/// Runs fio for one test and reads its JSON output. fio works the way the engine does, so
/// the two should agree: with io_uring, T jobs each keeping Q I/Os in flight through its own
/// ring; with the threads engine, one blocking psync worker per queue slot (Q x T of them);
/// sequential streams spread over the file either way.
pub fn run(file: &TestFile, job: &Job, dir: Dir, spec: &RunSpec) -> io::Result<Measured> {
    let (workers, engine) = if crate::engine::uring_allowed() {
        (
            job.threads,
            // The engine reaps what has completed and submits the refills in one call: fio
            // batching the same way (without it fio enters the kernel once per I/O and, on
            // tmpfs at Q32, measures its own CPU at 0.75x the engine).
            vec![
                "--ioengine=io_uring".to_string(),
                format!("--iodepth={}", job.queue_depth),
                format!("--iodepth_batch_submit={}", job.queue_depth),
                "--iodepth_batch_complete_min=1".to_string(),
                format!("--iodepth_batch_complete_max={}", job.queue_depth),
            ],
        )
    } else {
        (
            job.queue_depth * job.threads,
            vec!["--ioengine=psync".to_string()],
        )
    };
    let mut args = vec![
        format!("--numjobs={workers}"),
        format!(
            "--offset_increment={}",
            file.size / workers as u64 / 4096 * 4096
        ),
        "--thread".into(),
        "--norandommap".into(),
        "--randrepeat=0".into(),
    ];
    args.extend(engine);
    fio(file, job, dir, spec, &args)
}

/// The test as CrystalDiskMark and the published tables run it: libaio, queue depth Q from
/// each of T jobs (direct I/O, so the queue reaches the filesystem).
pub fn run_libaio(file: &TestFile, job: &Job, dir: Dir, spec: &RunSpec) -> io::Result<Measured> {
    fio(
        file,
        job,
        dir,
        spec,
        &[
            format!("--iodepth={}", job.queue_depth),
            format!("--numjobs={}", job.threads),
            "--ioengine=libaio".into(),
            "--norandommap".into(),
            "--randrepeat=0".into(),
        ],
    )
}

fn fio(
    file: &TestFile,
    job: &Job,
    dir: Dir,
    spec: &RunSpec,
    extra: &[String],
) -> io::Result<Measured> {
    let out = Command::new("fio")
        .arg("--name=stripefs")
        .arg(format!("--filename={}", file.path.display()))
        .arg(format!("--size={}", file.size))
        .arg(format!("--rw={}", rw(job, dir)))
        .args(job.mix_read.map(|r| format!("--rwmixread={r}")))
        .arg(format!("--bs={}", job.block_size))
        .args(extra)
        // Random data fixed per buffer, as the engine writes: fio's default scrambling makes
        // every write slightly different and partly compressible, which on compressing
        // storage (zram: SEQ1M write 0.25x) measures the data instead of the I/O.
        .arg("--scramble_buffers=0")
        .arg(format!("--direct={}", u8::from(spec.direct)))
        .arg("--lat_percentiles=1")
        .args(spec.cpus.as_ref().map(|c| format!("--cpus_allowed={c}")))
        // In milliseconds: fio drops a fraction of a second (0.300 is no runtime at all).
        .arg(format!("--runtime={}ms", spec.duration.as_millis().max(1)))
        .args(["--time_based", "--group_reporting", "--output-format=json"])
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("fio: {e} (apt-get install fio)")))?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "fio failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    parse(
        &String::from_utf8_lossy(&out.stdout),
        dir,
        job.block_size as u64,
        spec.direct,
    )
}

/// Reads fio's `--output-format=json`: the read side, the write side, or both for a mixed
/// test (its latency percentiles are the reads', the side most mixed workloads wait on).
pub fn parse(json: &str, dir: Dir, block_size: u64, direct: bool) -> io::Result<Measured> {
    // fio may print notes before the JSON document.
    let start = json.find('{').unwrap_or(0);
    let v: serde_json::Value = serde_json::from_str(&json[start..])
        .map_err(|e| io::Error::other(format!("fio output: {e}")))?;
    let job = &v["jobs"][0];
    let (r, w) = (&job["read"], &job["write"]);
    let sides: Vec<&serde_json::Value> = match dir {
        Dir::Read => vec![r],
        Dir::Write => vec![w],
        Dir::Mixed => vec![r, w],
    };
    let sum = |k: &str| {
        sides
            .iter()
            .map(|s| s[k].as_f64().unwrap_or(0.0))
            .sum::<f64>()
    };
    let side = sides[0];
    let bytes = sides
        .iter()
        .map(|s| s["io_bytes"].as_u64().unwrap_or(0))
        .sum::<u64>();
    let seconds = side["runtime"].as_f64().unwrap_or(0.0) / 1000.0;
    // The mean is of the whole latency (submission and completion), and so are the
    // percentiles where fio gives them (`--lat_percentiles=1`); else the completion's. With
    // libaio on a device that completes at submission (tmpfs), the completion latency alone
    // is a fraction of a microsecond: a p99 below the mean.
    let percentiles = match &side["lat_ns"]["percentile"] {
        serde_json::Value::Object(_) => &side["lat_ns"]["percentile"],
        _ => &side["clat_ns"]["percentile"],
    };
    let pct = |p: &str| percentiles[p].as_f64().unwrap_or(0.0) / 1000.0;
    let ops_of = |s: &serde_json::Value| s["io_bytes"].as_u64().unwrap_or(0) / block_size.max(1);
    let (read_ops, write_ops) = match dir {
        Dir::Read => (ops_of(r), 0),
        Dir::Write => (0, ops_of(w)),
        Dir::Mixed => (ops_of(r), ops_of(w)),
    };
    Ok(Measured {
        bytes,
        ops: bytes / block_size.max(1),
        seconds,
        mb_per_s: sum("bw_bytes") / 1e6,
        iops: sum("iops"),
        mean_us: side["lat_ns"]["mean"].as_f64().unwrap_or(0.0) / 1000.0,
        p50_us: pct("50.000000"),
        p99_us: pct("99.000000"),
        p999_us: pct("99.900000"),
        read_ops,
        write_ops,
        max_in_flight: 0,
        direct,
        io_engine: "fio".into(),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_fio_json() {
        let json = r#"note: both iodepth >= 1 and synchronous I/O engine are selected
{"jobs":[{"read":{"io_bytes":409600,"bw_bytes":2048000,"iops":500.0,"runtime":200,
 "lat_ns":{"mean":2000.0},"clat_ns":{"percentile":{"99.000000":8000}}},
 "write":{"io_bytes":0,"bw_bytes":0,"iops":0.0,"runtime":0,"lat_ns":{"mean":0.0}}}]}"#;
        let m = super::parse(json, crate::profile::Dir::Read, 4096, true).unwrap();
        assert_eq!(m.ops, 100);
        assert_eq!(m.mb_per_s, 2.048);
        assert_eq!(m.mean_us, 2.0);
        assert_eq!(m.p99_us, 8.0);
        assert_eq!(m.seconds, 0.2);
        // With --lat_percentiles=1 the percentiles are of the whole latency, as the mean.
        let json = r#"{"jobs":[{"read":{"io_bytes":4096,"bw_bytes":1,"iops":1.0,"runtime":1,
 "lat_ns":{"mean":9000.0,"percentile":{"99.000000":12000}},
 "clat_ns":{"percentile":{"99.000000":600}}}}]}"#;
        let m = super::parse(json, crate::profile::Dir::Read, 4096, true).unwrap();
        assert_eq!((m.mean_us, m.p99_us), (9.0, 12.0));
    }
}
