//! Workloads: CrystalDiskMark's profiles and custom ones.

use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    Seq,
    Rand,
}

/// Which way a test's I/Os go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dir {
    Read,
    Write,
    /// Reads and writes mixed, `Job::mix_read` percent reads (fio's rwmixread).
    Mixed,
}

impl Dir {
    /// Every direction, in the order tests run (as CrystalDiskMark: reads first).
    pub const ALL: [Dir; 3] = [Dir::Read, Dir::Write, Dir::Mixed];

    pub fn name(self) -> &'static str {
        match self {
            Dir::Read => "read",
            Dir::Write => "write",
            Dir::Mixed => "mixed",
        }
    }
}

/// One workload, run once as a read test and once as a write test (or only as `only`), or as
/// one mixed test (`mix_read`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Job {
    pub pattern: Pattern,
    pub block_size: usize,
    /// I/Os kept in flight per thread.
    pub queue_depth: usize,
    pub threads: usize,
    /// `Some(true)`: read only, `Some(false)`: write only, `None`: both.
    pub only: Option<bool>,
    /// A mixed test with this percent of reads (then `only` is not used).
    pub mix_read: Option<u8>,
}

impl Job {
    pub const fn new(
        pattern: Pattern,
        block_size: usize,
        queue_depth: usize,
        threads: usize,
    ) -> Job {
        Job {
            pattern,
            block_size,
            queue_depth,
            threads,
            only: None,
            mix_read: None,
        }
    }

    /// CrystalDiskMark's name: `SEQ1M Q8T1`, `RND4K Q32T1`.
    pub fn name(&self) -> String {
        let kind = match self.pattern {
            Pattern::Seq => "SEQ",
            Pattern::Rand => "RND",
        };
        let mix = self
            .mix_read
            .map(|r| format!(" R{r}W{}", 100 - r))
            .unwrap_or_default();
        format!(
            "{kind}{} Q{}T{}{mix}",
            size_name(self.block_size),
            self.queue_depth,
            self.threads
        )
    }

    /// The directions this job runs.
    pub fn directions(&self) -> Vec<Dir> {
        if self.mix_read.is_some() {
            return vec![Dir::Mixed];
        }
        match self.only {
            Some(true) => vec![Dir::Read],
            Some(false) => vec![Dir::Write],
            None => vec![Dir::Read, Dir::Write],
        }
    }
}

fn size_name(bytes: usize) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{}M", bytes >> 20)
    } else if bytes.is_multiple_of(1024) {
        format!("{}K", bytes >> 10)
    } else {
        bytes.to_string()
    }
}

const K: usize = 1024;
const M: usize = 1024 * 1024;

/// CrystalDiskMark 8's default set.
pub fn cdm8() -> Vec<Job> {
    vec![
        Job::new(Pattern::Seq, M, 8, 1),
        Job::new(Pattern::Seq, M, 1, 1),
        Job::new(Pattern::Rand, 4 * K, 32, 1),
        Job::new(Pattern::Rand, 4 * K, 1, 1),
    ]
}

/// CrystalDiskMark 6's set, the one the seeds quote.
pub fn cdm6() -> Vec<Job> {
    vec![
        Job::new(Pattern::Seq, 128 * K, 32, 1),
        Job::new(Pattern::Rand, 4 * K, 8, 8),
        Job::new(Pattern::Rand, 4 * K, 32, 1),
        Job::new(Pattern::Rand, 4 * K, 1, 1),
    ]
}

