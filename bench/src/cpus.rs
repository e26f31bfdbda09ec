//! The CPUs a run's load may use (`--cpus`), written as fio's `cpus_allowed` and taskset take
//! them: `0`, `0-3`, `0,2-3`. Where requests are served matters to a FUSE volume: FUSE over
//! io_uring serves a request on its CPU's queue, and a load that stays on one CPU keeps every
//! request and reply there, where one the scheduler moves about crosses CPUs on each.

use serde::Serialize;
use std::fmt;
use std::io;

/// A set of CPUs, ascending, none twice.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(into = "String")]
pub struct CpuList(Vec<usize>);

impl CpuList {
    /// Parses `spec` and checks that this process may run on every CPU in it.
    pub fn parse(spec: &str) -> Result<CpuList, String> {
        let list = Self::parse_syntax(spec)?;
        let allowed = allowed_cpus().map_err(|e| format!("sched_getaffinity: {e}"))?;
        let refused: Vec<usize> = list
            .0
            .iter()
            .copied()
            .filter(|c| !allowed.contains(c))
            .collect();
        if !refused.is_empty() {
            return Err(format!(
                "{spec}: CPU {} not available here (this process may use {})",
                CpuList(refused),
                CpuList(allowed)
            ));
        }
        Ok(list)
    }

    fn parse_syntax(spec: &str) -> Result<CpuList, String> {
        let bad = |why: &str| format!("{spec}: {why} (write CPUs as 0, 0-3 or 0,2-3)");
        let mut set = vec![false; libc::CPU_SETSIZE as usize];
        for part in spec.split(',').map(str::trim) {
            // Digits only: no sign, no other script's digits.
            let number = |s: &str| match s.trim() {
                n if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => n
                    .parse::<usize>()
                    .map_err(|_| bad("a CPU past the kernel's CPU set")),
                _ => Err(bad("not a CPU number")),
            };
            let (first, last) = match part.split_once('-') {
                Some((a, b)) => (number(a)?, number(b)?),
                None => (number(part)?, number(part)?),
            };
            if first > last {
                return Err(bad("a range that runs backwards"));
            }
            if last >= set.len() {
                return Err(bad("a CPU past the kernel's CPU set"));
            }
            set[first..=last].fill(true);
        }
        Ok(CpuList((0..set.len()).filter(|&c| set[c]).collect()))
    }

    pub fn cpus(&self) -> &[usize] {
        &self.0
    }

    /// Keeps the calling thread on these CPUs.
    pub fn pin_this_thread(&self) -> io::Result<()> {
        // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET stays inside it (checked at
        // parse against CPU_SETSIZE).
        let set = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &c in &self.0 {
                libc::CPU_SET(c, &mut set);
            }
            set
        };
        // SAFETY: pid 0 is the calling thread; the set is a valid cpu_set_t of its own size.
        let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// The CPUs the calling thread may run on.
fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: as in `pin_this_thread`; the kernel fills the set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect())
    }
}

/// Ranges where CPUs follow each other: `0-3,6`, as it was written.
impl fmt::Display for CpuList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut i = 0;
        while i < self.0.len() {
            let mut j = i;
            while j + 1 < self.0.len() && self.0[j + 1] == self.0[j] + 1 {
                j += 1;
            }
            if i > 0 {
                f.write_str(",")?;
            }
            match j > i {
                true => write!(f, "{}-{}", self.0[i], self.0[j])?,
                false => write!(f, "{}", self.0[i])?,
            }
            i = j + 1;
        }
        Ok(())
    }
}

impl From<CpuList> for String {
    fn from(c: CpuList) -> String {
        c.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_read_as_fio_writes_them_and_print_back() {
        for (spec, cpus, shown) in [
            ("0", vec![0], "0"),
            ("0-3", vec![0, 1, 2, 3], "0-3"),
            ("3,0-1, 1", vec![0, 1, 3], "0-1,3"),
            ("2-2", vec![2], "2"),
        ] {
            let l = CpuList::parse_syntax(spec).unwrap();
            assert_eq!(l.cpus(), cpus, "{spec}");
            assert_eq!(l.to_string(), shown, "{spec}");
        }
        for bad in [
            "",
            "a",
            "1-",
            "3-1",
            "0,,1",
            "99999",
            "+0",
            "0-99999999999999999999",
        ] {
            let e = CpuList::parse_syntax(bad).unwrap_err();
            assert!(e.starts_with(bad) && e.contains("0-3"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_cpu_this_process_may_not_use_is_refused_by_name() {
        let allowed = allowed_cpus().unwrap();
        let first = allowed[0];
        assert_eq!(CpuList::parse(&first.to_string()).unwrap().cpus(), [first]);
        let absent = (0..libc::CPU_SETSIZE as usize)
            .find(|c| !allowed.contains(c))
            .unwrap();
        let e = CpuList::parse(&format!("{first},{absent}")).unwrap_err();
        assert!(e.contains(&format!("CPU {absent} not available")), "{e}");
    }

    #[test]
    fn a_pinned_thread_runs_only_on_its_cpus() {
        let first = allowed_cpus().unwrap()[0];
        let list = CpuList::parse(&first.to_string()).unwrap();
        let seen = std::thread::spawn(move || {
            list.pin_this_thread().unwrap();
            // SAFETY: plain libc call.
            (allowed_cpus().unwrap(), unsafe { libc::sched_getcpu() })
        })
        .join()
        .unwrap();
        assert_eq!(seen, (vec![first], first as i32));
    }
}
