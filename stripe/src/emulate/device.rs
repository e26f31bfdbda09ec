//! The device model: up to `queue` I/Os are in service at once; each pays `access` (a seek and
//! rotation for a disk, the flash latency for an SSD) unless it continues the previous I/O
//! sequentially, then moves its bytes over the device's one transfer pipe at `read_bps` or
//! `write_bps`. A random I/O also takes a turn of the drive's own processor when the model
//! caps random IOPS (a flash controller's published 4K figure), so deep queues of small random
//! I/O stop where the drive's data sheet says, not where its transfer rate would. A spinning
//! disk computes each access from where its head is and how many commands it may reorder
//! (`Spindle`) instead of paying one fixed access time.

use super::spindle::Spindle;
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
    /// A spinning disk: seeks and rotation per access instead of `access`.
    pub spindle: Option<Spindle>,
}

impl DeviceModel {
    /// The profiles the seeds measured: HDD 5400 rpm about 61/60 MB/s, a laptop disk's seeks
    /// and rotation with NCQ (its `access` is the whole-disk average, for reports); SATA SSD
    /// (Intel S3520) about 445/392 MB/s, its random 4K capped at the data sheet's 67,500 read
    /// / 17,000 write IOPS; NVMe about 1397/713 MB/s.
    pub fn profile(name: &str) -> Option<DeviceModel> {
        let (r, w, access_us, queue, iops) = match name {
            "hdd-5400" => (61.0, 60.0, 17_600, 1, None),
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
            spindle: (name == "hdd-5400").then(Spindle::laptop_5400),
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
        let access = match &self.spindle {
            Some(s) => s.describe(),
            None => format!("{:?} access", self.access),
        };
        format!(
            "{} (emulated: {:.1}/{:.1} MB/s, {access}, queue {}{iops})",
            self.name,
            self.read_bps / 1e6,
            self.write_bps / 1e6,
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
    /// Completion times booked and not yet reached: the commands a spindle may reorder.
    queued: Vec<Duration>,
}

impl ModelState {
    pub fn new(model: &DeviceModel) -> ModelState {
        ModelState {
            // A spinning disk has one actuator: its commands queue (NCQ), not overlap.
            slots: vec![
                Duration::ZERO;
                match model.spindle {
                    Some(_) => 1,
                    None => model.queue.max(1),
                }
            ],
            pipe_free: Duration::ZERO,
            ops_free: Duration::ZERO,
            last_end: None,
            queued: Vec::new(),
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
        self.queued.retain(|&t| t > now);
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
        let ready = match (&model.spindle, sequential) {
            (_, true) => start,
            (None, false) => start + model.access,
            (Some(spindle), false) => {
                let head = self.last_end.map_or(0, |(o, end)| spindle.position(o, end));
                let to = spindle.position(object, offset);
                start + spindle.positioning(head, to, self.queued.len() + 1)
            }
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
        if model.spindle.is_some() {
            self.queued.push(done);
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1_000_000;

    /// Random 4K reads at queue depth `depth` within `span` bytes of one object, each
    /// submitted when one of the `depth` in flight completes: the IOPS on the virtual clock.
    fn random_iops(m: &DeviceModel, depth: usize, span: u64) -> f64 {
        let mut s = ModelState::new(m);
        let mut inflight = vec![Duration::ZERO; depth];
        let mut end = Duration::ZERO;
        let ios = 2000u64;
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..ios {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let offset = (x % (span / 4096)) * 4096;
            let (k, &free) = inflight.iter().enumerate().min_by_key(|e| e.1).unwrap();
            inflight[k] = s.schedule(m, free, false, 1, offset, 4096);
            end = end.max(inflight[k]);
        }
        ios as f64 / end.as_secs_f64()
    }

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
        // Over the whole disk, a data sheet's 12 ms average seek and half a revolution: ~57.
        let whole = random_iops(&m, 1, 1_000_000_000_000);
        assert!((50.0..62.0).contains(&whole), "whole disk {whole} IOPS");
        // Within a 1 GB test file the seeks are short: rotation dominates, ~140.
        let file = random_iops(&m, 1, 1_000 * MB);
        assert!((120.0..170.0).contains(&file), "1 GB file {file} IOPS");
    }

    #[test]
    fn ncq_gains_with_queue_depth_up_to_its_commands() {
        let m = DeviceModel::profile("hdd-5400").unwrap();
        let by_depth: Vec<f64> = [1, 2, 4, 8, 16, 32, 64]
            .iter()
            .map(|&q| random_iops(&m, q, 1_000 * MB))
            .collect();
        // Each doubling gains, a fifth or so: seeks cannot get shorter than a track's.
        for w in by_depth.windows(2).take(5) {
            assert!(w[1] > w[0] && w[1] < w[0] * 1.25, "{by_depth:?}");
        }
        let (q1, q32, q64) = (by_depth[0], by_depth[5], by_depth[6]);
        assert!((2.0..3.0).contains(&(q32 / q1)), "Q32/Q1: {by_depth:?}");
        // Past the drive's 32 commands, a deeper queue gains nothing.
        assert!((q64 / q32 - 1.0).abs() < 0.05, "{by_depth:?}");
        // Without NCQ the queue does not help a one-actuator disk.
        let mut fifo = m.clone();
        fifo.spindle.as_mut().unwrap().ncq = 1;
        let (a, b) = (
            random_iops(&fifo, 1, 1_000 * MB),
            random_iops(&fifo, 32, 1_000 * MB),
        );
        assert!((b / a - 1.0).abs() < 0.05, "{a} vs {b}");
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
