//! The cleaner's settings as the `cleaner` control key reads and takes them: one line of
//! `key=value` words (`policy=alru wake_up=1s staleness=30s flush_max_buffers=128
//! activity_threshold=0s dirty_ratio_threshold=80 dirty_ratio_inertia=128M max_mbps=0`).

use super::words::words;
use cache::{Cleaner, CleaningPolicy};
use std::time::Duration;

fn duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// The settings, in the form `parse` takes.
pub fn format(c: &Cleaner) -> String {
    format!(
        "policy={} wake_up={} staleness={} flush_max_buffers={} activity_threshold={} \
         dirty_ratio_threshold={} dirty_ratio_inertia={} max_mbps={}",
        c.policy.name(),
        duration(c.wake_up),
        duration(c.staleness),
        c.flush_max_buffers,
        duration(c.activity_threshold),
        c.dirty_ratio_threshold,
        mountcfg::format_size(c.dirty_ratio_inertia),
        c.max_mbps
    )
}

/// `base` with the settings of `spec` changed. A new policy without `wake_up` takes that
/// policy's default wake-up (alru 1 s, acp 10 ms).
pub fn parse(spec: &str, base: &Cleaner) -> Result<Cleaner, String> {
    let mut c = base.clone();
    let mut wake_up = None;
    for w in words(spec)? {
        match w.key.as_str() {
            "policy" => {
                let p = CleaningPolicy::parse(w.value)
                    .ok_or_else(|| w.bad("must be alru, acp or nop"))?;
                if p != c.policy {
                    let fresh = if p == CleaningPolicy::Acp {
                        Cleaner::acp()
                    } else {
                        Cleaner::alru()
                    };
                    c.wake_up = fresh.wake_up;
                    c.policy = p;
                }
            }
            "wake_up" => {
                let t = w.duration()?;
                wake_up = Some(if t.is_zero() {
                    Duration::from_millis(10)
                } else {
                    t
                });
            }
            "staleness" => c.staleness = w.duration()?,
            "activity_threshold" => c.activity_threshold = w.duration()?,
            "flush_max_buffers" => {
                c.flush_max_buffers = w.number(1, 65536, "must be from 1 to 65536 lines")? as usize
            }
            "dirty_ratio_threshold" => {
                c.dirty_ratio_threshold =
                    w.number(0, 100, "must be a percent from 0 to 100 (100: off)")? as u8
            }
            "dirty_ratio_inertia" => c.dirty_ratio_inertia = w.size()?,
            "max_mbps" => {
                c.max_mbps = w.number(0, 1_000_000, "must be from 0 (no limit) to 1000000 MB/s")?
            }
            _ => {
                return Err(format!(
                    "unknown setting \"{}\": policy, wake_up, staleness, flush_max_buffers, \
                     activity_threshold, dirty_ratio_threshold, dirty_ratio_inertia, max_mbps",
                    w.key
                ))
            }
        }
    }
    if let Some(w) = wake_up {
        c.wake_up = w;
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_read_back_as_they_are_given() {
        let base = Cleaner::alru();
        assert_eq!(parse(&format(&base), &base).unwrap(), base);
        let c = parse(
            "policy=acp flush-max-buffers=64 max_mbps=200 dirty_ratio_inertia=64M",
            &base,
        )
        .unwrap();
        assert_eq!(c.policy, CleaningPolicy::Acp);
        assert_eq!(c.wake_up, Duration::from_millis(10), "acp's own default");
        assert_eq!((c.flush_max_buffers, c.max_mbps), (64, 200));
        assert_eq!(c.dirty_ratio_inertia, 64 << 20);
        assert_eq!(parse(&format(&c), &base).unwrap(), c);
        let c = parse("policy=alru wake_up=5s activity_threshold=250ms", &c).unwrap();
        assert_eq!(c.wake_up, Duration::from_secs(5));
        assert_eq!(c.activity_threshold, Duration::from_millis(250));
        assert!(format(&c).contains("activity_threshold=250ms"));
        for bad in [
            "policy=lazy",
            "flush_max_buffers=0",
            "dirty_ratio_threshold=101",
            "wake_up=soon",
            "speed=3",
            "policy",
        ] {
            assert!(parse(bad, &base).is_err(), "{bad}");
        }
    }
}
