//! Emulated devices: a backing directory made to behave like an HDD, a SATA SSD or an NVMe
//! drive, for experiments on one machine. Each data I/O is given a completion time by a model
//! and the caller waits until then, after doing the real I/O.
//!
//! The model: up to `queue` I/Os are in service at once; each pays `access` (a seek and
//! rotation for a disk, the flash latency for an SSD) unless it continues the previous I/O
//! sequentially, then moves its bytes over the device's one transfer pipe at `read_bps` or
//! `write_bps`.

use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Clone, Debug, PartialEq)]
pub struct DeviceModel {
    /// Profile name, shown in reports ("hdd-5400", "custom", ...).
    pub name: String,
    pub read_bps: f64,
    pub write_bps: f64,
    pub access: Duration,
    pub queue: usize,
}

impl DeviceModel {
    /// The profiles the seeds measured: HDD 5400 rpm about 61/60 MB/s and a seek per random
    /// access; SATA SSD about 445/392 MB/s; NVMe about 1397/713 MB/s.
    pub fn profile(name: &str) -> Option<DeviceModel> {
        let (r, w, access_us, queue) = match name {
            "hdd-5400" => (61.0, 60.0, 12_000, 1),
            "sata-ssd" => (445.0, 392.0, 60, 32),
            "nvme" => (1397.0, 713.0, 20, 64),
            // A 3 Gb/s SATA port with a RAM disk behind it, as in the RAID-card experiment.
            "sata-port" => (175.0, 146.0, 10, 32),
            _ => return None,
        };
        Some(DeviceModel {
            name: name.to_string(),
            read_bps: r * 1e6,
            write_bps: w * 1e6,
            access: Duration::from_micros(access_us),
            queue,
        })
    }

    pub fn profile_names() -> &'static [&'static str] {
        &["hdd-5400", "sata-ssd", "nvme", "sata-port"]
    }

    /// One line for reports: `hdd-5400 (emulated: 61/60 MB/s, 12ms access, queue 1)`.
    pub fn describe(&self) -> String {
        format!(
            "{} (emulated: {:.0}/{:.0} MB/s, {:?} access, queue {})",
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
    last_end: Option<(u64, u64)>,
}

impl ModelState {
    pub fn new(model: &DeviceModel) -> ModelState {
        ModelState {
            slots: vec![Duration::ZERO; model.queue.max(1)],
            pipe_free: Duration::ZERO,
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

/// A model applied to one real device, on the wall clock.
pub struct Emulated {
    pub model: DeviceModel,
    state: Mutex<ModelState>,
    epoch: Instant,
}

impl Emulated {
    pub fn new(model: DeviceModel) -> Emulated {
        Emulated {
            state: Mutex::new(ModelState::new(&model)),
            model,
            epoch: Instant::now(),
        }
    }

    /// Books the I/O and returns when the emulated device would have finished it.
    pub fn book(&self, write: bool, object: u64, offset: u64, len: u64) -> Instant {
        let now = self.epoch.elapsed();
        let done = self
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .schedule(&self.model, now, write, object, offset, len);
        self.epoch + done
    }
}

/// A cache store on an emulated fast device (one file: object 0).
impl cache::Throttle for Emulated {
    fn book(&self, write: bool, offset: u64, len: u64) -> Instant {
        Emulated::book(self, write, 0, offset, len)
    }

    fn describe(&self) -> String {
        self.model.describe()
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
        let m = DeviceModel::profile("sata-ssd").unwrap();
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
    fn wall_clock_booking_waits_roughly_the_model_time() {
        let m = DeviceModel {
            name: "custom".into(),
            read_bps: 100e6,
            write_bps: 100e6,
            access: Duration::from_millis(5),
            queue: 1,
        };
        let e = Emulated::new(m);
        let until = e.book(false, 1, 0, 1_000_000);
        // 5 ms access + 10 ms transfer from the moment of booking, which lies between the
        // model's epoch and now: bounds that hold however slow this machine is.
        let service = Duration::from_millis(15);
        assert!(until >= e.epoch + service);
        assert!(until <= Instant::now() + service);
    }

    #[test]
    fn every_profile_name_resolves() {
        for name in DeviceModel::profile_names() {
            assert!(DeviceModel::profile(name).is_some(), "{name}");
        }
        assert!(DeviceModel::profile("floppy").is_none());
    }
}
