//! The device model: up to `queue` I/Os are in service at once; each pays `access` (a seek and
//! rotation for a disk, the flash latency for an SSD) unless it continues the previous I/O
//! sequentially, then moves its bytes over the device's one transfer pipe at `read_bps` or
//! `write_bps`. A random I/O also takes a turn of the drive's own processor when the model
//! caps random IOPS (a flash controller's published 4K figure), so deep queues of small random
//! I/O stop where the drive's data sheet says, not where its transfer rate would.

use std::time::Duration;

#[derive(Clone, Debug, PartialEq)]
pub struct DeviceModel {
    /// Profile name, shown in reports ("hdd-5400", "custom", ...).
    pub name: String,
    pub read_bps: f64,
    pub write_bps: f64,
    pub access: Duration,
    pub queue: usize,
    /// Random (non-sequential) reads per second the drive's processor completes at most.
    pub read_iops: Option<f64>,
    pub write_iops: Option<f64>,
}

impl DeviceModel {
    /// The profiles the seeds measured: HDD 5400 rpm about 61/60 MB/s and a seek per random
    /// access; SATA SSD (Intel S3520) about 445/392 MB/s, its random 4K capped at the data
    /// sheet's 67,500 read / 17,000 write IOPS; NVMe about 1397/713 MB/s.
    pub fn profile(name: &str) -> Option<DeviceModel> {
        let (r, w, access_us, queue, iops) = match name {
            "hdd-5400" => (61.0, 60.0, 12_000, 1, None),
            "sata-ssd" => (445.0, 392.0, 60, 32, Some((67_500.0, 17_000.0))),
            "nvme" => (1397.0, 713.0, 20, 64, None),
            // A 3 Gb/s SATA port with an ACARD RAM disk behind it, the seed's per-port figures.
            "sata-port" => (175.8, 146.6, 10, 32, None),
            _ => return None,
        };
        Some(DeviceModel {
            name: name.to_string(),
            read_bps: r * 1e6,
            write_bps: w * 1e6,
            access: Duration::from_micros(access_us),
            queue,
            read_iops: iops.map(|i| i.0),
            write_iops: iops.map(|i| i.1),
        })
    }

    pub fn profile_names() -> &'static [&'static str] {
        &["hdd-5400", "sata-ssd", "nvme", "sata-port"]
    }

    /// One line for reports: `hdd-5400 (emulated: 61/60 MB/s, 12ms access, queue 1)`.
    pub fn describe(&self) -> String {
        let iops = match (self.read_iops, self.write_iops) {
            (None, None) => String::new(),
            (r, w) => {
                let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
                format!(", random {}/{} IOPS", f(r), f(w))
            }
        };
        format!(
            "{} (emulated: {:.1}/{:.1} MB/s, {:?} access, queue {}{iops})",
            self.name,
            self.read_bps / 1e6,
            self.write_bps / 1e6,
            self.access,
            self.queue
        )
    }
}

/// Where the virtual device stands: when each service slot and the transfer pipe free up, and
/// where the last I/O ended (to tell sequential from random).
#[derive(Debug)]
pub struct ModelState {
    slots: Vec<Duration>,
    pipe_free: Duration,
    /// When the drive's processor takes its next random I/O (IOPS-capped models).
    ops_free: Duration,
    last_end: Option<(u64, u64)>,
}

impl ModelState {
    pub fn new(model: &DeviceModel) -> ModelState {
        ModelState {
            slots: vec![Duration::ZERO; model.queue.max(1)],
            pipe_free: Duration::ZERO,
            ops_free: Duration::ZERO,
            last_end: None,
        }
    }

    /// Completion time (on a clock that starts at zero) of an I/O of `len` bytes at `offset`
    /// of object `object`, submitted at `now`.
    pub fn schedule(
        &mut self,
        model: &DeviceModel,
        now: Duration,
        write: bool,
        object: u64,
        offset: u64,
        len: u64,
    ) -> Duration {
        let (slot, free) = self
            .slots
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|&(_, t)| t)
            .expect("at least one slot");
        let start = free.max(now);
        let sequential = self.last_end == Some((object, offset));
        let cap = if write {
            model.write_iops
        } else {
            model.read_iops
        };
        let start = match cap {
            Some(iops) if !sequential && iops > 0.0 => {
                let turn = start.max(self.ops_free);
                self.ops_free = turn + Duration::from_secs_f64(1.0 / iops);
                turn
            }
            _ => start,
        };
        let ready = if sequential {
            start
        } else {
            start + model.access
        };
        let bps = if write {
            model.write_bps
        } else {
            model.read_bps
        };
        let transfer = Duration::from_secs_f64(len as f64 / bps);
        let done = ready.max(self.pipe_free) + transfer;
        self.pipe_free = done;
        self.slots[slot] = done;
        self.last_end = Some((object, offset + len));
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1_000_000;