/// `cdm8`, `cdm6`, or `custom:rw=randread,bs=16K,qd=4,threads=2`.
pub fn parse(spec: &str) -> Result<Vec<Job>, String> {
    match spec {
        "cdm8" | "cdm" | "default" => return Ok(cdm8()),
        "cdm6" => return Ok(cdm6()),
        _ => {}
    }
    let Some(params) = spec.strip_prefix("custom:") else {
        return Err(format!(
            "unknown profile \"{spec}\": use cdm8, cdm6 or custom:rw=randread,bs=16K,qd=4,threads=2"
        ));
    };
    let mut job = Job::new(Pattern::Rand, 4 * K, 1, 1);
    for kv in params.split(',').filter(|s| !s.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("\"{kv}\" is not key=value"))?;
        let number = |v: &str| -> Result<usize, String> {
            v.parse::<usize>()
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(|| format!("{k}={v}: must be a whole number from 1"))
        };
        match k {
            "rw" => {
                let (pattern, only) = match v {
                    "read" => (Pattern::Seq, Some(true)),
                    "write" => (Pattern::Seq, Some(false)),
                    "randread" => (Pattern::Rand, Some(true)),
                    "randwrite" => (Pattern::Rand, Some(false)),
                    "seq" => (Pattern::Seq, None),
                    "rand" => (Pattern::Rand, None),
                    "rw" | "readwrite" => (Pattern::Seq, None),
                    "randrw" => (Pattern::Rand, None),
                    _ => {
                        return Err(format!(
                            "rw={v}: must be read, write, randread, randwrite, seq, rand, rw \
                             or randrw"
                        ))
                    }
                };
                job.pattern = pattern;
                job.only = only;
                if matches!(v, "rw" | "readwrite" | "randrw") {
                    job.mix_read = Some(job.mix_read.unwrap_or(50));
                }
            }
            "rwmixread" => {
                let n = v
                    .parse::<u8>()
                    .ok()
                    .filter(|n| (1..=99).contains(n))
                    .ok_or_else(|| format!("rwmixread={v}: must be a percent from 1 to 99"))?;
                job.mix_read = Some(n);
            }
            "bs" => job.block_size = parse_size(v).ok_or_else(|| format!("bs={v}: not a size"))?,
            "qd" => job.queue_depth = number(v)?,
            "threads" => job.threads = number(v)?,
            _ => {
                return Err(format!(
                    "unknown key \"{k}\" (rw, bs, qd, threads, rwmixread)"
                ))
            }
        }
    }
    if job.block_size == 0 || !job.block_size.is_multiple_of(512) || job.block_size > 64 * M {
        return Err(format!(
            "bs={}: must be a multiple of 512 up to 64M",
            job.block_size
        ));
    }
    if job.mix_read.is_some() && job.only.is_some() {
        return Err("rwmixread goes with rw=randrw or rw=rw".into());
    }
    if job.queue_depth * job.threads > 1024 {
        return Err("qd x threads must be at most 1024".into());
    }
    Ok(vec![job])
}

/// "4K", "1M", "131072".
pub fn parse_size(text: &str) -> Option<usize> {
    let t = text.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let n: usize = t[..digits].parse().ok()?;
    let mult = match t[digits..].to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => K,
        "M" | "MB" | "MIB" => M,
        "G" | "GB" | "GIB" => 1024 * M,
        _ => return None,
    };
    n.checked_mul(mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_crystaldiskmark() {
        let names: Vec<String> = cdm8().iter().map(Job::name).collect();
        assert_eq!(
            names,
            ["SEQ1M Q8T1", "SEQ1M Q1T1", "RND4K Q32T1", "RND4K Q1T1"]
        );
        let names: Vec<String> = cdm6().iter().map(Job::name).collect();
        assert_eq!(
            names,
            ["SEQ128K Q32T1", "RND4K Q8T8", "RND4K Q32T1", "RND4K Q1T1"]
        );
    }

    #[test]
    fn custom_profiles() {
        let j = parse("custom:rw=randread,bs=16K,qd=4,threads=2").unwrap();
        assert_eq!(j[0].name(), "RND16K Q4T2");
        assert_eq!(j[0].directions(), vec![Dir::Read]);
        assert_eq!(
            parse("custom:rw=seq,bs=1M").unwrap()[0].directions(),
            vec![Dir::Read, Dir::Write]
        );
        let m = parse("custom:rw=randrw,rwmixread=70,bs=4K,qd=16").unwrap();
        assert_eq!(m[0].directions(), vec![Dir::Mixed]);
        assert_eq!(m[0].name(), "RND4K Q16T1 R70W30");
        assert_eq!(
            parse("custom:rw=randrw").unwrap()[0].mix_read,
            Some(50),
            "fio's default"
        );
        for bad in [
            "custom:rw=sideways",
            "custom:bs=3",
            "custom:qd=0",
            "custom:colour=red",
            "custom:rw=randread,rwmixread=70",
            "custom:rw=randrw,rwmixread=100",
            "cdm9",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