    #[test]
    fn hdd_streams_at_its_rate_and_seeks_on_random_access() {
        let m = DeviceModel::profile("hdd-5400").unwrap();
        let mut s = ModelState::new(&m);
        // 100 sequential 1 MB reads, each submitted when the last completes (Q1).
        let mut t = Duration::ZERO;
        for i in 0..100 {
            t = s.schedule(&m, t, false, 1, i * MB, MB);
        }
        let rate = 100.0 * MB as f64 / t.as_secs_f64() / 1e6;
        assert!((rate - 61.0).abs() < 1.5, "sequential read {rate} MB/s");
        // Random 4K reads at Q1: one access each, so about 80 IOPS.
        let mut s = ModelState::new(&m);
        let mut t = Duration::ZERO;
        for i in 0..100u64 {
            t = s.schedule(&m, t, false, 1, (i * 7919 % 1000) * 1_000_000, 4096);
        }
        let iops = 100.0 / t.as_secs_f64();
        assert!((75.0..85.0).contains(&iops), "random read {iops} IOPS");
        // A queue of 32 does not help a one-actuator disk.
        let mut s = ModelState::new(&m);
        let done: Vec<Duration> = (0..32u64)
            .map(|i| s.schedule(&m, Duration::ZERO, false, 1, i * 10 * MB, 4096))
            .collect();
        assert!(done[31] >= m.access * 32);
    }

    #[test]
    fn ssd_overlaps_accesses_up_to_its_queue_but_shares_bandwidth() {
        let m = DeviceModel {
            read_iops: None,
            write_iops: None,
            ..DeviceModel::profile("sata-ssd").unwrap()
        };
        let mut s = ModelState::new(&m);
        // 32 random 4K reads submitted together pay one access time, not 32: then the pipe.
        let done = (0..32u64)
            .map(|i| s.schedule(&m, Duration::ZERO, false, 1, i * MB, 4096))
            .max()
            .unwrap();
        let want = m.access.as_secs_f64() + 32.0 * 4096.0 / 445e6;
        assert!((done.as_secs_f64() - want).abs() / want < 0.05, "{done:?}");
        assert!(done < m.access * 32);
        // Bandwidth is shared: 32 concurrent 1 MB writes take 32 MB / 392 MB/s.
        let mut s = ModelState::new(&m);
        let done = (0..32u64)
            .map(|i| s.schedule(&m, Duration::ZERO, true, 1, i * MB, MB))
            .max()
            .unwrap();
        let want = 32.0 * MB as f64 / 392e6;
        assert!((done.as_secs_f64() - want).abs() / want < 0.05, "{done:?}");
    }

    #[test]
    fn random_4k_stops_at_the_published_iops_of_the_sata_ssd() {
        let m = DeviceModel::profile("sata-ssd").unwrap();
        // 3200 random 4K I/Os at queue depth 32: each submitted when a slot frees up.
        for (write, iops) in [(false, 67_500.0), (true, 17_000.0)] {
            let mut s = ModelState::new(&m);
            let mut inflight: Vec<Duration> = vec![Duration::ZERO; 32];
            let mut end = Duration::ZERO;
            for i in 0..3200u64 {
                let k = (i % 32) as usize;
                inflight[k] = s.schedule(&m, inflight[k], write, 1, (i * 7919 % 5000) * MB, 4096);
                end = end.max(inflight[k]);
            }
            let got = 3200.0 / end.as_secs_f64();
            assert!((got - iops).abs() / iops < 0.05, "{write}: {got} IOPS");
        }
        // Sequential I/O is not capped by the random figure.
        let mut s = ModelState::new(&m);
        let t = (0..100u64).fold(Duration::ZERO, |t, i| {
            s.schedule(&m, t, false, 1, i * 4096, 4096)
        });
        assert!(100.0 / t.as_secs_f64() > 100_000.0);
    }

    #[test]
    fn every_profile_name_resolves() {
        for name in DeviceModel::profile_names() {
            assert!(DeviceModel::profile(name).is_some(), "{name}");
        }
        assert!(DeviceModel::profile("floppy").is_none());
    }
}
